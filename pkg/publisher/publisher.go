package publisher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/dirwatch"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
)

// SecretClient is the part of client-go's SecretInterface the publisher uses,
// scoped to the cluster's namespace. Get and Update are all the ServiceAccount is
// allowed; the publisher never creates or lists.
type SecretClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error)
	Update(ctx context.Context, secret *corev1.Secret, opts metav1.UpdateOptions) (*corev1.Secret, error)
}

// Config says what the publisher watches and where it publishes.
type Config struct {
	// KubeconfigPath is the file k3s writes with --write-kubeconfig.
	KubeconfigPath string
	// Endpoint is where the published kubeconfig points: the cluster's Service.
	Endpoint kubeconfig.Endpoint
	// Secrets reads and updates Secrets in the cluster's namespace.
	Secrets SecretClient
	// SecretName is the kubeconfig Secret (k3k-<name>-kubeconfig); the kubeconfig is
	// stored under layout.SecretKeyKubeconfig.
	SecretName string
	// TokenPath is the server's token file (<data-dir>/server/token). Empty turns
	// token restoring off.
	TokenPath string
	// TokenSecretName is the token Secret (k3k-<name>-token), restored from TokenPath
	// when its token key (layout.SecretKeyToken) is missing or empty.
	TokenSecretName string

	// Resync is how often the Secrets are checked when nothing happens on disk, so
	// that a Secret emptied or recreated by someone else is filled again and a
	// certificate expiring in place is noticed. Default 30s.
	Resync time.Duration
	// Poll is how often the kubeconfig's directory is compared for changes while
	// inotify cannot watch it (no instance left on the node). Default 1s.
	Poll time.Duration
	// WatchOptions change how the directory is watched; tests use them.
	WatchOptions []dirwatch.Option
	// Debounce is how long the file must be quiet before it is read. k3s rewrites the
	// file in place, so reading on the first event would mostly see it half-written.
	// Default 100ms.
	Debounce time.Duration
	// MinBackoff and MaxBackoff bound the exponential delay between attempts after a
	// failure to reach or update the Secrets. Defaults 500ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Now is the clock certificates are checked against. Default time.Now.
	Now func() time.Time

	// Identity names this publisher: the server pod's name. It is recorded on
	// the Secret (AnnotationPublishedBy). With several servers (etcd, HA) each
	// k3s writes a kubeconfig of its own, with its own client certificate; a
	// Secret published by another server is left alone while it is
	// as good as ours (see keepPublished), so that the servers do
	// not take turns rewriting it and every agent reloading. Empty: always keep
	// the Secret equal to this server's file (the single-server behaviour).
	Identity string
	// HandOver is how long before the published client certificate expires
	// another server's publisher replaces it with its own. Default 30 days.
	HandOver time.Duration

	// APITimeout bounds one /readyz request to the server's API. Default 3s.
	APITimeout time.Duration
	// APIPoll is how soon a Sync is retried after it found the API server not
	// ready yet: k3s writes the kubeconfig 2-3s before its API serves, and
	// nothing on disk changes when it starts serving. Default 1s.
	APIPoll time.Duration
}

// AnnotationPublishedBy on the kubeconfig Secret names the publisher (server
// pod) whose kubeconfig it holds.
const AnnotationPublishedBy = "k3k.io/published-by"

// State says what the publisher last found on disk.
type State string

// States of the kubeconfig file. They mirror the reasons of the controller's
// KubeconfigPublished condition, which the controller derives from the Secret.
const (
	// StateWaiting: k3s has not written the kubeconfig yet.
	StateWaiting State = "Waiting"
	// StateInvalid: the file does not validate; the Secret keeps its last content.
	StateInvalid State = "Invalid"
	// StatePublished: the Secret holds the file's current content.
	StatePublished State = "Published"
	// StateAPINotReady: the file is valid but the API server it names does not
	// answer /readyz ok yet; nothing is published until it does.
	StateAPINotReady State = "APINotReady"
)

// ErrSecretMissing means a Secret the publisher must update does not exist. The
// publisher may not create Secrets; the controller recreates an empty placeholder,
// which the publisher fills on a later attempt.
var ErrSecretMissing = errors.New("secret does not exist and the publisher may not create it; waiting for the controller to recreate it")

// Result is what one Sync found and did.
type Result struct {
	// State is the kubeconfig file's state.
	State State
	// Reason says why the state is Waiting or Invalid; it holds no file content.
	Reason string
	// Published is true when this Sync updated the kubeconfig Secret.
	Published bool
	// TokenRestored is true when this Sync restored the token Secret.
	TokenRestored bool
}

// Status is the publisher's latest Result with bookkeeping, for health checks.
type Status struct {
	Result
	// Err is the last Sync's error, nil when it succeeded.
	Err error
	// LastSync is when the last Sync finished; zero before the first.
	LastSync time.Time
	// Syncs counts completed Syncs since the publisher started.
	Syncs int
	// Writes counts Secret updates since the publisher started.
	Writes int
}

