package sqlite

import (
	"context"
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
// goes on writing. It is about kine's own backend (--backend kine); v2
// compacts on request (TestV2CompactsOnRequestAndAdoptsACompactionOfItsFile).
func TestCompactToCompactsExactlyWhereKineWouldNot(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{DataDir: dir, Backend: BackendKine})
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

// TestV2CompactsOnRequestAndAdoptsACompactionOfItsFile: the v2 backend
// answers an etcd Compact request as etcd does (every revision below it
// refused at once, for lists and watches, with the periodic compaction on,
// as the sidecar runs it), and a compaction of its file by another program
// (CompactTo, as a restore run by an older binary does) is adopted by its
// next compaction instead of failing it: without that, v2 kept its own
// compact revision, served the compacted revisions' remains, and every later
// compaction failed on "the compact revision changed under the compactor".
func TestV2CompactsOnRequestAndAdoptsACompactionOfItsFile(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{DataDir: dir, Backend: BackendV2})
	c := etcdClient(t, s.Endpoint())
	ctx := testContext(t)
	put := func(n int) (first int64) {
		for i := range n {
			resp, err := c.Put(ctx, fmt.Sprintf("/registry/cm/%02d", i%10), fmt.Sprintf("v%d", i))
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = resp.Header.Revision
			}
		}
		return first
	}
	compacted := func(rev int64) bool {
		_, err := c.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("a list at revision %d: %v", rev, err)
		}
		return err != nil
	}

	old := put(30)
	head, err := c.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, head.Header.Revision); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if !compacted(old) || compacted(head.Header.Revision) {
		t.Fatalf("after Compact(%d): revision %d compacted %v (want true), %d compacted %v (want false)",
			head.Header.Revision, old, compacted(old), head.Header.Revision, compacted(head.Header.Revision))
	}
	w := <-c.Watch(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(old))
	if w.CompactRevision == 0 && !errors.Is(w.Err(), rpctypes.ErrCompacted) {
		t.Fatalf("a watch from revision %d after Compact(%d): %+v", old, head.Header.Revision, w)
	}

	// Another program compacts the file further; v2's next compaction
	// adopts that and goes on.
	mid := put(30)
	midHead, err := c.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CompactTo(ctx, filepath.Join(dir, DatabaseFile), midHead.Header.Revision); err != nil {
		t.Fatal(err)
	}
	put(30)
	last, err := c.Get(ctx, "/registry/cm/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, last.Header.Revision); err != nil {
		t.Fatalf("Compact after the file was compacted by another program: %v", err)
	}
	if !compacted(mid) || !compacted(last.Header.Revision-1) || compacted(last.Header.Revision) {
		t.Fatalf("after CompactTo(%d) and Compact(%d): revisions %d, %d compacted %v, %v (want true), %d compacted %v (want false)",
			midHead.Header.Revision, last.Header.Revision, mid, last.Header.Revision-1, compacted(mid),
			compacted(last.Header.Revision-1), last.Header.Revision, compacted(last.Header.Revision))
	}
	if len(last.Kvs) != 10 {
		t.Fatalf("%d keys, want 10", len(last.Kvs))
	}
	now, err := c.Get(ctx, "/registry/cm/", clientv3.WithPrefix())
	if err != nil || len(now.Kvs) != 10 {
		t.Fatalf("after compacting: %d keys, %v", len(now.Kvs), err)
	}
	for i, kv := range now.Kvs {
		if want := last.Kvs[i]; string(kv.Value) != string(want.Value) || kv.ModRevision != want.ModRevision {
			t.Fatalf("%s = %s at %d after compacting, want %s at %d", kv.Key, kv.Value, kv.ModRevision, want.Value, want.ModRevision)
		}
	}
}

// TestV2RevisionNeverGoesBackAfterACompactionAtTheHead: the newest writes are
// deletes (as at the end of an in-place restore), the datastore is compacted
// exactly there, which removes those delete rows, and restarted: its current
// revision is still the one it gave out, a write gets the next one, and a
// watch from the revision after the head is not refused as compacted. Read
// from the rows left, the revision fell below the compact revision, and
// every list's watch was refused as compacted until a write came.
func TestV2RevisionNeverGoesBackAfterACompactionAtTheHead(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Backend: BackendV2}
	s := openT(t, cfg)
	c := etcdClient(t, s.Endpoint())
	ctx := testContext(t)
	mod := map[string]int64{}
	for i := range 5 {
		key := fmt.Sprintf("/registry/cm/%d", i)
		resp, err := c.Put(ctx, key, "v")
		if err != nil {
			t.Fatal(err)
		}
		mod[key] = resp.Header.Revision
	}
	var head int64
	for i := range 3 {
		// kine serves deletes only as kube-apiserver sends them: a txn.
		key := fmt.Sprintf("/registry/cm/%d", i)
		resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", mod[key])).
			Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
		if err != nil || !resp.Succeeded {
			t.Fatalf("deleting %s: %v", key, err)
		}
		head = resp.Header.Revision
	}
	if _, err := c.Compact(ctx, head); err != nil {
		t.Fatalf("Compact(%d): %v", head, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	s = openT(t, cfg)
	c = etcdClient(t, s.Endpoint())
	got, err := c.Get(ctx, "/registry/cm/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Revision != head || len(got.Kvs) != 2 {
		t.Fatalf("after the restart: revision %d with %d keys, want %d with 2", got.Header.Revision, len(got.Kvs), head)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := c.Watch(wctx, "/registry/cm/", clientv3.WithPrefix(), clientv3.WithRev(head+1))
	put, err := c.Put(ctx, "/registry/cm/next", "v")
	if err != nil {
		t.Fatal(err)
	}
	if put.Header.Revision != head+1 {
		t.Fatalf("the first write after the restart got revision %d, want %d", put.Header.Revision, head+1)
	}
	w := <-wch
	if err := w.Err(); err != nil || w.CompactRevision != 0 || len(w.Events) != 1 || w.Events[0].Kv.ModRevision != head+1 {
		t.Fatalf("a watch from revision %d: %+v (err %v), want the write at %d", head+1, w, err, head+1)
	}
}
