package sqlite

import (
	"context"
	"fmt"
)

// compactSQL is kine's own compaction statement for SQLite (kine's
// drivers/sqlite CompactSQL): the rows that a newer row of the same key
// superseded, and deletion rows, within (from, to].
const compactSQL = `DELETE FROM kine AS kv WHERE kv.id IN (
	SELECT kp.prev_revision AS id FROM kine AS kp
		WHERE kp.name != 'compact_rev_key' AND kp.prev_revision != 0 AND kp.id > ? AND kp.id <= ?
	UNION ALL
	SELECT kd.id AS id FROM kine AS kd
		WHERE kd.deleted != 0 AND kd.id > ? AND kd.id <= ?)`

// CompactResult is what CompactTo did.
type CompactResult struct {
	// From is the compact revision before, To the one after.
	From, To int64
	// Rows is how many rows were deleted.
	Rows int64
}

// CompactTo compacts the kine database at dbPath, which the running datastore
// may be serving, to revision rev exactly, in one transaction: kine's own
// compaction, without the margin kine keeps.
//
// The in-place restore needs it. Kine answers an etcd Compact request
// without compacting unless its own periodic compaction is off (ours is on),
// and even then never compacts the newest 1000 revisions (kine v0.17
// sqllog.safeCompactRev), so after a restore a client at an old revision
// could still list or watch from it and be served the pre-restore history.
// Kine reads the compact revision from the database on every list, count and
// watch (the compact_rev_key row), so once this commits, any request from a
// revision below rev gets etcd's "required revision has been compacted"
// (kube-apiserver: 410 Gone), and kine's own compaction carries on from rev.
//
// A rev at or below the current compact revision is a no-op (a second run of
// an interrupted restore); a rev above the current revision is an error.
func CompactTo(ctx context.Context, dbPath string, rev int64) (CompactResult, error) {
	db, err := openSide(dbPath)
	if err != nil {
		return CompactResult{}, err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return CompactResult{}, fmt.Errorf("compacting %s: %w", dbPath, err)
	}
	defer func() { _ = tx.Rollback() }()
	// Write first, so the transaction holds SQLite's write lock (waiting for
	// kine's writes under busy_timeout) before it reads anything: a read
	// transaction upgraded after kine wrote would fail with SQLITE_BUSY.
	res, err := tx.ExecContext(ctx, `UPDATE kine SET prev_revision = prev_revision WHERE name = 'compact_rev_key'`)
	if err != nil {
		return CompactResult{}, fmt.Errorf("locking %s: %w", dbPath, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return CompactResult{}, fmt.Errorf("database %s has %d compact_rev_key rows, kine keeps one", dbPath, n)
	}
	var current, compact int64
	// The current revision counts kine's AUTOINCREMENT counter too: after a
	// compaction at the newest revision (by the datastore itself, on request)
	// the newest rows may be gone while their revisions were given out.
	if err := tx.QueryRowContext(ctx, `SELECT
		MAX(COALESCE((SELECT MAX(id) FROM kine), 0), COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'kine'), 0)),
		(SELECT COALESCE(MAX(prev_revision), 0) FROM kine WHERE name = 'compact_rev_key')`).Scan(&current, &compact); err != nil {
		return CompactResult{}, fmt.Errorf("reading the revisions of %s: %w", dbPath, err)
	}
	out := CompactResult{From: compact, To: compact}
	switch {
	case rev > current:
		return out, fmt.Errorf("cannot compact %s to revision %d: its revision is %d", dbPath, rev, current)
	case rev <= compact:
		return out, nil
	}
	del, err := tx.ExecContext(ctx, compactSQL, compact, rev, compact, rev)
	if err != nil {
		return out, fmt.Errorf("compacting %s to revision %d: %w", dbPath, rev, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE kine SET prev_revision = ? WHERE name = 'compact_rev_key'`, rev); err != nil {
		return out, fmt.Errorf("recording compact revision %d in %s: %w", rev, dbPath, err)
	}
	if err := tx.Commit(); err != nil {
		return out, fmt.Errorf("compacting %s to revision %d: %w", dbPath, rev, err)
	}
	out.To = rev
	out.Rows, _ = del.RowsAffected()
	return out, nil
}
