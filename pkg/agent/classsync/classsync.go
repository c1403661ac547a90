package classsync

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/go-logr/logr"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/syncloop"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// Config is what the Syncer needs besides the virtual credentials.
type Config struct {
	// Translator names the classes to show.
	Translator *translate.Translator
	// Resync is how often every class is reconciled without an event.
	// Default 30s.
	Resync time.Duration
}

// Syncer keeps the virtual cluster's copies of the host's storage classes.
type Syncer struct {
	cfg      Config
	want     map[string]*storagev1.StorageClass
	progress syncloop.Progress // keys are class names
	said     syncloop.Said     // class name → "left alone" said in the log
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Syncer, error) {
	if cfg.Translator == nil {
		return nil, errors.New("classsync: translator is required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	want := map[string]*storagev1.StorageClass{}
	for _, c := range cfg.Translator.VirtualStorageClasses() {
		want[c.Name] = c
	}
	return &Syncer{cfg: cfg, want: want}, nil
}

// Synced reports whether the current Run's cache has synced.
func (s *Syncer) Synced() bool { return s.progress.Synced() }

// Reconciled counts the completed, error-free passes over one class name
// while the class exists.
func (s *Syncer) Reconciled(name string) uint64 { return s.progress.Reconciled(name) }

type run struct {
	*Syncer
	virtual kubernetes.Interface
	classes storagelisters.StorageClassLister
}

// Run syncs until ctx ends, with virtual as the virtual cluster's client. It
// returns nil when ctx ends.
func (s *Syncer) Run(ctx context.Context, virtual kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactory(virtual, s.cfg.Resync)
	classes := factory.Storage().V1().StorageClasses()
	r := &run{Syncer: s, virtual: virtual, classes: classes.Lister()}
	loop := syncloop.New(syncloop.Config{
		Name:      "k3k-agent-storageclasses",
		Noun:      "storageclass",
		Workers:   1,
		Progress:  &s.progress,
		Reconcile: r.reconcile,
		Exists:    syncloop.InCache(classes.Informer().GetIndexer()),
	})
	defer loop.ShutDown()
	if err := syncloop.AddWatches(syncloop.Watch{Informer: classes.Informer(), Enqueue: loop.AddObject}); err != nil {
		return err
	}
	for name := range s.want {
		loop.Add(name)
	}
	return loop.Run(ctx, factory)
}

func (r *run) reconcile(ctx context.Context, name string) (requeue bool, err error) {
	cur, err := syncloop.Found(r.classes.Get(name))
	if err != nil {
		return false, err
	}
	want := r.want[name]
	api := r.virtual.StorageV1().StorageClasses()
	switch {
	case cur == nil && want == nil:
		return false, nil
	case cur == nil:
		_, err := api.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return true, nil // the cache is behind
		}
		return false, err
	case !translate.IsVirtualStorageClass(cur):
		if want != nil && r.said.First(name, cur.UID, "") {
			logr.FromContextOrDiscard(ctx).Info("a StorageClass of the name was made in the virtual cluster; leaving it as it is", "storageClass", name)
		}
		return false, nil
	case want == nil || !maps.Equal(cur.Parameters, want.Parameters) ||
		ptr.Deref(cur.ReclaimPolicy, "") != ptr.Deref(want.ReclaimPolicy, "") ||
		ptr.Deref(cur.VolumeBindingMode, "") != ptr.Deref(want.VolumeBindingMode, ""):
		// No longer wanted, or differing where a class is immutable (the
		// provisioner is the same, IsVirtualStorageClass says): deleted. A
		// wanted one is made again: the delete's event brings the key back.
		err := api.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			err = nil
		}
		return false, err
	case ptr.Deref(cur.AllowVolumeExpansion, false) != ptr.Deref(want.AllowVolumeExpansion, false) ||
		!maps.Equal(cur.Annotations, want.Annotations) || !maps.Equal(cur.Labels, want.Labels):
		upd := cur.DeepCopy()
		upd.AllowVolumeExpansion, upd.Annotations, upd.Labels = want.AllowVolumeExpansion, want.Annotations, want.Labels
		_, err := api.Update(ctx, upd, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return true, nil
		}
		return false, err
	}
	return false, nil
}
