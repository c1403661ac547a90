package volumesync

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/k3k-io/k3k/pkg/agent/syncloop"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// Config is what the Syncer needs besides the virtual credentials.
type Config struct {
	// Translator builds host claims and virtual volumes; its config names
	// the host namespace and the allowed storage classes.
	Translator *translate.Translator
	// Host is a client for the host cluster, allowed what the agent's Role
	// allows in the host namespace.
	Host kubernetes.Interface
	// Resync is how often every claim is reconciled without an event.
	// Default 30s.
	Resync time.Duration
	// Workers is how many claims are reconciled at once. Default 2.
	Workers int
	// Now is the clock of Events. Default time.Now.
	Now func() time.Time
}

// Syncer keeps host copies of the virtual claims.
type Syncer struct {
	cfg      Config
	tr       *translate.Translator
	progress syncloop.Progress // keys are virtual claim keys

	said syncloop.Said // claim key → the last refusal said with an Event
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Syncer, error) {
	if cfg.Translator == nil || cfg.Host == nil {
		return nil, errors.New("volumesync: translator and host client are required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Syncer{cfg: cfg, tr: cfg.Translator}, nil
}

// Synced reports whether the current Run's caches have synced.
func (s *Syncer) Synced() bool { return s.progress.Synced() }

// Reconciled counts the completed, error-free passes over one virtual claim
// (key "namespace/name") while it exists.
func (s *Syncer) Reconciled(key string) uint64 { return s.progress.Reconciled(key) }

// run is one Run's clients, caches and queue.
type run struct {
	*Syncer
	virtual  kubernetes.Interface
	vClaims  corelisters.PersistentVolumeClaimLister
	vVolumes cache.Indexer
	hClaims  corelisters.PersistentVolumeClaimLister
	loop     *syncloop.Loop
}

// claimIndex indexes the agent's virtual volumes by the claim
// ("namespace/name") they are bound to.
const claimIndex = "claim"

// Run syncs until ctx ends, with virtual as the virtual cluster's client. It
// returns nil when ctx ends.
func (s *Syncer) Run(ctx context.Context, virtual kubernetes.Interface) error {
	hostFactory := syncloop.HostFactory(s.cfg.Host, s.cfg.Resync, s.tr.Config().HostNamespace, s.tr.HostSelector())
	virtualFactory := informers.NewSharedInformerFactory(virtual, s.cfg.Resync)
	// Only the volumes the agent made: a tenant's own volumes are not the
	// agent's business (a claim bound to one is refused).
	volumeFactory := informers.NewSharedInformerFactoryWithOptions(virtual, s.cfg.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = translate.LabelManagedBy + "=" + translate.ManagedByValue
		}))

	r := &run{Syncer: s, virtual: virtual}
	vClaims := virtualFactory.Core().V1().PersistentVolumeClaims()
	r.loop = syncloop.New(syncloop.Config{
		Name:      "k3k-agent-volumes",
		Noun:      "claim",
		Workers:   s.cfg.Workers,
		Progress:  &s.progress,
		Reconcile: r.reconcile,
		Exists:    syncloop.InCache(vClaims.Informer().GetIndexer()),
	})
	defer r.loop.ShutDown()

	vVolumes := volumeFactory.Core().V1().PersistentVolumes().Informer()
	if err := vVolumes.AddIndexers(cache.Indexers{claimIndex: indexClaim}); err != nil {
		return fmt.Errorf("indexing virtual volumes: %w", err)
	}
	r.vVolumes = vVolumes.GetIndexer()
	r.vClaims = vClaims.Lister()
	r.hClaims = hostFactory.Core().V1().PersistentVolumeClaims().Lister()
	if err := syncloop.AddWatches(
		syncloop.Watch{Informer: vClaims.Informer(), Enqueue: r.loop.AddObject},
		syncloop.Watch{Informer: vVolumes, Enqueue: r.enqueueVirtualVolume},
		syncloop.Watch{Informer: hostFactory.Core().V1().PersistentVolumeClaims().Informer(), Enqueue: r.enqueueHost},
	); err != nil {
		return err
	}
	return r.loop.Run(ctx, hostFactory, virtualFactory, volumeFactory)
}

func (r *run) enqueueVirtualVolume(obj any) {
	if keys, _ := indexClaim(obj); len(keys) == 1 {
		r.loop.Add(keys[0])
	}
}

// enqueueHost enqueues the virtual claim a host claim stands for.
func (r *run) enqueueHost(obj any) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	if k, ok := r.tr.VirtualKeyOf(m); ok && k.Kind == translate.KindClaim {
		r.loop.Add(k.Namespace + "/" + k.Name)
	}
}

func indexClaim(obj any) ([]string, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil {
		return nil, nil
	}
	return []string{pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name}, nil
}
