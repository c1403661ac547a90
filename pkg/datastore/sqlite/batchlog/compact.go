package batchlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/k3s-io/kine/pkg/server"
)

// compactor compacts every CompactInterval up to the revision that was
// current at the previous run, as kine's compactor does, so that what is
// compacted is always at least one interval old.
func (b *Backend) compactor(ctx context.Context) {
	t := time.NewTicker(b.cfg.CompactInterval)
	defer t.Stop()
	target := b.visible.Load()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.compactTo(ctx, target, b.cfg.CompactMinRetain)
		target = b.visible.Load()
	}
}

// compactTo compacts in steps of CompactBatchSize revisions, each one
// transaction of kine's UpdateCompactSQL and CompactSQL on the writer's
// queue, so a step holds the writers for one short transaction and never
// waits for the SQLite lock. It never compacts the newest retain revisions
// (kine's CompactMinRetain for the periodic compaction, none for an explicit
// request), and ends with kine's post-compact checkpoint.
//
// A compact revision that another program moved on the file (CompactTo of a
// restore run by an older binary, stock kine on the same file) is adopted:
// the step that finds it reads it, readers refuse below it from then on, and
// compaction goes on from there instead of failing at every interval.
func (b *Backend) compactTo(ctx context.Context, target, retain int64) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	from := b.compact.Load()
	steps := 0
	for from < target {
		to := min(from+b.cfg.CompactBatchSize, target)
		safe := max(min(to, b.visible.Load()-retain), 0)
		if safe <= from {
			break
		}
		var deleted, moved int64
		err := b.exclusive(ctx, func(tx *sql.Tx) error {
			var dbCompact sql.NullInt64
			if err := tx.QueryRowContext(ctx, b.cfg.Dialect.CompactRevSQL.Query).Scan(&dbCompact); err != nil {
				return err
			}
			if dbCompact.Int64 != from {
				moved = dbCompact.Int64
				return errCompactMoved
			}
			_, err := tx.ExecContext(ctx, b.cfg.Dialect.UpdateCompactSQL.Query, safe)
			counted("UpdateCompact", err)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, b.cfg.Dialect.CompactSQL.Query, from, safe, from, safe)
			counted("Compact", err)
			if err != nil {
				return err
			}
			deleted, _ = res.RowsAffected()
			// Readers refuse revisions below it from now on, before
			// the deleted rows could be missed; undone if the commit fails.
			b.compact.Store(safe)
			return nil
		})
		if errors.Is(err, errCompactMoved) && moved > from {
			b.cfg.Log.Info("the compact revision was moved on the file by another program; adopted", "from", from, "to", moved)
			b.compact.Store(moved)
			from = moved
			continue
		}
		if err != nil {
			b.compact.Store(from)
			if ctx.Err() == nil {
				b.cfg.Log.Error(err, "compaction step failed", "from", from, "to", safe)
			}
			break
		}
		b.cfg.Log.V(1).Info("compacted", "from", from, "to", safe, "deletedRows", deleted)
		from = safe
		steps++
	}
	if steps > 0 {
		if err := b.cfg.Dialect.PostCompact(ctx); err != nil && ctx.Err() == nil {
			b.cfg.Log.Error(err, "post-compaction checkpoint failed")
		}
	}
}

var errCompactMoved = errors.New("the compact revision changed under the compactor")

// Compact is etcd's, not kine's: an explicit request (the etcd Compact
// RPC; kube-apiserver's compaction is a transaction on compact_rev_key,
// which kine's server answers without calling this) compacts exactly up to
// revision, so every revision below it is refused from then on. kine
// answers it with a no-op while its periodic compaction runs, which is why
// an in-place restore compacted kine's file behind its back
// (sqlite.CompactTo); with v2 it asks, and the compaction is seen by
// readers and watchers at once.
func (b *Backend) Compact(ctx context.Context, revision int64) (int64, error) {
	current := b.visible.Load()
	if revision > current {
		return 0, server.ErrFutureRev
	}
	if revision <= b.compact.Load() {
		return 0, server.ErrCompacted
	}
	b.compactTo(ctx, revision, 0)
	if got := b.compact.Load(); got < revision {
		return 0, fmt.Errorf("compacted up to revision %d of %d asked: %w", got, revision, errCompactIncomplete)
	}
	return b.visible.Load(), nil
}

var errCompactIncomplete = errors.New("the compaction stopped early (see the datastore's log)")
