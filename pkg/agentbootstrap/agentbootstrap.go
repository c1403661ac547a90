package agentbootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/pkg/dirwatch"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
)

// Config says where the Secret is mounted and whom to tell about new credentials.
type Config struct {
	// Dir is the Secret volume's mount point.
	Dir string
	// Key is the file in Dir holding the kubeconfig. Default layout.SecretKeyKubeconfig.
	Key string
	// OnChange is called by Run, on Run's goroutine, with a fresh copy each time new
	// valid credentials are loaded, so that the agent rebuilds its clients with them.
	// Run waits for it to return before looking at the directory again. Credentials
	// returned by Wait are not announced again.
	OnChange func(*rest.Config)
	// Resync is how often Run rereads the file without an event, in case one is lost
	// and to notice credentials expiring in place. Default one minute.
	Resync time.Duration
	// Poll is how often the directory is compared for changes while inotify
	// cannot watch it (no instance left on the node). Default 1s.
	Poll time.Duration
	// WatchOptions change how the directory is watched; tests use them.
	WatchOptions []dirwatch.Option
	// MinBackoff and MaxBackoff bound Wait's delay between attempts when no event
	// arrives. Defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// Now is the clock certificates are checked against. Default time.Now.
	Now func() time.Time
}

// Status says which credentials are in use and why newer content is not.
type Status struct {
	// Generation counts the distinct valid kubeconfigs loaded; 0 before the first.
	Generation int
	// LoadedAt is when the credentials in use were loaded.
	LoadedAt time.Time
	// Err says why the file's current content is not in use; nil when it is. It
	// wraps kubeconfig.ErrEmpty while there is nothing to load yet.
	Err error
}

// Loader loads and follows the credentials in a mounted kubeconfig Secret.
type Loader struct {
	cfg  Config
	path string

	mu      sync.Mutex
	good    []byte       // the file content in use
	current *rest.Config // built from good
	status  Status
}

// New checks cfg and fills in its defaults. It does not touch the file system.
func New(cfg Config) (*Loader, error) {
	if cfg.Dir == "" {
		return nil, errors.New("agentbootstrap: directory is required")
	}
	if cfg.Key == "" {
		cfg.Key = layout.SecretKeyKubeconfig
	}
	if cfg.Resync <= 0 {
		cfg.Resync = time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(5*time.Second, cfg.MinBackoff)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Loader{cfg: cfg, path: filepath.Join(cfg.Dir, cfg.Key)}, nil
}

// Current returns a copy of the credentials in use, or nil before the first load.
func (l *Loader) Current() *rest.Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current == nil {
		return nil
	}
	return rest.CopyConfig(l.current)
}

// Status returns what the last load found.
func (l *Loader) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status
}

// Wait returns the credentials in use, first waiting until the file holds valid
// ones: it rereads the file on every change to the directory (see dirwatch)
// and otherwise with exponential backoff. When ctx ends first, the error says
// what the file held.
func (l *Loader) Wait(ctx context.Context) (*rest.Config, error) {
	if cfg := l.Current(); cfg != nil {
		return cfg, nil
	}
	// Watch before reading, so a change between the read and the wait is not lost.
	watcher := dirwatch.Start(ctx, l.cfg.Dir, l.cfg.Poll, l.cfg.WatchOptions...)
	defer watcher.Close()
	watcher.LogMode(logr.FromContextOrDiscard(ctx))
	delay := l.cfg.MinBackoff
	for {
		if _, err := l.load(); err == nil {
			return l.Current(), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a valid kubeconfig at %s: %w (last: %v)", l.path, ctx.Err(), l.Status().Err)
		case <-watcher.C:
		case <-time.After(delay):
			delay = min(2*delay, l.cfg.MaxBackoff)
		}
	}
}

// Run follows the file until ctx ends, calling OnChange with each new set of valid
// credentials (including the first, if Wait has not loaded it). It logs refused
// content's reason with the logger from ctx, never the content. It returns nil
// when ctx ends.
func (l *Loader) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	watcher := dirwatch.Start(ctx, l.cfg.Dir, l.cfg.Poll, l.cfg.WatchOptions...)
	defer watcher.Close()
	ticker := time.NewTicker(l.cfg.Resync)
	defer ticker.Stop()
	var lastErr string
	for {
		watcher.LogMode(log)
		changed, err := l.load()
		switch {
		case err != nil && err.Error() != lastErr:
			log.Info("not using the mounted kubeconfig; keeping the credentials in use", "path", l.path, "reason", err.Error())
			lastErr = err.Error()
		case err == nil:
			lastErr = ""
		}
		if changed {
			log.Info("loaded new credentials", "path", l.path, "generation", l.Status().Generation)
			if l.cfg.OnChange != nil {
				l.cfg.OnChange(l.Current())
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-watcher.C:
		case <-ticker.C:
		}
	}
}

// load reads the file and, when it holds valid credentials different from those in
// use, switches to them. It reports whether it switched, and why not. Each read
// is parsed once.
func (l *Loader) load() (bool, error) {
	data, err := os.ReadFile(l.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		err = fmt.Errorf("%w: %s does not exist", kubeconfig.ErrEmpty, l.path)
	case err != nil:
		err = fmt.Errorf("reading %s: %w", l.path, err)
	}
	var k *kubeconfig.Kubeconfig
	if err == nil {
		k, err = kubeconfig.ParseValid(data, l.cfg.Now())
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	l.status.Err = err
	if err != nil || bytes.Equal(data, l.good) {
		return false, err
	}
	l.good, l.current = data, k.RESTConfig()
	l.status.Generation++
	l.status.LoadedAt = l.cfg.Now()
	return true, nil
}
