package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/controller/cluster"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshot"
	"github.com/k3k-io/k3k/pkg/snapshotter"
)

// sidecarSource delivers what `datastore snapshot sqlite`, run as its own
// process against a live `datastore sqlite`, streams: the real stream of the
// sidecar, without the pods/exec that carries it in a cluster (no kubelet
// runs here). Each snapshot is dated a minute after the one before, so the
// rotation's order is known.
type sidecarSource struct {
	dataDir, tmpDir string
	at              time.Time
}

func (s *sidecarSource) Receive(ctx context.Context, data *os.File) (snapshot.Manifest, []byte, error) {
	cmd := exec.CommandContext(ctx, binary, "snapshot", "sqlite", "--data-dir", s.dataDir, "--tmp-dir", s.tmpDir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return snapshot.Manifest{}, nil, fmt.Errorf("datastore snapshot: %v: %s", err, stderr.String())
	}
	m, err := snapshot.ReadStream(&stdout, data)
	if err != nil {
		return snapshot.Manifest{}, nil, err
	}
	s.at = s.at.Add(time.Minute)
	m.CreatedAt = s.at
	m.Cluster = snapshot.ClusterRef{Namespace: "ns", Name: "c1"}
	return m, []byte("the-token"), nil
}

// brokenSource sends part of the data, then fails: a stream cut short.
type brokenSource struct{}

func (brokenSource) Receive(_ context.Context, data *os.File) (snapshot.Manifest, []byte, error) {
	if _, err := data.Write(bytes.Repeat([]byte("x"), 4096)); err != nil {
		return snapshot.Manifest{}, nil, err
	}
	return snapshot.Manifest{}, nil, errors.New("snapshot stream cut short after 4096 bytes of data")
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func readResult(t *testing.T, path string) snapshotter.Result {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res snapshotter.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("result %q: %v", b, err)
	}
	return res
}

