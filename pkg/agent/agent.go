// Package agent is the shared-mode agent of a virtual cluster: a virtual
// kubelet that registers one node in the virtual cluster (package node), runs
// the pods bound to it as pods of the host namespace (package podsync),
// translating them with package translate, and answers `kubectl logs`, `exec`,
// `attach` and `port-forward` for them (package kubeletapi). Package servicesync copies the virtual cluster's
// Services and EndpointSlices next to those pods, so they are reachable
// through host Services; package volumesync gives their PersistentVolumeClaims
// host claims and virtual PersistentVolumes, and package ingresssync, when
// the Cluster asks for it, their Ingresses host Ingresses; package eventsync
// shows the host's Events about the host pods on the virtual pods, and
// package classsync the storage classes claims may name as StorageClasses.
//
// It is built from plain client-go informers and work queues rather than
// github.com/virtual-kubelet/virtual-kubelet. That library fits our Kubernetes
// version (v1.14.1 requires k8s.io/* v0.37.1), but what it provides is the part
// that is easy here (a pod informer calling CreatePod/UpdatePod/DeletePod, a
// node and lease loop) while the hard parts are ours either way: name
// translation, ConfigMap/Secret/token copies, ownership checks, status mapping.
// Its controllers are built around one client fixed at construction, so
// following rotated credentials would mean tearing down and rebuilding its
// whole node and pod controllers anyway, which is all Agent does; and it would
// add k8s.io/apiserver, k8s.io/kubelet and k8s.io/component-base to the module
// and bump every k8s.io module. The kubelet API subset the agent serves
// (package kubeletapi) is small enough to write directly: logs are copied
// from the host API, and streams are forwarded to it without being parsed.
//
// Credentials: the host client is fixed (the pod's ServiceAccount). The
// virtual cluster's credentials come from the mounted kubeconfig Secret through
// pkg/agentbootstrap; SetCredentials (wired to its OnChange) stops the node
// and pod loops and starts them again with new clients. Host pods are never
// touched by a restart: the loops only act after their caches are complete.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/pkg/agent/classsync"
	"github.com/k3k-io/k3k/pkg/agent/dnsserver"
	"github.com/k3k-io/k3k/pkg/agent/eventsync"
	"github.com/k3k-io/k3k/pkg/agent/ingresssync"
	"github.com/k3k-io/k3k/pkg/agent/kubeletapi"
	"github.com/k3k-io/k3k/pkg/agent/node"
	"github.com/k3k-io/k3k/pkg/agent/nodeport"
	"github.com/k3k-io/k3k/pkg/agent/podsync"
	"github.com/k3k-io/k3k/pkg/agent/servicesync"
	"github.com/k3k-io/k3k/pkg/agent/translate"
	"github.com/k3k-io/k3k/pkg/agent/volumesync"
)

// Config is everything the agent needs besides the virtual credentials.
type Config struct {
	// Translate names the cluster, host namespace and node, and the host
	// placement of pods.
	Translate translate.Config
	// Node describes the virtual node; its Name defaults to Translate.NodeName.
	Node node.Config
	// Host is the host cluster client.
	Host kubernetes.Interface
	// HostConfig is the configuration Host was made from; with it the
	// kubelet API forwards exec, attach and port-forward to the host pods.
	// Nil answers those 501.
	HostConfig *rest.Config
	// Resync is how often every pod and Service is reconciled without an
	// event. Default 30s.
	Resync time.Duration
	// HostDomain is the host cluster's DNS domain. The agent's DNS server
	// never forwards its names and never passes on a forwarded reply that
	// names anything in it (package dnsserver). Default cluster.local.
	HostDomain string
	// SyncIngresses copies the virtual cluster's Ingresses to the host
	// (package ingresssync), with the classes Translate.IngressClasses maps.
	SyncIngresses bool
	// StorageClassCopies shows the storage classes claims may name as
	// StorageClasses in the virtual cluster (package classsync).
	StorageClassCopies bool
	// NodePorts, when set, serves the node ports of the virtual cluster's
	// NodePort and LoadBalancer Services at the agent's own address (the
	// node's InternalIP), relayed to their host copies (package nodeport).
	NodePorts *nodeport.Relay
	// UserAgent is set on virtual clients. Default "k3k-kubelet".
	UserAgent string
	// WrapVirtualTransport, when set, wraps the transport of every virtual
	// client (instrumentation; the tests count writes with it).
	WrapVirtualTransport func(http.RoundTripper) http.RoundTripper
}

