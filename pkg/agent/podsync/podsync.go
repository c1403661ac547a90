package podsync

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/k3k-io/k3k/pkg/agent/syncloop"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// Config is what the Syncer needs besides the virtual credentials.
type Config struct {
	// Translator builds host objects; its config names the host namespace and
	// the virtual node.
	Translator *translate.Translator
	// Host is a client for the host cluster, allowed what the agent's Role
	// allows in the host namespace.
	Host kubernetes.Interface
	// Resync is how often every pod is reconciled without an event (status
	// drift, token refresh). Default 30s.
	Resync time.Duration
	// RewriteInterval is how long a written host copy is trusted before it is
	// written again. Default five minutes.
	RewriteInterval time.Duration
	// Workers is how many pods are reconciled at once. Default 2.
	Workers int
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Capacity is the virtual node's allocatable (cpu, memory, pods, …): a pod
	// is admitted only when it fits next to the pods already admitted
	// (package nodeadmit), so a spec.nodeName set by the tenant, which skips
	// the virtual scheduler, cannot ask the host for more. Nil bounds nothing.
	Capacity corev1.ResourceList
	// ServiceLinks lists the Services whose variables a pod of namespace gets
	// (servicesync.Syncer.ServiceLinks); complete is false while one of them
	// has no host address yet. Nil gives pods no service variables.
	ServiceLinks func(namespace string) (links []translate.ServiceLink, complete bool)
}

// serviceLinksWait is how long a new pod waits for every Service of its
// namespace to have a host address before it starts without the variables
// of those that have none (a Service the host refused never gets one).
const serviceLinksWait = 10 * time.Second

// Syncer runs the virtual node's pods on the host.
type Syncer struct {
	cfg      Config
	tr       *translate.Translator
	progress syncloop.Progress // keys are virtual pod keys

	mu      sync.Mutex
	written map[string]written // "kind/name" → what was last written
	tokens  map[string]token   // "identity secret/key" → issued token

	// admitMu makes admission and the record of it one step, so two workers
	// cannot both fill the last place on the node.
	admitMu  sync.Mutex
	admitted map[string]types.UID // virtual pod key → UID admitted, until its host pod is in the cache

	// imageRefusals holds, by pod key, the version of the virtual pod's spec
	// (UID and generation) whose refused image update was last reported, so
	// that a refusal is said once, not on every reconcile; the entry goes
	// when the pod's images are acceptable again.
	imageRefusals sync.Map
	// copyRefusals holds, by pod key, the last refused copy (ConfigMap,
	// Secret) said on the pod, so that a refusal is said once, not on every
	// retry; the entry goes when the pod's copies are written or the pod is
	// gone.
	copyRefusals syncloop.Said
}

type written struct {
	hash string
	at   time.Time
	// secretType is a Secret copy's type, which an update cannot change.
	secretType corev1.SecretType
}

