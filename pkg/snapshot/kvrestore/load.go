package kvrestore

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

// KeySource calls fn with every live key of a snapshot (snapshot.ReadEtcdKeys,
// or the SQLite datastore's ReadSnapshotKeys).
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
		if !restorable(&res, key, lease) {
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

// restorable reports whether Load and Replace write key, and else which of
// res's counters it adds to.
func restorable(res *LoadResult, key string, lease int64) bool {
	restored := false
	for _, p := range RestoredPrefixes {
		restored = restored || strings.HasPrefix(key, p)
	}
	switch {
	case !restored || datastoreKeys[key]:
		res.Other++
		return false
	case lease != 0:
		res.Leased++
		return false
	}
	return true
}

// ReplaceResult is what Replace did.
type ReplaceResult struct {
	LoadResult
	// Deleted keys were live in the target, under RestoredPrefixes, and not
	// in the snapshot (or only under a lease there).
	Deleted int
	// Before is the target's revision before Replace wrote anything: every
	// key it wrote or deleted has a higher mod revision, so no client can
	// hold a resourceVersion as new as any restored object.
	Before int64
	// After is the target's revision once Replace was done: compact the
	// target at it, so that a watch or list from an older revision is told
	// that it was compacted and relists.
	After int64
}

// replacePage bounds the keys one listing of the target returns.
const replacePage = 1000

// Replace makes the cluster keys of a datastore that holds data already
// exactly those of a snapshot: the in-place restore (`datastore restore
// --replace`), run while no k3s server uses the datastore. Through the etcd
// API, every live snapshot key under RestoredPrefixes is written (even when
// the target holds the same value: the key must get a new revision), then
// every live target key under RestoredPrefixes that was not written is
// deleted. Revisions therefore only move forward: a client that held
// resourceVersion r <= Before sees every restored object as changed after r,
// and once the caller compacted at After it is told to relist rather than
// being handed time going backwards, as a restore of the snapshot's own
// revisions would.
//
// Nothing here is atomic, and nothing needs to be: a Replace interrupted at
// any point leaves keys that a second Replace of the same snapshot writes or
// deletes again, so running it again finishes the job. Keys under a lease in
// the snapshot are left out as Load leaves them out, and deleted from the
// target (Events, endpoint leases: the servers write their own).
func Replace(ctx context.Context, kv clientv3.KV, keys KeySource) (ReplaceResult, error) {
	var res ReplaceResult
	head, err := kv.Get(ctx, RestoredPrefixes[0], clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return res, fmt.Errorf("reading the target's revision: %w", err)
	}
	res.Before, res.After = head.Header.Revision, head.Header.Revision
	written := map[string]bool{}
	err = keys(func(key string, value []byte, lease int64) error {
		if !restorable(&res.LoadResult, key, lease) {
			return nil
		}
		resp, err := kv.Put(ctx, key, string(value))
		if err != nil {
			return fmt.Errorf("writing key %d: %w", res.Restored+1, err)
		}
		written[key] = true
		res.Restored++
		res.After = max(res.After, resp.Header.Revision)
		return nil
	})
	if err != nil {
		return res, err
	}
	for _, p := range RestoredPrefixes {
		end := clientv3.GetPrefixRangeEnd(p)
		for from := p; ; {
			page, err := kv.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(replacePage))
			if err != nil {
				return res, fmt.Errorf("listing the target's keys under %s: %w", p, err)
			}
			for _, k := range page.Kvs {
				key := string(k.Key)
				if written[key] || datastoreKeys[key] {
					continue
				}
				// The form kube-apiserver deletes with, which kine serves too.
				resp, err := kv.Txn(ctx).
					If(clientv3.Compare(clientv3.ModRevision(key), "=", k.ModRevision)).
					Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
				if err != nil {
					return res, fmt.Errorf("deleting a key that is not in the snapshot: %w", err)
				}
				if !resp.Succeeded {
					return res, fmt.Errorf("key %s changed in the target during the restore: something else writes it", key)
				}
				res.Deleted++
				res.After = max(res.After, resp.Header.Revision)
			}
			if !page.More || len(page.Kvs) == 0 {
				break
			}
			from = string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
		}
	}
	return res, nil
}
