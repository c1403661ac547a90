package ingresssync

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"

	"github.com/k3k-io/k3k/pkg/agent/syncloop"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// Config is what the Syncer needs besides the virtual credentials.
type Config struct {
	// Translator builds host Ingresses; its config maps the classes.
	Translator *translate.Translator
	// Host is a client for the host cluster, allowed what the agent's Role
	// allows in the host namespace.
	Host kubernetes.Interface
	// Resync is how often every Ingress is reconciled without an event.
	// Default 30s.
	Resync time.Duration
	// RewriteInterval is how long a written TLS Secret copy is trusted
	// before it is written again. Default five minutes.
	RewriteInterval time.Duration
	// Workers is how many Ingresses are reconciled at once. Default 2.
	Workers int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Syncer keeps host copies of the virtual Ingresses.
type Syncer struct {
	cfg      Config
	tr       *translate.Translator
	progress syncloop.Progress

	mu      sync.Mutex
	written map[string]written // host Secret name → what was last written
	said    syncloop.Said      // Ingress key → the last refusal said with an Event
}

type written struct {
	hash string
	at   time.Time
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Syncer, error) {
	if cfg.Translator == nil || cfg.Host == nil {
		return nil, errors.New("ingresssync: translator and host client are required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.RewriteInterval <= 0 {
		cfg.RewriteInterval = 5 * time.Minute
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Syncer{cfg: cfg, tr: cfg.Translator, written: map[string]written{}}, nil
}

// Synced reports whether the current Run's caches have synced.
func (s *Syncer) Synced() bool { return s.progress.Synced() }

// Reconciled counts the completed, error-free passes over one virtual
// Ingress (key "namespace/name") while it exists.
func (s *Syncer) Reconciled(key string) uint64 { return s.progress.Reconciled(key) }

type run struct {
	*Syncer
	virtual    kubernetes.Interface
	vIngresses networkinglisters.IngressLister
	vSecrets   corelisters.SecretLister
	hIngresses networkinglisters.IngressLister
	loop       *syncloop.Loop
}

// Run syncs until ctx ends, with virtual as the virtual cluster's client. It
// returns nil when ctx ends.
func (s *Syncer) Run(ctx context.Context, virtual kubernetes.Interface) error {
	hostFactory := syncloop.HostFactory(s.cfg.Host, s.cfg.Resync, s.tr.Config().HostNamespace, s.tr.HostSelector())
	virtualFactory := informers.NewSharedInformerFactory(virtual, s.cfg.Resync)
	// Secrets change rarely; they are resynced with the Ingresses naming them.
	secretFactory := informers.NewSharedInformerFactory(virtual, 0)

	r := &run{Syncer: s, virtual: virtual}
	vIngresses := virtualFactory.Networking().V1().Ingresses()
	r.loop = syncloop.New(syncloop.Config{
		Name:      "k3k-agent-ingresses",
		Noun:      "ingress",
		Workers:   s.cfg.Workers,
		Progress:  &s.progress,
		Reconcile: r.reconcile,
		Exists:    syncloop.InCache(vIngresses.Informer().GetIndexer()),
	})
	defer r.loop.ShutDown()

	r.vIngresses = vIngresses.Lister()
	r.vSecrets = secretFactory.Core().V1().Secrets().Lister()
	r.hIngresses = hostFactory.Networking().V1().Ingresses().Lister()
	if err := syncloop.AddWatches(
		syncloop.Watch{Informer: vIngresses.Informer(), Enqueue: r.loop.AddObject},
		syncloop.Watch{Informer: hostFactory.Networking().V1().Ingresses().Informer(), Enqueue: r.enqueueHost},
		syncloop.Watch{Informer: secretFactory.Core().V1().Secrets().Informer(), Enqueue: r.enqueueUsers},
	); err != nil {
		return err
	}
	return r.loop.Run(ctx, hostFactory, virtualFactory, secretFactory)
}

func (r *run) enqueueHost(obj any) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	if k, ok := r.tr.VirtualKeyOf(m); ok && k.Kind == translate.KindIngress {
		r.loop.Add(k.Namespace + "/" + k.Name)
	}
}

// enqueueUsers enqueues the Ingresses whose TLS entries name a changed
// Secret, so their host copies follow it.
func (r *run) enqueueUsers(obj any) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	ings, err := r.vIngresses.Ingresses(s.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, i := range ings {
		for _, name := range translate.IngressSecrets(i) {
			if name == s.Name {
				r.loop.Add(i.Namespace + "/" + i.Name)
			}
		}
	}
}
