//go:build !cgo

package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestWritesNeedNoTemporaryFiles runs creates, updates and deletes where
// SQLite cannot create a temporary file, as in the datastore container (a
// read-only root filesystem, no /tmp volume). An insert whose statement
// journal outgrows 64 KiB (an index page split that rebalances more than 16
// pages) spills it to a temporary file; long keys make that happen within a
// dozen keys. Without temp_store=MEMORY such an insert failed, kine answered
// the update as a failed compare with the key unchanged, and kube-apiserver
// retried it at once until its deadline: lease renewals stopped 4 minutes
// into an e2e run. Only the pure-Go build: mattn/go-sqlite3 (cgo, tests only)
// has no DSN setting for it.
//
// It runs on each backend: v2's batches and range scans must not spill either.
func TestWritesNeedNoTemporaryFiles(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) { writesNeedNoTemporaryFiles(t, b) })
	}
}

func writesNeedNoTemporaryFiles(t *testing.T, backend BackendKind) {
	noTemp := t.TempDir()
	// Room for no file at all: SQLite finds the directory usable, and the
	// open of a temporary file in it fails.
	mountTmpfs(t, noTemp, "size=64k,nr_inodes=1")
	s := openT(t, Config{DataDir: t.TempDir(), Backend: backend})
	ctx := testContext(t)
	// Process-wide in the pure-Go SQLite: every connection, kine's included,
	// would put its temporary files there.
	if _, err := s.side.ExecContext(ctx, fmt.Sprintf("PRAGMA temp_store_directory = '%s'", noTemp)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = s.side.ExecContext(context.Background(), "PRAGMA temp_store_directory = ''") })
	c := etcdClient(t, s.Endpoint())

	const keys = 12
	name := func(i int) string {
		return fmt.Sprintf("/registry/configmaps/default/%s-%02d", strings.Repeat("n", 900), i)
	}
	revs := make([]int64, keys)
	for i := range keys {
		r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(name(i)), "=", 0)).
			Then(clientv3.OpPut(name(i), "v1")).Commit()
		if err != nil || !r.Succeeded {
			t.Fatalf("create %d: %v (succeeded %v)", i, err, r != nil && r.Succeeded)
		}
		revs[i] = r.Header.Revision
	}
	for i := range keys {
		r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(name(i)), "=", revs[i])).
			Then(clientv3.OpPut(name(i), "v2")).Else(clientv3.OpGet(name(i))).Commit()
		if err != nil || !r.Succeeded {
			t.Fatalf("update %d at its own revision %d: %v (succeeded %v)", i, revs[i], err, r != nil && r.Succeeded)
		}
		revs[i] = r.Header.Revision
	}
	for i := range keys {
		r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(name(i)), "=", revs[i])).
			Then(clientv3.OpDelete(name(i))).Else(clientv3.OpGet(name(i))).Commit()
		if err != nil || !r.Succeeded {
			t.Fatalf("delete %d at its own revision %d: %v (succeeded %v)", i, revs[i], err, r != nil && r.Succeeded)
		}
	}
}
