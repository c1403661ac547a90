package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAFullDiskFailsWritesLosesNothingAndRecovers runs on each backend: for
// v2 it is the fault test of the batch's rollback and its writes sent again
// one by one (a write that fails alone is answered Unavailable).
func TestAFullDiskFailsWritesLosesNothingAndRecovers(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) { fullDisk(t, b) })
	}
}

func fullDisk(t *testing.T, backend BackendKind) {
	dir := filepath.Join(t.TempDir(), "small")
	mountTmpfs(t, dir, "size=2m")
	// Ballast we delete later to free space without touching the database.
	ballast := filepath.Join(dir, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 512<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openT(t, Config{DataDir: dir, Backend: backend})
	c := etcdClient(t, s.Endpoint())
	ctx := testContext(t)

	value := func(i int) string { return fmt.Sprintf("%06d-%s", i, bytes.Repeat([]byte("x"), 16<<10)) }
	committed := 0
	var writeErr error
	for i := range 1000 {
		if writeErr = create(ctx, c, fmt.Sprintf("/registry/fill/%06d", i), value(i)); writeErr != nil {
			break
		}
		committed++
	}
	if writeErr == nil {
		t.Fatalf("wrote %d values of 16 KiB to a 2 MiB filesystem without an error", committed)
	}
	if committed < 10 {
		t.Fatalf("only %d writes before the first error (%v); the test filled too early to mean anything", committed, writeErr)
	}
	t.Logf("disk full after %d writes: %v", committed, writeErr)

	checkAll := func(stage string, c interface {
		Get(context.Context, string) (string, bool)
	}) {
		for i := range committed {
			v, ok := c.Get(ctx, fmt.Sprintf("/registry/fill/%06d", i))
			if !ok || v != value(i) {
				t.Fatalf("%s: committed key %d lost or changed (found %v)", stage, i, ok)
			}
		}
	}
	checkAll("while full", getter{t, c})
	// A second write attempt while still full fails too, and leaves nothing broken.
	if err := create(ctx, c, "/registry/fill/extra", value(999999)); err == nil {
		t.Fatalf("a write on a still-full disk succeeded")
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	for i := committed; i < committed+5; i++ {
		if err := create(ctx, c, fmt.Sprintf("/registry/fill/%06d", i), value(i)); err != nil {
			t.Fatalf("write %d after freeing space, without a restart: %v", i, err)
		}
	}
	committed += 5
	checkAll("after freeing space", getter{t, c})
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("not ready after space was freed: %v", err)
	}

	// Folding the WAL back into the database file needs room for both at once,
	// which the ballast alone does not give; grow the volume the way an operator
	// expands a PVC, then stop cleanly.
	if out, err := exec.Command("mount", "-o", "remount,size=8m", dir).CombinedOutput(); err != nil {
		t.Fatalf("growing the tmpfs: %v: %s", err, out)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := CheckIntegrity(ctx, filepath.Join(dir, DatabaseFile)); err != nil {
		t.Fatalf("integrity after the full disk: %v", err)
	}
	s2 := openT(t, Config{DataDir: dir, Backend: backend})
	checkAll("after restart", getter{t, etcdClient(t, s2.Endpoint())})
}

// getter reads values for checkAll, failing the test on a read error.
type getter struct {
	t *testing.T
	c *clientv3.Client
}

func (g getter) Get(ctx context.Context, key string) (string, bool) {
	return getValue(ctx, g.t, g.c, key)
}
