package servicesync

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/k3k-io/k3k/pkg/agent/nodeport"
	"github.com/k3k-io/k3k/pkg/agent/syncloop"
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
	// NodePorts, when set, serves the node ports of NodePort and
	// LoadBalancer Services at the agent's address, relayed to their host
	// copies (package nodeport).
	NodePorts *nodeport.Relay
}

// Syncer keeps host copies of the virtual Services.
type Syncer struct {
	cfg      Config
	tr       *translate.Translator
	progress syncloop.Progress // keys are virtual Service keys
	dns      dnsSource
	said     syncloop.Said // Service key → the last host refusal said with an Event
	unrouted syncloop.Said // Service key → the ClusterIP said not to route
	unserved syncloop.Said // Service key → the node ports said not to be served
	inside   syncloop.Said // Service key → the type said not to be exposed on the host
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
	return &Syncer{cfg: cfg, tr: cfg.Translator, dns: dnsSource{tr: cfg.Translator}}, nil
}

// Synced reports whether the current Run's caches have synced.
func (s *Syncer) Synced() bool { return s.progress.Synced() }

// Reconciled counts the completed, error-free passes over one virtual
// Service (key "namespace/name") while it exists.
func (s *Syncer) Reconciled(key string) uint64 { return s.progress.Reconciled(key) }

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
	hPodsByIP cache.Indexer
	loop      *syncloop.Loop
}

// podIndex indexes virtual EndpointSlices by the virtual pods
// ("namespace/name") their endpoints name, and by the address ("ip/<ip>") of
// each endpoint that names none.
const podIndex = "pods"

// ipIndex indexes host pods by their IPs.
const ipIndex = "ips"

// Run syncs until ctx ends, with virtual as the virtual cluster's client. It
// returns nil when ctx ends.
func (s *Syncer) Run(ctx context.Context, virtual kubernetes.Interface) error {
	hostFactory := syncloop.HostFactory(s.cfg.Host, s.cfg.Resync, s.tr.Config().HostNamespace, s.tr.HostSelector())
	virtualFactory := informers.NewSharedInformerFactory(virtual, s.cfg.Resync)

	r := &run{Syncer: s, virtual: virtual}
	vServices := virtualFactory.Core().V1().Services()
	r.loop = syncloop.New(syncloop.Config{
		Name:      "k3k-agent-services",
		Noun:      "service",
		Workers:   s.cfg.Workers,
		Progress:  &s.progress,
		Reconcile: r.reconcile,
		Exists:    syncloop.InCache(vServices.Informer().GetIndexer()),
		// Once the caches are complete they answer DNS.
		Background: []func(context.Context){func(context.Context) { r.publishDNS() }},
	})
	defer r.loop.ShutDown()

	vSlices := virtualFactory.Discovery().V1().EndpointSlices()
	if err := vSlices.Informer().AddIndexers(cache.Indexers{podIndex: indexPods}); err != nil {
		return fmt.Errorf("indexing virtual EndpointSlices: %w", err)
	}
	r.vByPod = vSlices.Informer().GetIndexer()
	r.vSlices = vSlices.Lister()
	r.vServices = vServices.Lister()
	r.hServices = hostFactory.Core().V1().Services().Lister()
	r.hSlices = hostFactory.Discovery().V1().EndpointSlices().Lister()
	r.hPods = hostFactory.Core().V1().Pods().Lister()
	if err := hostFactory.Core().V1().Pods().Informer().AddIndexers(cache.Indexers{ipIndex: indexIPs}); err != nil {
		return fmt.Errorf("indexing host pods: %w", err)
	}
	r.hPodsByIP = hostFactory.Core().V1().Pods().Informer().GetIndexer()
	if err := syncloop.AddWatches(
		syncloop.Watch{Informer: vServices.Informer(), Enqueue: r.loop.AddObject},
		syncloop.Watch{Informer: vSlices.Informer(), Enqueue: r.enqueueVirtualSlice},
		syncloop.Watch{Informer: hostFactory.Core().V1().Services().Informer(), Enqueue: r.enqueueHost},
		syncloop.Watch{Informer: hostFactory.Discovery().V1().EndpointSlices().Informer(), Enqueue: r.enqueueHost},
		syncloop.Watch{Informer: hostFactory.Core().V1().Pods().Informer(), Enqueue: r.enqueueHostPod},
	); err != nil {
		return err
	}
	return r.loop.Run(ctx, hostFactory, virtualFactory)
}

func (r *run) enqueueVirtualSlice(obj any) {
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok && s.Labels[discoveryv1.LabelServiceName] != "" {
		r.loop.Add(s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName])
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
		r.loop.Add(k.Namespace + "/" + k.Name)
	case k.Kind == translate.KindEndpointSlice && m.GetAnnotations()[translate.AnnotationService] != "":
		r.loop.Add(k.Namespace + "/" + m.GetAnnotations()[translate.AnnotationService])
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
	for _, ip := range p.Status.PodIPs {
		more, _ := r.vByPod.ByIndex(podIndex, "ip/"+ip.IP)
		slices = append(slices, more...)
	}
	for _, o := range slices {
		r.enqueueVirtualSlice(o)
	}
}

func indexIPs(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	return out, nil
}

func indexPods(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, e := range s.Endpoints {
		switch ref := e.TargetRef; {
		case ref != nil && ref.Kind == "Pod":
			ns := ref.Namespace
			if ns == "" {
				ns = s.Namespace
			}
			out = append(out, ns+"/"+ref.Name)
		case ref == nil && len(e.Addresses) > 0:
			out = append(out, "ip/"+e.Addresses[0])
		}
	}
	return out, nil
}