type token struct {
	value     []byte
	podUID    types.UID
	refreshAt time.Time
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Syncer, error) {
	if cfg.Translator == nil || cfg.Host == nil {
		return nil, errors.New("podsync: translator and host client are required")
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
	return &Syncer{cfg: cfg, tr: cfg.Translator, written: map[string]written{}, tokens: map[string]token{}, admitted: map[string]types.UID{}}, nil
}

// Synced reports whether the current Run's caches have synced: the agent is
// in touch with both API servers.
func (s *Syncer) Synced() bool { return s.progress.Synced() }

// run is one Run's clients, caches and queue.
type run struct {
	*Syncer
	virtual  kubernetes.Interface
	vPods    corelisters.PodLister
	vCMs     corelisters.ConfigMapLister
	vSecrets corelisters.SecretLister
	vClaims  corelisters.PersistentVolumeClaimLister
	hPods    corelisters.PodLister
	hIndex   cache.Indexer
	loop     *syncloop.Loop
}

// refsIndex indexes host pods by the host ConfigMaps ("configmap/NAME") and
// Secrets ("secret/NAME") they use, to find a copy's owners.
const refsIndex = "refs"

// Run syncs until ctx ends, with virtual as the virtual cluster's client. It
// returns nil when ctx ends.
func (s *Syncer) Run(ctx context.Context, virtual kubernetes.Interface) error {
	tc := s.tr.Config()
	hostFactory := syncloop.HostFactory(s.cfg.Host, s.cfg.Resync, tc.HostNamespace, s.tr.HostSelector())
	podFactory := informers.NewSharedInformerFactoryWithOptions(virtual, s.cfg.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", tc.NodeName).String()
		}))
	// ConfigMaps and Secrets change rarely; they are resynced with the pods
	// that use them, not on their own.
	objFactory := informers.NewSharedInformerFactory(virtual, 0)

	r := &run{Syncer: s, virtual: virtual}
	vPods := podFactory.Core().V1().Pods()
	r.loop = syncloop.New(syncloop.Config{
		Name:       "k3k-agent-pods",
		Noun:       "pod",
		Workers:    s.cfg.Workers,
		Progress:   &s.progress,
		Reconcile:  r.reconcile,
		Exists:     syncloop.InCache(vPods.Informer().GetIndexer()),
		Background: []func(context.Context){s.pruneEvery},
	})
	defer r.loop.ShutDown()

	hostPods := hostFactory.Core().V1().Pods().Informer()
	if err := hostPods.AddIndexers(cache.Indexers{refsIndex: indexRefs}); err != nil {
		return fmt.Errorf("indexing host pods: %w", err)
	}
	r.hIndex = hostPods.GetIndexer()
	r.hPods = hostFactory.Core().V1().Pods().Lister()
	r.vPods = vPods.Lister()
	r.vCMs = objFactory.Core().V1().ConfigMaps().Lister()
	r.vSecrets = objFactory.Core().V1().Secrets().Lister()
	r.vClaims = objFactory.Core().V1().PersistentVolumeClaims().Lister()
	if err := syncloop.AddWatches(
		syncloop.Watch{Informer: vPods.Informer(), Enqueue: r.loop.AddObject},
		syncloop.Watch{Informer: hostPods, Enqueue: r.enqueueHost},
		syncloop.Watch{Informer: objFactory.Core().V1().ConfigMaps().Informer(), Enqueue: r.enqueueUsers(false)},
		syncloop.Watch{Informer: objFactory.Core().V1().Secrets().Informer(), Enqueue: r.enqueueUsers(true)},
	); err != nil {
		return err
	}
	return r.loop.Run(ctx, hostFactory, podFactory, objFactory)
}

// Reconciled counts the completed, error-free passes over one virtual pod
// (key "namespace/name"). It is forgotten when the pod is gone.
func (s *Syncer) Reconciled(key string) uint64 { return s.progress.Reconciled(key) }

// pruneEvery prunes every RewriteInterval until ctx ends.
func (s *Syncer) pruneEvery(ctx context.Context) {
	tick := time.NewTicker(s.cfg.RewriteInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.prune()
		}
	}
}

// prune drops what is no longer worth remembering: copies written longer ago
// than RewriteInterval (they are written again on their next pass anyway) and
// tokens due for refresh, so memory follows the pods that exist.
func (s *Syncer) prune() {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, w := range s.written {
		if now.Sub(w.at) >= s.cfg.RewriteInterval {
			delete(s.written, k)
		}
	}
	for k, t := range s.tokens {
		if !now.Before(t.refreshAt) {
			delete(s.tokens, k)
		}
	}
}

func (r *run) enqueueHost(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if k, ok := r.tr.VirtualKeyOf(p); ok && k.Kind == translate.KindPod {
		r.loop.Add(k.Namespace + "/" + k.Name)
	}
}

// enqueueUsers enqueues the pods on this node that use a changed ConfigMap or
// Secret, so their host copies follow it.
func (r *run) enqueueUsers(secret bool) func(obj any) {
	return func(obj any) {
		m, ok := obj.(metav1.Object)
		if !ok {
			return
		}
		pods, err := r.vPods.Pods(m.GetNamespace()).List(labels.Everything())
		if err != nil {
			return
		}
		for _, p := range pods {
			refs := translate.PodRefs(&p.Spec)
			names := refs.ConfigMaps
			if secret {
				names = refs.Secrets
			}
			if i := sort.SearchStrings(names, m.GetName()); i < len(names) && names[i] == m.GetName() {
				r.loop.Add(p.Namespace + "/" + p.Name)
			}
		}
	}
}

func indexRefs(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	refs := translate.PodRefs(&p.Spec)
	var out []string
	for _, n := range refs.ConfigMaps {
		out = append(out, "configmap/"+n)
	}
	for _, n := range refs.Secrets {
		out = append(out, "secret/"+n)
	}
	return out, nil
}
