package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/etcd/member"
	"github.com/k3k-io/k3k/pkg/pki"
)

// The end-to-end symptom of issue 16 at the sidecar: a member removed from the
// cluster while its `datastore etcd` process runs must not keep serving a
// stopped server nor crash-loop on "the member has been permanently removed":
// the process stays up (alive, not ready), sets the data aside, waits while
// its roster still lists the removed member, and joins again as the learner
// the controller adds.
func TestARemovedMembersSidecarSetsItsDataAsideAndJoinsAgain(t *testing.T) {
	f := startPair(t)
	dir, a, b, bPeer, bClient, cl, rosterFile := f.dir, f.a, f.b, f.bPeer, f.bClient, f.cl, f.rosterFile
	ctx := context.Background()
	addB := func() uint64 {
		t.Helper()
		id, _ := f.addB(t, ctx)
		return id
	}
	promote := func(id uint64) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			err := cl.Promote(ctx, a.ClientURL, id)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("promoting b: %v", err)
			}
		}
	}

	health := freeAddr(t)
	bData := filepath.Join(dir, "b", "data")
	firstID := addB()
	p := spawn(t, health, "etcd", "--name=b", "--data-dir="+bData, "--peer-url="+b.PeerURL, "--client-url="+b.ClientURL,
		"--listen-peer-address="+bPeer, "--listen-client-address="+bClient, "--members-file="+rosterFile,
		"--ca-file="+f.caFile, "--cert-file="+f.certFile, "--key-file="+f.keyFile,
		"--health-address="+health, "--metrics-address="+freeAddr(t), "--termination-message-path="+filepath.Join(dir, "termination-log"))
	promote(firstID)
	waitReadyz(t, p, http.StatusOK)

	// The member is removed while its sidecar runs.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := cl.Remove(ctx, a.ClientURL, firstID)
		if err == nil {
			break
		}
		if !errors.Is(err, etcd.ErrUnhealthy) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	waitReadyz(t, p, http.StatusServiceUnavailable)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		stale, _ := filepath.Glob(bData + ".stale-*")
		if len(stale) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the removed member's data is not set aside: %v", stale)
		}
	}
	// The roster still lists the removed member: the sidecar waits, alive.
	time.Sleep(3 * rosterPollInterval)
	select {
	case <-p.done:
		t.Fatalf("the sidecar exited after its member's removal: %v", p.cmd.ProcessState)
	default:
	}
	if code, body := get(p.healthURL + "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d %s while waiting to be added again", code, body)
	}
	if _, err := os.Stat(filepath.Join(dir, "termination-log")); err == nil {
		t.Fatal("a data-lost report was written for a removed member: the controller would act on it")
	}

	// The controller adds it again: it joins as the new member.
	secondID := addB()
	promote(secondID)
	waitReadyz(t, p, http.StatusOK)
	if secondID == firstID {
		t.Fatal("test bug: the same member ID twice")
	}
	st, err := cl.Status(ctx, b.ClientURL)
	if err != nil || st.MemberID != secondID {
		t.Fatalf("b answers as %x (%v), want the new member %x", st.MemberID, err, secondID)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if stale, _ := filepath.Glob(bData + ".stale-*"); len(stale) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the set-aside data dir is still there after the member votes again")
		}
	}
	if !strings.Contains(p.output(), "this member was removed from the cluster") {
		t.Error("the sidecar did not log the removal")
	}
}

// pair is the fixture of the sidecar tests: member a running in-process, the
// addresses of member b (whose sidecar each test runs as the built binary), the
// certificates both use, a client of the members and the roster file b reads.
type pair struct {
	dir                       string
	caFile, certFile, keyFile string
	a, b                      etcd.Peer
	bPeer, bClient            string // b's listen addresses
	tls                       *tls.Config
	cl                        *etcd.EtcdClient
	rosterFile                string
	// stopA stops a; it runs at cleanup too, and only once.
	stopA func()
}