// Publisher keeps the kubeconfig Secret equal to the validated, rewritten file.
type Publisher struct {
	cfg Config
	api *apiChecker

	mu     sync.Mutex
	status Status
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Publisher, error) {
	switch {
	case cfg.KubeconfigPath == "":
		return nil, errors.New("publisher: kubeconfig path is required")
	case cfg.Secrets == nil:
		return nil, errors.New("publisher: secret client is required")
	case cfg.SecretName == "":
		return nil, errors.New("publisher: secret name is required")
	case cfg.TokenPath != "" && cfg.TokenSecretName == "":
		return nil, errors.New("publisher: token secret name is required with a token path")
	}
	// A bad endpoint fails here, at start, not at the first kubeconfig k3s writes.
	if err := cfg.Endpoint.Validate(); err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(30*time.Second, cfg.MinBackoff)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HandOver <= 0 {
		cfg.HandOver = 30 * 24 * time.Hour
	}
	if cfg.APITimeout <= 0 {
		cfg.APITimeout = 3 * time.Second
	}
	if cfg.APIPoll <= 0 {
		cfg.APIPoll = time.Second
	}
	return &Publisher{cfg: cfg, api: &apiChecker{timeout: cfg.APITimeout}}, nil
}

// Status returns the latest state.
func (p *Publisher) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Run publishes until ctx ends: at start, after the kubeconfig's directory changes
// (watched, because the file may not exist yet and may be replaced; polled when
// the kernel grants no inotify instance, see dirwatch), every Resync, and after a
// failure with exponential backoff. It logs state changes and failures with the
// logger from ctx, never file or Secret content. It returns nil when ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	watcher := dirwatch.Start(ctx, filepath.Dir(p.cfg.KubeconfigPath), p.cfg.Poll, p.cfg.WatchOptions...)
	defer watcher.Close()
	watcher.LogMode(log)

	var (
		failures int
		last     Result
		lastErr  string
	)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-watcher.C:
			timer.Reset(p.cfg.Debounce)
			continue
		case <-timer.C:
		}
		watcher.LogMode(log)
		res, err := p.Sync(ctx)
		// Log changes, not every resync.
		switch {
		case res.Published:
			log.Info("published kubeconfig", "secret", p.cfg.SecretName, "server", p.cfg.Endpoint.URL)
		case res.State == last.State && res.Reason == last.Reason:
		case res.State == StateInvalid:
			log.Info("kubeconfig is invalid; the Secret keeps its last valid content", "reason", res.Reason)
		case res.State == StateWaiting:
			log.Info("waiting for kubeconfig", "reason", res.Reason)
		case res.State == StateAPINotReady:
			log.Info("waiting for the API server to serve before publishing", "reason", res.Reason)
		case res.State == StatePublished:
			log.Info("kubeconfig already published", "secret", p.cfg.SecretName)
		}
		last = res
		if res.TokenRestored {
			log.Info("restored token Secret from the server's token file", "secret", p.cfg.TokenSecretName)
		}
		if err != nil {
			if err.Error() != lastErr {
				log.Error(err, "publishing; retrying with backoff")
				lastErr = err.Error()
			}
			failures++
			timer.Reset(p.backoff(failures))
			continue
		}
		failures, lastErr = 0, ""
		if res.State == StateAPINotReady {
			timer.Reset(p.cfg.APIPoll)
			continue
		}
		timer.Reset(p.cfg.Resync)
	}
}

// backoff is the delay before retry n (1-based): doubling from MinBackoff, capped at
// MaxBackoff, with up to 20% jitter so that many publishers do not retry in step
// against a recovering apiserver.
func (p *Publisher) backoff(n int) time.Duration {
	d := p.cfg.MinBackoff
	for i := 1; i < n && d < p.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.cfg.MaxBackoff)
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// Sync checks both Secrets once and updates each that needs it. The Result says
// what it found even when it also returns an error; the error is about the API or
// the token file, never an invalid kubeconfig, which is a State.
func (p *Publisher) Sync(ctx context.Context) (Result, error) {
	res, kerr := p.syncKubeconfig(ctx)
	var terr error
	if p.cfg.TokenPath != "" {
		res.TokenRestored, terr = p.syncToken(ctx)
	}
	err := errors.Join(kerr, terr)

	p.mu.Lock()
	defer p.mu.Unlock()
	p.status.Result, p.status.Err, p.status.LastSync = res, err, p.cfg.Now()
	p.status.Syncs++
	if res.Published {
		p.status.Writes++
	}
	if res.TokenRestored {
		p.status.Writes++
	}
	return res, err
}

