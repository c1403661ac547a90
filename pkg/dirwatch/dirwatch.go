// Package dirwatch tells a loop when the files in a directory may have
// changed: through inotify while the kernel grants an instance, else by
// comparing the directory's entries at a poll interval.
//
// Inotify instances are a per-user kernel limit (fs.inotify.max_user_instances,
// 128 on a default kernel) shared by every process of that user on the node:
// every container running as root, every kubelet and API server watching its
// certificate files. A node running a few dozen k3s servers runs out, and a
// container that cannot follow its files must not crash-loop for it (CI of
// 2026-12-05: kubeconfig publishers exiting with "too many open files" kept
// eight virtual clusters from ever becoming Ready). Polling finds the same
// changes a little later; while polling, the watcher asks for an inotify
// instance again at every poll and uses it once one is free.
package dirwatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

// Watcher signals on C when Dir may have changed. Signals are coalesced: one
// pending signal stands for any number of changes, so the reader rereads
// what it follows rather than counting.
type Watcher struct {
	// C receives when the directory may have changed.
	C <-chan struct{}

	c      chan struct{}
	dir    string
	poll   time.Duration
	notify func() (*fsnotify.Watcher, error)
	done   chan struct{}
	cancel context.CancelFunc

	// in and watching belong to Start, then to the goroutine it starts.
	in       *fsnotify.Watcher
	watching bool

	mu      sync.Mutex
	polling error   // why the watcher polls; nil while inotify watches
	logged  *string // the mode LogMode logged last; nil before its first call
}

// Option changes how Start watches.
type Option func(*Watcher)

// WithNotify replaces the constructor of the inotify watcher; tests use it to
// stand for a kernel out of instances.
func WithNotify(f func() (*fsnotify.Watcher, error)) Option {
	return func(w *Watcher) { w.notify = f }
}

// Start watches dir until ctx ends or Close is called. poll is how often it
// compares the directory's entries while it has no inotify watch on dir (no
// instance, or dir missing or replaced); it must be positive. Start never
// fails: the directory need not exist yet. Polling says, as soon as Start
// returns, whether it got a watch.
func Start(ctx context.Context, dir string, poll time.Duration, opts ...Option) *Watcher {
	if poll <= 0 {
		panic("dirwatch: poll interval must be positive")
	}
	c := make(chan struct{}, 1)
	w := &Watcher{C: c, c: c, dir: dir, poll: poll, notify: fsnotify.NewWatcher, done: make(chan struct{})}
	for _, o := range opts {
		o(w)
	}
	last := snapshot(dir)
	w.attach()
	ctx, w.cancel = context.WithCancel(ctx)
	go w.run(ctx, last)
	return w
}

// Close stops the watcher and waits for it to let go of its inotify instance.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
}

// Polling says why the watcher compares entries instead of being told by
// inotify; nil while inotify watches the directory.
func (w *Watcher) Polling() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polling
}

// LogMode logs how the directory is followed when that changed since its last
// call, and on its first call when it polls: by polling and why, or by
// inotify again. Loops call it on each pass, so that a node out of inotify
// instances is said once, not hidden.
func (w *Watcher) LogMode(log logr.Logger) {
	w.mu.Lock()
	why := ""
	if w.polling != nil {
		why = w.polling.Error()
	}
	first, changed := w.logged == nil, w.logged != nil && *w.logged != why
	w.logged = &why
	w.mu.Unlock()
	switch {
	case !first && !changed, first && why == "":
	case why != "":
		log.Info("following a directory by polling", "dir", w.dir, "every", w.poll.String(), "reason", why)
	default:
		log.Info("following a directory with inotify", "dir", w.dir)
	}
}

func (w *Watcher) setPolling(err error) {
	w.mu.Lock()
	w.polling = err
	w.mu.Unlock()
}

func (w *Watcher) signal() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// attach gets an inotify instance if it has none and watches dir if it does
// not yet, recording why it polls when either fails. It reports whether dir
// is watched now and was not before.
func (w *Watcher) attach() bool {
	if w.in == nil {
		n, err := w.notify()
		if err != nil {
			w.setPolling(fmt.Errorf("no inotify instance: %w", err))
			return false
		}
		w.in = n
	}
	if w.watching {
		return false
	}
	if err := w.in.Add(w.dir); err != nil {
		w.setPolling(fmt.Errorf("watching %s: %w", w.dir, err))
		return false
	}
	w.watching = true
	w.setPolling(nil)
	return true
}

// detach forgets an inotify instance whose channels closed.
func (w *Watcher) detach() {
	_ = w.in.Close()
	w.in, w.watching = nil, false
}

func (w *Watcher) run(ctx context.Context, last []string) {
	defer close(w.done)
	defer func() {
		if w.in != nil {
			_ = w.in.Close()
		}
	}()
	ticker := time.NewTicker(w.poll)
	defer ticker.Stop()
	for {
		// What changed before a watch began is only seen by comparing.
		if w.attach() {
			if now := snapshot(w.dir); !slices.Equal(now, last) {
				last = now
				w.signal()
			}
		}
		var (
			events <-chan fsnotify.Event
			errs   <-chan error
		)
		if w.in != nil {
			events, errs = w.in.Events, w.in.Errors
		}
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				w.detach()
				continue
			}
			if ev.Name == w.dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				w.watching = false
			}
			w.signal()
		case _, ok := <-errs:
			if !ok {
				w.detach()
				continue
			}
			// An overflow loses events, not state: the reader rereads.
			w.signal()
		case <-ticker.C:
			if w.watching {
				continue
			}
			if now := snapshot(w.dir); !slices.Equal(now, last) {
				last = now
				w.signal()
			}
		}
	}
}

// snapshot lists what a change to dir alters: each entry's name, type, size,
// modification time and, for a symlink, its target. Kubernetes updates a
// Secret volume by swapping the ..data symlink, which a target tells.
func snapshot(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			out = append(out, e.Name()+": "+err.Error())
			continue
		}
		s := fmt.Sprintf("%s %v %d %d", e.Name(), info.Mode(), info.Size(), info.ModTime().UnixNano())
		if info.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(filepath.Join(dir, e.Name()))
			s += " -> " + target
		}
		out = append(out, s)
	}
	return out
}
