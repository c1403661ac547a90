package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
)

// migrationMember is etcd member 0 of a migration run as the built sidecar
// (`datastore etcd --migrate-from-sqlite`), started again on the same data
// dir as often as a test asks.
type migrationMember struct {
	dir, sqliteDir    string
	args              []string
	health            string
	termination       string
	tls               *tls.Config
	clientURL         string
	peerAddr, cliAddr string
	procs             []*proc
}

func newMigrationMember(t *testing.T, sqliteDir string) *migrationMember {
	t.Helper()
	dir := t.TempDir()
	ca, kp := memberPKI(t)
	files := map[string][]byte{"ca.crt": ca.CertPEM, "tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m := &migrationMember{dir: dir, sqliteDir: sqliteDir, peerAddr: freeAddr(t), cliAddr: freeAddr(t), termination: filepath.Join(dir, "termination-log")}
	url := func(addr string) string {
		_, port, _ := net.SplitHostPort(addr)
		return "https://localhost:" + port
	}
	self := etcd.Peer{Name: "server-0", PeerURL: url(m.peerAddr), ClientURL: url(m.cliAddr)}
	m.clientURL = self.ClientURL
	writeRoster(t, filepath.Join(dir, "members.json"), etcd.InitialRoster("k3k-test", self))
	m.args = []string{"etcd", "--name=server-0", "--data-dir=" + filepath.Join(dir, "etcd", "data"),
		"--peer-url=" + self.PeerURL, "--client-url=" + self.ClientURL,
		"--listen-peer-address=" + m.peerAddr, "--listen-client-address=" + m.cliAddr,
		"--members-file=" + filepath.Join(dir, "members.json"),
		"--ca-file=" + filepath.Join(dir, "ca.crt"), "--cert-file=" + filepath.Join(dir, "tls.crt"), "--key-file=" + filepath.Join(dir, "tls.key"),
		"--termination-message-path=" + m.termination,
		"--migrate-from-sqlite=" + sqliteDir}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	m.tls = &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return m
}

// start runs the sidecar; the process is killed with the test.
func (m *migrationMember) start(t *testing.T) *proc {
	t.Helper()
	m.health = freeAddr(t)
	p := spawn(t, m.health, append(m.args, "--health-address="+m.health, "--metrics-address="+freeAddr(t))...)
	m.procs = append(m.procs, p)
	return p
}

// waitStarted waits until the sidecar reports started (/readyz: what its
// startup probe asks before k3s may start).
func (m *migrationMember) waitStarted(t *testing.T, p *proc) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		select {
		case <-p.done:
			t.Fatalf("the sidecar exited: %v\n%s", p.cmd.ProcessState, p.output())
		default:
		}
		if code, _ := get(p.healthURL + "/readyz"); code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar did not report started:\n%s", p.output())
		}
	}
}

