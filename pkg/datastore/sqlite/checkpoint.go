package sqlite

import (
	"context"
	"database/sql"
	"sync/atomic"

	"github.com/go-logr/logr"
)

// checkpointEvery is how many acknowledged writes may go into the WAL between
// two background checkpoints. A create writes about eight pages, so this keeps
// the WAL near SQLite's own limit of 1000 pages (4 MiB).
const checkpointEvery = 128

// checkpointer folds the WAL back into the database file on its own connection.
// kine's connections do not checkpoint (wal_autocheckpoint=0): SQLite runs its
// automatic checkpoint inside the commit that crosses the limit, so that
// write would wait for the copy and two fsyncs, and, since writes pass the
// gate one at a time, every other writer with it.
//
// A checkpoint has two steps. The first copies the WAL while writers go on;
// under steady writes it never catches up, and SQLite starts writing the WAL
// from its beginning again only after a checkpoint copied every frame. So the
// second step takes the write gate and copies the few frames written during
// the first. Without it the WAL grows without bound (150 MiB after 4000
// creates), and every fsync of a growing file also writes its new size.
//
// With cgo, kine uses mattn/go-sqlite3, which ignores the pragma in the DSN,
// so SQLite's own checkpoints run as well; the two do not conflict.
type checkpointer struct {
	db     *sql.DB
	gate   *writeGate
	writes atomic.Int64
	kick   chan struct{}
	done   chan struct{}
}

func newCheckpointer(db *sql.DB, gate *writeGate) *checkpointer {
	return &checkpointer{db: db, gate: gate, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// wrote counts an acknowledged write and wakes the checkpointer when enough
// have accumulated. It never waits.
func (c *checkpointer) wrote() {
	if c.writes.Add(1)%checkpointEvery != 0 {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default: // a checkpoint is already due
	}
}

// run checkpoints whenever wrote asks for it, until ctx ends. A checkpoint that
// cannot finish (a reader still uses old frames) copies what it can; the next
// one continues, and kine's compaction runs a full one.
func (c *checkpointer) run(ctx context.Context) {
	defer close(c.done)
	log := logr.FromContextOrDiscard(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		}
		if err := c.checkpoint(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "background WAL checkpoint failed; the WAL grows until the next one succeeds")
		}
	}
}

func (c *checkpointer) checkpoint(ctx context.Context) error {
	if err := c.passive(ctx); err != nil {
		return err
	}
	if err := c.gate.enter(ctx, "checkpoint", ""); err != nil {
		return err
	}
	defer c.gate.leave()
	return c.gatedPass(ctx)
}

// gatedPass is the pass that holds the gate, a function of its own so that a
// stall report can find it by its name.
//
//go:noinline
func (c *checkpointer) gatedPass(ctx context.Context) error {
	return c.passive(ctx)
}

func (c *checkpointer) passive(ctx context.Context) error {
	var busy, frames, copied int64
	return c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
}
