package eventsync

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/k3k-io/k3k/pkg/agent/syncloop"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// Config is what the Syncer needs besides the virtual credentials.
type Config struct {
	// Translator decides what a host Event becomes; its config names the
	// host namespace and the virtual node.
	Translator *translate.Translator
	// Host is a client for the host cluster, allowed to read Events and pods
	// in the host namespace.
	Host kubernetes.Interface
	// Resync is how often the host pods are listed again. Default 30s.
	Resync time.Duration
	// Rate is how many Events per second the agent writes into the virtual
	// cluster, Burst how many at once. Default 10 and 50.
	Rate  rate.Limit
	Burst int
	// Workers is how many Events are written at once. Default 2.
	Workers int
}

// Syncer carries host Events over to the virtual pods.
type Syncer struct {
	cfg      Config
	tr       *translate.Translator
	limiter  *rate.Limiter
	progress syncloop.Progress // keys are host Event keys

	mu      sync.Mutex
	written map[string]string // host Event key → the resource version last written
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Syncer, error) {
	if cfg.Translator == nil || cfg.Host == nil {
		return nil, errors.New("eventsync: translator and host client are required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 10
	}
	if cfg.Burst <= 0 {
		cfg.Burst = 50
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	return &Syncer{cfg: cfg, tr: cfg.Translator, limiter: rate.NewLimiter(cfg.Rate, cfg.Burst), written: map[string]string{}}, nil
}

// Synced reports whether the current Run's caches have synced.
func (s *Syncer) Synced() bool { return s.progress.Synced() }

// Reconciled counts the completed, error-free passes over one host Event
// (key "namespace/name") while it exists.
func (s *Syncer) Reconciled(key string) uint64 { return s.progress.Reconciled(key) }

// byPod indexes host Events by the name of the pod they are about.
const byPod = "pod"

type run struct {
	*Syncer
	virtual kubernetes.Interface
	events  cache.Indexer
	hPods   corelisters.PodLister
	loop    *syncloop.Loop
}

// Run syncs until ctx ends, with virtual as the virtual cluster's client. It
// returns nil when ctx ends.
func (s *Syncer) Run(ctx context.Context, virtual kubernetes.Interface) error {
	ns := s.tr.Config().HostNamespace
	podFactory := syncloop.HostFactory(s.cfg.Host, s.cfg.Resync, ns, s.tr.HostSelector())
	// Events carry no labels of the agent's; the field selector keeps the
	// cache to Events about pods. They are not resynced: a written Event
	// changes only when the host's does.
	eventFactory := informers.NewSharedInformerFactoryWithOptions(s.cfg.Host, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("involvedObject.kind", "Pod").String()
		}))
	events := eventFactory.Core().V1().Events().Informer()
	if err := events.AddIndexers(cache.Indexers{byPod: func(obj any) ([]string, error) {
		if e, ok := obj.(*corev1.Event); ok {
			return []string{e.InvolvedObject.Name}, nil
		}
		return nil, nil
	}}); err != nil {
		return err
	}
	pods := podFactory.Core().V1().Pods()

	r := &run{Syncer: s, virtual: virtual, events: events.GetIndexer(), hPods: pods.Lister()}
	r.loop = syncloop.New(syncloop.Config{
		Name:      "k3k-agent-events",
		Noun:      "event",
		Workers:   s.cfg.Workers,
		Progress:  &s.progress,
		Reconcile: r.reconcile,
		Exists:    syncloop.InCache(r.events),
	})
	defer r.loop.ShutDown()
	if err := syncloop.AddWatches(
		syncloop.Watch{Informer: events, Enqueue: r.loop.AddObject},
		syncloop.Watch{Informer: pods.Informer(), Enqueue: r.enqueuePodEvents},
	); err != nil {
		return err
	}
	return r.loop.Run(ctx, podFactory, eventFactory)
}

// enqueuePodEvents queues the Events about a host pod: those that arrived
// before the pod was in the cache were dropped then.
func (r *run) enqueuePodEvents(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	evs, err := r.events.ByIndex(byPod, p.Name)
	if err != nil {
		return
	}
	for _, e := range evs {
		r.loop.AddObject(e)
	}
}

func (r *run) reconcile(ctx context.Context, key string) (requeue bool, err error) {
	obj, exists, err := r.events.GetByKey(key)
	if err != nil {
		return false, err
	}
	if !exists {
		r.mu.Lock()
		delete(r.written, key)
		r.mu.Unlock()
		return false, nil
	}
	host := obj.(*corev1.Event)
	// Every update of a host pod queues its Events again; one written as it
	// is now needs neither its pod nor a translation.
	r.mu.Lock()
	last, seen := r.written[key]
	r.mu.Unlock()
	if seen && last == host.ResourceVersion {
		return false, nil
	}
	pod, err := syncloop.Found(r.hPods.Pods(host.Namespace).Get(host.InvolvedObject.Name))
	if err != nil || pod == nil {
		// Not one of the agent's pods, or not in the cache yet (its add
		// queues this Event again).
		return false, err
	}
	want, ok := r.tr.VirtualPodEvent(host, pod)
	if !ok {
		return false, nil
	}
	if !r.limiter.Allow() {
		return true, nil
	}
	if err := r.write(ctx, want, seen); err != nil {
		return false, err
	}
	r.mu.Lock()
	r.written[key] = host.ResourceVersion
	r.mu.Unlock()
	return false, nil
}

// write creates the virtual Event, or updates it when it exists: first
// (seen) when this agent wrote it before, else when the create says it
// exists (a restarted agent). Events allow an update without a resource
// version, so nothing is read first.
func (r *run) write(ctx context.Context, want *corev1.Event, seen bool) error {
	events := r.virtual.CoreV1().Events(want.Namespace)
	if seen {
		_, err := events.Update(ctx, want, metav1.UpdateOptions{})
		if !apierrors.IsNotFound(err) {
			return err
		}
		// Expired in the virtual cluster (its event TTL) or deleted.
	}
	_, err := events.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = events.Update(ctx, want, metav1.UpdateOptions{})
	}
	return err
}
