package sqlite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/pkg/datastore"
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return logr.NewContext(ctx, testr.NewWithOptions(t, testr.Options{Verbosity: 0}))
}

// openT opens a server and closes it at the end of the test.
func openT(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.ListenAddress == "" {
		cfg.ListenAddress = "127.0.0.1:0"
	}
	s, err := Open(testContext(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func etcdClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// create writes key the way kube-apiserver creates an object: only if absent.
func create(ctx context.Context, c *clientv3.Client, key, val string) error {
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val)).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("%s already exists", key)
	}
	return nil
}

func getValue(ctx context.Context, t *testing.T, c *clientv3.Client, key string) (string, bool) {
	t.Helper()
	resp, err := c.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", false
	}
	return string(resp.Kvs[0].Value), true
}

func TestOpenRefusesABadDataDir(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(base, "ro")
	mountTmpfs(t, readOnly, "ro,size=1m")

	cases := []struct {
		name, dir, want string
	}{
		{"a missing directory is not created", filepath.Join(base, "missing"), "does not exist"},
		{"a file is not a directory", file, "is not a directory"},
		{"a read-only directory is not writable", readOnly, "is not writable"},
		{"an empty data dir is required", "", "data dir is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(testContext(t), Config{DataDir: tc.dir, ListenAddress: "127.0.0.1:0"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open(%q) error = %v, want one containing %q", tc.dir, err, tc.want)
			}
			if tc.dir != "" && !strings.Contains(err.Error(), tc.dir) {
				t.Errorf("error %q does not name the directory", err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(base, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing data dir was created (stat: %v)", err)
	}
}

func TestASecondServerOnTheSameDataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	first := openT(t, Config{DataDir: dir})
	_, err := Open(testContext(t), Config{DataDir: dir, ListenAddress: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "in use by another datastore process") ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second Open error = %v, want a refusal naming pid %d", err, os.Getpid())
	}
	// The refused attempt must not disturb the owner.
	c := etcdClient(t, first.Endpoint())
	ctx := testContext(t)
	if err := create(ctx, c, "/registry/a", "1"); err != nil {
		t.Fatalf("owner write after refused second open: %v", err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	second := openT(t, Config{DataDir: dir})
	if v, ok := getValue(ctx, t, etcdClient(t, second.Endpoint()), "/registry/a"); !ok || v != "1" {
		t.Fatalf("after the owner closed, a new server reads %q (found %v), want \"1\"", v, ok)
	}
}

func TestADamagedDatabaseIsRefusedAndLeftAsItIs(t *testing.T) {
	t.Run("a file that is not a database", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, DatabaseFile)
		garbage := bytes.Repeat([]byte("this is not a sqlite database "), 500)
		if err := os.WriteFile(path, garbage, 0o600); err != nil {
			t.Fatal(err)
		}
		assertRefusedUnchanged(t, dir, path)
	})
	t.Run("a database with a damaged page", func(t *testing.T) {
		dir := t.TempDir()
		s := openT(t, Config{DataDir: dir})
		c := etcdClient(t, s.Endpoint())
		ctx := testContext(t)
		for i := range 200 {
			if err := create(ctx, c, fmt.Sprintf("/registry/configmaps/default/cm-%03d", i), strings.Repeat("x", 300)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, DatabaseFile)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		const page = 4096
		if len(data) < 6*page {
			t.Fatalf("database only %d bytes, expected several pages", len(data))
		}
		// Scribble over the middle of a b-tree page (not page 1, which holds the
		// header): headers and cell pointers become nonsense.
		copy(data[3*page:3*page+200], bytes.Repeat([]byte{0xA5}, 200))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		assertRefusedUnchanged(t, dir, path)
	})
}

func assertRefusedUnchanged(t *testing.T, dir, path string) {
	t.Helper()
	before := fileHash(t, path)
	_, err := Open(testContext(t), Config{DataDir: dir, ListenAddress: "127.0.0.1:0"})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open error = %v, want ErrCorrupt", err)
	}
	for _, want := range []string{path, "To recover", "copy the whole data dir aside"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if after := fileHash(t, path); after != before {
		t.Fatalf("the damaged database was modified by the refused start")
	}
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

// TestStatusHealthAndMetrics runs on each backend.
func TestStatusHealthAndMetrics(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) { statusHealthAndMetrics(t, b) })
	}
}

