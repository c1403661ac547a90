package servicesync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// Config is what the Syncer needs besides the virtual credentials.
type Config struct {
	// Translator builds host objects; its config names the host namespace.
	Translator *translate.Translator
	// Host is a client for the host cluster, allowed what the agent's Role
	// allows in the host namespace.
	Host kubernetes.Interface
	// Resync is how often every Service is reconciled without an event.
	// Default 30s.
	Resync time.Duration
	// Workers is how many Services are reconciled at once. Default 2.
	Workers int
}

// Syncer keeps host copies of the virtual Services.
type Syncer struct {
	cfg Config
	tr  *translate.Translator

	mu     sync.Mutex
	synced bool
	passes map[string]uint64 // virtual Service key → completed reconciles
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Syncer, error) {
	if cfg.Translator == nil || cfg.Host == nil {
		return nil, errors.New("servicesync: translator and host client are required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	return &Syncer{cfg: cfg, tr: cfg.Translator, passes: map[string]uint64{}}, nil
}

// Synced reports whether the current Run's caches have synced.
func (s *Syncer) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// Reconciled counts the completed, error-free passes over one virtual
// Service (key "namespace/name") while it exists.
func (s *Syncer) Reconciled(key string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.passes[key]
}

// run is one Run's clients, caches and queue.
type run struct {
	*Syncer
	virtual   kubernetes.Interface
	vServices corelisters.ServiceLister
	vSlices   discoverylisters.EndpointSliceLister
	vByPod    cache.Indexer
	hServices corelisters.ServiceLister
	hSlices   discoverylisters.EndpointSliceLister
	hPods     corelisters.PodLister
	queue     workqueue.TypedRateLimitingInterface[string]
}

// podIndex indexes virtual EndpointSlices by the virtual pods
// ("namespace/name") their endpoints name.
const podIndex = "pods"

// Run syncs until ctx ends, with virtual as the virtual cluster's client. It
// returns nil when ctx ends.
func (s *Syncer) Run(ctx context.Context, virtual kubernetes.Interface) error {
	log := logr.FromContextOrDiscard(ctx)
	hostFactory := informers.NewSharedInformerFactoryWithOptions(s.cfg.Host, s.cfg.Resync,
		informers.WithNamespace(s.tr.Config().HostNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = s.tr.HostSelector() }))
	virtualFactory := informers.NewSharedInformerFactory(virtual, s.cfg.Resync)

	r := &run{
		Syncer:  s,
		virtual: virtual,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "k3k-agent-services"}),
	}
	defer r.queue.ShutDown()

	vSlices := virtualFactory.Discovery().V1().EndpointSlices()
	if err := vSlices.Informer().AddIndexers(cache.Indexers{podIndex: indexPods}); err != nil {
		return fmt.Errorf("indexing virtual EndpointSlices: %w", err)
	}
	r.vByPod = vSlices.Informer().GetIndexer()
	r.vSlices = vSlices.Lister()
	r.vServices = virtualFactory.Core().V1().Services().Lister()
	r.hServices = hostFactory.Core().V1().Services().Lister()
	r.hSlices = hostFactory.Discovery().V1().EndpointSlices().Lister()
	r.hPods = hostFactory.Core().V1().Pods().Lister()

	handlers := []struct {
		inf     cache.SharedIndexInformer
		enqueue func(any)
	}{
		{virtualFactory.Core().V1().Services().Informer(), r.enqueueVirtualService},
		{vSlices.Informer(), r.enqueueVirtualSlice},
		{hostFactory.Core().V1().Services().Informer(), r.enqueueHost},
		{hostFactory.Discovery().V1().EndpointSlices().Informer(), r.enqueueHost},
		{hostFactory.Core().V1().Pods().Informer(), r.enqueueHostPod},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(handler(h.enqueue)); err != nil {
			return fmt.Errorf("watching: %w", err)
		}
	}
	for _, f := range []informers.SharedInformerFactory{hostFactory, virtualFactory} {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	for _, f := range []informers.SharedInformerFactory{hostFactory, virtualFactory} {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("cache of %v did not sync", typ)
			}
		}
	}
	s.setSynced(true)
	defer s.setSynced(false)
	log.Info("service sync started")

	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Go(func() {
			for r.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	r.queue.ShutDown()
	wg.Wait()
	return nil
}

func (s *Syncer) setSynced(v bool) {
	s.mu.Lock()
	s.synced = v
	s.mu.Unlock()
}

func handler(enqueue func(obj any)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			enqueue(obj)
		},
	}
}

func (r *run) enqueueVirtualService(obj any) {
	if s, ok := obj.(*corev1.Service); ok {
		r.queue.Add(s.Namespace + "/" + s.Name)
	}
}

func (r *run) enqueueVirtualSlice(obj any) {
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok && s.Labels[discoveryv1.LabelServiceName] != "" {
		r.queue.Add(s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName])
	}
}

// enqueueHost enqueues the virtual Service a host Service or host slice
// stands for.
func (r *run) enqueueHost(obj any) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	k, ok := r.tr.VirtualKeyOf(m)
	switch {
	case !ok:
	case k.Kind == translate.KindService:
		r.queue.Add(k.Namespace + "/" + k.Name)
	case k.Kind == translate.KindEndpointSlice && m.GetAnnotations()[translate.AnnotationService] != "":
		r.queue.Add(k.Namespace + "/" + m.GetAnnotations()[translate.AnnotationService])
	}
}

// enqueueHostPod enqueues the Services whose virtual slices name the virtual
// pod a host pod runs: its IPs are their endpoints' addresses.
func (r *run) enqueueHostPod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k, ok := r.tr.VirtualKeyOf(p)
	if !ok || k.Kind != translate.KindPod {
		return
	}
	slices, _ := r.vByPod.ByIndex(podIndex, k.Namespace+"/"+k.Name)
	for _, o := range slices {
		r.enqueueVirtualSlice(o)
	}
}

func indexPods(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, e := range s.Endpoints {
		if ref := e.TargetRef; ref != nil && ref.Kind == "Pod" {
			ns := ref.Namespace
			if ns == "" {
				ns = s.Namespace
			}
			out = append(out, ns+"/"+ref.Name)
		}
	}
	return out, nil
}

// next reconciles one key; false once the queue is shut down.
func (r *run) next(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	requeue, err := r.reconcile(ctx, key)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			logr.FromContextOrDiscard(ctx).Info("service sync failed; retrying", "service", key, "error", err.Error())
		}
		r.queue.AddRateLimited(key)
	case requeue:
		r.queue.AddRateLimited(key)
	default:
		r.queue.Forget(key)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	if _, gone := r.vServices.Services(ns).Get(name); gone != nil {
		delete(r.passes, key)
	} else if err == nil {
		r.passes[key]++
	}
	return true
}
