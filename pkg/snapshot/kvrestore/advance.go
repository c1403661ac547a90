package kvrestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// advanceKey is the scratch key AdvanceRevision writes: outside
// RestoredPrefixes, so no restore writes, deletes or reads it as the
// cluster's, and deleted when done.
const advanceKey = "/k3k/advance-revision"

// advanceWorkers is how many puts AdvanceRevision keeps in flight: etcd
// commits concurrent requests in one batch (one fsync), so the revision
// moves thousands per second instead of one per disk sync.
const advanceWorkers = 64

// AdvanceRevision writes a scratch key until the datastore's revision is at
// least target, then deletes it, and returns the revision it ended at.
//
// It is for a datastore that takes over from another whose clients hold
// revisions up to target: the migration from SQLite to etcd (k3kcli
// cluster migrate) loads the SQLite snapshot into a new etcd member, whose
// revisions would otherwise start at 1, below the resourceVersions the
// agent and users' watches hold. With the revision moved past target first,
// Replace writes every key above it, and the compaction after Replace makes
// every revision a client can hold refused as compacted (410 Gone: relist),
// as an in-place restore does. etcd has no call that moves the revision by
// more than one per transaction (etcdutl's --bump-revision works on the
// files of a stopped member), so it costs target minus the current revision
// writes; a datastore already past target gets none.
func AdvanceRevision(ctx context.Context, kv clientv3.KV, target int64) (int64, error) {
	head, err := kv.Get(ctx, advanceKey, clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("reading the datastore's revision: %w", err)
	}
	if head.Header.Revision >= target {
		return head.Header.Revision, nil
	}
	var (
		reached  atomic.Int64
		wg       sync.WaitGroup
		firstErr error
		once     sync.Once
	)
	reached.Store(head.Header.Revision)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range advanceWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for reached.Load() < target && ctx.Err() == nil {
				resp, err := kv.Put(ctx, advanceKey, "")
				if err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				for {
					cur := reached.Load()
					if resp.Header.Revision <= cur || reached.CompareAndSwap(cur, resp.Header.Revision) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil && reached.Load() < target {
		// The workers stopped because the caller's context ended, not
		// because the target was reached: that is no success.
		firstErr = ctx.Err()
		if firstErr == nil {
			firstErr = errors.New("stopped before the target")
		}
	}
	if firstErr != nil {
		return 0, fmt.Errorf("advancing the datastore's revision to %d (at %d): %w", target, reached.Load(), firstErr)
	}
	del, err := kv.Delete(context.WithoutCancel(ctx), advanceKey)
	if err != nil {
		return 0, fmt.Errorf("deleting the scratch key after advancing the revision to %d: %w", target, err)
	}
	return del.Header.Revision, nil
}
