package snapshot

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// RestoredPrefixes are the keys a restore writes: the Kubernetes objects
// (/registry/) and k3s's bootstrap data (/bootstrap/: the cluster's CA keys,
// encrypted with the token). Other keys are the datastore's own (kine's
// bookkeeping, k3k's readiness probe) and stay the target's.
var RestoredPrefixes = []string{"/registry/", "/bootstrap/"}

// datastoreKeys are keys under RestoredPrefixes that belong to the datastore,
// not to the cluster: kine writes its health key on start.
var datastoreKeys = map[string]bool{"/registry/health": true}

// LoadResult counts what Load did.
type LoadResult struct {
	// Restored keys were written.
	Restored int
	// Leased keys were skipped: they lived under an etcd lease (Events, the
	// API server's endpoint leases), which a restore cannot carry over; the
	// new servers write their own.
	Leased int
	// Other keys were skipped: not under RestoredPrefixes.
	Other int
}

// KeySource calls fn with every live key of a snapshot (ReadEtcdKeys, or the
// SQLite datastore's ReadSnapshotKeys).
type KeySource func(fn func(key string, value []byte, lease int64) error) error

// Load writes the live keys of a snapshot into a datastore that holds none of
// a cluster's keys yet, through the etcd API: the restore into a new Cluster,
// whose servers wait for their token until it is done. Each key is created
// only if it is absent, so Load never overwrites anything: a target that
// already holds cluster keys is refused before the first write, and a key
// that appears meanwhile (a server that started) stops it with an error.
//
// The keys get new revisions in the target; a new cluster has no client that
// could hold the old ones.
func Load(ctx context.Context, kv clientv3.KV, keys KeySource) (LoadResult, error) {
	for _, p := range RestoredPrefixes {
		resp, err := kv.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return LoadResult{}, fmt.Errorf("checking that the target is empty: %w", err)
		}
		n := 0
		for _, k := range resp.Kvs {
			if !datastoreKeys[string(k.Key)] {
				n++
			}
		}
		if n > 0 {
			return LoadResult{}, fmt.Errorf("the target datastore holds %d keys under %s already: a restore only goes into a new cluster", n, p)
		}
	}
	var res LoadResult
	err := keys(func(key string, value []byte, lease int64) error {
		restored := false
		for _, p := range RestoredPrefixes {
			restored = restored || strings.HasPrefix(key, p)
		}
		switch {
		case !restored || datastoreKeys[key]:
			res.Other++
			return nil
		case lease != 0:
			res.Leased++
			return nil
		}
		resp, err := kv.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(value))).
			Commit()
		if err != nil {
			return fmt.Errorf("restoring key %d: %w", res.Restored+1, err)
		}
		if !resp.Succeeded {
			return fmt.Errorf("key %s appeared in the target during the restore: something else writes it", key)
		}
		res.Restored++
		return nil
	})
	return res, err
}
