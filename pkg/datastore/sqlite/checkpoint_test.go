package sqlite

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestTheWALStaysBoundedUnderConcurrentWrites writes without a pause from
// several clients, so that a checkpoint running beside the writers never
// catches up on its own. SQLite reuses the WAL from its start only after a
// checkpoint copied every frame; if none ever does, the file grows by about
// 35 KiB per create (over 100 MiB here). The file never shrinks while the
// server runs, so its final size is the largest it was.
//
// It runs on each backend: v2 keeps the checkpointer and its gated pass.
func TestTheWALStaysBoundedUnderConcurrentWrites(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) { walStaysBounded(t, b) })
	}
}

func walStaysBounded(t *testing.T, backend BackendKind) {
	const (
		writers   = 8
		perWriter = 400
		maxWAL    = 24 << 20
	)
	dir := t.TempDir()
	s := openT(t, Config{DataDir: dir, Backend: backend})
	ctx := testContext(t)
	c := etcdClient(t, s.Endpoint())
	value := strings.Repeat("v", 1000)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				if err := create(ctx, c, fmt.Sprintf("/registry/w%d/k%d", w, i), value); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, "/registry/w", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != writers*perWriter {
		t.Fatalf("%d keys stored, want %d", r.Count, writers*perWriter)
	}
	size, err := fileSize(filepath.Join(dir, DatabaseFile+"-wal"))
	if err != nil {
		t.Fatal(err)
	}
	if size > maxWAL {
		t.Fatalf("WAL grew to %d MiB under steady writes, want at most %d MiB", size>>20, maxWAL>>20)
	}
	t.Logf("WAL after %d creates: %.1f MiB", writers*perWriter, float64(size)/(1<<20))
}
