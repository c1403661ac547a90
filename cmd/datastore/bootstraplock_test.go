package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestStaleBootstrapLockClearedOnlyOnTheFirstStartInAPod runs the datastore
// process on a database where a k3s server died during its very first start,
// leaving its bootstrap lock (an empty /bootstrap/<hash> key, as k3s writes
// it) behind, next to another cluster token's filled bootstrap data.
//   - The first start in a new pod (an empty pod dir) removes the empty lock and
//     keeps the data: no k3s of this pod can hold the lock yet.
//   - A restart within the same pod (the pod dir keeps its marker), where this
//     pod's k3s may be running and hold the lock it just took, leaves a lock
//     alone.
//   - Without --pod-dir nothing is ever removed.
func TestStaleBootstrapLockClearedOnlyOnTheFirstStartInAPod(t *testing.T) {
	dataDir := t.TempDir()
	const lock, filled = "/bootstrap/0123456789ab", "/bootstrap/ba9876543210"

	put := func(p *proc, key, value string) {
		t.Helper()
		c := newClient(t, p.endpoint)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// As k3s's kine client Create does: only if the key does not exist.
		resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, value)).Commit()
		if err != nil || !resp.Succeeded {
			t.Fatalf("creating %s: %v (succeeded %v)", key, err, resp != nil && resp.Succeeded)
		}
	}
	keys := func(p *proc) map[string]string {
		t.Helper()
		c := newClient(t, p.endpoint)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := c.Get(ctx, "/bootstrap/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = string(kv.Value)
		}
		return out
	}

	// A pod without --pod-dir: the lock is taken and the server dies.
	p := startProc(t, dataDir)
	put(p, lock, "")
	put(p, filled, "salt:encrypted-bootstrap-data")
	p.stop(t)
	p = startProc(t, dataDir)
	if got := keys(p); len(got) != 2 {
		t.Fatalf("without --pod-dir the keys changed: %v", got)
	}
	p.stop(t)

	// The replacement pod: its sidecar starts first.
	podDir := t.TempDir()
	p = startProcWith(t, dataDir, "--pod-dir", podDir)
	got := keys(p)
	if _, ok := got[lock]; ok {
		t.Errorf("the stale lock %s is still there on the first start in a new pod: %v", lock, got)
	}
	if got[filled] != "salt:encrypted-bootstrap-data" {
		t.Errorf("bootstrap data was touched: %v", got)
	}
	if !strings.Contains(p.output(), lock) {
		t.Errorf("the removal is not logged:\n%s", p.output())
	}
	if _, err := os.Stat(filepath.Join(podDir, startMarker)); err != nil {
		t.Errorf("no start marker in the pod dir: %v", err)
	}

	// This pod's k3s takes the lock; then the sidecar restarts in place.
	put(p, lock, "")
	p.kill(t)
	p = startProcWith(t, dataDir, "--pod-dir", podDir)
	if got := keys(p); got[lock] != "" || len(got) != 2 {
		t.Fatalf("a restart beside a k3s that may hold the lock removed it: %v", got)
	} else if _, ok := got[lock]; !ok {
		t.Fatalf("a restart beside a k3s that may hold the lock removed it: %v", got)
	}
	if !strings.Contains(p.output(), "leaving it alone") {
		t.Errorf("the restart does not say why it keeps the lock:\n%s", p.output())
	}
}
