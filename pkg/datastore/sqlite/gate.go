package sqlite

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// stallAfter is how long a write may hold the write gate, or an fsync run,
// before a watch reports it. A write holds the gate for about a millisecond
// and kube-apiserver gives up on a lease update after 5 s, so 10 s is a
// stall even on a slow, busy machine.
const stallAfter = 10 * time.Second

// writeGate lets one write at a time into SQLite. SQLite has one writer at a
// time; a second BEGIN IMMEDIATE does not queue but sleeps in SQLite's busy
// handler (1, 2, 5, 10 ms, ...) and retries, long after the first writer, which
// holds the lock for a fraction of a millisecond, is done. Waiting here instead
// hands the lock over as soon as it is free. The checkpointer takes the gate
// too, for the short step that needs no writer running.
//
// Every write in the process queues here, so a holder that does not come back
// stops all of them while reads go on. The gate remembers what holds it, and
// watch reports a holder that keeps it longer than stallAfter: such a stall
// must never be silent.
type writeGate struct {
	slot chan struct{}

	mu      sync.Mutex
	holder  gateHolder
	seq     uint64 // counts entries; tells one holding from the next
	waiting int    // callers queued in enter
	// reported is the seq of the holding the watchdog reported, so that it
	// reports each stall once and leave can tell when it ended.
	reported uint64
	log      logr.Logger
}

// gateHolder says what holds the gate: the etcd method and key of a write, or
// the checkpointer.
type gateHolder struct {
	what  string
	key   string
	since time.Time
}

func newWriteGate() *writeGate { return &writeGate{slot: make(chan struct{}, 1), log: logr.Discard()} }

// enter waits for the gate, or for ctx to end. what and key name the holder
// in a stall report.
func (g *writeGate) enter(ctx context.Context, what, key string) error {
	g.mu.Lock()
	g.waiting++
	g.mu.Unlock()
	var err error
	select {
	case g.slot <- struct{}{}:
	case <-ctx.Done():
		err = ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting--
	if err != nil {
		return err
	}
	g.seq++
	g.holder = gateHolder{what: what, key: key, since: time.Now()}
	return nil
}

// leave opens the gate; when the holding was reported as a stall, it says
// that the stall ended and how long it lasted.
func (g *writeGate) leave() {
	g.mu.Lock()
	h, stalled, log := g.holder, g.reported == g.seq, g.log
	g.holder = gateHolder{}
	g.mu.Unlock()
	<-g.slot
	if stalled {
		log.Info("the write that stalled all writes left the write gate",
			"method", h.what, "key", h.key, "heldFor", time.Since(h.since).Round(time.Millisecond).String())
	}
}

// watch reports, once per holding, a holder that keeps the gate longer than
// after, until ctx ends; log also receives the end of the stall (see leave).
// The report names the holder and carries its goroutine's stack, and the
// stacks of the goroutines inside SQLite, which say what it waits for.
func (g *writeGate) watch(ctx context.Context, log logr.Logger, after time.Duration) {
	g.mu.Lock()
	g.log = log
	g.mu.Unlock()
	every(ctx, after, func() {
		g.mu.Lock()
		h, seq, waiting := g.holder, g.seq, g.waiting
		stalled := !h.since.IsZero() && g.reported != seq && time.Since(h.since) > after
		if stalled {
			g.reported = seq
		}
		g.mu.Unlock()
		if !stalled {
			return
		}
		holderStack, sqliteStacks := stallStacks()
		log.Info("a write has held the write gate too long; every other write waits behind it",
			"method", h.what, "key", h.key, "heldFor", time.Since(h.since).Round(time.Millisecond).String(),
			"waitingWrites", waiting, "holderStack", holderStack, "sqliteStacks", sqliteStacks)
	})
}

// every calls check a few times per after (at least every second) until ctx
// ends. A watch costs a lock and a clock reading per call.
func every(ctx context.Context, after time.Duration, check func()) {
	tick := time.NewTicker(min(after/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			check()
		}
	}
}

// holderFrames mark the goroutine that holds the gate: the functions that
// run while it is held (see ackGuard.inGate and checkpointer.gatedPass).
var holderFrames = [][]byte{[]byte("sqlite.(*ackGuard).inGate("), []byte("sqlite.(*checkpointer).gatedPass("), []byte("batchlog.(*writer).inTx(")}

// maxStacksBytes bounds the stacks of a stall report.
const maxStacksBytes = 64 << 10

// sqliteFrames mark goroutines working in or waiting for the database.
var sqliteFrames = [][]byte{[]byte("modernc.org/sqlite"), []byte("mattn/go-sqlite3"), []byte("database/sql."), []byte("sqlite.(*groupSync)")}

// stallStacks returns the stacks of the goroutines that hold the gate, and of
// the other goroutines inside SQLite or database/sql.
func stallStacks() (holder, inSQLite string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var h, s bytes.Buffer
	for _, gr := range bytes.Split(buf, []byte("\n\n")) {
		switch {
		case containsAny(gr, holderFrames):
			h.Write(gr)
			h.WriteString("\n\n")
		case containsAny(gr, sqliteFrames) && s.Len() < maxStacksBytes:
			s.Write(gr)
			s.WriteString("\n\n")
		}
	}
	return h.String(), s.String()
}

func containsAny(b []byte, subs [][]byte) bool {
	for _, sub := range subs {
		if bytes.Contains(b, sub) {
			return true
		}
	}
	return false
}
