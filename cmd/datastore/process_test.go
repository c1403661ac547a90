package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
)

func TestASecondProcessOnTheSameDataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	first := startProc(t, dir)
	code, out := runToExit(t, "sqlite", "--data-dir", dir, "--listen-address", freeAddr(t))
	if code == 0 || !strings.Contains(out, "in use by another datastore process") {
		t.Fatalf("second process exited %d with %q, want a refusal", code, lastLine(out))
	}
	if code, body := get(first.healthURL + "/readyz"); code != http.StatusOK {
		t.Fatalf("first process not ready after the refused second one: %d %s", code, body)
	}
}

func TestStartErrorsAreClear(t *testing.T) {
	base := t.TempDir()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"the data dir is required", []string{"sqlite"}, `required flag(s) "data-dir" not set`},
		{"a missing data dir is named", []string{"sqlite", "--data-dir", filepath.Join(base, "nope")}, filepath.Join(base, "nope") + " does not exist"},
		{"a bad listen address is named", []string{"sqlite", "--data-dir", base, "--listen-address", "no-port"}, `--listen-address "no-port"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runToExit(t, tc.args...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output %q; want failure mentioning %q", code, out, tc.want)
			}
		})
	}
}

func TestSIGTERMFinishesCleanlyWithTheWALCheckpointed(t *testing.T) {
	dir := t.TempDir()
	p := startProc(t, dir)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{p.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 100 {
		if _, err := c.Put(ctx, "/registry/k"+strings.Repeat("x", i%7), strings.Repeat("v", 2000)); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/status"} {
		if code, body := get(p.healthURL + path); code != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, code, body)
		}
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0\n%s", code, p.output())
	}
	wal := filepath.Join(dir, sqlite.DatabaseFile+"-wal")
	if info, err := os.Stat(wal); err == nil && info.Size() != 0 {
		t.Fatalf("WAL is %d bytes after a graceful stop, want it checkpointed", info.Size())
	}
	if !strings.Contains(p.output(), "WAL checkpointed") {
		t.Fatalf("the log does not say the WAL was checkpointed:\n%s", p.output())
	}
	for _, secret := range []string{"sqlite://", "_journal_mode", "_synchronous"} {
		if strings.Contains(p.output(), secret) {
			t.Fatalf("the log contains the DSN (%q):\n%s", secret, p.output())
		}
	}
}

func TestTheContractCommandLine(t *testing.T) {
	// The controller runs exactly these flags; ports here are free ones because
	// tests share the machine.
	dir := t.TempDir()
	listen, health, metrics := freeAddr(t), freeAddr(t), freeAddr(t)
	p := launch(t, dir, listen, health, "--metrics-address", metrics)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := get(p.healthURL + "/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready:\n%s", p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, body := get("http://" + metrics + "/metrics")
	if code != http.StatusOK || !strings.Contains(body, "k3k_datastore_db_size_bytes") || !strings.Contains(body, "kine_sql_total") {
		t.Fatalf("GET /metrics = %d, missing datastore or kine metrics", code)
	}
	if !strings.Contains(p.output(), "modernc.org/sqlite") {
		t.Fatalf("the binary does not run modernc's SQLite:\n%s", p.output())
	}
}
