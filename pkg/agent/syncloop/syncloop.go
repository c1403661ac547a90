// Package syncloop runs the shared-mode agent's level-based sync loops: a
// rate-limited queue of "namespace/name" keys, worked by a fixed number of
// workers only once every informer cache has synced, with a count of the
// error-free passes over each key.
//
// It exists because podsync, servicesync, volumesync and ingresssync need
// the same loop and the same rules: no worker acts on an incomplete cache (it
// would look like deleted objects), a failed or unfinished key comes back
// rate-limited, a key that settled is forgotten by the rate limiter, and Run
// returns nil when its context ends. Kept in one place, the loops cannot
// drift apart; so are the pieces each syncer's Run wires alike (HostFactory,
// AddWatches, Loop.AddObject, InCache, Found). What a key means, and what
// reconciling it does, stays with each syncer.
package syncloop

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Progress is what a syncer remembers across its Runs: whether the current
// Run's caches have synced, and how many error-free passes each key has had.
// The zero value is ready to use.
type Progress struct {
	mu     sync.Mutex
	synced bool
	passes map[string]uint64
}

// Synced reports whether the current Run's caches have synced.
func (p *Progress) Synced() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.synced
}

// Reconciled counts the completed, error-free passes over one key while its
// object exists.
func (p *Progress) Reconciled(key string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.passes[key]
}

// Forget drops the count of a key whose object is gone.
func (p *Progress) Forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.passes, key)
}

func (p *Progress) setSynced(v bool) {
	p.mu.Lock()
	p.synced = v
	p.mu.Unlock()
}

// record counts a pass over key: an error-free pass over an existing object
// is counted; the count of an object that is gone is dropped.
func (p *Progress) record(key string, exists bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !exists:
		delete(p.passes, key)
	case err == nil:
		if p.passes == nil {
			p.passes = map[string]uint64{}
		}
		p.passes[key]++
	}
}

// Config describes one loop.
type Config struct {
	// Name names the work queue ("k3k-agent-pods").
	Name string
	// Noun is what a key stands for in log lines ("pod", "service").
	Noun string
	// Workers is how many keys are reconciled at once; at least one.
	Workers int
	// Progress records the loop's state; it outlives the Loop.
	Progress *Progress
	// Reconcile brings one key in step. requeue asks for another pass soon
	// without an error; both come back through the rate limiter.
	Reconcile func(ctx context.Context, key string) (requeue bool, err error)
	// Exists reports whether the key's object is in the cache, so that
	// counts of objects that are gone are not kept.
	Exists func(key string) bool
	// Background tasks run beside the workers once the caches have synced,
	// until ctx ends.
	Background []func(ctx context.Context)
}

// Loop is one Run's work queue.
type Loop struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[string]
}

// New makes a loop's queue. The caller adds keys with Add from its event
// handlers, calls Run once and ShutDown when done (also when it never gets
// to Run).
func New(cfg Config) *Loop {
	return &Loop{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: cfg.Name}),
	}
}

// Add queues a key for reconciling.
func (l *Loop) Add(key string) { l.queue.Add(key) }

// ShutDown stops the queue; workers drain and exit.
func (l *Loop) ShutDown() { l.queue.ShutDown() }

// Run starts the factories, waits for every cache to sync, then works the
// queue until ctx ends. It returns nil when ctx ends, and an error when a
// cache fails to sync for another reason.
func (l *Loop) Run(ctx context.Context, factories ...informers.SharedInformerFactory) error {
	for _, f := range factories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	// No worker acts before every cache is complete: an incomplete virtual
	// cache would look like deleted objects.
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("cache of %v did not sync", typ)
			}
		}
	}
	l.cfg.Progress.setSynced(true)
	defer l.cfg.Progress.setSynced(false)
	logr.FromContextOrDiscard(ctx).Info(l.cfg.Noun + " sync started")

	var wg sync.WaitGroup
	for _, task := range l.cfg.Background {
		wg.Go(func() { task(ctx) })
	}
	for range l.cfg.Workers {
		wg.Go(func() {
			for l.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	l.queue.ShutDown()
	wg.Wait()
	return nil
}

// next reconciles one key; false once the queue is shut down.
func (l *Loop) next(ctx context.Context) bool {
	key, quit := l.queue.Get()
	if quit {
		return false
	}
	defer l.queue.Done(key)
	requeue, err := l.cfg.Reconcile(ctx, key)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			logr.FromContextOrDiscard(ctx).Info(l.cfg.Noun+" sync failed; retrying", l.cfg.Noun, key, "error", err.Error())
		}
		l.queue.AddRateLimited(key)
	case requeue:
		l.queue.AddRateLimited(key)
	default:
		l.queue.Forget(key)
	}
	l.cfg.Progress.record(key, l.cfg.Exists(key), err)
	return true
}

// Handler turns an enqueue function into an event handler that calls it for
// every added, updated and deleted object, unwrapping deletions whose final
// state is unknown.
func Handler(enqueue func(obj any)) cache.ResourceEventHandler {
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

// HostFactory is the informer factory of the host objects a syncer follows:
// those in namespace that match selector (the agent's label selector), so the
// caches hold the agent's copies and nothing else of the namespace.
func HostFactory(host kubernetes.Interface, resync time.Duration, namespace, selector string) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(host, resync,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
}

// Watch is one informer and the enqueue function its events call.
type Watch struct {
	Informer cache.SharedIndexInformer
	Enqueue  func(obj any)
}

// AddWatches registers each Watch's Enqueue as an event handler (Handler)
// of its Informer. Call it before Run starts the factories.
func AddWatches(watches ...Watch) error {
	for _, w := range watches {
		if _, err := w.Informer.AddEventHandler(Handler(w.Enqueue)); err != nil {
			return fmt.Errorf("watching: %w", err)
		}
	}
	return nil
}

// AddObject queues the "namespace/name" key of obj, an object of the kind
// the loop's keys stand for; anything else is ignored. The key is the one an
// informer's store files obj under (cache.MetaNamespaceKeyFunc), so InCache
// finds it.
func (l *Loop) AddObject(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		l.Add(key)
	}
}

// InCache is a Config.Exists for keys of the objects in store (an informer's
// indexer): whether store holds key.
func InCache(store cache.Store) func(key string) bool {
	return func(key string) bool {
		_, ok, err := store.GetByKey(key)
		return ok && err == nil
	}
}

// Found is a lister's Get with NotFound as no object and no error: the
// shape of every reconcile's first look at the virtual object and its host
// copy, either of which may be gone.
func Found[T any](obj T, err error) (T, error) {
	var none T
	switch {
	case apierrors.IsNotFound(err):
		return none, nil
	case err != nil:
		return none, err
	}
	return obj, nil
}
