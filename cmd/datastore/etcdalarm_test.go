package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/etcd/member"
	"github.com/k3k-io/k3k/pkg/pki"
)

// The operator's commands of docs/etcd.md's Alarms section, run as the binary
// runs in a pod: against the member's own client port on 127.0.0.1, with the
// member certificate (which names DNS names only) as client certificate.
func TestEtcdAlarmListsAndDisarmsThroughThePodsOwnMember(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("etcd-ca", time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// As in a pod: the certificate names the members' DNS names, not the
	// address the command dials.
	kp, err := pki.Issue(ca, pki.MemberSpec("member", "a.k3k-c-server-headless.ns.svc", "b.k3k-c-server-headless.ns.svc"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for path, b := range map[string][]byte{caFile: ca.CertPEM, certFile: kp.CertPEM, keyFile: kp.KeyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	peerAddr, clientAddr := freeAddr(t), freeAddr(t)
	_, peerPort, _ := net.SplitHostPort(peerAddr)
	_, clientPort, _ := net.SplitHostPort(clientAddr)
	a := etcd.Peer{Name: "a", PeerURL: "https://a.k3k-c-server-headless.ns.svc:" + peerPort, ClientURL: "https://a.k3k-c-server-headless.ns.svc:" + clientPort}
	m, err := member.Start(context.Background(), member.Config{
		Name: "a", DataDir: filepath.Join(dir, "a"), PeerURL: a.PeerURL, ClientURL: a.ClientURL,
		ListenPeerAddress: peerAddr, ListenClientAddress: clientAddr,
		CAFile: caFile, CertFile: certFile, KeyFile: keyFile,
		Roster: etcd.InitialRoster("k3k-test", a), Logger: zap.NewNop(), UnsafeNoFsync: true,
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
	id := etcd.FormatID(m.ID())

	flags := []string{"--endpoint=https://" + clientAddr, "--ca-file=" + caFile, "--cert-file=" + certFile, "--key-file=" + keyFile}
	run := func(wantCode int, args ...string) string {
		t.Helper()
		code, out := runToExit(t, append(append([]string{"etcd-alarm"}, args...), flags...)...)
		if code != wantCode {
			t.Fatalf("datastore etcd-alarm %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, wantCode, out)
		}
		return out
	}
	if out := run(0, "list"); !strings.Contains(out, "alarms: none") || !strings.Contains(out, id+" a voter") {
		t.Fatalf("list of a healthy member:\n%s", out)
	}

	// etcd's corruption check raises the alarm this way; so does the test,
	// for this member and for the whole cluster (member ID 0).
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{a.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", clientAddr)
		})}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mc := clientv3.RetryMaintenanceClient(cl, cl.ActiveConnection())
	for _, mid := range []uint64{m.ID(), 0} {
		if _, err := mc.Alarm(ctx, &etcdserverpb.AlarmRequest{Action: etcdserverpb.AlarmRequest_ACTIVATE, MemberID: mid, Alarm: etcdserverpb.AlarmType_CORRUPT}); err != nil {
			t.Fatal(err)
		}
	}
	out := run(0, "list")
	if !strings.Contains(out, "CORRUPT "+id+" (a)") || !strings.Contains(out, "CORRUPT 0 (the whole cluster)") {
		t.Fatalf("list with two CORRUPT alarms:\n%s", out)
	}

	if out := run(1, "disarm", "BROKEN", id); !strings.Contains(out, `alarm "BROKEN"`) {
		t.Fatalf("disarm of an unknown alarm:\n%s", out)
	}
	if out := run(1, "disarm", "CORRUPT", "not-hex"); !strings.Contains(out, "hexadecimal") {
		t.Fatalf("disarm with a bad member ID:\n%s", out)
	}
	out = run(0, "disarm", "corrupt", id)
	if !strings.Contains(out, "disarmed CORRUPT of member "+id) || strings.Contains(out, "CORRUPT "+id+" (a)") || !strings.Contains(out, "CORRUPT 0 (the whole cluster)") {
		t.Fatalf("disarm of the member's alarm:\n%s", out)
	}
	if out := run(0, "disarm", "CORRUPT", "0"); !strings.Contains(out, "alarms: none") {
		t.Fatalf("disarm of the cluster-wide alarm:\n%s", out)
	}
	if _, err := cl.Put(ctx, "/k3k/after-disarm", "x"); err != nil {
		t.Fatalf("a write after both disarms: %v", err)
	}
}
