package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// SnapshotInfo is what a snapshot of the database holds.
type SnapshotInfo struct {
	// Revision is the newest kine revision in the snapshot: every write up to
	// it is there, none after it.
	Revision int64
	// CompactRevision is the revision kine had compacted to.
	CompactRevision int64
}

// Snapshot writes a consistent copy of the database at dbPath, which a
// running datastore may be writing meanwhile, to dst, which must not exist.
//
// It runs SQLite's VACUUM INTO from a connection of its own: one read
// transaction, so the copy is the database as of one commit (writers go on;
// in WAL mode a reader blocks none of them), written as a compact database
// file without WAL. The copy is then checked (quick_check) and its revision
// read from the copy itself, so the revision is exactly what it holds.
//
// The datastore's `snapshot` command runs it in a process of its own, beside
// the serving one; within one process it opens the file through the same
// SQLite library kine uses (sideDriver), so the locks hold either way.
func Snapshot(ctx context.Context, dbPath, dst string) (SnapshotInfo, error) {
	if _, err := os.Stat(dbPath); err != nil {
		return SnapshotInfo{}, fmt.Errorf("database to snapshot: %w", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		return SnapshotInfo{}, fmt.Errorf("snapshot file %s exists already", dst)
	}
	src, err := openSide(dbPath)
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer src.Close()
	if _, err := src.ExecContext(ctx, `VACUUM INTO ?`, dst); err != nil {
		_ = os.Remove(dst)
		return SnapshotInfo{}, fmt.Errorf("copying database %s: %w", dbPath, err)
	}
	if err := checkDatabase(ctx, dst, "quick_check"); err != nil {
		return SnapshotInfo{}, fmt.Errorf("checking the snapshot: %w", err)
	}
	snap, err := openSide(dst)
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer snap.Close()
	var info SnapshotInfo
	err = snap.QueryRowContext(ctx, `SELECT
		(SELECT COALESCE(MAX(id), 0) FROM kine),
		(SELECT COALESCE(MAX(prev_revision), 0) FROM kine WHERE name = 'compact_rev_key')`).
		Scan(&info.Revision, &info.CompactRevision)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("reading the snapshot's revision: %w", err)
	}
	return info, nil
}

// ReadSnapshotKeys calls fn, in key order, with the newest value of every key
// live in the SQLite snapshot at path (kine's table: the newest row of each
// name, unless that row is a deletion), with the lease it was written under.
// It never writes the file.
func ReadSnapshotKeys(ctx context.Context, path string, fn func(key string, value []byte, lease int64) error) error {
	db, err := openSide(path)
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT k.name, k.value, k.lease FROM kine k
		JOIN (SELECT name, MAX(id) AS id FROM kine GROUP BY name) newest ON k.id = newest.id
		WHERE k.deleted = 0 ORDER BY k.name`)
	if err != nil {
		return fmt.Errorf("reading the snapshot's keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key   string
			value []byte
			lease int64
		)
		if err := rows.Scan(&key, &value, &lease); err != nil {
			return fmt.Errorf("reading the snapshot's keys: %w", err)
		}
		if err := fn(key, value, lease); err != nil {
			return err
		}
	}
	return rows.Err()
}
