package batchlog

import (
	"context"
	"database/sql"

	"github.com/k3s-io/kine/pkg/server"
)

// The range scans of a list. Rows come in key order from kine_name_id_index,
// each key's rows in revision order, so the newest row per key is chosen
// while reading: nothing is materialised or sorted, unlike kine's list query
// (docs/datastore.md, "The list query"). The key conditions are kine's:
// "" is every key, no end is one key, otherwise [key, end).
const (
	scanColumns = `SELECT ` + rowColumns + `, value FROM kine `
	scanKeys    = `SELECT ` + rowColumns + `, NULL FROM kine `
	scanAll     = `WHERE id <= ? ORDER BY name, id`
	scanOne     = `WHERE name = ? AND id <= ? ORDER BY name, id`
	scanRange   = `WHERE name >= ? AND name < ? AND id <= ? ORDER BY name, id`
)

// The counts of live keys at a revision: the newest row per key through
// kine_name_index, as kine's count.
const (
	countAll   = `SELECT COUNT(*) FROM kine WHERE deleted = 0 AND id IN (SELECT MAX(id) FROM kine WHERE id <= ? GROUP BY name)`
	countRange = `SELECT COUNT(*) FROM kine WHERE deleted = 0 AND id IN (SELECT MAX(id) FROM kine WHERE name >= ? AND name < ? AND id <= ? GROUP BY name)`
)

func rangeQuery(key, end string, at int64, keysOnly bool) (string, []any) {
	q := scanColumns
	if keysOnly {
		q = scanKeys
	}
	switch {
	case key == "":
		return q + scanAll, []any{at}
	case end == "":
		return q + scanOne, []any{key, at}
	default:
		return q + scanRange, []any{key, end, at}
	}
}

// scanRange calls emit with the newest live row of every key in the range
// at revision at, in key order, until limit keys (0: no limit) or emit
// returns false.
func (b *Backend) scanRange(ctx context.Context, key, end string, limit, at int64, keysOnly bool, emit func(*server.KeyValue) bool) error {
	q, args := rangeQuery(key, end, at, keysOnly)
	rows, err := b.db.QueryContext(ctx, q, args...)
	counted("v2RangeScan", err)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		last    dbRow
		have    bool
		emitted int64
	)
	flush := func() bool {
		if !have || last.deleted {
			return true
		}
		emitted++
		return emit(last.keyValue()) && (limit <= 0 || emitted < limit)
	}
	for rows.Next() {
		r, err := scanRow(rows, false)
		if err != nil {
			return err
		}
		if have && r.name != last.name {
			if !flush() {
				return nil
			}
		}
		last, have = r, true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	flush()
	return nil
}

// List returns the newest live row of each key in the range at revision (0:
// now), in key order, at most limit keys, and the current revision.
func (b *Backend) List(ctx context.Context, key, end string, limit, revision int64, keysOnly bool) (int64, []*server.KeyValue, error) {
	current, err := b.checkRevision(revision)
	if err != nil {
		return current, nil, err
	}
	at := current
	if revision > 0 {
		at = revision
	}
	var kvs []*server.KeyValue
	err = b.scanRange(ctx, key, end, limit, at, keysOnly, func(kv *server.KeyValue) bool {
		kvs = append(kvs, kv)
		return true
	})
	return current, kvs, err
}

// ListStream is List, streamed to the caller while the scan reads.
func (b *Backend) ListStream(ctx context.Context, key, end string, limit, revision int64, keysOnly bool) server.ListResult {
	kvc := make(chan *server.KeyValue, 1)
	errc := make(chan error, 1)
	current, err := b.checkRevision(revision)
	if err != nil {
		errc <- err
		close(kvc)
		close(errc)
		return server.ListResult{KVc: kvc, Errorc: errc}
	}
	at := current
	if revision > 0 {
		at = revision
	}
	go func() {
		defer close(errc)
		defer close(kvc)
		err := b.scanRange(ctx, key, end, limit, at, keysOnly, func(kv *server.KeyValue) bool {
			select {
			case kvc <- kv:
				return true
			case <-ctx.Done():
				return false
			}
		})
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			errc <- err
		}
	}()
	return server.ListResult{CurrentRevision: current, KVc: kvc, Errorc: errc}
}

// Count is the number of live keys in the range at revision (0: now), with
// kine's key conditions and errors.
func (b *Backend) Count(ctx context.Context, key, end string, revision int64) (int64, int64, error) {
	current, err := b.checkRevision(revision)
	if err != nil {
		return current, 0, err
	}
	at := current
	if revision > 0 {
		at = revision
	}
	q, args := countAll, []any{at}
	if key != "" {
		// kine counts [key, end) even when end is empty (no key then).
		q, args = countRange, []any{key, end, at}
	}
	var n sql.NullInt64
	err = b.db.QueryRowContext(ctx, q, args...).Scan(&n)
	counted("v2Count", err)
	return current, n.Int64, err
}
