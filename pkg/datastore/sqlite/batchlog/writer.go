package batchlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/k3s-io/kine/pkg/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A batch is at most maxBatch writes or maxBatchBytes of values: a bound on
// how long one transaction holds the SQLite lock, not a window to wait for.
const (
	maxBatch      = 128
	maxBatchBytes = 4 << 20
)

type writeKind int

const (
	kindCreate writeKind = iota
	kindUpdate
	kindDelete
	kindExclusive // a function run alone in its own transaction (compaction)
)

// request is one write waiting for its answer.
type request struct {
	kind  writeKind
	key   string
	value []byte
	lease int64
	rev   int64 // the revision an update or delete compares against
	fn    func(*sql.Tx) error
	done  chan result
}

// result is kine's answer to a write.
type result struct {
	rev     int64
	kv      *server.KeyValue
	ok      bool
	err     error
	written *dbRow // the row this write stored, if any
}

// errNotStored answers a write whose transaction failed: nothing of it was
// stored, and the client may send it again. Unavailable is what etcd clients
// and kube-apiserver retry.
func errNotStored(err error) error {
	return status.Errorf(codes.Unavailable, "the write was not stored: the database did not take it (full volume, or a transient failure); nothing was changed, retry: %v", err)
}

func (b *Backend) submit(ctx context.Context, r *request) result {
	r.done = make(chan result, 1)
	select {
	case b.queue <- r:
	case <-ctx.Done():
		return result{err: ctx.Err()}
	case <-b.ctx.Done():
		return result{err: errNotStored(b.ctx.Err())}
	}
	select {
	case res := <-r.done:
		return res
	case <-ctx.Done():
		// The write may still be stored; like a timed-out etcd request, its
		// outcome is unknown to this caller.
		return result{err: ctx.Err()}
	case <-b.ctx.Done():
		return result{err: errOutcomeUnknown}
	}
}

// errOutcomeUnknown answers a write caught by the datastore's stop after it
// was queued: it may or may not be stored, as with a timed-out etcd request.
var errOutcomeUnknown = status.Error(codes.Unavailable, "the datastore is stopping; the write may or may not have been stored")

// Create inserts key if it has no live row, with kine's answers: the new
// row's revision, or ErrKeyExists. After a delete the insert is repeated
// against the delete's revision, as kine's Create does, and answered with
// the new row's revision (kine v0.17.5 answers the current revision there).
func (b *Backend) Create(ctx context.Context, key string, value []byte, lease int64) (int64, error) {
	res := b.submit(ctx, &request{kind: kindCreate, key: key, value: value, lease: lease})
	return res.rev, res.err
}

// Update inserts a new row of key if its newest row is at revision; else it
// answers with the key as it is and false, as kine's Update.
func (b *Backend) Update(ctx context.Context, key string, value []byte, revision, lease int64) (int64, *server.KeyValue, bool, error) {
	res := b.submit(ctx, &request{kind: kindUpdate, key: key, value: value, lease: lease, rev: revision})
	return res.rev, res.kv, res.ok, res.err
}

// Delete inserts a delete row of key if its newest row is at revision; else
// it answers as kine's Delete (a key with no row at all counts as deleted).
func (b *Backend) Delete(ctx context.Context, key string, revision int64) (int64, *server.KeyValue, bool, error) {
	res := b.submit(ctx, &request{kind: kindDelete, key: key, rev: revision})
	return res.rev, res.kv, res.ok, res.err
}

// exclusive runs fn in a transaction of its own on the writer's connection,
// between batches.
func (b *Backend) exclusive(ctx context.Context, fn func(*sql.Tx) error) error {
	return b.submit(ctx, &request{kind: kindExclusive, fn: fn}).err
}

// writer owns the one connection that writes. It takes what is queued,
// commits it as one transaction and hands it to publish, which waits for
// the flush, makes it visible and answers; meanwhile the next batch runs.
type writer struct {
	b         *Backend
	conn      *sql.Conn
	published chan *committed
}

// committed is a batch whose transaction committed.
type committed struct {
	reqs    []*request
	results []result
	last    int64 // the highest revision the batch wrote; 0 if none
	durable func(context.Context) error
}