func (m *migrationMember) client(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{m.clientURL}, TLS: m.tls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sqliteData writes n objects rounds times over (a history whose revision is
// above the number of keys), the bootstrap key and an Event under a
// lease into a real `datastore sqlite`, kills it (as a node failure would:
// its WAL stays behind) and returns its data dir, the live cluster keys and
// its revision.
func sqliteData(t *testing.T, n, rounds int) (string, map[string]string, int64) {
	t.Helper()
	dir := t.TempDir()
	p := startProc(t, dir)
	src := replaceTarget{client: newClient(t, p.endpoint)}
	for round := range rounds - 1 {
		put(t, src.client, 0, n, func(i int) string { return fmt.Sprintf("round-%d-%d", round, i) })
	}
	put(t, src.client, 0, n, func(i int) string { return fmt.Sprintf("v%d", i) })
	ctx := context.Background()
	lease, err := src.client.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []clientv3.Op{
		clientv3.OpPut("/bootstrap/0123abcd", "bootstrap of the SQLite cluster"),
		clientv3.OpPut("/registry/events/ns/e", "an event", clientv3.WithLease(lease.ID)),
	} {
		if _, err := src.client.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	deleteKey(t, src.client, replaceKey(3))
	want, _ := clusterKeys(t, src.client)
	delete(want, "/registry/events/ns/e")
	r := revision(t, src.client)
	src.client.Close()
	p.kill(t)
	return dir, want, r
}

// fingerprint is the content of every file of dir, to show it was never
// written.
func fingerprint(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fmt.Sprintf("%x", sha256.Sum256(b))
	}
	return out
}

func checkFingerprint(t *testing.T, dir string, before map[string]string) {
	t.Helper()
	after := fingerprint(t, dir)
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the SQLite directory changed (the way back must stay untouched):\nbefore %v\nafter  %v", before, after)
	}
}

// TestEtcdSidecarLoadsTheSQLiteDataOfAMigrationOnce: the SQLite data of a
// killed `datastore sqlite` (200 objects written four times, one deleted,
// k3s's bootstrap key, an Event under a lease), then `datastore etcd
// --migrate-from-sqlite` as member 0 alone → before it reports started,
// etcd holds exactly the live keys (the Event left out), every one with a
// revision above the SQLite revision, that revision refused as compacted
// (clients holding SQLite resourceVersions relist), the marker naming the
// SQLite revision, and the SQLite files byte for byte as they were. A write
// made after the load (k3s's) survives a restart of the sidecar, which does
// not load again.
func TestEtcdSidecarLoadsTheSQLiteDataOfAMigrationOnce(t *testing.T) {
	sqliteDir, want, r := sqliteData(t, 200, 4)
	if r < 800 {
		t.Fatalf("the SQLite datastore is at revision %d; the test needs a history well above its keys", r)
	}
	if _, err := os.Stat(filepath.Join(sqliteDir, sqlite.DatabaseFile+"-wal")); err != nil {
		t.Logf("no WAL left by the killed SQLite datastore: %v", err)
	}
	before := fingerprint(t, sqliteDir)
	m := newMigrationMember(t, sqliteDir)
	p := m.start(t)
	m.waitStarted(t, p)
	if !strings.Contains(p.output(), fmt.Sprintf("loaded the SQLite data at revision %d", r)) {
		t.Fatalf("the sidecar does not say it loaded revision %d:\n%s", r, p.output())
	}
	c := m.client(t)
	checkReplaced(t, c, want, r)
	marker, err := c.Get(context.Background(), etcd.MigrationMarkerKey)
	if err != nil || len(marker.Kvs) != 1 || string(marker.Kvs[0].Value) != strconv.FormatInt(r, 10) {
		t.Fatalf("marker %s: %v %v, want %d", etcd.MigrationMarkerKey, err, marker, r)
	}
	checkFingerprint(t, sqliteDir, before)
	if _, err := os.Stat(migrationTmpDir(filepath.Join(m.dir, "etcd", "data"))); !os.IsNotExist(err) {
		t.Fatalf("the copy of the SQLite database is left behind: %v", err)
	}

	// k3s writes after the load; the sidecar restarts (SIGTERM, as a pod
	// restart) and must not load over that.
	if _, err := c.Put(context.Background(), replaceKey(0), "written by k3s after the load"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if code := p.stop(t); code != 0 {
		t.Fatalf("sidecar exit code %d\n%s", code, p.output())
	}
	p2 := m.start(t)
	m.waitStarted(t, p2)
	if !strings.Contains(p2.output(), "its files are unchanged since") || strings.Contains(p2.output(), "loaded the SQLite data at") {
		t.Fatalf("the restarted sidecar does not say it had nothing to load, unread:\n%s", p2.output())
	}
	c = m.client(t)
	got, _ := clusterKeys(t, c)
	if got[replaceKey(0)] != "written by k3s after the load" {
		t.Fatalf("after a restart %s = %q: the write made after the load was lost", replaceKey(0), got[replaceKey(0)])
	}
	checkFingerprint(t, sqliteDir, before)

	// A marker written before the files were recorded (an older sidecar's):
	// the next start reads the copy once, finds the revision loaded, and
	// records the files, so the start after needs no copy.
	if _, err := c.Delete(context.Background(), etcd.MigrationFilesKey); err != nil {
		t.Fatal(err)
	}
	c.Close()
	for i, want := range []string{"was loaded already (marker", "its files are unchanged since"} {
		if code := p2.stop(t); code != 0 {
			t.Fatalf("sidecar exit code %d\n%s", code, p2.output())
		}
		p2 = m.start(t)
		m.waitStarted(t, p2)
		if !strings.Contains(p2.output(), want) || strings.Contains(p2.output(), "loaded the SQLite data at") {
			t.Fatalf("start %d after the files key was removed: want %q:\n%s", i+1, want, p2.output())
		}
	}

	// A database whose modification time moved (as any write of a SQLite
	// datastore moves it) is read again: the record no longer vouches for
	// it. Its content is the same, so the revision is the one loaded.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(sqliteDir, sqlite.DatabaseFile), later, later); err != nil {
		t.Fatal(err)
	}
	if code := p2.stop(t); code != 0 {
		t.Fatalf("sidecar exit code %d\n%s", code, p2.output())
	}
	p2 = m.start(t)
	m.waitStarted(t, p2)
	if !strings.Contains(p2.output(), "was loaded already (marker") || strings.Contains(p2.output(), "its files are unchanged since") {
		t.Fatalf("the database's mtime moved, and the sidecar did not read it again:\n%s", p2.output())
	}
	got, _ = clusterKeys(t, m.client(t))
	if got[replaceKey(0)] != "written by k3s after the load" {
		t.Fatalf("after the restarts %s = %q: the write made after the load was lost", replaceKey(0), got[replaceKey(0)])
	}
	checkFingerprint(t, sqliteDir, before)
}

// TestEtcdSidecarRedoesALoadKilledMidway: the sidecar killed while it
// writes the keys (after the revision was moved, before the marker) →
// started again, it loads again and ends with exactly the SQLite data and
// the marker; only then does it report started.
func TestEtcdSidecarRedoesALoadKilledMidway(t *testing.T) {
	sqliteDir, want, r := sqliteData(t, 400, 1)
	m := newMigrationMember(t, sqliteDir)
	p := m.start(t)
	for deadline := time.Now().Add(3 * time.Minute); !strings.Contains(p.output(), "revision moved from"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar never moved the revision:\n%s", p.output())
		}
	}
	p.kill(t)
	if strings.Contains(p.output(), "marker "+etcd.MigrationMarkerKey+" written") {
		t.Fatalf("the load finished before the kill; the test proves nothing:\n%s", p.output())
	}
	if code, _ := get(p.healthURL + "/readyz"); code == http.StatusOK {
		t.Fatal("a killed sidecar answers ready")
	}
	p2 := m.start(t)
	m.waitStarted(t, p2)
	if !strings.Contains(p2.output(), fmt.Sprintf("loaded the SQLite data at revision %d", r)) {
		t.Fatalf("the second start did not load again:\n%s", p2.output())
	}
	c := m.client(t)
	checkReplaced(t, c, want, r)
	marker, err := c.Get(context.Background(), etcd.MigrationMarkerKey)
	if err != nil || len(marker.Kvs) != 1 || string(marker.Kvs[0].Value) != strconv.FormatInt(r, 10) {
		t.Fatalf("marker %s: %v %v, want %d", etcd.MigrationMarkerKey, err, marker, r)
	}
}

