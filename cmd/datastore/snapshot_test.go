package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
	"github.com/k3k-io/k3k/pkg/snapshot"
)

// snapKey is the i-th key the writer puts.
func snapKey(i int) string { return fmt.Sprintf("/registry/snap/%06d", i) }

// sequentialWriter puts snapKey(0), snapKey(1), … one after the other, each
// only after the previous one was acknowledged, until ctx ends; acked counts
// the acknowledged ones. So the writes any consistent snapshot holds are
// exactly snapKey(0..k-1) for one k: a prefix.
func sequentialWriter(ctx context.Context, c *clientv3.Client, acked *atomic.Int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			if _, err := c.Put(ctx, snapKey(i), "value-"+strconv.Itoa(i)); err != nil {
				if ctx.Err() != nil {
					break
				}
				done <- fmt.Errorf("put %d: %w", i, err)
				return
			}
			acked.Add(1)
		}
		done <- nil
	}()
	return done
}

// waitAcked waits until at least n writes were acknowledged.
func waitAcked(t *testing.T, acked *atomic.Int64, n int64, writer <-chan error) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for acked.Load() < n {
		select {
		case err := <-writer:
			t.Fatalf("writer stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d writes acknowledged", acked.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runSnapshot runs `datastore snapshot ARGS…` as its own process and reads
// its stdout as a snapshot stream into file.
func runSnapshot(t *testing.T, file string, args ...string) snapshot.Manifest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"snapshot"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("datastore snapshot %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := snapshot.ReadStream(&stdout, f)
	if err != nil {
		t.Fatalf("reading the snapshot stream: %v\nstderr: %s", err, stderr.String())
	}
	return m
}

// checkPrefix fails unless keys (key → value) are exactly snapKey(0..k-1)
// with their values, and returns k.
func checkPrefix(t *testing.T, keys map[string]string) int {
	t.Helper()
	k := len(keys)
	for i := range k {
		if v, ok := keys[snapKey(i)]; !ok || v != "value-"+strconv.Itoa(i) {
			t.Fatalf("the snapshot holds %d writes but not write %d (%q, present %v): not a prefix of the writes", k, i, v, ok)
		}
	}
	return k
}

// TestSQLiteSnapshotWhileWritesGoOn takes snapshots of a real `datastore
// sqlite` process with `datastore snapshot sqlite` while a client writes
// without pause. Each snapshot must open as a datastore of its own and hold a
// prefix of the writes: every write acknowledged before the snapshot began,
// none that had not been sent when it ended, and no gap. Its manifest's
// revision is the revision the restored datastore serves.
func TestSQLiteSnapshotWhileWritesGoOn(t *testing.T) {
	dir, tmp := t.TempDir(), t.TempDir()
	p := startProc(t, dir)
	c := newClient(t, p.endpoint)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var acked atomic.Int64
	writer := sequentialWriter(ctx, c, &acked)
	waitAcked(t, &acked, 200, writer)

	for round := range 3 {
		before := acked.Load()
		restored := t.TempDir()
		m := runSnapshot(t, filepath.Join(restored, sqlite.DatabaseFile), "sqlite", "--data-dir", dir, "--tmp-dir", tmp)
		after := acked.Load()
		if m.Datastore != snapshot.SQLite || m.Revision <= 0 || m.CreatedAt.IsZero() {
			t.Fatalf("manifest %+v", m)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Fatalf("the copy was left in the tmp dir: %v", left)
		}

		q := startProc(t, restored)
		rc := newClient(t, q.endpoint)
		resp, err := rc.Get(context.Background(), "/registry/snap/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]string{}
		for _, kv := range resp.Kvs {
			keys[string(kv.Key)] = string(kv.Value)
		}
		k := checkPrefix(t, keys)
		// One more than acknowledged may be in: committed, its answer still
		// on the way.
		if int64(k) < before || int64(k) > after+1 {
			t.Fatalf("round %d: the snapshot holds %d writes; %d were acknowledged before it began, %d when it ended", round, k, before, after)
		}
		if resp.Header.Revision != m.Revision {
			t.Fatalf("round %d: the restored datastore serves revision %d, the manifest says %d", round, resp.Header.Revision, m.Revision)
		}
		t.Logf("round %d: snapshot at revision %d holds writes 0..%d (acknowledged: %d before, %d after), %d bytes", round, m.Revision, k-1, before, after, m.Size)
		q.stop(t)
	}
	cancel()
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
}

// etcdKeys reads the keys of an etcd snapshot database straight from its
// backend: every revision up to the newest, the newest value of each key.
func etcdKeys(t *testing.T, path string) map[string]string {
	t.Helper()
	db, err := bbolt.Open(path, 0o400, &bbolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	err = db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("key")).ForEach(func(_, v []byte) error {
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return err
			}
			if strings.HasPrefix(string(kv.Key), "/registry/snap/") {
				out[string(kv.Key)] = string(kv.Value)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEtcdSnapshotWhileWritesGoOn is the same for an etcd member: `datastore
// snapshot etcd` streams the member's maintenance snapshot over mutual TLS,
// checked against the member's DNS name while dialling an address; the
// snapshot passes etcd's own checksum, holds a prefix of the writes, and its
// revision (read from the snapshot) counts exactly those writes.
func TestEtcdSnapshotWhileWritesGoOn(t *testing.T) {
	tm := startTestMember(t)
	c := tm.client
	_, clientPort, _ := net.SplitHostPort(tm.clientAddr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	getCtx, getCancel := context.WithTimeout(ctx, 30*time.Second)
	defer getCancel()
	start, err := c.Get(getCtx, "/registry/snap/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	base := start.Header.Revision
	var acked atomic.Int64
	writer := sequentialWriter(ctx, c, &acked)
	waitAcked(t, &acked, 200, writer)

	// The member is dialled by address, as the sidecar dials its own; its
	// certificate names it by DNS only.
	args := append([]string{"etcd", "--endpoint", tm.name, "--dial-address", tm.clientAddr}, tm.tlsFlags...)
	for round := range 3 {
		before := acked.Load()
		file := filepath.Join(t.TempDir(), snapshot.EtcdEntry)
		m := runSnapshot(t, file, args...)
		after := acked.Load()
		if m.Datastore != snapshot.Etcd || m.EtcdVersion == "" || m.CreatedAt.IsZero() {
			t.Fatalf("manifest %+v", m)
		}
		info, err := snapshot.InspectEtcd(file)
		if err != nil {
			t.Fatal(err)
		}
		k := checkPrefix(t, etcdKeys(t, file))
		if int64(k) < before || int64(k) > after+1 {
			t.Fatalf("round %d: the snapshot holds %d writes; %d were acknowledged before it began, %d when it ended", round, k, before, after)
		}
		if info.Revision != base+int64(k) {
			t.Fatalf("round %d: snapshot revision %d, but it holds %d writes made from revision %d on", round, info.Revision, k, base)
		}
		t.Logf("round %d: snapshot at revision %d holds writes 0..%d (acknowledged: %d before, %d after), %d bytes", round, info.Revision, k-1, before, after, m.Size)
	}

	// A member whose certificate does not carry the endpoint's name is
	// refused: the name is what is trusted, not the address dialled.
	cmd := exec.Command(binary, append([]string{"snapshot", "etcd", "--endpoint", "https://member-1.example.svc:" + clientPort, "--dial-address", tm.clientAddr}, tm.tlsFlags...)...)
	ctxT, cancelT := context.WithTimeout(context.Background(), time.Minute)
	defer cancelT()
	cmd = exec.CommandContext(ctxT, cmd.Path, cmd.Args[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("snapshot from a member under another name: %v: %s", err, strings.TrimSpace(stderr.String()))
	if err == nil || len(out) != 0 {
		t.Fatalf("a snapshot was sent to a client that checked the wrong name (err %v, %d bytes)", err, len(out))
	}
	cancel()
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
}
