// Command kubelet is the shared-mode agent of a k3k virtual cluster: it
// registers as a node of the virtual cluster and runs the pods bound to that
// node as pods of the cluster's host namespace (see pkg/agent and
// docs/agent.md).
//
// Its virtual cluster credentials are the admin kubeconfig the controller
// publishes into Secret k3k-<name>-kubeconfig and mounts at --credentials-dir;
// it waits for them to be valid and follows their changes without restarting.
// Its host credentials are the pod's ServiceAccount.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/internal/hostclient"
	"github.com/k3k-io/k3k/pkg/agent"
	"github.com/k3k-io/k3k/pkg/agent/dnsserver"
	"github.com/k3k-io/k3k/pkg/agent/node"
	"github.com/k3k-io/k3k/pkg/agent/nodeport"
	"github.com/k3k-io/k3k/pkg/agent/podsecurity"
	"github.com/k3k-io/k3k/pkg/agent/translate"
	"github.com/k3k-io/k3k/pkg/agentbootstrap"
	"github.com/k3k-io/k3k/pkg/layout"
)

type options struct {
	clusterName, clusterUID, hostNamespace string
	nodeName, nodeIP                       string
	credentialsDir, healthAddress          string
	hostKubeconfig                         string
	clusterDNS, clusterDomain              string
	hostClusterDomain                      string
	apiServerService, dnsService           string
	dnsPort                                int
	kubeletPort                            int32
	cpu, memory, pods                      string
	resync                                 time.Duration
	podSecurityLevel                       string
	storageClasses                         []string
	defaultStorageClass                    string
	expandableStorageClasses               []string
	storageClassCopies                     bool
	syncIngresses                          bool
	serveNodePorts                         bool
	ingressClasses                         map[string]string
	priorityClasses                        map[string]string
	ingressHosts                           []string
	seccompDefault                         bool
	seccompLocalhostProfiles               []string
	appArmorLocalhostProfiles              []string
	defaultRequests, defaultLimits         string
	maxTerminationGracePeriodSeconds       int64
	alwaysPullImages                       bool
	allowRegistryAddresses                 bool
	userNamespaces                         bool
}