// TestEtcdSidecarWithoutTheSQLiteDataFailsAndSaysWhy: member 0 of a
// migration whose SQLite directory holds no database never reports started
// (k3s would bootstrap an empty cluster with a new CA): it exits with the
// reason in its termination message, which the controller reports as
// MigrationFailed.
func TestEtcdSidecarWithoutTheSQLiteDataFailsAndSaysWhy(t *testing.T) {
	m := newMigrationMember(t, t.TempDir())
	p := m.start(t)
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the sidecar did not exit:\n%s", p.output())
	}
	msg, err := os.ReadFile(m.termination)
	if err != nil {
		t.Fatal(err)
	}
	why, ok := etcd.ParseMigrationFailedReport(string(msg))
	if !ok || !strings.Contains(why, sqlite.DatabaseFile) {
		t.Fatalf("termination message %q, want the migration's failure naming the database", msg)
	}
}

// TestEtcdSidecarOfAJoiningMemberLoadsNothing: after the switch every
// server pod of a migrated cluster keeps --migrate-from-sqlite (the switch
// changes no pod template), and the volumes of servers 1 and 2 hold no
// SQLite data. Such a sidecar, joining as a learner, loads nothing and
// becomes ready once promoted, rather than failing for the missing
// database.
func TestEtcdSidecarOfAJoiningMemberLoadsNothing(t *testing.T) {
	f := startPair(t)
	ctx := context.Background()
	id, _ := f.addB(t, ctx)
	health := freeAddr(t)
	p := spawn(t, health, "etcd", "--name=b", "--data-dir="+filepath.Join(f.dir, "b", "data"), "--peer-url="+f.b.PeerURL, "--client-url="+f.b.ClientURL,
		"--listen-peer-address="+f.bPeer, "--listen-client-address="+f.bClient, "--members-file="+f.rosterFile,
		"--ca-file="+f.caFile, "--cert-file="+f.certFile, "--key-file="+f.keyFile,
		"--health-address="+health, "--metrics-address="+freeAddr(t), "--termination-message-path="+filepath.Join(f.dir, "termination-log"),
		"--migrate-from-sqlite="+t.TempDir())
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if err := f.cl.Promote(ctx, f.a.ClientURL, id); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("promoting b: %v\n%s", err, p.output())
		}
	}
	waitReadyz(t, p, http.StatusOK)
	if !strings.Contains(p.output(), "members, so its data was loaded before it grew: nothing to load") {
		t.Fatalf("the joining sidecar does not say it had nothing to load:\n%s", p.output())
	}
}
