package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/controller/cluster"
	"github.com/k3k-io/k3k/pkg/snapshot"
)

// writeSnapshot writes a snapshot file of data with token into dir as name.
func writeSnapshot(t *testing.T, dir, name string, data, token []byte) {
	t.Helper()
	sum := sha256.Sum256(data)
	m := snapshot.Manifest{FormatVersion: snapshot.FormatVersion, Datastore: snapshot.SQLite, Revision: 42, Size: int64(len(data)),
		SHA256: hex.EncodeToString(sum[:]), CreatedAt: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC),
		Cluster: snapshot.ClusterRef{Namespace: "old", Name: "c"}}
	var b bytes.Buffer
	if err := snapshot.WriteArchive(&b, m, token, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// fakeTarget records what a restore gave the new cluster.
type fakeTarget struct {
	loaded []byte
	token  []byte
}

func (f *fakeTarget) Load(_ context.Context, _ snapshot.Manifest, data io.Reader) (string, error) {
	b, err := io.ReadAll(data)
	f.loaded = b
	return "restored 3 keys", err
}

func (f *fakeTarget) GiveToken(_ context.Context, token []byte) error {
	f.token = token
	return nil
}

// TestRestoreFromFileChecksTheFileBeforeAnything: an intact file is loaded
// whole and its token given, after the load; a corrupt or truncated file, a
// path instead of a name, and a symbolic link are refused before the host
// API is even connected to, with the reason as the result and no token in it.
func TestRestoreFromFileChecksTheFileBeforeAnything(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("kine rows "), 5000)
	token := []byte("K10the-old-token")
	writeSnapshot(t, dir, "good.k3ksnap", data, token)
	good, err := os.ReadFile(filepath.Join(dir, "good.k3ksnap"))
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-2048] ^= 0xff // inside the data entry
	if err := os.WriteFile(filepath.Join(dir, "flipped.k3ksnap"), flipped, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "short.k3ksnap"), good[:len(good)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "good.k3ksnap"), filepath.Join(dir, "link.k3ksnap")); err != nil {
		t.Fatal(err)
	}
	// A FIFO no one writes to: opening it for reading blocks forever unless
	// the open does not wait (the Job would hang until its deadline).
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.k3ksnap"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("an intact file is loaded, then its token given", func(t *testing.T) {
		target := &fakeTarget{}
		result := filepath.Join(t.TempDir(), "termination-log")
		o := restoreFileOptions{dir: dir, file: "good.k3ksnap", tmpDir: t.TempDir(), resultFile: result}
		err := runRestoreFromFile(context.Background(), o, func() (restoreTarget, error) { return target, nil }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(target.loaded, data) || !bytes.Equal(target.token, token) {
			t.Fatalf("loaded %d bytes (want %d), token %q", len(target.loaded), len(data), target.token)
		}
		res := readResult(t, result)
		if res.File != "good.k3ksnap" || res.Revision != 42 || res.Error != "" {
			t.Fatalf("result %+v", res)
		}
		if raw, _ := os.ReadFile(result); bytes.Contains(raw, token) {
			t.Fatal("the token is in the termination message")
		}
	})
	for _, tc := range []struct{ name, file, wantIn string }{
		{"a flipped byte", "flipped.k3ksnap", "is not a usable snapshot"},
		{"a truncated file", "short.k3ksnap", "is not a usable snapshot"},
		{"a path out of the directory", "../good.k3ksnap", "must be a plain file name"},
		{"a symbolic link", "link.k3ksnap", "not a regular file"},
		{"a FIFO", "fifo.k3ksnap", "not a regular file"},
		{"a missing file", "none.k3ksnap", "no such file"},
	} {
		t.Run(tc.name+" is refused before any write", func(t *testing.T) {
			tmp := t.TempDir()
			result := filepath.Join(t.TempDir(), "termination-log")
			o := restoreFileOptions{dir: dir, file: tc.file, tmpDir: tmp, resultFile: result}
			connected := false
			err := runRestoreFromFile(context.Background(), o, func() (restoreTarget, error) { connected = true; return &fakeTarget{}, nil }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.wantIn) || connected {
				t.Fatalf("err %v (want %q), connected %v", err, tc.wantIn, connected)
			}
			if res := readResult(t, result); !strings.Contains(res.Error, tc.wantIn) || res.File != "" {
				t.Fatalf("result %+v", res)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Fatalf("left %d files in the tmp dir", len(left))
			}
		})
	}
}

