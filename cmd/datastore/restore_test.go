package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/etcd/member"
	"github.com/k3k-io/k3k/pkg/pki"
)

// testMember is a real etcd member on loopback whose certificate names DNS
// names only, member-0.example.svc first (which resolves nowhere) and
// localhost, as a member certificate in a pod names no address.
type testMember struct {
	name       string // https URL by DNS name
	id         uint64
	clientAddr string
	tlsFlags   []string
	client     *clientv3.Client
}

func startTestMember(t *testing.T) *testMember {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA("etcd-ca", time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := pki.Issue(ca, pki.MemberSpec("member", "member-0.example.svc", "localhost"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"ca.crt": ca.CertPEM, "tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	peerAddr, clientAddr := freeAddr(t), freeAddr(t)
	_, peerPort, _ := net.SplitHostPort(peerAddr)
	_, clientPort, _ := net.SplitHostPort(clientAddr)
	self := etcd.Peer{Name: "member-0", PeerURL: "https://localhost:" + peerPort, ClientURL: "https://localhost:" + clientPort}
	m, err := member.Start(context.Background(), member.Config{
		Name: self.Name, DataDir: filepath.Join(dir, "data"), PeerURL: self.PeerURL, ClientURL: self.ClientURL,
		ListenPeerAddress: peerAddr, ListenClientAddress: clientAddr,
		CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"),
		Roster: etcd.InitialRoster("k3k-test", self), Logger: zap.NewNop(), UnsafeNoFsync: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	<-m.ReadyNotify()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{self.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &testMember{
		name: "https://member-0.example.svc:" + clientPort, id: m.ID(), clientAddr: clientAddr, client: c,
		tlsFlags: []string{"--ca-file", filepath.Join(dir, "ca.crt"), "--cert-file", filepath.Join(dir, "tls.crt"), "--key-file", filepath.Join(dir, "tls.key")},
	}
}

// writeHistory writes what a restore must sort out: 300 objects, one of
// them updated and one deleted, k3s's bootstrap key, an Event under a lease
// and a key of the datastore's own.
func writeHistory(t *testing.T, c *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 300 {
		if _, err := c.Put(ctx, fmt.Sprintf("/registry/configmaps/ns/object-%03d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := c.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	// As Kubernetes deletes (kine knows no other way): a transaction on the
	// key's revision.
	gone := "/registry/configmaps/ns/object-007"
	cur, err := c.Get(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(gone), "=", cur.Kvs[0].ModRevision)).Then(clientv3.OpDelete(gone)).Else(clientv3.OpGet(gone)).Commit(); err != nil {
		t.Fatal(err)
	}
	for _, op := range []clientv3.Op{
		clientv3.OpPut("/registry/configmaps/ns/object-005", "v5-updated"),
		clientv3.OpPut("/bootstrap/0123abcd", "encrypted bootstrap data"),
		clientv3.OpPut("/registry/events/ns/e1", "an event", clientv3.WithLease(lease.ID)),
		clientv3.OpPut("/k3k.io/other", "the datastore's own"),
	} {
		if _, err := c.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
}

// checkRestored fails unless c holds exactly what writeHistory left live
// under /registry/ and /bootstrap/, Events aside.
func checkRestored(t *testing.T, c *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := map[string]string{}
	for _, p := range []string{"/registry/", "/bootstrap/", "/k3k.io/"} {
		resp, err := c.Get(ctx, p, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			got[string(kv.Key)] = string(kv.Value)
		}
	}
	want := map[string]string{"/bootstrap/0123abcd": "encrypted bootstrap data"}
	for i := range 300 {
		want[fmt.Sprintf("/registry/configmaps/ns/object-%03d", i)] = fmt.Sprintf("v%d", i)
	}
	want["/registry/configmaps/ns/object-005"] = "v5-updated"
	delete(want, "/registry/configmaps/ns/object-007")
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("restored %s = %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && !strings.HasPrefix(k, "/k3k.io/datastore/") && k != "/registry/health" {
			t.Fatalf("restored %s, which the snapshot did not hold live or which is not the cluster's", k)
		}
	}
}

// restore runs `datastore restore ARGS…` with stream on stdin.
func restore(t *testing.T, stream []byte, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"restore"}, args...)...)
	cmd.Stdin = bytes.NewReader(stream)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// snapshotStream runs `datastore snapshot ARGS…` and returns its stdout.
func snapshotStream(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(binary, append([]string{"snapshot"}, args...)...).Output()
	if err != nil {
		t.Fatalf("datastore snapshot: %v", err)
	}
	return out
}

// TestRestoreSQLiteSnapshotIntoANewCluster: a snapshot of a real SQLite
// datastore, restored by `datastore restore` into a fresh one, serves exactly
// the live keys; a second restore into it is refused and changes nothing.
func TestRestoreSQLiteSnapshotIntoANewCluster(t *testing.T) {
	src := startProc(t, t.TempDir())
	writeHistory(t, newClient(t, src.endpoint))
	stream := snapshotStream(t, "sqlite", "--data-dir", src.cmd.Args[3], "--tmp-dir", t.TempDir())

	dst := startProc(t, t.TempDir())
	tmp := t.TempDir()
	out, err := restore(t, stream, "--endpoint", dst.endpoint, "--tmp-dir", tmp)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	t.Logf("restore said: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "restored 300 keys") || !strings.Contains(out, "1 under a lease") {
		t.Fatalf("restore output %q, want 300 keys restored and the Event left out", out)
	}
	c := newClient(t, dst.endpoint)
	checkRestored(t, c)
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("the snapshot was left in the tmp dir: %v", left)
	}

	before, err := c.Get(context.Background(), "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	out, err = restore(t, stream, "--endpoint", dst.endpoint, "--tmp-dir", tmp)
	if err == nil || !strings.Contains(out, "holds 299 keys under /registry/ already") {
		t.Fatalf("a second restore into a cluster with data: err %v, output %q", err, out)
	}
	after, err := c.Get(context.Background(), "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.Revision != before.Header.Revision {
		t.Fatalf("the refused restore wrote: revision %d → %d", before.Header.Revision, after.Header.Revision)
	}
	// Garbage on stdin is refused before anything is written.
	if out, err := restore(t, []byte("not a snapshot"), "--endpoint", dst.endpoint, "--tmp-dir", tmp); err == nil || !strings.Contains(out, "not a k3k snapshot stream") {
		t.Fatalf("garbage restored: err %v, output %q", err, out)
	}
}

// TestRestoreEtcdSnapshotsAcrossDatastores: an etcd member's snapshot is
// read from etcd's own backend format and restored into a SQLite datastore,
// and a SQLite snapshot into an etcd member over mutual TLS (dialled by
// address, checked by name): what a restore reads and where it writes do not
// depend on each other.
func TestRestoreEtcdSnapshotsAcrossDatastores(t *testing.T) {
	m := startTestMember(t)
	writeHistory(t, m.client)
	etcdStream := snapshotStream(t, append([]string{"etcd", "--endpoint", m.name, "--dial-address", m.clientAddr}, m.tlsFlags...)...)
	dst := startProc(t, t.TempDir())
	if out, err := restore(t, etcdStream, "--endpoint", dst.endpoint, "--tmp-dir", t.TempDir()); err != nil || !strings.Contains(out, "restored 300 keys of a etcd snapshot") {
		t.Fatalf("etcd snapshot into SQLite: %v\n%s", err, out)
	}
	checkRestored(t, newClient(t, dst.endpoint))

	src := startProc(t, t.TempDir())
	writeHistory(t, newClient(t, src.endpoint))
	sqliteStream := snapshotStream(t, "sqlite", "--data-dir", src.cmd.Args[3], "--tmp-dir", t.TempDir())
	target := startTestMember(t)
	args := append([]string{"--endpoint", target.name, "--dial-address", target.clientAddr, "--tmp-dir", t.TempDir()}, target.tlsFlags...)
	if out, err := restore(t, sqliteStream, args...); err != nil || !strings.Contains(out, "restored 300 keys of a sqlite snapshot") {
		t.Fatalf("SQLite snapshot into etcd: %v\n%s", err, out)
	}
	checkRestored(t, target.client)
}