func statusHealthAndMetrics(t *testing.T, backend BackendKind) {
	dir := t.TempDir()
	s := openT(t, Config{DataDir: dir, Backend: backend})
	ctx := testContext(t)
	c := etcdClient(t, s.Endpoint())
	for i := range 10 {
		if err := create(ctx, c, fmt.Sprintf("/registry/k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	h := httptest.NewServer(datastore.HealthHandler(s))
	defer h.Close()
	for _, path := range []string{"/healthz", "/readyz"} {
		code, body := httpGet(t, h.URL+path)
		if code != http.StatusOK || strings.TrimSpace(body) != "ok" {
			t.Errorf("GET %s = %d %q, want 200 ok", path, code, body)
		}
	}
	code, body := httpGet(t, h.URL+"/status")
	if code != http.StatusOK {
		t.Fatalf("GET /status = %d %q", code, body)
	}
	var st datastore.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("status is not JSON: %v: %s", err, body)
	}
	// compact_rev_key is revision 1; our ten creates follow it.
	if st.Kind != Kind || st.Revision < 11 || st.DBSizeBytes <= 0 || st.WALSizeBytes <= 0 ||
		st.VolumeFreeBytes == 0 || st.VolumeSizeBytes < st.VolumeFreeBytes || st.CompactIntervalSeconds != 300 {
		t.Errorf("implausible status: %+v", st)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(datastore.NewCollector(s))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		got[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
	}
	for _, name := range []string{"k3k_datastore_db_size_bytes", "k3k_datastore_wal_size_bytes", "k3k_datastore_volume_free_bytes", "k3k_datastore_revision"} {
		if got[name] <= 0 {
			t.Errorf("metric %s = %v, want > 0 (all: %v)", name, got[name], got)
		}
	}
	if got["k3k_datastore_status_up"] != 1 {
		t.Errorf("k3k_datastore_status_up = %v, want 1", got["k3k_datastore_status_up"])
	}
}

// TestCloseCheckpointsTheWAL runs on each backend.
func TestCloseCheckpointsTheWAL(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) { closeCheckpointsTheWAL(t, b) })
	}
}

func closeCheckpointsTheWAL(t *testing.T, backend BackendKind) {
	dir := t.TempDir()
	s := openT(t, Config{DataDir: dir, Backend: backend})
	ctx := testContext(t)
	c := etcdClient(t, s.Endpoint())
	for i := range 50 {
		if err := create(ctx, c, fmt.Sprintf("/registry/k%d", i), strings.Repeat("v", 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if size, _ := fileSize(filepath.Join(dir, DatabaseFile+"-wal")); size == 0 {
		t.Fatalf("expected a non-empty WAL before Close")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if size, err := fileSize(filepath.Join(dir, DatabaseFile+"-wal")); err != nil || size != 0 {
		t.Fatalf("WAL after Close: %d bytes (err %v), want 0", size, err)
	}
	if err := CheckIntegrity(ctx, filepath.Join(dir, DatabaseFile)); err != nil {
		t.Fatalf("integrity after Close: %v", err)
	}
}

// TestSyncModesBothPersistWrites runs both modes on each backend.
func TestSyncModesBothPersistWrites(t *testing.T) {
	for _, backend := range backends {
		for _, mode := range []SyncMode{SyncGroup, SyncCommit} {
			t.Run(string(backend)+"/"+string(mode), func(t *testing.T) { syncModePersists(t, backend, mode) })
		}
	}
	if _, err := (Config{DataDir: "x", Sync: "sometimes"}).withDefaults(); err == nil {
		t.Fatalf("an unknown sync mode was accepted")
	}
	if _, err := (Config{DataDir: "x", Backend: "v3"}).withDefaults(); err == nil {
		t.Fatalf("an unknown backend was accepted")
	}
}

func syncModePersists(t *testing.T, backend BackendKind, mode SyncMode) {
	dir := t.TempDir()
	s := openT(t, Config{DataDir: dir, Sync: mode, Backend: backend})
	ctx := testContext(t)
	c := etcdClient(t, s.Endpoint())
	if err := create(ctx, c, "/registry/x", "1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := openT(t, Config{DataDir: dir, Sync: mode, Backend: backend})
	if v, ok := getValue(ctx, t, etcdClient(t, s2.Endpoint()), "/registry/x"); !ok || v != "1" {
		t.Fatalf("read back %q (found %v), want \"1\"", v, ok)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// mountTmpfs mounts a tmpfs with opts at dir for the test (the tests run as root;
// a failed mount fails the test rather than skipping it).
func mountTmpfs(t *testing.T, dir, opts string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("mount tmpfs on %s (these tests need root): %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}
