package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// k3s keeps its bootstrap data (CAs, keys, encrypted with the token) in the
// datastore under /bootstrap/<hash of the token>. On a server's very first
// start, before it generates that data, it creates the key empty as a lock, so
// that two servers never store different CAs; it fills the key a few seconds
// later (pkg/cluster/storage.go, storageBootstrap and Save). A server that dies
// in between leaves the empty key behind, and the next start finds it locked,
// polls every 5s and deletes it only after 5 polls: ~25s lost.
//
// In a single-server SQLite pod the datastore sidecar is the only way to the
// database, and the sidecar starts before k3s (a native sidecar whose startup
// probe holds k3s back). So when the sidecar starts for the first time in a
// pod, no k3s can be running against this database: the previous pod is gone
// (a StatefulSet starts a pod's replacement only after it terminated, and the
// volume is ReadWriteOnce), and this pod's k3s has not started. An empty
// bootstrap key found then is a lock nobody holds, and removing it is what k3s
// itself would do 25s later. When the sidecar restarts inside a pod whose k3s
// may be running and may hold the lock, it leaves the key alone: a marker in a
// directory that lives as long as the pod (an emptyDir) tells the two apart.

// bootstrapPrefix is where k3s stores its bootstrap data (storageKey).
const bootstrapPrefix = "/bootstrap/"

// startMarker is the file in the pod-scoped directory that says this pod's
// sidecar has started before.
const startMarker = "datastore-started"

// firstStartInPod reports whether the sidecar starts for the first time in
// this pod, and records that it has started. The marker is written before the
// datastore serves anything, so a crash after it can only make the next start
// careful, never careless.
func firstStartInPod(podDir string) (bool, error) {
	path := filepath.Join(podDir, startMarker)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("recording the datastore's start in %s: %w", podDir, err)
	}
	_, werr := f.WriteString(time.Now().UTC().Format(time.RFC3339Nano) + "\n")
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return false, fmt.Errorf("recording the datastore's start in %s: %w", podDir, err)
	}
	return true, nil
}

// clearStaleBootstrapLocks deletes every empty key under /bootstrap/ through
// the datastore's etcd API at endpoint, each only if it has not changed since
// it was read, and returns the keys it deleted, and whether any key holds
// data (k3s stored its bootstrap data once). Keys holding data are never
// touched. It must only run when no k3s can hold the lock (see above).
func clearStaleBootstrapLocks(ctx context.Context, endpoint string) (cleared []string, stored bool, err error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, false, fmt.Errorf("connecting to the datastore: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, bootstrapPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, false, fmt.Errorf("listing k3s bootstrap keys: %w", err)
	}
	for _, kv := range resp.Kvs {
		if len(kv.Value) != 0 {
			stored = true
			continue
		}
		key := string(kv.Key)
		txn, err := c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(key)).
			Else(clientv3.OpGet(key)). // the form kine serves (and k3s uses)
			Commit()
		if err != nil {
			return cleared, stored, fmt.Errorf("deleting the stale k3s bootstrap lock %s: %w", key, err)
		}
		if txn.Succeeded {
			cleared = append(cleared, key)
		}
	}
	return cleared, stored, nil
}