func (w *writer) run(ctx context.Context) {
	defer close(w.published)
	defer w.conn.Close()
	var next *request
	for {
		first := next
		next = nil
		if first == nil {
			select {
			case first = <-w.b.queue:
			case <-ctx.Done():
				return
			}
		}
		if first.kind == kindExclusive {
			w.runExclusive(ctx, first)
			continue
		}
		reqs := []*request{first}
		size := len(first.value)
	drain:
		for len(reqs) < maxBatch && size < maxBatchBytes {
			select {
			case r := <-w.b.queue:
				if r.kind == kindExclusive {
					next = r
					break drain
				}
				reqs = append(reqs, r)
				size += len(r.value)
			default:
				break drain
			}
		}
		w.runBatch(ctx, reqs)
	}
}

func (w *writer) runExclusive(ctx context.Context, r *request) {
	err := w.inTx(ctx, r.key, func(tx *sql.Tx) error { return r.fn(tx) })
	// Its rows may change what readers see (compaction deletes old rows
	// only), but nothing new becomes visible: it is answered at once.
	r.done <- result{err: err}
}

// inTx runs fn in one write transaction holding the gate.
func (w *writer) inTx(ctx context.Context, key string, fn func(*sql.Tx) error) error {
	if g := w.b.cfg.Gate; g != nil {
		if err := g.Enter(ctx, "batch", key); err != nil {
			return err
		}
		defer g.Leave()
	}
	tx, err := w.conn.BeginTx(ctx, nil)
	if err != nil {
		counted("v2Transaction", err)
		return err
	}
	if err := fn(tx); err != nil {
		counted("v2Transaction", err)
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	err = tx.Commit()
	counted("v2Transaction", err)
	return err
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// runBatch commits reqs in one transaction. A statement error (a full disk,
// an I/O error) may have rolled SQLite's transaction back already, so the
// whole batch is rolled back and each request is run again alone: one that
// fails alone gets its error, the others are stored. Nothing of a rolled-back
// transaction is visible or answered, and its revisions are not used up.
func (w *writer) runBatch(ctx context.Context, reqs []*request) {
	results := make([]result, len(reqs))
	err := w.inTx(ctx, reqs[0].key, func(tx *sql.Tx) error {
		for i, r := range reqs {
			res, err := w.b.apply(ctx, tx, r)
			if err != nil {
				return err
			}
			results[i] = res
		}
		return nil
	})
	if err == nil {
		w.hand(ctx, reqs, results)
		return
	}
	if len(reqs) == 1 {
		reqs[0].done <- result{err: errNotStored(err)}
		return
	}
	for _, r := range reqs {
		var res result
		err := w.inTx(ctx, r.key, func(tx *sql.Tx) error {
			var err error
			res, err = w.b.apply(ctx, tx, r)
			return err
		})
		if err != nil {
			r.done <- result{err: errNotStored(err)}
			continue
		}
		w.hand(ctx, []*request{r}, []result{res})
	}
}

// hand passes a committed batch on to publish, with the flush that makes it
// durable started now.
func (w *writer) hand(ctx context.Context, reqs []*request, results []result) {
	c := &committed{reqs: reqs, results: results}
	for _, res := range results {
		if res.written != nil && res.written.id > c.last {
			c.last = res.written.id
		}
	}
	if c.last > 0 && w.b.cfg.Flush != nil {
		c.durable = w.b.cfg.Flush()
	}
	select {
	case w.published <- c:
	case <-ctx.Done():
		// Committed, but not known to be durable.
		for _, r := range reqs {
			r.done <- result{err: errOutcomeUnknown}
		}
	}
}

// publish waits for each batch to be durable, in commit order, then makes it
// visible, sends its events to watchers and answers its requests.
func (w *writer) publish(ctx context.Context) {
	for c := range w.published {
		if c.durable != nil {
			if err := c.durable(ctx); err != nil {
				// A failed flush is fatal (the datastore stops); nothing
				// of this batch may be acknowledged or shown.
				for _, r := range c.reqs {
					r.done <- result{err: status.Error(codes.Unavailable, err.Error())}
				}
				continue
			}
		}
		b := w.b
		if c.last > b.visible.Load() {
			b.visible.Store(c.last)
		}
		current := b.visible.Load()
		var events []*server.Event
		for i := range c.results {
			res := &c.results[i]
			if res.written != nil {
				events = append(events, res.written.event())
				if b.cfg.Wrote != nil {
					b.cfg.Wrote()
				}
			}
			// kine answers a write that stored nothing with the current
			// revision (adjustRevision).
			if res.rev == 0 {
				res.rev = current
			}
			res.written = nil
			c.reqs[i].done <- *res
		}
		if len(events) > 0 {
			b.events.publish(events, current)
		}
	}
}

// apply runs one write inside the batch's transaction. Its guard is kine's
// insert's own WHERE, so it sees the earlier writes of the same batch. A
// guard that fails is kine's answer, not an error; an error is a statement
// that failed.
func (b *Backend) apply(ctx context.Context, tx *sql.Tx, r *request) (result, error) {
	switch r.kind {
	case kindCreate:
		row, ok, err := b.insert1(ctx, tx, r.key, true, false, 0, r.lease, r.value)
		if err != nil || ok {
			return result{rev: row.id, written: ptr(row, ok)}, err
		}
		newest, found, err := b.newest(ctx, tx, r.key)
		if err != nil {
			return result{}, err
		}
		if !found || !newest.deleted {
			return result{err: server.ErrKeyExists}, nil
		}
		row, ok, err = b.insert1(ctx, tx, r.key, true, false, newest.id, r.lease, r.value)
		if err != nil {
			return result{}, err
		}
		if !ok {
			return result{err: server.ErrKeyExists}, nil
		}
		return result{rev: row.id, written: &row}, nil
	case kindUpdate:
		row, ok, err := b.insert1(ctx, tx, r.key, false, false, r.rev, r.lease, r.value)
		if err != nil {
			return result{}, err
		}
		if ok {
			return result{rev: row.id, ok: true, written: &row,
				kv: &server.KeyValue{Key: r.key, Value: r.value, Lease: r.lease, CreateRevision: row.createRevision, ModRevision: row.id}}, nil
		}
		newest, found, err := b.newest(ctx, tx, r.key)
		if err != nil || !found || newest.deleted {
			return result{}, err
		}
		return result{kv: newest.keyValue()}, nil
	case kindDelete:
		row, ok, err := b.insert1(ctx, tx, r.key, false, true, r.rev, 0, nil)
		if err != nil {
			return result{}, err
		}
		if ok {
			return result{rev: row.id, ok: true, written: &row, kv: &server.KeyValue{Key: r.key, ModRevision: row.id}}, nil
		}
		newest, found, err := b.newest(ctx, tx, r.key)
		switch {
		case err != nil:
			return result{}, err
		case !found:
			return result{ok: true}, nil
		case newest.deleted:
			return result{}, nil
		}
		return result{kv: newest.keyValue()}, nil
	}
	return result{}, fmt.Errorf("unknown write kind %d", r.kind)
}

func ptr(r dbRow, ok bool) *dbRow {
	if !ok {
		return nil
	}
	return &r
}

// insert1 runs kine's insert with kine's arguments (generic.Insert) and
// reads the row it wrote back through RETURNING; ok is false when the guard
// held it back.
func (b *Backend) insert1(ctx context.Context, tx *sql.Tx, key string, created, deleted bool, prev, lease int64, value []byte) (dbRow, bool, error) {
	r := dbRow{name: key, created: created, deleted: deleted, prevRevision: prev, lease: lease, value: value}
	var (
		crev sql.NullInt64
		old  []byte
	)
	err := tx.QueryRowContext(ctx, b.insert, prev, key, boolInt(created), boolInt(deleted), prev, lease, value, key, prev).
		Scan(&r.id, &crev, &old)
	if errors.Is(err, sql.ErrNoRows) {
		counted("Insert", nil)
		return r, false, nil
	}
	counted("Insert", err)
	if err != nil {
		return r, false, err
	}
	r.createRevision, r.oldValue = crev.Int64, old
	return r, true, nil
}

// newestRow is a key's newest row, live or not: an index search.
const newestRow = `SELECT ` + rowColumns + `, value FROM kine WHERE name = ? ORDER BY id DESC LIMIT 1`

// newest reads key's newest row inside the transaction, so it sees the
// batch's own earlier writes.
func (b *Backend) newest(ctx context.Context, tx *sql.Tx, key string) (dbRow, bool, error) {
	r, err := scanRow(tx.QueryRowContext(ctx, newestRow, key), false)
	if errors.Is(err, sql.ErrNoRows) {
		counted("v2Newest", nil)
		return r, false, nil
	}
	counted("v2Newest", err)
	return r, err == nil, err
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}
