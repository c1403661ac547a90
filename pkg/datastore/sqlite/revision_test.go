package sqlite

import (
	"context"
	"fmt"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRecreateAnswersWithTheRowsRevision: a create of a key that was deleted
// before must answer with the revision it stored, as etcd does, also while
// other clients write. kine v0.17.5 answers such a create with the store's
// current revision instead (see ackGuard); with concurrent writers that is a
// later revision, and kube-apiserver would hand out a resourceVersion whose
// next update fails its compare.
func TestRecreateAnswersWithTheRowsRevision(t *testing.T) {
	s := openT(t, Config{DataDir: t.TempDir(), ListenAddress: "127.0.0.1:0"})
	c := etcdClient(t, s.Endpoint())
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()

	// Background writers keep the store's revision moving.
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("/registry/noise/%d/%d", w, i)
				_, _ = c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, "x")).Commit()
			}
		}()
	}
	defer wg.Wait()
	defer cancel()

	for round := 0; round < 60; round++ {
		key := fmt.Sprintf("/registry/recreate/%d", round%3)
		put := clientv3.OpPut(key, fmt.Sprintf("v%d", round))
		txn := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(put)
		if round%2 == 1 {
			// The shape of a client that wants the current value on conflict.
			txn = c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(put).Else(clientv3.OpGet(key))
		}
		resp, err := txn.Commit()
		if err != nil {
			t.Fatalf("round %d: create %s: %v", round, key, err)
		}
		if !resp.Succeeded {
			t.Fatalf("round %d: create %s failed its compare", round, key)
		}
		got, err := c.Get(ctx, key)
		if err != nil || len(got.Kvs) != 1 {
			t.Fatalf("round %d: get %s: %v", round, key, err)
		}
		if stored := got.Kvs[0].ModRevision; resp.Header.Revision != stored {
			t.Fatalf("round %d: create of %s answered revision %d, stored %d", round, key, resp.Header.Revision, stored)
		}
		del, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", got.Kvs[0].ModRevision)).
			Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
		if err != nil || !del.Succeeded {
			t.Fatalf("round %d: delete %s: %v (succeeded %v)", round, key, err, del != nil && del.Succeeded)
		}
	}
}