// TestBackupKeepsTheNewestAndTouchesNothingElse runs backups of a real SQLite
// datastore into a directory with keep 2 while writes go on between them:
// after every run exactly the two newest snapshots of the cluster remain,
// each a complete archive with the token and the revision in its name;
// other files (another cluster's snapshot, a name that only looks like one,
// notes) stay, a temporary file a killed run left is removed and never
// counted, and a run whose stream fails leaves no file behind and deletes
// nothing.
func TestBackupKeepsTheNewestAndTouchesNothingElse(t *testing.T) {
	dataDir, tmp, backups := t.TempDir(), t.TempDir(), t.TempDir()
	p := startProc(t, dataDir)
	kv := newClient(t, p.endpoint)
	foreign := []string{
		"notes.txt",
		"c10-20200101T000000Z-r1.k3ksnap",      // cluster c10, not c1
		"other-20200101T000000Z-r1.k3ksnap",    // another cluster
		"c1-20200101T000000Z-r1.k3ksnap.bak",   // not the pattern
		"c1-latest.k3ksnap",                    // not the pattern
		"c1-20200101T000000Z-r1.k3ksnap.other", // not the pattern
	}
	for _, name := range foreign {
		if err := os.WriteFile(filepath.Join(backups, name), []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// What a run killed mid-write leaves.
	stale := "c1-20200101T000000Z-r7.k3ksnap.partial"
	if err := os.WriteFile(filepath.Join(backups, stale), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	resultFile := filepath.Join(t.TempDir(), "termination-log")
	o := backupOptions{namespace: "ns", cluster: "c1", dir: backups, keep: 2, resultFile: resultFile}
	src := &sidecarSource{dataDir: dataDir, tmpDir: tmp, at: time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)}

	var written []snapshotter.Result
	for i := range 4 {
		if _, err := kv.Put(context.Background(), fmt.Sprintf("/registry/backup/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
		res, err := runBackup(context.Background(), o, src, time.Now, io.Discard)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if got := readResult(t, resultFile); got.File != res.File || got.Revision != res.Revision || got.SHA256 != res.SHA256 || got.Error != "" {
			t.Fatalf("run %d: the result file says %+v, the run %+v", i, got, res)
		}
		if want := snapshotter.FileName("c1", src.at, res.Revision); res.File != want || res.Revision <= 0 {
			t.Fatalf("run %d wrote %q (revision %d), want %q", i, res.File, res.Revision, want)
		}
		if i > 0 && res.Revision <= written[i-1].Revision {
			t.Fatalf("run %d: revision %d did not advance past %d", i, res.Revision, written[i-1].Revision)
		}
		written = append(written, res)

		var own []string
		for _, n := range names(t, backups) {
			if strings.HasSuffix(n, snapshotter.PartialSuffix) {
				t.Fatalf("run %d left temporary file %s", i, n)
			}
			if strings.HasPrefix(n, "c1-2026") {
				own = append(own, n)
			}
		}
		want := []string{written[i].File}
		if i > 0 {
			want = []string{written[i-1].File, written[i].File}
		}
		if strings.Join(own, " ") != strings.Join(want, " ") {
			t.Fatalf("after run %d the cluster's snapshots are %v, want %v", i, own, want)
		}
	}
	// The seventh-revision snapshot of 2020 was the cluster's by its name: the
	// rotation deleted it as the oldest. The foreign files are all there.
	for _, name := range foreign {
		if b, err := os.ReadFile(filepath.Join(backups, name)); err != nil || string(b) != "keep me" {
			t.Fatalf("foreign file %s: %q, %v", name, b, err)
		}
	}

	// Each kept file is a complete snapshot: manifest, token, data.
	for _, res := range written[2:] {
		f, err := os.Open(filepath.Join(backups, res.File))
		if err != nil {
			t.Fatal(err)
		}
		a, err := snapshot.ReadArchive(f, io.Discard)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", res.File, err)
		}
		if string(a.Token) != "the-token" || a.Manifest.Revision != res.Revision || a.Manifest.SHA256 != res.SHA256 {
			t.Fatalf("%s holds %+v", res.File, a.Manifest)
		}
		if info, _ := os.Stat(filepath.Join(backups, res.File)); info.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %v", res.File, info.Mode())
		}
	}

	before := names(t, backups)
	if _, err := runBackup(context.Background(), o, brokenSource{}, time.Now, io.Discard); err == nil {
		t.Fatal("a run whose stream was cut short succeeded")
	}
	if after := names(t, backups); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Fatalf("a failed run changed the directory: %v, before %v", after, before)
	}
	if res := readResult(t, resultFile); res.Error == "" || res.File != "" {
		t.Fatalf("a failed run reported %+v", res)
	}
}

// TestBackupCommandReportsFailureAsItsResult runs `datastore backup` as the
// Job does, against a host API that does not answer: it must exit non-zero,
// write the reason as its JSON result (the termination message) and leave
// nothing in the directory. keep 0 is refused the same way.
func TestBackupCommandReportsFailureAsItsResult(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, keep, wantIn string
	}{
		{"an unreachable host API", "2", "getting cluster ns/c1"},
		{"keep 0", "0", "--keep must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			result := filepath.Join(t.TempDir(), "termination-log")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, binary, "backup", "--namespace=ns", "--cluster=c1", "--dir="+dir,
				"--keep="+tc.keep, "--kubeconfig="+kubeconfig, "--result-file="+result).CombinedOutput()
			if err == nil {
				t.Fatalf("datastore backup succeeded: %s", out)
			}
			if res := readResult(t, result); !strings.Contains(res.Error, tc.wantIn) || res.File != "" {
				t.Fatalf("result %+v, want an error containing %q", res, tc.wantIn)
			}
			if left := names(t, dir); len(left) != 0 {
				t.Fatalf("the failed run left %v", left)
			}
		})
	}
}

// TestTheControllersBackupCommandLineParses parses the command line the
// controller gives the backup Job (cluster.BackupArgs) with this binary's own
// flags: the two sides of the contract cannot drift apart.
func TestTheControllersBackupCommandLineParses(t *testing.T) {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "demo"},
		Spec: v1beta1.ClusterSpec{Backup: &v1beta1.BackupConfig{Schedule: "@daily", Keep: 4, ClaimName: "snapshots"}}}
	args := cluster.BackupArgs(c)
	root := newRootCommand()
	cmd, rest, err := root.Find(args)
	if err != nil || cmd.Name() != "backup" || len(rest) == 0 {
		t.Fatalf("%v does not name the backup command: %v", args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("datastore backup refuses the controller's flags %v: %v", rest, err)
	}
	want := map[string]string{"namespace": "tenants", "cluster": "demo", "dir": layout.BackupDir, "keep": "4", "result-file": "/dev/termination-log"}
	for name, value := range want {
		if got := cmd.Flags().Lookup(name).Value.String(); got != value {
			t.Errorf("--%s = %q, want %q", name, got, value)
		}
	}
}
