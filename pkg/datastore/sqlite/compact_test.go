package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestCompactToCompactsExactlyWhereKineWouldNot: kine, serving with its
// periodic compaction on (the sidecar's setting), answers an etcd Compact
// request and still serves the revision asked to be compacted; CompactTo on
// its database, while it serves, makes every revision below the target
// refused as compacted (list and watch), keeps every key's newest value, is a
// no-op when asked again, refuses a revision kine has not reached, and kine
// goes on writing.
func TestCompactToCompactsExactlyWhereKineWouldNot(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{DataDir: dir})
	c := etcdClient(t, s.Endpoint())
	ctx := testContext(t)
	var old int64
	for i := range 50 {
		resp, err := c.Put(ctx, fmt.Sprintf("/registry/cm/%02d", i%10), fmt.Sprintf("v%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 20 {
			old = resp.Header.Revision
		}
	}
	head, err := c.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	rev := head.Header.Revision

	if _, err := c.Compact(ctx, rev); err != nil {
		t.Fatalf("kine's Compact: %v", err)
	}
	if _, err := c.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(old)); err != nil {
		t.Fatalf("kine compacted on request after all (%v): CompactTo would not be needed", err)
	}

	db := filepath.Join(dir, DatabaseFile)
	res, err := CompactTo(ctx, db, rev)
	if err != nil {
		t.Fatal(err)
	}
	if res.To != rev || res.Rows == 0 {
		t.Fatalf("CompactTo = %+v, want to %d with rows deleted", res, rev)
	}
	if _, err := c.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(old)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("a list at revision %d after compacting at %d: %v, want compacted", old, rev, err)
	}
	w := <-c.Watch(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(old))
	if w.CompactRevision == 0 && !errors.Is(w.Err(), rpctypes.ErrCompacted) {
		t.Fatalf("a watch from revision %d after compacting at %d: %+v", old, rev, w)
	}
	now, err := c.Get(ctx, "/registry/cm/", clientv3.WithPrefix())
	if err != nil || len(now.Kvs) != 10 {
		t.Fatalf("after compacting: %d keys, %v", len(now.Kvs), err)
	}
	for _, kv := range now.Kvs {
		if !strings.HasPrefix(string(kv.Value), "v4") {
			t.Fatalf("%s = %s after compacting, want its newest value", kv.Key, kv.Value)
		}
	}

	if again, err := CompactTo(ctx, db, rev); err != nil || again.Rows != 0 || again.To != rev {
		t.Fatalf("CompactTo again = %+v, %v; want a no-op", again, err)
	}
	if _, err := CompactTo(ctx, db, rev+100); err == nil {
		t.Fatal("CompactTo a revision kine has not reached succeeded")
	}
	if _, err := c.Put(ctx, "/registry/cm/after", "x"); err != nil {
		t.Fatalf("kine does not write after CompactTo: %v", err)
	}
}
