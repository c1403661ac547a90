package batchlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/k3s-io/kine/pkg/drivers/generic"
	"github.com/k3s-io/kine/pkg/server"
	"github.com/k3s-io/kine/pkg/ttl"
)

// compactRevKey is the row kine keeps its compact revision in (in the row's
// prev_revision); the name is kine's.
const compactRevKey = "compact_rev_key"

// currentRevisionSQL reads the highest revision ever given: the larger of
// the newest row and kine's AUTOINCREMENT counter (sqlite_sequence; absent
// before the first insert).
const currentRevisionSQL = `SELECT MAX(COALESCE((SELECT MAX(id) FROM kine), 0), COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'kine'), 0))`

// Gate is the datastore's write gate: the writer holds it for each
// transaction, so that the background checkpoint's short exclusive step and
// the stall watch work for this backend as they do for kine's.
type Gate interface {
	Enter(ctx context.Context, what, key string) error
	Leave()
}

// Config is what the backend needs from the datastore that runs it.
type Config struct {
	// Dialect is kine's SQLite driver after its schema set-up: its database
	// handle serves the reads and the writer's connection, its statements
	// (InsertSQL, CompactSQL, UpdateCompactSQL, GetSizeSQL) are the ones run.
	Dialect *generic.Generic
	// Flush, when set, is called after each committed batch and returns a
	// function that waits until the batch is on disk (the datastore's group
	// fsync). Nil means a commit is durable by itself (synchronous=FULL).
	// A failure must be sticky: every later wait fails too (the group
	// fsync's is). publish skips a batch whose flush failed but makes a later
	// durable batch visible up to its revision, which would show the failed
	// batch's rows if a later flush could succeed.
	Flush func() func(context.Context) error
	// Gate, when set, is held around each write transaction.
	Gate Gate
	// Wrote, when set, is called once per acknowledged write (the
	// checkpointer counts them).
	Wrote func()
	// CompactInterval is how often old revisions are compacted; 0 disables
	// automatic compaction, and then Compact compacts on request, as kine.
	CompactInterval time.Duration
	// CompactMinRetain and CompactBatchSize are kine's: never compact the
	// newest CompactMinRetain revisions; compact in steps of CompactBatchSize.
	CompactMinRetain int64
	CompactBatchSize int64
	// Log receives compaction results and failures.
	Log logr.Logger
	// WaitGroup, when set, tracks the writer, so that whoever waits for
	// kine's goroutines also waits for the last transaction to end.
	WaitGroup *sync.WaitGroup
}

// Backend is a server.Backend over one SQLite file. New makes it; kine's
// server calls Start.
type Backend struct {
	cfg     Config
	db      *sql.DB
	insert  string // kine's InsertSQL with RETURNING
	visible atomic.Int64
	compact atomic.Int64

	queue  chan *request
	wmu    sync.Mutex // serialises compaction with itself
	events *broadcaster
	ctx    context.Context
}

var _ server.Backend = (*Backend)(nil)

// New returns a backend over cfg.Dialect's database; nothing runs until
// Start.
func New(cfg Config) *Backend {
	if cfg.CompactBatchSize <= 0 {
		cfg.CompactBatchSize = 1000
	}
	return &Backend{
		cfg: cfg,
		db:  cfg.Dialect.DB,
		// The RETURNING clause reads back the row the insert wrote; it
		// changes nothing in it, so the row is exactly kine's.
		insert: cfg.Dialect.InsertSQL.Query + " RETURNING id, create_revision, old_value",
		queue:  make(chan *request, maxBatch),
		events: newBroadcaster(),
	}
}