// Agent runs one virtual node.
type Agent struct {
	cfg   Config
	tr    *translate.Translator
	node  *node.Node
	pods  *podsync.Syncer
	svcs  *servicesync.Syncer
	vols  *volumesync.Syncer
	ings  *ingresssync.Syncer // nil unless Config.SyncIngresses
	evs   *eventsync.Syncer
	cls   *classsync.Syncer // nil unless Config.StorageClassCopies
	creds chan *rest.Config

	mu      sync.Mutex
	virtual kubernetes.Interface // the client of the current credentials
}

// New checks cfg and builds the parts.
func New(cfg Config) (*Agent, error) {
	if cfg.Host == nil {
		return nil, errors.New("agent: host client is required")
	}
	if cfg.Node.Name == "" {
		cfg.Node.Name = cfg.Translate.NodeName
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "k3k-kubelet"
	}
	if cfg.HostDomain != "" {
		// Checked here so that a bad flag stops the agent rather than only
		// its DNS server.
		if err := dnsserver.CheckDomain(cfg.HostDomain); err != nil {
			return nil, fmt.Errorf("agent: host domain: %w", err)
		}
	}
	tr, err := translate.New(cfg.Translate)
	if err != nil {
		return nil, err
	}
	n, err := node.New(cfg.Node)
	if err != nil {
		return nil, err
	}
	svcs, err := servicesync.New(servicesync.Config{Translator: tr, Host: cfg.Host, Resync: cfg.Resync, NodePorts: cfg.NodePorts})
	if err != nil {
		return nil, err
	}
	// Pods get their namespace's Service variables from the Services the
	// agent copies, at the host copies' addresses.
	pods, err := podsync.New(podsync.Config{Translator: tr, Host: cfg.Host, Resync: cfg.Resync, Capacity: n.Capacity(), ServiceLinks: svcs.ServiceLinks})
	if err != nil {
		return nil, err
	}
	vols, err := volumesync.New(volumesync.Config{Translator: tr, Host: cfg.Host, Resync: cfg.Resync})
	if err != nil {
		return nil, err
	}
	evs, err := eventsync.New(eventsync.Config{Translator: tr, Host: cfg.Host, Resync: cfg.Resync})
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, tr: tr, node: n, pods: pods, svcs: svcs, vols: vols, evs: evs, creds: make(chan *rest.Config, 1)}
	if cfg.StorageClassCopies {
		if a.cls, err = classsync.New(classsync.Config{Translator: tr, Resync: cfg.Resync}); err != nil {
			return nil, err
		}
	}
	if cfg.SyncIngresses {
		if a.ings, err = ingresssync.New(ingresssync.Config{Translator: tr, Host: cfg.Host, Resync: cfg.Resync}); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// SetCredentials hands the agent new virtual credentials; Run switches to them.
// It never blocks: credentials not yet picked up are replaced.
func (a *Agent) SetCredentials(cfg *rest.Config) {
	for {
		select {
		case a.creds <- cfg:
			return
		default:
		}
		select {
		case <-a.creds:
		default:
		}
	}
}

// Ready reports whether the node's Lease is current and the pod, Service and
// claim caches of both clusters are complete.
func (a *Agent) Ready() error {
	if err := a.node.Healthy(); err != nil {
		return err
	}
	if !a.pods.Synced() {
		return errors.New("pod caches have not synced")
	}
	if !a.svcs.Synced() {
		return errors.New("service caches have not synced")
	}
	if !a.vols.Synced() {
		return errors.New("volume claim caches have not synced")
	}
	if a.ings != nil && !a.ings.Synced() {
		return errors.New("ingress caches have not synced")
	}
	return nil
}

// Reconciled counts the completed passes over one virtual pod (key
// "namespace/name") since it was first seen.
func (a *Agent) Reconciled(key string) uint64 { return a.pods.Reconciled(key) }

// ServiceReconciled counts the completed passes over one virtual Service (key
// "namespace/name") while it exists.
func (a *Agent) ServiceReconciled(key string) uint64 { return a.svcs.Reconciled(key) }

// ClaimReconciled counts the completed passes over one virtual
// PersistentVolumeClaim (key "namespace/name") while it exists.
func (a *Agent) ClaimReconciled(key string) uint64 { return a.vols.Reconciled(key) }

// HostEventReconciled counts the completed passes over one host Event (key
// "namespace/name" in the host namespace) while it exists.
func (a *Agent) HostEventReconciled(key string) uint64 { return a.evs.Reconciled(key) }

// StorageClassReconciled counts the completed passes over one virtual
// StorageClass name while the class exists; always 0 without
// StorageClassCopies.
func (a *Agent) StorageClassReconciled(name string) uint64 {
	if a.cls == nil {
		return 0
	}
	return a.cls.Reconciled(name)
}

// IngressReconciled counts the completed passes over one virtual Ingress
// (key "namespace/name") while it exists; always 0 without SyncIngresses.
func (a *Agent) IngressReconciled(key string) uint64 {
	if a.ings == nil {
		return 0
	}
	return a.ings.Reconciled(key)
}

// Run runs the node, pod, Service and volume claim loops with initial credentials until ctx ends,
// restarting them whenever SetCredentials brings new ones.
func (a *Agent) Run(ctx context.Context, initial *rest.Config) error {
	log := logr.FromContextOrDiscard(ctx)
	cur := initial
	for {
		rc := rest.CopyConfig(cur)
		rc.UserAgent = a.cfg.UserAgent
		if rc.QPS == 0 {
			// client-go's defaults (5 QPS) would throttle a node running many pods.
			rc.QPS, rc.Burst = 50, 100
		}
		if a.cfg.WrapVirtualTransport != nil {
			rc.Wrap(a.cfg.WrapVirtualTransport)
		}
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("building virtual cluster client: %w", err)
		}
		a.mu.Lock()
		a.virtual = client
		a.mu.Unlock()
		inner, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { a.node.Run(inner, client) })
		wg.Go(func() { keepRunning(inner, "pod sync", a.pods.Run, client) })
		wg.Go(func() { keepRunning(inner, "service sync", a.svcs.Run, client) })
		wg.Go(func() { keepRunning(inner, "volume sync", a.vols.Run, client) })
		// Not part of Ready: the pods run whether or not the host's Events
		// about them are shown.
		wg.Go(func() { keepRunning(inner, "event sync", a.evs.Run, client) })
		if a.ings != nil {
			wg.Go(func() { keepRunning(inner, "ingress sync", a.ings.Run, client) })
		}
		if a.cls != nil {
			wg.Go(func() { keepRunning(inner, "storage class sync", a.cls.Run, client) })
		}
		select {
		case <-ctx.Done():
			cancel()
			wg.Wait()
			return nil
		case cur = <-a.creds:
			log.Info("virtual cluster credentials changed; restarting node, pod, service and volume loops")
			cancel()
			wg.Wait()
		}
	}
}

