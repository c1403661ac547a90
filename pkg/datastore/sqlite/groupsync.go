package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// groupSync makes committed SQLite writes durable in batches: every caller of
// start gets an fsync of the WAL that begins after the call, and callers
// arriving while an fsync runs share the next one. This is etcd's group commit
// applied after the fact, which is what lets concurrent writers cost one fsync
// together instead of one each. The batch is led by whichever fsync is
// running: there is no waiting window, because writers commit one at a time
// and the commits of the next batch pile up during the current fsync anyway.
//
// An fsync failure is sticky: Linux may drop the dirty pages it failed to write,
// so nothing later can be trusted to be durable either. Every later batch carries
// the error, and failed is closed so the server can stop and be restarted from
// what is really on disk.
type groupSync struct {
	walPath, dbPath, dir string

	mu      sync.Mutex
	running bool
	pending *syncBatch
	walIno  uint64
	err     error
	failed  chan struct{}
	// syncSince is when the running fsync started (zero when none runs);
	// reported says the stall watch has reported that one.
	syncSince time.Time
	reported  bool
	log       logr.Logger
	// hold, when a test sets it (under mu), runs before every fsync: a way
	// to keep a batch from becoming durable for as long as the test wants.
	hold func()
}

type syncBatch struct {
	done chan struct{}
	err  error
}

func newGroupSync(dbPath, dir string) *groupSync {
	return &groupSync{walPath: dbPath + "-wal", dbPath: dbPath, dir: dir, failed: make(chan struct{}), log: logr.Discard()}
}

// watch reports, once per fsync, an fsync that runs longer than after, until
// ctx ends: every write waits for it before it is acknowledged. log also
// receives the end of such an fsync.
func (g *groupSync) watch(ctx context.Context, log logr.Logger, after time.Duration) {
	g.mu.Lock()
	g.log = log
	g.mu.Unlock()
	every(ctx, after, func() {
		g.mu.Lock()
		since := g.syncSince
		stalled := !since.IsZero() && !g.reported && time.Since(since) > after
		if stalled {
			g.reported = true
		}
		g.mu.Unlock()
		if stalled {
			log.Info("an fsync of the WAL has not finished; no write is acknowledged until it does",
				"file", g.walPath, "running", time.Since(since).Round(time.Millisecond).String())
		}
	})
}

// start asks for an fsync that begins after the call, and returns the batch
// that will carry it, for wait. Splitting the two lets a writer do other work
// (the create check) while the disk flushes.
func (g *groupSync) start() *syncBatch {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		b := &syncBatch{done: make(chan struct{}), err: g.err}
		close(b.done)
		return b
	}
	if g.pending == nil {
		g.pending = &syncBatch{done: make(chan struct{})}
	}
	if !g.running {
		g.running = true
		go g.loop()
	}
	return g.pending
}

// wait returns once the fsync of b is done.
func (g *groupSync) wait(ctx context.Context, b *syncBatch) error {
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the write to reach disk: %w", ctx.Err())
	}
}

func (g *groupSync) loop() {
	for {
		g.mu.Lock()
		b := g.pending
		g.pending = nil
		if b == nil {
			g.running = false
			g.mu.Unlock()
			return
		}
		ino, hold := g.walIno, g.hold
		g.syncSince, g.reported = time.Now(), false
		g.mu.Unlock()
		if hold != nil {
			hold()
		}

		newIno, err := g.fsync(ino)

		g.mu.Lock()
		wasReported, since, log := g.reported, g.syncSince, g.log
		g.syncSince = time.Time{}
		if err != nil && g.err == nil {
			g.err = fmt.Errorf("flushing the database to disk failed, later writes cannot be made durable: %w", err)
			close(g.failed)
		}
		if err == nil {
			g.walIno = newIno
		}
		b.err = g.err
		g.mu.Unlock()
		close(b.done)
		if wasReported {
			log.Info("the slow fsync of the WAL finished", "took", time.Since(since).Round(time.Millisecond).String())
		}
	}
}

// fsync flushes the WAL; when the WAL is a new file (first write, or SQLite
// removed and recreated it) the directory entry is flushed as well, so that the
// file itself survives a power loss. The WAL is opened anew every time because
// SQLite may replace it, and an old descriptor would flush the old inode.
func (g *groupSync) fsync(lastIno uint64) (uint64, error) {
	f, err := os.Open(g.walPath)
	if errors.Is(err, os.ErrNotExist) {
		// No WAL: SQLite checkpointed and removed it, which it does only after
		// the database file itself was flushed. Flush it again to be sure.
		f, err = os.Open(g.dbPath)
		lastIno = 0
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// fdatasync, as etcd does for its WAL: it writes the data and the size, and
	// skips the inode's timestamps, which cost a second write (a journal commit
	// on ext4) and which no reader needs after a power loss.
	if err := fdatasync(f); err != nil {
		return 0, err
	}
	var ino uint64
	if st, ok := statIno(f); ok {
		ino = st
	}
	if ino != lastIno || ino == 0 {
		d, err := os.Open(g.dir)
		if err != nil {
			return 0, err
		}
		defer d.Close()
		if err := d.Sync(); err != nil {
			return 0, err
		}
	}
	return ino, nil
}

func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

func statIno(f *os.File) (uint64, bool) {
	info, err := f.Stat()
	if err != nil {
		return 0, false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Ino, true
}

// failure returns the sticky error, if any.
func (g *groupSync) failure() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}