func main() {
	if err := newCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "kubelet --cluster-name NAME --host-namespace NS",
		Short: "Run a k3k virtual cluster's pods on the host cluster",
		Long: `Register a node in the virtual cluster and run the pods bound to it as pods of
the host namespace: ConfigMaps, Secrets and ServiceAccount tokens they use are
copied next to them, their status flows back, deletion works both ways.

/healthz on --health-address answers 200 while the process runs; /readyz answers
200 while the node's Lease is current and both clusters' caches are synced.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: false,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	bindFlags(cmd, &o)
	_ = cmd.MarkFlagRequired("cluster-name")
	return cmd
}

// bindFlags binds the agent's flags of cmd to o.
func bindFlags(cmd *cobra.Command, o *options) {
	f := cmd.Flags()
	f.StringVar(&o.clusterName, "cluster-name", "", "name of the Cluster (required)")
	f.StringVar(&o.clusterUID, "cluster-uid", "", "UID of the Cluster; when set, host pods are owned by it")
	f.StringVar(&o.hostNamespace, "host-namespace", os.Getenv("POD_NAMESPACE"), "host namespace the pods run in (default $POD_NAMESPACE)")
	f.StringVar(&o.nodeName, "node-name", "", "name of the virtual node (default k3k-<cluster-name>-kubelet)")
	f.StringVar(&o.nodeIP, "node-ip", os.Getenv("POD_IP"), "address reported for the node (default $POD_IP)")
	f.StringVar(&o.credentialsDir, "credentials-dir", layout.AgentCredentialsDir, "where the kubeconfig Secret is mounted")
	f.StringVar(&o.healthAddress, "health-address", fmt.Sprintf(":%d", layout.AgentHealthPort), "host:port for /healthz and /readyz")
	f.StringVar(&o.hostKubeconfig, "kubeconfig", "", "kubeconfig for the host cluster; default: the pod's ServiceAccount")
	f.StringVar(&o.clusterDNS, "cluster-dns", "", "nameserver for ClusterFirst pods; empty keeps the host's DNS")
	f.StringVar(&o.clusterDomain, "cluster-domain", "cluster.local", "the virtual cluster's DNS domain")
	f.StringVar(&o.hostClusterDomain, "host-cluster-domain", "cluster.local", "the host cluster's DNS domain: the agent's DNS server answers its names NXDOMAIN and denies forwarded replies that name it, so tenants learn no host names")
	f.StringVar(&o.apiServerService, "api-server-service", "", "the cluster's API Service in the host namespace; pods get its name and ClusterIP as KUBERNETES_SERVICE_HOST instead of the host API's. Empty: the host kubelet's values stay")
	f.StringVar(&o.dnsService, "dns-service", "", "the cluster's DNS Service in the host namespace: pods with dnsPolicy ClusterFirst use its ClusterIP as nameserver, and the agent answers behind it on --dns-port. Overrides --cluster-dns")
	f.IntVar(&o.dnsPort, "dns-port", layout.AgentDNSPort, "port (UDP and TCP) of the agent's DNS server, started with --dns-service")
	f.Int32Var(&o.kubeletPort, "kubelet-port", layout.AgentKubeletPort, "port of the kubelet API (logs, exec, attach, port-forward), advertised in the node status; 0 disables it")
	f.StringVar(&o.cpu, "capacity-cpu", "8", "CPU capacity the node reports")
	f.StringVar(&o.memory, "capacity-memory", "32Gi", "memory capacity the node reports")
	f.StringVar(&o.pods, "capacity-pods", "110", "pod capacity the node reports")
	f.DurationVar(&o.resync, "resync", 30*time.Second, "how often every pod is reconciled without an event")
	f.StringVar(&o.podSecurityLevel, "pod-security-level", podsecurity.Baseline, "Pod Security Standards level every host pod must meet: baseline, restricted or privileged (the controller passes the Cluster's spec.podSecurityLevel, privileged only where the host administrator allowed it)")
	f.StringSliceVar(&o.storageClasses, "storage-classes", nil, "storage classes PersistentVolumeClaims and generic ephemeral volumes may name, besides the host's default (none by default; the controller passes the Cluster's spec.storageClasses)")
	f.StringVar(&o.defaultStorageClass, "default-storage-class", "", "the host's default storage class by name (the controller passes it when the host has one): claims may name it, and its virtual copy is the virtual cluster's default")
	f.StringSliceVar(&o.expandableStorageClasses, "expandable-storage-classes", nil, "of the classes above, those whose host class allows volume expansion (the controller passes them): their virtual copies allow it too")
	f.BoolVar(&o.storageClassCopies, "storage-class-copies", true, "show the storage classes claims may name (--storage-classes, --default-storage-class) as StorageClasses in the virtual cluster; a class of the same name its admin made is left alone")
	f.BoolVar(&o.serveNodePorts, "serve-node-ports", true, "serve the node ports of NodePort and LoadBalancer Services (TCP) at the agent's own address, the node's InternalIP, relayed to their host copies; reachable by the virtual cluster's pods only, never opened on a host node")
	f.BoolVar(&o.syncIngresses, "sync-ingresses", false, "copy the virtual cluster's Ingresses to the host namespace (the controller passes the Cluster's spec.ingresses.enabled)")
	f.StringToStringVar(&o.priorityClasses, "priority-classes", nil, "virtual=host priority class pairs: a pod naming the virtual class runs on the host with the host class; a pod naming another runs at the host's default priority, with a Warning Event (none by default; the controller passes the host administrator's --agent-priority-classes)")
	f.StringToStringVar(&o.ingressClasses, "ingress-classes", nil, "virtual=host ingress class pairs an Ingress may name; one without a class gets the host's default, others are refused")
	f.StringSliceVar(&o.ingressHosts, "ingress-hosts", nil, "hostnames an Ingress may claim: a name, or *.suffix for every name under suffix (none by default: no Ingress is copied; the controller passes the Cluster's spec.ingresses.hosts)")
	f.BoolVar(&o.seccompDefault, "seccomp-default", true, "give host pods whose virtual pod sets no pod-level seccomp profile RuntimeDefault (without a profile the host runs them unconfined)")
	f.StringSliceVar(&o.seccompLocalhostProfiles, "seccomp-localhost-profiles", nil, "localhostProfile values a Localhost seccomp profile may name; pods naming any other are refused (none by default)")
	f.StringSliceVar(&o.appArmorLocalhostProfiles, "apparmor-localhost-profiles", nil, "localhostProfile values a Localhost AppArmor profile may name; pods naming any other are refused (none by default)")
	f.StringVar(&o.defaultRequests, "default-requests", "cpu=10m,memory=32Mi", "name=quantity requests given to containers that request none of a resource (and do not limit it); cpu, memory and ephemeral-storage; empty for none")
	f.StringVar(&o.defaultLimits, "default-limits", "memory=512Mi", "name=quantity limits given to containers that set no limit of a resource; cpu, memory and ephemeral-storage; empty for none")
	f.BoolVar(&o.alwaysPullImages, "always-pull-images", true, "give every host container and image volume the pull policy Always, so the node checks the pod's own pull credentials before running an image it has cached (off only where images are loaded into the nodes, never pulled)")
	f.BoolVar(&o.allowRegistryAddresses, "allow-registry-addresses", false, "let images name their registry by address (an IP, localhost, a one-label name); refused by default, since the node connects there to pull")
	f.BoolVar(&o.userNamespaces, "user-namespaces", false, "run every host pod in a user namespace of its own (hostUsers: false; below the privileged level a pod may not opt out); only where every host node's runtime supports user namespaces, which the controller checks")
	f.Int64Var(&o.maxTerminationGracePeriodSeconds, "max-termination-grace-period-seconds", translate.DefaultMaxTerminationGracePeriodSeconds, "cap on a host pod's terminationGracePeriodSeconds and on every host pod deletion's grace period; at least 1")
}

// agentConfig turns the flags into the agent's configuration, without the
// host client.
func agentConfig(o options) (agent.Config, error) {
	if o.hostNamespace == "" {
		return agent.Config{}, errors.New("--host-namespace (or $POD_NAMESPACE) is required")
	}
	if o.nodeName == "" {
		o.nodeName = layout.AgentName(o.clusterName)
	}
	if _, err := podsecurity.New(o.podSecurityLevel); err != nil {
		return agent.Config{}, fmt.Errorf("--pod-security-level: %w", err)
	}
	capacity := corev1.ResourceList{}
	for name, value := range map[corev1.ResourceName]string{corev1.ResourceCPU: o.cpu, corev1.ResourceMemory: o.memory, corev1.ResourcePods: o.pods} {
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return agent.Config{}, fmt.Errorf("--capacity-%s: %w", name, err)
		}
		capacity[name] = q
	}
	if o.maxTerminationGracePeriodSeconds < 1 {
		return agent.Config{}, fmt.Errorf("--max-termination-grace-period-seconds: %d: must be at least 1", o.maxTerminationGracePeriodSeconds)
	}
	defaultRequests, err := parseResourceList(o.defaultRequests)
	if err != nil {
		return agent.Config{}, fmt.Errorf("--default-requests: %w", err)
	}
	defaultLimits, err := parseResourceList(o.defaultLimits)
	if err != nil {
		return agent.Config{}, fmt.Errorf("--default-limits: %w", err)
	}
	cfg := agent.Config{
		Translate: translate.Config{
			ClusterName:   o.clusterName,
			HostNamespace: o.hostNamespace,
			NodeName:      o.nodeName,
			ClusterDNS:    o.clusterDNS,
			ClusterDomain: o.clusterDomain,

			PodSecurityLevel:         o.podSecurityLevel,
			StorageClasses:           o.storageClasses,
			DefaultStorageClass:      o.defaultStorageClass,
			ExpandableStorageClasses: o.expandableStorageClasses,
			IngressClasses:           o.ingressClasses,
			PriorityClasses:          o.priorityClasses,
			IngressHosts:             o.ingressHosts,

			DisableSeccompDefault:            !o.seccompDefault,
			SeccompLocalhostProfiles:         o.seccompLocalhostProfiles,
			AppArmorLocalhostProfiles:        o.appArmorLocalhostProfiles,
			DefaultRequests:                  defaultRequests,
			DefaultLimits:                    defaultLimits,
			MaxTerminationGracePeriodSeconds: o.maxTerminationGracePeriodSeconds,
			AlwaysPullImages:                 o.alwaysPullImages,
			AllowRegistryAddresses:           o.allowRegistryAddresses,
			UserNamespaces:                   o.userNamespaces,
		},
		Node: node.Config{
			Name:        o.nodeName,
			InternalIP:  o.nodeIP,
			KubeletPort: o.kubeletPort,
			Capacity:    capacity,
		},
		Resync:             o.resync,
		SyncIngresses:      o.syncIngresses,
		StorageClassCopies: o.storageClassCopies,
		HostDomain:         o.hostClusterDomain,
	}
	if o.clusterUID != "" {
		cfg.Translate.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "k3k.io/v1beta1", Kind: "Cluster", Name: o.clusterName, UID: types.UID(o.clusterUID),
		}}
	}
	return cfg, nil
}

// defaultableResources are the resources --default-requests and
// --default-limits may name. Extended resources and hugepages must be
// requested and limited alike and name hardware; a default of them would
// make every host pod invalid or ask the host for devices.
var defaultableResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}

// parseResourceList parses "name=quantity,name=quantity" into a
// ResourceList; an empty string is none (nil).
func parseResourceList(s string) (corev1.ResourceList, error) {
	var out corev1.ResourceList
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want name=quantity", part)
		}
		rn := corev1.ResourceName(strings.TrimSpace(name))
		if !slices.Contains(defaultableResources, rn) {
			return nil, fmt.Errorf("%q: only %v may be defaulted", part, defaultableResources)
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("%q: must be positive", part)
		}
		if _, dup := out[rn]; dup {
			return nil, fmt.Errorf("%q: %s given twice", part, rn)
		}
		if out == nil {
			out = corev1.ResourceList{}
		}
		out[rn] = q
	}
	return out, nil
}

// run starts the agent and runs it until ctx ends or a signal arrives, in
// the order its parts depend on each other: the host client, the health
// server (so /healthz answers while the rest waits), the host Services the
// pods are pointed at, the virtual credentials, then the kubelet API and DNS
// servers beside the agent's loops.
func run(ctx context.Context, o options, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx = logr.NewContext(ctx, newLogger(stderr))
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	cfg, err := agentConfig(o)
	if err != nil {
		return err
	}
	if err := connectHost(&cfg, o.hostKubeconfig); err != nil {
		return err
	}
	var current atomic.Pointer[agent.Agent]
	stopHealth, err := startHealth(ctx, o.healthAddress, current.Load)
	if err != nil {
		return err
	}
	defer stopHealth()
	dns, err := readHostServices(ctx, o, &cfg)
	if err != nil {
		return ignoreStop(ctx, err)
	}
	if o.serveNodePorts {
		cfg.NodePorts = nodeport.New(nodeport.Config{Logger: logr.FromContextOrDiscard(ctx)})
		defer cfg.NodePorts.Close()
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	current.Store(a)
	virtual, err := followCredentials(ctx, o.credentialsDir, a)
	if err != nil {
		return ignoreStop(ctx, err)
	}
	if err := serveBeside(ctx, o.kubeletPort, a, dns); err != nil {
		return err
	}
	logr.FromContextOrDiscard(ctx).Info("agent starting", "cluster", o.clusterName, "hostNamespace", cfg.Translate.HostNamespace,
		"node", cfg.Translate.NodeName, "podSecurityLevel", cfg.Translate.PodSecurityLevel,
		"seccompDefault", !cfg.Translate.DisableSeccompDefault, "maxTerminationGracePeriodSeconds", cfg.Translate.MaxTerminationGracePeriodSeconds,
		"alwaysPullImages", cfg.Translate.AlwaysPullImages, "allowRegistryAddresses", cfg.Translate.AllowRegistryAddresses,
		"userNamespaces", cfg.Translate.UserNamespaces)
	return a.Run(ctx, virtual)
}

// ignoreStop is nil when ctx has ended (the agent was told to stop while it
// waited), else err.
func ignoreStop(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// newLogger writes key/value lines with a timestamp to stderr.
func newLogger(stderr io.Writer) logr.Logger {
	return funcr.New(func(_, args string) {
		fmt.Fprintf(stderr, "time=%s %s\n", time.Now().Format(time.RFC3339Nano), args)
	}, funcr.Options{})
}

// connectHost fills in cfg's host client from the pod's ServiceAccount or
// the kubeconfig at path.
func connectHost(cfg *agent.Config, path string) error {
	hostRest, err := hostConfig(path)
	if err != nil {
		return err
	}
	cfg.HostConfig = hostRest
	if cfg.Host, err = kubernetes.NewForConfig(hostRest); err != nil {
		return fmt.Errorf("building host cluster client: %w", err)
	}
	return nil
}

// startHealth serves /healthz (200 while the process runs) and /readyz (the
// agent's Ready, 503 while current returns nil) on address, in the background.
// It returns the function that shuts the server down.
func startHealth(ctx context.Context, address string, current func() *agent.Agent) (func(), error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("--health-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		err := errors.New("agent starting")
		if a := current(); a != nil {
			err = a.Ready()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	health := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := health.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logr.FromContextOrDiscard(ctx).Error(err, "health server stopped")
		}
	}()
	return func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = health.Shutdown(shutdown)
	}, nil
}

// dnsListeners are the agent's DNS sockets and the resolvers it forwards to;
// nil without --dns-service.
type dnsListeners struct {
	udp       net.PacketConn
	tcp       net.Listener
	upstreams []string
}

// readHostServices waits for the cluster's API Service (--api-server-service)
// and DNS Service (--dns-service) in the host namespace and puts what pods
// need of them into cfg. With --dns-service it binds the DNS port first, so
// a port in use fails at once.
func readHostServices(ctx context.Context, o options, cfg *agent.Config) (*dnsListeners, error) {
	var err error
	if o.apiServerService != "" {
		if cfg.Translate.APIServer, err = virtualAPIServer(ctx, cfg.Host, cfg.Translate.HostNamespace, o.apiServerService); err != nil {
			return nil, err
		}
	}
	if o.dnsService == "" {
		return nil, nil
	}
	dns := &dnsListeners{}
	if dns.upstreams, err = dnsserver.UpstreamsFromResolvConf("/etc/resolv.conf"); err != nil {
		return nil, fmt.Errorf("--dns-service: the agent forwards to its own resolvers: %w", err)
	}
	addr := fmt.Sprintf(":%d", o.dnsPort)
	if dns.udp, err = net.ListenPacket("udp", addr); err != nil {
		return nil, fmt.Errorf("--dns-port: %w", err)
	}
	if dns.tcp, err = net.Listen("tcp", addr); err != nil {
		return nil, fmt.Errorf("--dns-port: %w", err)
	}
	if cfg.Translate.ClusterDNS, err = serviceClusterIP(ctx, cfg.Host, cfg.Translate.HostNamespace, o.dnsService); err != nil {
		return nil, err
	}
	return dns, nil
}

// followCredentials waits for valid virtual cluster credentials in dir and
// returns them, then follows their changes into a.SetCredentials in the
// background until ctx ends.
func followCredentials(ctx context.Context, dir string, a *agent.Agent) (*rest.Config, error) {
	log := logr.FromContextOrDiscard(ctx)
	loader, err := agentbootstrap.New(agentbootstrap.Config{Dir: dir, OnChange: a.SetCredentials})
	if err != nil {
		return nil, err
	}
	log.Info("waiting for virtual cluster credentials", "dir", dir)
	virtual, err := loader.Wait(ctx)
	if err != nil {
		return nil, err
	}
	go func() {
		if err := loader.Run(ctx); err != nil {
			log.Error(err, "following credential changes stopped")
		}
	}()
	return virtual, nil
}

// serveBeside starts, in the background until ctx ends, the servers that run
// beside the agent's loops: the kubelet API on kubeletPort (none when 0) and
// the DNS server on dns (none when nil).
func serveBeside(ctx context.Context, kubeletPort int32, a *agent.Agent, dns *dnsListeners) error {
	log := logr.FromContextOrDiscard(ctx)
	if kubeletPort > 0 {
		kln, err := net.Listen("tcp", fmt.Sprintf(":%d", kubeletPort))
		if err != nil {
			return fmt.Errorf("--kubelet-port: %w", err)
		}
		go func() {
			if err := a.ServeKubeletAPI(ctx, kln); err != nil {
				log.Error(err, "kubelet API stopped")
			}
		}()
	}
	if dns != nil {
		go func() {
			if err := a.ServeDNS(ctx, dns.udp, dns.tcp, dns.upstreams); err != nil {
				log.Error(err, "DNS server stopped")
			}
		}()
	}
	return nil
}

// hostConfig is the host cluster client configuration: the pod's
// ServiceAccount, or a kubeconfig file for tests and debugging.
func hostConfig(path string) (*rest.Config, error) {
	cfg, err := hostclient.Config(path)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "k3k-kubelet"
	// client-go's defaults (5 QPS) would throttle a node running many pods.
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}