// keepRunning keeps a sync loop running until ctx ends; a loop only stops
// early on a setup error, which is retried after a pause.
func keepRunning(ctx context.Context, what string, loop func(context.Context, kubernetes.Interface) error, client kubernetes.Interface) {
	for {
		err := loop(ctx, client)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, what+" stopped; restarting")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// currentVirtual is the client of the credentials in use, nil before Run.
func (a *Agent) currentVirtual() kubernetes.Interface {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.virtual
}

// ServeKubeletAPI serves the kubelet API on ln until ctx ends: package
// kubeletapi's Serve for this node, with its InternalIP, the host clients
// and the virtual client of the credentials in use.
func (a *Agent) ServeKubeletAPI(ctx context.Context, ln net.Listener) error {
	var ips []net.IP
	if ip := net.ParseIP(a.cfg.Node.InternalIP); ip != nil {
		ips = append(ips, ip)
	}
	return kubeletapi.Serve(ctx, ln, kubeletapi.Config{
		NodeName: a.cfg.Node.Name, NodeIPs: ips, Translator: a.tr, Host: a.cfg.Host, HostConfig: a.cfg.HostConfig, Virtual: a.currentVirtual,
	})
}

// ServeDNS answers DNS on pc (UDP) and ln (TCP) until ctx ends: the virtual
// cluster's Service names from the Service caches, every other name of the
// virtual and of the host cluster's domain (Config.HostDomain) NXDOMAIN, the
// rest forwarded to upstreams (the agent pod's own resolvers, the host DNS),
// whose replies naming either domain are denied. Host pods reach it through
// the cluster's DNS Service, whose ClusterIP is their nameserver
// (translate.Config.ClusterDNS).
func (a *Agent) ServeDNS(ctx context.Context, pc net.PacketConn, ln net.Listener, upstreams []string) error {
	srv, err := dnsserver.New(dnsserver.Config{
		Domain:     a.tr.Config().ClusterDomain,
		HostDomain: a.cfg.HostDomain,
		Source:     a.svcs.DNSSource(),
		Upstreams:  upstreams,
		Logger:     logr.FromContextOrDiscard(ctx),
	})
	if err != nil {
		return err
	}
	logr.FromContextOrDiscard(ctx).Info("serving DNS", "udp", pc.LocalAddr().String(), "tcp", ln.Addr().String(), "upstreams", upstreams)
	return srv.Serve(ctx, pc, ln)
}
