package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestServersShareTheFirstServersBootstrapData runs shareBootstrap for two
// servers with different CAs against a real etcd (its JSON gateway): the first
// keeps its files, the second ends up with exactly the first's, and running it
// again changes nothing.
func TestServersShareTheFirstServersBootstrapData(t *testing.T) {
	tools := needTools(t)
	ep := startEtcd(t, tools)
	cfg := Config{DatastoreEndpoint: ep + "," + ep} // two endpoints: an HA cluster
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	servers := make([]tlsDir, 2)
	for i := range servers {
		servers[i] = tlsDir(filepath.Join(t.TempDir(), "tls"))
		if err := os.MkdirAll(string(servers[i]), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, ca := range []string{"server-ca", "client-ca"} {
			if _, err := servers[i].loadOrCreateCA(ca, "k3s-"+ca); err != nil {
				t.Fatal(err)
			}
		}
		if err := servers[i].loadOrCreateKey("service.key"); err != nil {
			t.Fatal(err)
		}
	}
	first := readAll(t, servers[0])
	if bytes.Equal(first["server-ca.crt"], readAll(t, servers[1])["server-ca.crt"]) {
		t.Fatal("the two servers made the same CA; the test proves nothing")
	}
	for _, s := range servers {
		if err := shareBootstrap(ctx, cfg, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range servers {
		for f, want := range first {
			if got := readAll(t, s)[f]; !bytes.Equal(got, want) {
				t.Errorf("%s of %s differs from the first server's", f, s)
			}
		}
	}
	if err := shareBootstrap(ctx, cfg, servers[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := servers[1].loadOrCreateCA("server-ca", "k3s-server-ca"); err != nil {
		t.Fatalf("the shared CA does not load: %v", err)
	}

	// One endpoint (a single server, or kine): nothing is shared or changed.
	solo := tlsDir(t.TempDir())
	if _, err := solo.loadOrCreateCA("server-ca", "k3s-server-ca"); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(solo.path("server-ca.crt"))
	if err := shareBootstrap(ctx, Config{DatastoreEndpoint: ep}, solo); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(solo.path("server-ca.crt")); !bytes.Equal(before, after) {
		t.Fatal("a single-endpoint server's CA was replaced")
	}
}

func readAll(t *testing.T, d tlsDir) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, f := range bootstrapFiles {
		data, err := os.ReadFile(d.path(f))
		if err != nil {
			t.Fatal(err)
		}
		out[f] = data
	}
	return out
}