// memberPKI makes a CA and a member certificate for "localhost", as the
// controller makes them for a member's pod.
func memberPKI(t *testing.T) (ca, member pki.KeyPair) {
	t.Helper()
	ca, err := pki.NewCA("etcd-ca", time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	member, err = pki.Issue(ca, pki.MemberSpec("member", "localhost"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca, member
}

func startPair(t *testing.T) *pair {
	t.Helper()
	dir := t.TempDir()
	ca, kp := memberPKI(t)
	f := &pair{dir: dir, rosterFile: filepath.Join(dir, "members.json"),
		caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key")}
	for path, b := range map[string][]byte{f.caFile: ca.CertPEM, f.certFile: kp.CertPEM, f.keyFile: kp.KeyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	url := func(addr string) string {
		_, port, _ := net.SplitHostPort(addr)
		return "https://localhost:" + port
	}
	aPeer, aClient := freeAddr(t), freeAddr(t)
	f.bPeer, f.bClient = freeAddr(t), freeAddr(t)
	f.a = etcd.Peer{Name: "a", PeerURL: url(aPeer), ClientURL: url(aClient)}
	f.b = etcd.Peer{Name: "b", PeerURL: url(f.bPeer), ClientURL: url(f.bClient)}
	ma, err := member.Start(context.Background(), member.Config{
		Name: "a", DataDir: filepath.Join(dir, "a"), PeerURL: f.a.PeerURL, ClientURL: f.a.ClientURL,
		ListenPeerAddress: aPeer, ListenClientAddress: aClient, CAFile: f.caFile, CertFile: f.certFile, KeyFile: f.keyFile,
		Roster: etcd.InitialRoster("k3k-test", f.a), Logger: zap.NewNop(), UnsafeNoFsync: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	f.stopA = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = ma.Close(ctx)
		})
	}
	t.Cleanup(f.stopA)
	<-ma.ReadyNotify()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	f.tls = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	f.cl = etcd.NewClient(etcd.ClientConfig{TLS: f.tls})
	t.Cleanup(func() { f.cl.Close() })
	return f
}

// addB adds b as a learner through a and publishes the roster, as the
// controller does; it returns b's member ID and the roster written.
func (f *pair) addB(t *testing.T, ctx context.Context) (uint64, etcd.Roster) {
	t.Helper()
	if err := f.cl.AddLearner(ctx, f.a.ClientURL, f.b.PeerURL); err != nil {
		t.Fatal(err)
	}
	list, err := f.cl.MemberList(ctx, f.a.ClientURL, true)
	if err != nil {
		t.Fatal(err)
	}
	r := etcd.Roster{State: etcd.ClusterStateExisting, Token: "k3k-test"}
	var id uint64
	for _, m := range list {
		name := m.Name
		if m.PeerURLs[0] == f.b.PeerURL {
			name, id = "b", m.ID
		}
		r.Members = append(r.Members, etcd.RosterMember{Name: name, PeerURL: m.PeerURLs[0], ID: etcd.FormatID(m.ID), Started: m.Name != ""})
	}
	writeRoster(t, f.rosterFile, r)
	return id, r
}

func writeRoster(t *testing.T, path string, r etcd.Roster) {
	t.Helper()
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func waitReadyz(t *testing.T, p *proc, want int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-p.done:
			t.Fatalf("the sidecar exited: %v", p.cmd.ProcessState)
		default:
		}
		code, body := get(p.healthURL + "/readyz")
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d %s after 90s, want %d", code, body, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The sidecar's side of a recovery from quorum loss (docs/etcd.md): a roster
// that names this member for a recovery never forces a new cluster on its
// own — not on a fresh start, not while the member has quorum — and once the
// running member sees the request and no quorum it restarts with
// --force-new-cluster, alone with all its data, and records the request so a
// later start does not rebuild again.
func TestTheSidecarRebuildsOnlyWhenItsRunningMemberHasNoQuorum(t *testing.T) {
	f := startPair(t)
	dir, a, b, bPeer, bClient, cl, rosterFile, tlsCfg := f.dir, f.a, f.b, f.bPeer, f.bClient, f.cl, f.rosterFile, f.tls
	caFile, certFile, keyFile, stopA := f.caFile, f.certFile, f.keyFile, f.stopA
	ctx := context.Background()
	bID, roster := f.addB(t, ctx)

	bData := filepath.Join(dir, "b", "data")
	health := freeAddr(t)
	metrics := freeAddr(t)
	// startB starts b's sidecar as a fresh process, as the kubelet restarts
	// the container.
	startB := func() *proc {
		t.Helper()
		return spawn(t, health, "etcd", "--name=b", "--data-dir="+bData, "--peer-url="+b.PeerURL, "--client-url="+b.ClientURL,
			"--listen-peer-address="+bPeer, "--listen-client-address="+bClient, "--members-file="+rosterFile,
			"--ca-file="+caFile, "--cert-file="+certFile, "--key-file="+keyFile,
			"--health-address="+health, "--metrics-address="+metrics, "--termination-message-path=")
	}
	kill := func(p *proc) {
		t.Helper()
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p := startB()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if err := cl.Promote(ctx, a.ClientURL, bID); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("promoting b: %v", err)
		}
	}
	waitReadyz(t, p, http.StatusOK)
	kv, err := clientv3.New(clientv3.Config{Endpoints: []string{a.ClientURL, b.ClientURL}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	for i := range 20 {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := kv.Put(wctx, "/k3k/rebuild/"+strconv.Itoa(i), "v")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	// The roster names b for a recovery while the cluster has quorum, and b's
	// container restarts: a fresh start with the request in its roster starts
	// the member normally, and the running member keeps the cluster as it is.
	roster.Recover = &etcd.Recovery{Name: "b", ID: etcd.FormatID(bID), Request: "req-1"}
	for i := range roster.Members {
		roster.Members[i].Started = true
	}
	writeRoster(t, rosterFile, roster)
	kill(p)
	p = startB()
	waitReadyz(t, p, http.StatusOK)
	time.Sleep(3 * rosterPollInterval)
	if list, err := cl.MemberList(ctx, b.ClientURL, true); err != nil || len(list) != 2 {
		t.Fatalf("members seen by b with quorum and a recovery request: %+v %v, want both", list, err)
	}
	if member.RecoveryDone(bData, "req-1") || strings.Contains(p.output(), "restarting to rebuild") {
		t.Fatal("b rebuilt the cluster while it had quorum")
	}

	// a is gone for good: b has no quorum; it sees the request and rebuilds.
	stopA()
	for deadline := time.Now().Add(60 * time.Second); !member.RecoveryDone(bData, "req-1"); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("b did not rebuild the cluster after losing quorum")
		}
	}
	waitReadyz(t, p, http.StatusOK)
	if !strings.Contains(p.output(), "restarting to rebuild the cluster from this member's data") {
		t.Error("the sidecar did not log the rebuild")
	}
	check := func() {
		t.Helper()
		list, err := cl.MemberList(ctx, b.ClientURL, true)
		if err != nil || len(list) != 1 || list[0].ID != bID {
			t.Fatalf("members after the rebuild: %+v %v, want b alone as %x", list, err, bID)
		}
		bkv, err := clientv3.New(clientv3.Config{Endpoints: []string{b.ClientURL}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer bkv.Close()
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := bkv.Get(gctx, "/k3k/rebuild/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || r.Count != 20 {
			t.Fatalf("b holds %v keys (%v), want every one of the 20 written", r, err)
		}
		if _, err := bkv.Put(gctx, "/k3k/after-rebuild", "v"); err != nil {
			t.Fatalf("a write to the rebuilt cluster: %v", err)
		}
	}
	check()

	// The roster still names b (the kubelet's copy lags): a restart starts
	// from the rebuilt data and does not rebuild again.
	kill(p)
	p = startB()
	waitReadyz(t, p, http.StatusOK)
	time.Sleep(2 * rosterPollInterval)
	if strings.Contains(p.output(), "restarting to rebuild") {
		t.Fatal("a restart after the recovery rebuilt again")
	}
	check()
}
