package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// writeTLSDir writes a small server/tls below k3sDir the way k3s lays it out:
// a CA certificate and key, a key in a subdirectory, dynamic-cert.json. It
// returns the directory and its files' contents by relative path.
func writeTLSDir(t *testing.T, k3sDir string) (string, map[string][]byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "k3s-server-ca"}, key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := certutil.EncodeCertificates(ca)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"server-ca.crt":      certPEM,
		"server-ca.key":      keyPEM,
		"etcd/server-ca.key": keyPEM,
		"dynamic-cert.json":  []byte(`{"kind":"Secret"}`),
	}
	dir := filepath.Join(k3sDir, k3sTLSDir)
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, files
}

// TestBrokenTLSFiles: files k3s would refuse at its start are found, with
// client-go's parsers (the ones k3s loads them with); files that parse and a
// missing directory are not.
func TestBrokenTLSFiles(t *testing.T) {
	k3sDir := t.TempDir()
	if got, err := brokenTLSFiles(filepath.Join(k3sDir, k3sTLSDir)); err != nil || len(got) != 0 {
		t.Fatalf("a missing directory: %v, %v; want none, no error", got, err)
	}
	dir, files := writeTLSDir(t, k3sDir)
	if got, err := brokenTLSFiles(dir); err != nil || len(got) != 0 {
		t.Fatalf("all files parse, yet found %v (%v)", got, err)
	}
	// Killed mid-write: the first half of a certificate, an empty key, half
	// of a JSON document.
	half := files["server-ca.crt"][:len(files["server-ca.crt"])/2]
	for name, data := range map[string][]byte{"server-ca.crt": half, "etcd/server-ca.key": nil, "dynamic-cert.json": []byte(`{"kind":`)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := brokenTLSFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"dynamic-cert.json", "etcd/server-ca.key", "server-ca.crt"}; !slices.Equal(got, want) {
		t.Errorf("broken files %v, want %v", got, want)
	}
}

// TestUnfinishedCertificatesSetAsideOnTheFirstStartInAPod runs the datastore
// process on the database and k3s directory a k3s killed on its very first
// start left: its bootstrap lock taken, no bootstrap data stored, server-ca.crt
// half written (what made a replacement server crash-loop with "data does not
// contain any valid RSA or ECDSA certificates").
//   - The first start in a new pod removes the lock and sets the whole
//     server/tls aside, every file kept as it was; k3s will generate new ones.
//   - A restart within the pod leaves a broken directory alone (the pod's k3s
//     may be writing it right now).
//   - With bootstrap data stored, a broken directory is left alone: the
//     cluster's certificates are the datastore's copy, k3s's business.
//   - A directory whose files all parse is left alone.
func TestUnfinishedCertificatesSetAsideOnTheFirstStartInAPod(t *testing.T) {
	put := func(p *proc, key, value string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := newClient(t, p.endpoint).Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, value)).Commit()
		if err != nil || !resp.Succeeded {
			t.Fatalf("creating %s: %v", key, err)
		}
	}
	// dying leaves a database and a k3s directory as k3s killed on its first
	// start would: the lock taken (and, with stored, data under another key),
	// server-ca.crt half written when broken.
	dying := func(stored, broken bool) (dataDir, k3sDir string, files map[string][]byte) {
		dataDir, k3sDir = t.TempDir(), t.TempDir()
		p := startProc(t, dataDir)
		put(p, "/bootstrap/0123456789ab", "")
		if stored {
			put(p, "/bootstrap/ba9876543210", "salt:encrypted-bootstrap-data")
		}
		p.stop(t)
		dir, files := writeTLSDir(t, k3sDir)
		if broken {
			files["server-ca.crt"] = files["server-ca.crt"][:len(files["server-ca.crt"])/2]
			if err := os.WriteFile(filepath.Join(dir, "server-ca.crt"), files["server-ca.crt"], 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dataDir, k3sDir, files
	}
	sameFiles := func(what, dir string, want map[string][]byte) {
		t.Helper()
		for name, data := range want {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || string(got) != string(data) {
				t.Errorf("%s: %s changed or gone (%v)", what, name, err)
			}
		}
	}
	aside := func(k3sDir string) []string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(k3sDir, k3sTLSDir+".unfinished-*"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	t.Run("no data stored, a file broken: set aside on the first start in a pod", func(t *testing.T) {
		dataDir, k3sDir, files := dying(false, true)
		podDir := t.TempDir()
		p := startProcWith(t, dataDir, "--pod-dir", podDir, "--k3s-data-dir", k3sDir)
		if _, err := os.Stat(filepath.Join(k3sDir, k3sTLSDir)); !os.IsNotExist(err) {
			t.Errorf("server/tls is still there (%v)", err)
		}
		moved := aside(k3sDir)
		if len(moved) != 1 {
			t.Fatalf("set-aside directories: %v, want one", moved)
		}
		sameFiles("the set-aside directory", moved[0], files)
		if out := p.output(); !strings.Contains(out, "server-ca.crt") || !strings.Contains(out, moved[0]) {
			t.Errorf("the log does not name the broken file and where the directory went:\n%s", out)
		}
		p.stop(t)

		// k3s's next try writes a new directory and dies again, broken: a
		// restart within the pod leaves it alone.
		dir, files := writeTLSDir(t, k3sDir)
		files["server-ca.crt"] = nil
		if err := os.WriteFile(filepath.Join(dir, "server-ca.crt"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		p = startProcWith(t, dataDir, "--pod-dir", podDir, "--k3s-data-dir", k3sDir)
		sameFiles("after a restart within the pod", dir, files)
		if got := aside(k3sDir); len(got) != 1 {
			t.Errorf("a restart within the pod set aside again: %v", got)
		}
		p.stop(t)
	})
	t.Run("data stored: left alone", func(t *testing.T) {
		dataDir, k3sDir, files := dying(true, true)
		p := startProcWith(t, dataDir, "--pod-dir", t.TempDir(), "--k3s-data-dir", k3sDir)
		sameFiles("with bootstrap data stored", filepath.Join(k3sDir, k3sTLSDir), files)
		if got := aside(k3sDir); len(got) != 0 {
			t.Errorf("set aside although bootstrap data is stored: %v", got)
		}
		p.stop(t)
	})
	t.Run("every file parses: left alone", func(t *testing.T) {
		dataDir, k3sDir, files := dying(false, false)
		p := startProcWith(t, dataDir, "--pod-dir", t.TempDir(), "--k3s-data-dir", k3sDir)
		sameFiles("with every file parsing", filepath.Join(k3sDir, k3sTLSDir), files)
		if got := aside(k3sDir); len(got) != 0 {
			t.Errorf("set aside although every file parses: %v", got)
		}
		p.stop(t)
	})
}
