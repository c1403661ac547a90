package dirwatch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr/funcr"
)

// noInstance stands for a kernel whose inotify instances are all taken: the
// error inotify_init1 returns then.
func noInstance() (*fsnotify.Watcher, error) { return nil, syscall.EMFILE }

// waitSignal fails unless w signals within a minute (a generous bound on a
// loaded machine; a watcher that never signals fails either way).
func waitSignal(t *testing.T, w *Watcher, what string) {
	t.Helper()
	select {
	case <-w.C:
	case <-time.After(time.Minute):
		t.Fatalf("no signal after %s (polling: %v)", what, w.Polling())
	}
}

// drain empties a pending signal, so that the next wait sees only what follows.
func drain(w *Watcher) {
	select {
	case <-w.C:
	default:
	}
}

// quiet fails if w signals within d: nothing changed.
func quiet(t *testing.T, w *Watcher, d time.Duration, what string) {
	t.Helper()
	select {
	case <-w.C:
		t.Fatalf("a signal %s, where nothing changed", what)
	case <-time.After(d):
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// swapData updates dir as the kubelet updates a Secret volume: the new
// content in a fresh directory, then the ..data symlink replaced by rename.
func swapData(t *testing.T, dir, gen, content string) {
	t.Helper()
	data := filepath.Join(dir, "..gen-"+gen)
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(data, "kubeconfig.yaml"), content)
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(data), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func TestInotifySignalsAWrite(t *testing.T) {
	dir := t.TempDir()
	// An hour's poll: only inotify can signal in time.
	w := Start(context.Background(), dir, time.Hour)
	defer w.Close()
	if err := w.Polling(); err != nil {
		t.Fatalf("polling on a machine with inotify: %v", err)
	}
	quiet(t, w, 200*time.Millisecond, "before any write")
	write(t, filepath.Join(dir, "kubeconfig.yaml"), "one")
	waitSignal(t, w, "a write")
}

func TestWithoutAnInstanceItPollsAndSeesEveryKindOfChange(t *testing.T) {
	dir := t.TempDir()
	w := Start(context.Background(), dir, 20*time.Millisecond, WithNotify(noInstance))
	defer w.Close()
	if err := w.Polling(); err == nil {
		t.Fatal("Polling() is nil without an inotify instance")
	}
	quiet(t, w, 200*time.Millisecond, "before any change")

	// Renamed in, so that no poll can see it half-written (a second, true
	// signal) before the quiet check.
	path := filepath.Join(dir, "kubeconfig.yaml")
	staged := filepath.Join(t.TempDir(), "kubeconfig.yaml")
	write(t, staged, "one")
	if err := os.Rename(staged, path); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, w, "a new file")
	quiet(t, w, 200*time.Millisecond, "after the new file was seen")

	// Same size, later modification time: a rewrite in place.
	time.Sleep(10 * time.Millisecond)
	write(t, path, "two")
	waitSignal(t, w, "a rewrite of the same size")
	// A poll may have seen it truncated: let that second signal come, then
	// drop it, so that the next wait is answered by the next change only.
	time.Sleep(100 * time.Millisecond)
	drain(w)

	swapData(t, dir, "1", "three")
	waitSignal(t, w, "the first Secret volume swap")
	drain(w)
	// A second swap: same names, sizes and (within the clock's resolution,
	// possibly) times; the symlink's target differs.
	swapData(t, dir, "2", "four!")
	waitSignal(t, w, "a second Secret volume swap")

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, w, "a removal")
}

func TestAnInstanceFreedLaterIsUsed(t *testing.T) {
	dir := t.TempDir()
	var calls atomic.Int32
	notify := func() (*fsnotify.Watcher, error) {
		if calls.Add(1) <= 3 {
			return noInstance()
		}
		return fsnotify.NewWatcher()
	}
	var logged []string
	log := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	w := Start(context.Background(), dir, 20*time.Millisecond, WithNotify(notify))
	defer w.Close()
	if w.Polling() == nil {
		t.Fatal("Polling() is nil while no instance was granted")
	}
	w.LogMode(log)
	w.LogMode(log)
	deadline := time.Now().Add(time.Minute)
	for w.Polling() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("still polling after the kernel granted an instance: %v", w.Polling())
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.LogMode(log)
	w.LogMode(log)
	if len(logged) != 2 || !strings.Contains(logged[0], "by polling") || !strings.Contains(logged[0], "too many open files") || !strings.Contains(logged[1], "with inotify") {
		t.Errorf("logged %q, want polling with its reason once, then inotify once", logged)
	}
	write(t, filepath.Join(dir, "kubeconfig.yaml"), "one")
	waitSignal(t, w, "a write once inotify watches")
}

func TestADirectoryCreatedLaterIsWatched(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mount")
	w := Start(context.Background(), dir, 20*time.Millisecond)
	defer w.Close()
	if w.Polling() == nil {
		t.Fatal("Polling() is nil while the directory is missing")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, w, "the directory appearing")
	deadline := time.Now().Add(time.Minute)
	for w.Polling() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the directory exists and is not watched: %v", w.Polling())
		}
		time.Sleep(10 * time.Millisecond)
	}
	drain(w)
	write(t, filepath.Join(dir, "kubeconfig.yaml"), "one")
	waitSignal(t, w, "a write in the new directory")
}

// inotifyInstances counts this process's inotify descriptors.
func inotifyInstances(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

func TestCloseLetsGoOfTheInstance(t *testing.T) {
	before := inotifyInstances(t)
	w := Start(context.Background(), t.TempDir(), time.Hour)
	if got := inotifyInstances(t); got != before+1 {
		t.Fatalf("%d inotify instances while watching, want %d", got, before+1)
	}
	w.Close()
	if got := inotifyInstances(t); got != before {
		t.Fatalf("%d inotify instances after Close, want %d", got, before)
	}
}
