package batchlog

import (
	"context"
	"database/sql"
	"errors"
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
		b.compactTo(ctx, target)
		target = b.visible.Load()
	}
}

// compactTo compacts in steps of CompactBatchSize revisions, each one
// transaction of kine's UpdateCompactSQL and CompactSQL on the writer's
// queue, so a step holds the writers for one short transaction and never
// waits for the SQLite lock. Like kine, it never compacts the newest
// CompactMinRetain revisions, and ends with kine's post-compact checkpoint.
func (b *Backend) compactTo(ctx context.Context, target int64) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	from := b.compact.Load()
	steps := 0
	for from < target {
		to := min(from+b.cfg.CompactBatchSize, target)
		safe := max(min(to, b.visible.Load()-b.cfg.CompactMinRetain), 0)
		if safe <= from {
			break
		}
		var deleted int64
		err := b.exclusive(ctx, func(tx *sql.Tx) error {
			var dbCompact sql.NullInt64
			if err := tx.QueryRowContext(ctx, b.cfg.Dialect.CompactRevSQL.Query).Scan(&dbCompact); err != nil {
				return err
			}
			if dbCompact.Int64 != from {
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

// Compact is kine's: a no-op answered with the current revision while
// automatic compaction runs, else a compaction up to revision.
func (b *Backend) Compact(ctx context.Context, revision int64) (int64, error) {
	current := b.visible.Load()
	if revision > current {
		return 0, server.ErrFutureRev
	}
	if revision <= b.compact.Load() {
		return 0, server.ErrCompacted
	}
	if b.cfg.CompactInterval <= 0 {
		b.compactTo(ctx, revision)
	}
	return b.visible.Load(), nil
}