func (p *Publisher) syncKubeconfig(ctx context.Context) (Result, error) {
	data, err := os.ReadFile(p.cfg.KubeconfigPath)
	if errors.Is(err, os.ErrNotExist) {
		return Result{State: StateWaiting, Reason: "k3s has not written " + p.cfg.KubeconfigPath + " yet"}, nil
	}
	if err != nil {
		return Result{State: StateWaiting, Reason: "cannot read " + p.cfg.KubeconfigPath}, fmt.Errorf("reading kubeconfig: %w", err)
	}
	// Parsed once: the checks, the rewrite, the comparison with another
	// server's kubeconfig and the API check all use k.
	k, err := kubeconfig.ParseValid(data, p.cfg.Now())
	if err != nil {
		if errors.Is(err, kubeconfig.ErrEmpty) {
			return Result{State: StateWaiting, Reason: err.Error()}, nil
		}
		return Result{State: StateInvalid, Reason: err.Error()}, nil
	}
	ours, err := k.Rewrite(p.cfg.Endpoint)
	if err != nil {
		return Result{State: StateInvalid, Reason: err.Error()}, nil
	}
	want, err := ours.Marshal()
	if err != nil {
		return Result{State: StateInvalid, Reason: err.Error()}, nil
	}

	secret, err := p.get(ctx, p.cfg.SecretName)
	if err != nil {
		return Result{State: StateWaiting, Reason: "kubeconfig not published yet"}, err
	}
	if bytes.Equal(secret.Data[layout.SecretKeyKubeconfig], want) {
		return Result{State: StatePublished}, nil
	}
	if by := secret.Annotations[AnnotationPublishedBy]; p.cfg.Identity != "" && by != "" && by != p.cfg.Identity &&
		keepPublished(secret.Data[layout.SecretKeyKubeconfig], ours, p.cfg.Now(), p.cfg.HandOver) {
		return Result{State: StatePublished, Reason: "published by " + by}, nil
	}
	// Publish only credentials for a server that serves: a client handed this
	// kubeconfig must get answers, not refusals or 503s.
	if err := p.api.check(ctx, data, k); err != nil {
		return Result{State: StateAPINotReady, Reason: err.Error()}, nil
	}
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	secret.Data[layout.SecretKeyKubeconfig] = want
	if p.cfg.Identity != "" {
		if secret.Annotations == nil {
			secret.Annotations = map[string]string{}
		}
		secret.Annotations[AnnotationPublishedBy] = p.cfg.Identity
	}
	// Update carries the resourceVersion just read: a concurrent change makes it
	// fail with a conflict and the next attempt starts from a fresh read.
	if _, err := p.cfg.Secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		return Result{State: StateWaiting, Reason: "kubeconfig not published yet"},
			fmt.Errorf("updating secret %s: %w", p.cfg.SecretName, err)
	}
	return Result{State: StatePublished, Published: true}, nil
}

// keepPublished reports whether a kubeconfig another server published stays
// rather than ours: it has the same server and the same CA bundle (so every
// server of the cluster accepts its client certificate), and it is either still
// valid at now+handOver or outlives ours. The second rule means a certificate
// near expiry is replaced only by one that lasts longer, so two servers can
// never take turns. A different CA (a rotation) is always replaced.
func keepPublished(published []byte, want *kubeconfig.Kubeconfig, now time.Time, handOver time.Duration) bool {
	have, err := kubeconfig.Parse(published)
	if err != nil {
		return false
	}
	if have.Server != want.Server || have.TLSServerName != want.TLSServerName || !bytes.Equal(have.CAData, want.CAData) {
		return false
	}
	if have.Validate(now.Add(handOver)) == nil {
		return true
	}
	return have.Validate(now) == nil && !have.ClientNotAfter().Before(want.ClientNotAfter())
}

// syncToken restores the token Secret's value from the server's token file when the
// value is missing, unless the Secret is marked restore-pending (k3kcli cluster
// restore). A value that is present is left alone, whatever it is.
func (p *Publisher) syncToken(ctx context.Context) (bool, error) {
	secret, err := p.get(ctx, p.cfg.TokenSecretName)
	if err != nil {
		return false, err
	}
	if len(secret.Data[layout.SecretKeyToken]) > 0 {
		return false, nil
	}
	if _, ok := secret.Annotations[v1beta1.AnnotationRestorePending]; ok {
		// An in-place restore emptied the Secret on purpose: the server's
		// own copy is the token of the data being replaced, and k3s must
		// not start until the snapshot's data and token are in place.
		return false, nil
	}
	data, err := os.ReadFile(p.cfg.TokenPath)
	if err != nil {
		return false, fmt.Errorf("secret %s has no token and the server's token file cannot be read: %w", p.cfg.TokenSecretName, err)
	}
	token, err := ParseServerToken(data)
	if err != nil {
		return false, fmt.Errorf("secret %s has no token: %w", p.cfg.TokenSecretName, err)
	}
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	secret.Data[layout.SecretKeyToken] = []byte(token)
	if _, err := p.cfg.Secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		return false, fmt.Errorf("restoring secret %s: %w", p.cfg.TokenSecretName, err)
	}
	return true, nil
}

func (p *Publisher) get(ctx context.Context, name string) (*corev1.Secret, error) {
	secret, err := p.cfg.Secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("secret %s: %w", name, ErrSecretMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("getting secret %s: %w", name, err)
	}
	return secret, nil
}