// TestRestoreFromFileProcessRefusesACorruptFile runs the binary as the Job
// does, against a host API that counts requests: a corrupt file exits
// non-zero with the reason as its result, and no request was made.
func TestRestoreFromFileProcessRefusesACorruptFile(t *testing.T) {
	var requests atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer api.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+api.URL+`"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "garbage.k3ksnap"), bytes.Repeat([]byte{0x5a}, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	writeSnapshot(t, dir, "good.k3ksnap", []byte("data"), []byte("tok"))
	run := func(file string) (snapshotResult string, err error) {
		result := filepath.Join(t.TempDir(), "termination-log")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, binary, "restore-from-file", "--namespace=ns", "--cluster=c2", "--dir="+dir,
			"--file="+file, "--tmp-dir="+t.TempDir(), "--kubeconfig="+kubeconfig, "--result-file="+result).CombinedOutput()
		if err == nil {
			t.Fatalf("datastore restore-from-file %s succeeded: %s", file, out)
		}
		return readResult(t, result).Error, err
	}
	if msg, _ := run("garbage.k3ksnap"); !strings.Contains(msg, "is not a usable snapshot") || requests.Load() != 0 {
		t.Fatalf("result %q, %d requests to the host API", msg, requests.Load())
	}
	// The same run with an intact file does reach the host API: the count
	// above is zero because of the check, not because nothing could connect.
	if msg, _ := run("good.k3ksnap"); !strings.Contains(msg, "getting cluster ns/c2") || requests.Load() == 0 {
		t.Fatalf("result %q, %d requests to the host API", msg, requests.Load())
	}
}

// TestTheControllersRestoreCommandLineParses parses the command line the
// controller gives the restore Job (cluster.RestoreArgs) with this binary's
// own flags.
func TestTheControllersRestoreCommandLineParses(t *testing.T) {
	c := &v1beta1.Cluster{}
	c.Namespace, c.Name = "ns", "c2"
	c.Spec.RestoreFrom = &v1beta1.RestoreSource{ClaimName: "snaps", File: "c-20261202T030000Z-r4.k3ksnap"}
	args := cluster.RestoreArgs(c)
	cmd := newRestoreFromFileCommand()
	if args[0] != cmd.Name() {
		t.Fatalf("subcommand %q, the binary's is %q", args[0], cmd.Name())
	}
	if err := cmd.ParseFlags(args[1:]); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, name := range []string{"namespace", "cluster", "dir", "file", "tmp-dir", "result-file"} {
		got[name] = cmd.Flags().Lookup(name).Value.String()
	}
	if got["file"] != "c-20261202T030000Z-r4.k3ksnap" || got["cluster"] != "c2" || got["dir"] == "" || got["tmp-dir"] == "" {
		t.Fatalf("parsed %v", got)
	}
}

// TestGiveTokenFillsOnlyAnEmptySecret: the empty Secret gets the token; the
// same token again is fine; another token is refused and left in place.
func TestGiveTokenFillsOnlyAnEmptySecret(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "k3k-c2-token"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "k3k-other-token"}, Data: map[string][]byte{"token": []byte("theirs")}},
	)
	for i := range 2 {
		if err := giveToken(ctx, cs, "ns", "k3k-c2-token", []byte("snapshot")); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	s, _ := cs.CoreV1().Secrets("ns").Get(ctx, "k3k-c2-token", metav1.GetOptions{})
	if string(s.Data["token"]) != "snapshot" {
		t.Fatalf("token Secret holds %q", s.Data["token"])
	}
	if err := giveToken(ctx, cs, "ns", "k3k-other-token", []byte("snapshot")); !errors.Is(err, errAnotherToken) {
		t.Fatalf("another token: %v", err)
	}
	s, _ = cs.CoreV1().Secrets("ns").Get(ctx, "k3k-other-token", metav1.GetOptions{})
	if string(s.Data["token"]) != "theirs" {
		t.Fatalf("the other token was replaced: %q", s.Data["token"])
	}
	if err := giveToken(ctx, cs, "ns", "k3k-missing-token", []byte("snapshot")); err == nil {
		t.Fatal("a missing Secret was accepted")
	}
}