// Start reads the current and compact revisions, starts the writer, makes
// sure kine's compact_rev_key row and the health key exist, and starts TTL
// expiry and compaction, the way kine's logstructured.Start does.
func (b *Backend) Start(ctx context.Context) error {
	b.ctx = ctx
	// The current revision is the highest id ever handed out (the
	// AUTOINCREMENT counter kine's table keeps), not the highest id left: a
	// compaction at the newest revision deletes the rows of deletes there,
	// and counting only the rows left would move the revision backwards
	// after a restart, under a compact revision above it.
	var cur sql.NullInt64
	if err := b.db.QueryRowContext(ctx, currentRevisionSQL).Scan(&cur); err != nil {
		return fmt.Errorf("reading the current revision: %w", err)
	}
	b.visible.Store(cur.Int64)
	b.events.start(cur.Int64)
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("opening the writer's connection: %w", err)
	}
	w := &writer{b: b, conn: conn, published: make(chan *committed, 4)}
	wg := b.cfg.WaitGroup
	if wg == nil {
		wg = &sync.WaitGroup{}
	}
	wg.Add(2)
	go func() { defer wg.Done(); w.run(ctx) }()
	go func() { defer wg.Done(); w.publish(ctx) }()
	go b.events.dropWhenIdle(ctx)

	if err := b.compactStart(ctx); err != nil {
		return fmt.Errorf("preparing the compact revision row: %w", err)
	}
	var compact sql.NullInt64
	if err := b.db.QueryRowContext(ctx, b.cfg.Dialect.CompactRevSQL.Query).Scan(&compact); err != nil {
		return fmt.Errorf("reading the compact revision: %w", err)
	}
	b.compact.Store(compact.Int64)
	if _, err := b.Create(ctx, server.HealthKey, []byte(server.HealthVal), 0); err != nil && !errors.Is(err, server.ErrKeyExists) {
		b.cfg.Log.Error(err, "creating the health key")
	}
	go ttl.Run(ctx, b)
	if b.cfg.CompactInterval > 0 {
		go b.compactor(ctx)
	}
	return nil
}

