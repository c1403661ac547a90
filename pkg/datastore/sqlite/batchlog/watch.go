package batchlog

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/server"
)

// The ring keeps the newest events for watchers that are close behind: at
// most ringEvents events and about ringBytes of values. A watcher further
// behind reads from the table instead, catchUpRows at a time.
const (
	ringEvents  = 8192
	ringBytes   = 4 << 20
	catchUpRows = 500
	// ringIdle is how long the ring keeps its events without a new write:
	// an idle datastore holds none (a watcher that still needs them reads
	// the table, as after a restart).
	ringIdle = time.Minute
)

// catchUp reads the rows after a revision up to the visible one, in revision
// order, with their previous values: what kine's AfterAllOldVal reads, bounded
// by the visible revision so that a row not yet durable is never delivered.
const catchUp = `SELECT ` + rowColumns + `, value, old_value FROM kine WHERE id > ? AND id <= ? ORDER BY id LIMIT ?`

// broadcaster holds the events of durable batches, in revision order, and
// wakes watchers when more arrive. It never waits for a watcher: each one
// has its own goroutine and cursor.
type broadcaster struct {
	mu      sync.Mutex
	ring    []*server.Event
	bytes   int
	current int64
	wake    chan struct{}
	last    time.Time // of the newest publish
}

func newBroadcaster() *broadcaster { return &broadcaster{wake: make(chan struct{})} }

func (br *broadcaster) start(current int64) {
	br.mu.Lock()
	br.current = current
	br.mu.Unlock()
}

// publish appends a durable batch's events (consecutive revisions, after
// every event published before) and wakes every waiting watcher.
func (br *broadcaster) publish(events []*server.Event, current int64) {
	br.mu.Lock()
	defer br.mu.Unlock()
	br.ring = append(br.ring, events...)
	for _, e := range events {
		br.bytes += eventBytes(e)
	}
	drop := 0
	for len(br.ring)-drop > ringEvents || (br.bytes > ringBytes && len(br.ring)-drop > 1) {
		br.bytes -= eventBytes(br.ring[drop])
		drop++
	}
	if drop > 0 {
		// A copy, so the dropped events' memory goes with them.
		br.ring = append([]*server.Event(nil), br.ring[drop:]...)
	}
	br.current = current
	br.last = time.Now()
	close(br.wake)
	br.wake = make(chan struct{})
}

// dropWhenIdle empties the ring every ringIdle without a publish, until
// ctx ends.
func (br *broadcaster) dropWhenIdle(ctx context.Context) {
	t := time.NewTicker(ringIdle / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		br.dropIfIdle(time.Now())
	}
}

func (br *broadcaster) dropIfIdle(now time.Time) {
	br.mu.Lock()
	defer br.mu.Unlock()
	if len(br.ring) > 0 && now.Sub(br.last) > ringIdle {
		br.ring, br.bytes = nil, 0
	}
}

func eventBytes(e *server.Event) int {
	n := len(e.KV.Key) + len(e.KV.Value)
	if e.PrevKV != nil {
		n += len(e.PrevKV.Value)
	}
	return n
}

// since returns the ring's events after revision last when the ring holds
// all of them, the current revision, and a channel closed by the next
// publish.
func (br *broadcaster) since(last int64) (events []*server.Event, inRing bool, current int64, wake <-chan struct{}) {
	br.mu.Lock()
	defer br.mu.Unlock()
	current, wake = br.current, br.wake
	if last >= current {
		return nil, true, current, wake
	}
	if len(br.ring) == 0 || br.ring[0].KV.ModRevision > last+1 {
		return nil, false, current, wake
	}
	i := sort.Search(len(br.ring), func(i int) bool { return br.ring[i].KV.ModRevision > last })
	return br.ring[i:len(br.ring):len(br.ring)], true, current, wake
}

// Watch sends every event after the start revision, then live ones, until
// ctx ends. As kine's: revision r > 1 starts after r-1 (so r itself is
// included), 0 starts now, a start below the compact revision returns the
// compact revision (the server cancels the watch with ErrCompacted).
func (b *Backend) Watch(ctx context.Context, revision int64) server.WatchResult {
	eventc := make(chan server.EventBatch, 100)
	errc := make(chan error, 1)
	current := b.visible.Load()
	wr := server.WatchResult{CurrentRevision: current, Eventc: eventc, Errorc: errc}
	after := revision
	if after > 1 {
		after--
	}
	if revision == 0 {
		after = current
	}
	if revision != 0 {
		if _, err := b.checkRevision(after); err != nil {
			if err == server.ErrCompacted {
				wr.CompactRevision = b.compact.Load()
			} else {
				errc <- err
			}
			close(eventc)
			return wr
		}
	}
	go b.feed(ctx, after, eventc, errc)
	return wr
}

// feed delivers events after revision last to eventc: from the ring when it
// holds them, else from the table. A watcher tracks the last revision it
// delivered, so switching between the two has no gap and no duplicate.
func (b *Backend) feed(ctx context.Context, last int64, eventc chan<- server.EventBatch, errc chan<- error) {
	defer close(eventc)
	// send delivers one batch. Events read back from the table (history)
	// lose a PrevKV whose revision is below the compact revision, as kine's
	// After does; events from the ring (what was just written, as kine's
	// poll delivers it) keep theirs. The previous version of a key a live
	// event changes is that key's latest until then, which compaction
	// keeps, and the API server needs it: a DELETE without PrevKV is an
	// error that makes its watch cache drop every watcher of the resource
	// ("etcd event received with PrevKv=nil"), and a PUT without it reads as
	// a create.
	send := func(events []*server.Event, current int64, history bool) bool {
		out := events
		if history {
			compact := b.compact.Load()
			out = make([]*server.Event, 0, len(events))
			for _, e := range events {
				if e.PrevKV != nil && e.PrevKV.ModRevision < compact {
					c := *e
					c.PrevKV = nil
					e = &c
				}
				out = append(out, e)
			}
		}
		select {
		case eventc <- server.EventBatch{Events: out, CurrentRev: current}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		events, inRing, current, wake := b.events.since(last)
		switch {
		case inRing && len(events) == 0:
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return
			}
		case inRing:
			if !send(events, current, false) {
				return
			}
			last = events[len(events)-1].KV.ModRevision
			continue
		}
		if last < b.compact.Load() {
			// The rows this watcher still needs are gone.
			errc <- server.ErrCompacted
			return
		}
		events, upTo, err := b.readAfter(ctx, last, current)
		if err != nil {
			if ctx.Err() == nil {
				errc <- err
			}
			return
		}
		// kine's server refuses (fatally) to send events for a revision a
		// watch has already been sent: a page that ends before current
		// says its own last revision, and the next page starts after it.
		if len(events) > 0 && !send(events, upTo, true) {
			return
		}
		last = upTo
	}
}

// readAfter reads up to catchUpRows events after last, at most up to
// current, and says up to which revision it has read.
func (b *Backend) readAfter(ctx context.Context, last, current int64) ([]*server.Event, int64, error) {
	rows, err := b.db.QueryContext(ctx, catchUp, last, current, catchUpRows)
	counted("v2CatchUp", err)
	if err != nil {
		return nil, last, err
	}
	defer rows.Close()
	var events []*server.Event
	for rows.Next() {
		r, err := scanRow(rows, true)
		if err != nil {
			return nil, last, err
		}
		events = append(events, r.event())
	}
	if err := rows.Err(); err != nil {
		return nil, last, err
	}
	if len(events) < catchUpRows {
		return events, current, nil
	}
	return events, events[len(events)-1].KV.ModRevision, nil
}