// compactStart creates kine's compact_rev_key row when it is missing and
// removes all but the newest of duplicate ones (an old kine bug kine's own
// start repairs too).
func (b *Backend) compactStart(ctx context.Context) error {
	rows, err := b.db.QueryContext(ctx, `SELECT id, prev_revision FROM kine WHERE name = ? AND id <= ? ORDER BY id`, compactRevKey, b.visible.Load())
	if err != nil {
		return err
	}
	type row struct{ id, prev int64 }
	var found []row
	for rows.Next() {
		var r row
		var prev sql.NullInt64
		if err := rows.Scan(&r.id, &prev); err != nil {
			rows.Close()
			return err
		}
		r.prev = prev.Int64
		found = append(found, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	switch len(found) {
	case 0:
		_, err := b.Create(ctx, compactRevKey, []byte(""), 0)
		return err
	case 1:
		return nil
	}
	keep := found[0]
	for _, r := range found {
		if r.prev > keep.prev {
			keep = r
		}
	}
	var drop []int64
	for _, r := range found {
		if r.id != keep.id {
			drop = append(drop, r.id)
		}
	}
	return b.exclusive(ctx, func(tx *sql.Tx) error {
		for _, id := range drop {
			if _, err := tx.ExecContext(ctx, b.cfg.Dialect.DeleteSQL.Query, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkRevision is kine's check of a requested revision (sqllog's
// checkRevision) against our visible and compact revisions.
func (b *Backend) checkRevision(revision int64) (current int64, err error) {
	current = b.visible.Load()
	if current == 0 {
		return current, server.ErrGRPCUnhealthy
	}
	if revision > 0 && revision < b.compact.Load() {
		return current, server.ErrCompacted
	}
	if revision > current {
		return current, server.ErrFutureRev
	}
	return current, nil
}

// rowColumns are the columns every read scans, in scanRow's order.
const rowColumns = `id, name, created, deleted, create_revision, prev_revision, lease`

// getAt is the newest row of a key at or before a revision: an index search
// on kine_name_id_index.
const (
	getAt     = `SELECT ` + rowColumns + `, value FROM kine WHERE name = ? AND id <= ? ORDER BY id DESC LIMIT 1`
	getKeysAt = `SELECT ` + rowColumns + `, NULL FROM kine WHERE name = ? AND id <= ? ORDER BY id DESC LIMIT 1`
)

// dbRow is one kine row as read.
type dbRow struct {
	id             int64
	name           string
	created        bool
	deleted        bool
	createRevision int64
	prevRevision   int64
	lease          int64
	value          []byte
	oldValue       []byte
}

type scanner interface{ Scan(...any) error }

func scanRow(s scanner, withOld bool) (dbRow, error) {
	var (
		r                  dbRow
		name               sql.NullString
		created, deleted   sql.NullBool
		crev, prev, leaseN sql.NullInt64
	)
	dest := []any{&r.id, &name, &created, &deleted, &crev, &prev, &leaseN, &r.value}
	if withOld {
		dest = append(dest, &r.oldValue)
	}
	if err := s.Scan(dest...); err != nil {
		return r, err
	}
	r.name, r.created, r.deleted = name.String, created.Bool, deleted.Bool
	r.createRevision, r.prevRevision, r.lease = crev.Int64, prev.Int64, leaseN.Int64
	return r, nil
}

// keyValue is the row as kine's scan turns it into a KeyValue: a create's
// create revision is its own id.
func (r dbRow) keyValue() *server.KeyValue {
	kv := &server.KeyValue{Key: r.name, Value: r.value, CreateRevision: r.createRevision, ModRevision: r.id, Lease: r.lease}
	if r.created {
		kv.CreateRevision = r.id
	}
	return kv
}

// event is the row as kine's scan turns it into a watch event: every row but
// a create carries the previous value from old_value.
func (r dbRow) event() *server.Event {
	e := &server.Event{Create: r.created, Delete: r.deleted, KV: r.keyValue()}
	if !r.created {
		e.PrevKV = &server.KeyValue{Key: r.name, Value: r.oldValue, CreateRevision: r.createRevision, ModRevision: r.prevRevision, Lease: r.lease}
	}
	return e
}

// Get returns the newest live row of key at revision (0: now) and the
// current revision, with kine's errors for a compacted or future revision.
func (b *Backend) Get(ctx context.Context, key string, revision int64, keysOnly bool) (int64, *server.KeyValue, error) {
	current, err := b.checkRevision(revision)
	if err != nil {
		return current, nil, err
	}
	r, ok, err := b.getRow(ctx, b.db, key, revision, current, keysOnly)
	if err != nil || !ok || r.deleted {
		return current, nil, err
	}
	return current, r.keyValue(), nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (b *Backend) getRow(ctx context.Context, q querier, key string, revision, current int64, keysOnly bool) (dbRow, bool, error) {
	at := current
	if revision > 0 {
		at = revision
	}
	stmt := getAt
	if keysOnly {
		stmt = getKeysAt
	}
	r, err := scanRow(q.QueryRowContext(ctx, stmt, key, at), false)
	if errors.Is(err, sql.ErrNoRows) {
		counted("v2Get", nil)
		return r, false, nil
	}
	counted("v2Get", err)
	if err != nil {
		return r, false, err
	}
	return r, true, nil
}

// DbSize is kine's: the pages in use times the page size.
func (b *Backend) DbSize(ctx context.Context) (int64, error) {
	return b.cfg.Dialect.GetSize(ctx)
}

// CurrentRevision is the visible revision: the newest durable write.
func (b *Backend) CurrentRevision(context.Context) (int64, error) {
	return b.visible.Load(), nil
}

// Statements returns the text of every statement the backend runs on d,
// by name, so that tests can check their query plans.
func Statements(d *generic.Generic) map[string]string {
	b := New(Config{Dialect: d})
	out := map[string]string{
		"v2Insert": b.insert, "v2Get": getAt, "v2GetKeys": getKeysAt, "v2Newest": newestRow,
		"v2CatchUp": catchUp, "v2CountAll": countAll, "v2CountRange": countRange,
	}
	for _, keysOnly := range []bool{false, true} {
		for _, kr := range [][2]string{{"", ""}, {"/a", ""}, {"/a", "/b"}} {
			q, _ := rangeQuery(kr[0], kr[1], 1, keysOnly)
			out[fmt.Sprintf("v2RangeScan(%q,%q,keysOnly=%v)", kr[0], kr[1], keysOnly)] = q
		}
	}
	return out
}
