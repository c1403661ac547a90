// Command controller is the k3k operator: it runs the Cluster reconciler in a
// controller-runtime manager with leader election, health probes and metrics.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/controller/cluster"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/resourcelist"
)

// options are the command-line settings.
type options struct {
	metricsAddr, probeAddr string
	leaderElect            bool
	leaderElectionNS       string
	lease                  leaseTimings
	watchNamespaces        string
	workers                int
	pullSecrets            string
	pullPolicy             string
	defaultPersistence     string
	defaultDatastore       string
	defaultServerSpread    string
	isolation              isolationFlags
	agent                  agentFlags
	cfg                    cluster.Config
}

// agentFlags are the host administrator's defaults for every shared-mode
// agent (cluster.AgentDefaults) as given on the command line.
type agentFlags struct {
	seccompDefault                 bool
	seccompProfiles                string
	appArmorProfiles               string
	defaultRequests, defaultLimits string
	alwaysPullImages               bool
	storageClassCopies             bool
	priorityClasses                string
	userNamespaces                 string
}

// defaultWorkers is the default of --workers: see docs/architecture.md,
// "Reconcile workers", for the measurement behind it.
const defaultWorkers = 4

// defaultServerGOGC is the default of --server-gogc: idle, a k3s server's
// private memory was 275 MiB with Go's default GOGC (100), 208 with 50, 177
// with 25 and 161 with 10, for 4 %, 9 % and 20 % more idle CPU than with 100
// (docs/footprint.md, "The k3s server's heap"); 25 takes most of the memory
// for a small share of the CPU.
const defaultServerGOGC = 25

// defaultNodeLossTimeout is the default of --node-loss-timeout: as long as
// Kubernetes itself tolerates a not-ready or unreachable node before it
// evicts the node's pods (300 s), so a node that reboots is not counted lost.
const defaultNodeLossTimeout = 5 * time.Minute

// leaseTimings are the leader election's durations (client-go's
// leaderelection.LeaderElectionConfig): a leader that cannot renew its Lease
// within renewDeadline stops, and the pod restarts it.
type leaseTimings struct {
	duration, renewDeadline, retryPeriod time.Duration
}

// defaultLease is what the controller tolerates of a slow API server before
// it gives up leadership. controller-runtime's defaults (15s, 10s, 2s, each
// request cut at 5s) were too short on a loaded 2-core host: the e2e suite
// saw "leader election lost" while the host's etcd answered in under a
// second, and each exit cost a restart with the kubelet's growing back-off,
// so no Cluster was reconciled for minutes (docs/architecture.md, "Leader
// election"). The cost of longer timings is the wait after a leader dies
// without releasing its Lease: a replacement takes over after at most
// duration; a clean shutdown hands over at once (ReleaseOnCancel).
var defaultLease = leaseTimings{duration: 60 * time.Second, renewDeadline: 40 * time.Second, retryPeriod: 5 * time.Second}

// validate applies client-go's own rule (NewLeaderElector refuses anything
// else) at flag-parsing time, so a bad chart value stops the controller with
// the flags' names rather than later with client-go's field names.
func (l leaseTimings) validate() error {
	if l.retryPeriod <= 0 {
		return fmt.Errorf("--leader-elect-retry-period %s: want more than 0", l.retryPeriod)
	}
	if floor := time.Duration(leaderelection.JitterFactor * float64(l.retryPeriod)); l.renewDeadline <= floor {
		return fmt.Errorf("--leader-elect-renew-deadline %s: want more than %s (%.1f × --leader-elect-retry-period)", l.renewDeadline, floor, leaderelection.JitterFactor)
	}
	if l.duration <= l.renewDeadline {
		return fmt.Errorf("--leader-elect-lease-duration %s: want more than --leader-elect-renew-deadline (%s)", l.duration, l.renewDeadline)
	}
	return nil
}

// isolationFlags are the defaults of spec.quota, spec.limits and
// spec.networkPolicy as given on the command line.
type isolationFlags struct {
	quota, limitRequest, limit, limitMax string
	networkPolicy                        bool
	egressCIDRs, egressExcept            string
}

// parseFlags parses args; zapOpts receives the --zap-* logging flags.
func parseFlags(args []string, zapOpts *zap.Options) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	zapOpts.BindFlags(fs)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address the Prometheus metrics endpoint binds to; 0 turns it off")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader so only one replica reconciles")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "namespace of the leader election Lease; empty means the pod's own")
	fs.DurationVar(&o.lease.duration, "leader-elect-lease-duration", defaultLease.duration, "how long other replicas wait for a leader that stopped renewing before they take over")
	fs.DurationVar(&o.lease.renewDeadline, "leader-elect-renew-deadline", defaultLease.renewDeadline, "how long the leader keeps trying to renew its Lease before it stops (and its pod restarts it)")
	fs.DurationVar(&o.lease.retryPeriod, "leader-elect-retry-period", defaultLease.retryPeriod, "how often the Lease is renewed or tried for")
	fs.IntVar(&o.workers, "workers", defaultWorkers, "how many Clusters are reconciled at once (make bench-controller measures the choice)")
	fs.StringVar(&o.watchNamespaces, "watch-namespaces", "", "comma-separated namespaces to watch; empty means all")
	fs.StringVar(&o.cfg.ServerImage, "server-image", "rancher/k3s", "k3s server image repository; the tag is spec.version or --default-version")
	fs.StringVar(&o.cfg.DefaultVersion, "default-version", "v1.34.3-k3s1", "k3s image tag for Clusters without spec.version")
	fs.DurationVar(&o.cfg.NodeLossTimeout, "node-loss-timeout", defaultNodeLossTimeout, "how long a host node holding a server pod may stay not Ready before the pod is replaced where that is safe: an etcd member is removed and starts again on another node with a new volume; a SQLite or external-datastore server waits until the node is tainted node.kubernetes.io/out-of-service or its Node deleted (docs/etcd.md, When a node is lost); 0 turns this off")
	fs.IntVar(&o.cfg.ServerGOGC, "server-gogc", defaultServerGOGC, "GOGC of every k3s server whose Cluster's spec.serverEnvs sets none (lower: less memory, more GC work; docs/footprint.md); 0 sets none (Go's default, 100)")
	fs.StringVar(&o.cfg.DatastoreImage, "datastore-image", "k3k-io/k3k-datastore:dev", "image of the datastore sidecar and kubeconfig publisher")
	fs.StringVar(&o.cfg.AgentImage, "agent-image", "k3k-io/k3k-kubelet:dev", "image of the shared-mode agent (empty: deploy no agent)")
	fs.StringVar(&o.cfg.AgentClusterRole, "agent-cluster-role", "k3k-agent",
		"ClusterRole holding the agent's rights (the chart installs it); each cluster's agent is bound to it in its own namespace")
	fs.StringVar(&o.cfg.BackupExecClusterRole, "backup-exec-cluster-role", "k3k-backup-exec",
		"ClusterRole granting exec into pods (the chart installs it); each cluster's backup Job is bound to it in its own namespace")
	fs.BoolVar(&o.cfg.AllowPrivilegedPods, "allow-privileged-pods", false,
		"let Clusters choose spec.podSecurityLevel privileged for their shared-mode pods; without it they get baseline")
	fs.StringVar(&o.pullPolicy, "image-pull-policy", string(corev1.PullIfNotPresent), "pull policy of every image the controller deploys: Always, IfNotPresent or Never")
	fs.StringVar(&o.pullSecrets, "image-pull-secrets", "", "comma-separated Secret names added to every pod the controller deploys")
	fs.StringVar(&o.defaultPersistence, "default-persistence-type", string(v1beta1.DynamicPersistence), "persistence for Clusters that leave spec.persistence.type empty: dynamic or ephemeral")
	fs.StringVar(&o.cfg.DefaultStorageClass, "default-storage-class", "", "storage class for Clusters that leave spec.persistence.storageClassName unset; empty means the host's default")
	fs.StringVar(&o.defaultDatastore, "default-datastore-type", string(v1beta1.SQLiteDatastore), "datastore for Clusters that leave spec.datastore.type empty: sqlite or etcd")
	fs.StringVar(&o.defaultServerSpread, "default-server-spread", string(v1beta1.SpreadPreferred), "how the server pods of etcd and external-datastore Clusters that leave spec.serverSpread empty are placed: Preferred (over nodes where the scheduler can) or Required (never two on one node)")
	fs.StringVar(&o.isolation.quota, "default-quota", "", "ResourceQuota hard limits for Clusters (name=quantity,…, e.g. pods=50,requests.cpu=8); spec.quota.hard replaces them name by name; empty makes no quota")
	fs.StringVar(&o.isolation.limitRequest, "default-limit-request", "", "LimitRange default requests of containers that set none (cpu=50m,memory=64Mi); spec.limits.defaultRequest replaces them")
	fs.StringVar(&o.isolation.limit, "default-limit", "", "LimitRange default limits of containers that set none; spec.limits.default replaces them")
	fs.StringVar(&o.isolation.limitMax, "default-limit-max", "", "LimitRange maximum per container; spec.limits.max replaces them")
	fs.BoolVar(&o.isolation.networkPolicy, "network-policy", true, "make each Cluster's NetworkPolicies unless its spec.networkPolicy.enabled is false")
	fs.StringVar(&o.isolation.egressCIDRs, "network-policy-egress-cidrs", "", "comma-separated CIDRs a virtual cluster's pods may reach besides their own cluster (e.g. 0.0.0.0/0)")
	fs.StringVar(&o.isolation.egressExcept, "network-policy-egress-except", "", "comma-separated CIDRs cut out of --network-policy-egress-cidrs: the host's pod and Service networks")
	fs.StringVar(&o.cfg.Isolation.ControllerNamespace, "controller-namespace", "", "namespace the controller runs in; only its pods may open a server's etcd client port (empty: any namespace)")
	fs.BoolVar(&o.agent.seccompDefault, "agent-seccomp-default", true, "agents give workload containers that ask for no seccomp profile RuntimeDefault; false passes --seccomp-default=false to every agent")
	fs.StringVar(&o.agent.seccompProfiles, "agent-seccomp-localhost-profiles", "", "comma-separated Localhost seccomp profiles workloads may name, passed to every agent; empty: none")
	fs.StringVar(&o.agent.appArmorProfiles, "agent-apparmor-localhost-profiles", "", "comma-separated Localhost AppArmor profiles workloads may name, passed to every agent; empty: none")
	fs.StringVar(&o.agent.defaultRequests, "agent-default-requests", "", "requests of workload containers that set none (name=quantity,…), passed to every agent; empty: the agent's own (cpu=10m,memory=32Mi)")
	fs.StringVar(&o.agent.defaultLimits, "agent-default-limits", "", "limits of workload containers that set none (name=quantity,…), passed to every agent; empty: the agent's own (memory=512Mi)")
	fs.StringVar(&o.agent.priorityClasses, "agent-priority-classes", "", "virtual=host priority class pairs, passed to every agent: a workload naming the virtual class runs with the host class, any other at the host's default priority (with a Warning Event on its virtual pod). Empty: none")
	fs.BoolVar(&o.agent.storageClassCopies, "agent-storage-class-copies", true, "agents show the host storage classes a Cluster's claims may name (its spec.storageClasses and the host's default) as StorageClasses in the virtual cluster, the default marked and expansion as the host class allows; reads the host's StorageClasses (list, watch). false passes --storage-class-copies=false to every agent")
	fs.BoolVar(&o.agent.alwaysPullImages, "agent-always-pull-images", true, "agents give every workload container the pull policy Always, so a node checks the pod's own credentials before running a cached image; false passes --always-pull-images=false to every agent (hosts whose images are loaded into the nodes)")
	fs.StringVar(&o.agent.userNamespaces, "agent-user-namespaces", "auto", "whether agents run workloads in user namespaces (hostUsers: false): auto, for each Cluster while every node its workloads may run on reports runtime support (reads Nodes); true, always; false, never")
	fs.BoolVar(&o.cfg.Agent.AllowRegistryAddresses, "agent-allow-registry-addresses", false, "let workload images name their registry by IP, localhost or a one-label name (passes --allow-registry-addresses to every agent); refused by default")
	fs.StringVar(&o.cfg.HostServiceCIDR, "host-service-cidr", "", "the host's Service network (an IPv4 CIDR), which new Clusters without spec.serviceCIDR take so that their ClusterIPs route on the host; empty: read from the host's ServiceCIDR \""+cluster.DefaultServiceCIDRName+"\" (needs get on servicecidrs.networking.k8s.io), else k3s's "+cluster.K3sDefaultServiceCIDR)
	fs.StringVar(&o.cfg.Agent.HostClusterDomain, "host-cluster-domain", cluster.DefaultHostClusterDomain, "the host cluster's DNS domain; passed to agents when not "+cluster.DefaultHostClusterDomain)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.cfg.NodeLossTimeout < 0 {
		return nil, fmt.Errorf("--node-loss-timeout %s: want a duration >= 0 (0 turns node-loss handling off)", o.cfg.NodeLossTimeout)
	}
	if o.cfg.ServerGOGC < 0 {
		return nil, fmt.Errorf("--server-gogc %d: want a percentage > 0, or 0 for Go's default", o.cfg.ServerGOGC)
	}
	if err := o.lease.validate(); err != nil {
		return nil, err
	}
	if o.workers < 1 {
		return nil, fmt.Errorf("--workers %d: want at least 1", o.workers)
	}
	if err := o.isolation.apply(&o.cfg.Isolation); err != nil {
		return nil, err
	}
	if err := o.agent.apply(&o.cfg.Agent); err != nil {
		return nil, err
	}
	if o.cfg.HostServiceCIDR != "" {
		cidr, err := cluster.ParseHostServiceCIDR(o.cfg.HostServiceCIDR)
		if err != nil {
			return nil, fmt.Errorf("--host-service-cidr %w", err)
		}
		o.cfg.HostServiceCIDR = cidr
	}
	switch corev1.PullPolicy(o.pullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		o.cfg.PullPolicy = corev1.PullPolicy(o.pullPolicy)
	default:
		return nil, fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", o.pullPolicy)
	}
	switch p := v1beta1.PersistenceType(o.defaultPersistence); p {
	case v1beta1.DynamicPersistence, v1beta1.EphemeralPersistence:
		o.cfg.DefaultPersistence = p
	default:
		return nil, fmt.Errorf("--default-persistence-type %q: want dynamic or ephemeral", o.defaultPersistence)
	}
	switch sp := v1beta1.ServerSpread(o.defaultServerSpread); sp {
	case v1beta1.SpreadPreferred, v1beta1.SpreadRequired:
		o.cfg.DefaultServerSpread = sp
	default:
		return nil, fmt.Errorf("--default-server-spread %q: want Preferred or Required", o.defaultServerSpread)
	}
	switch d := v1beta1.DatastoreType(o.defaultDatastore); d {
	case v1beta1.SQLiteDatastore, v1beta1.EtcdDatastore:
		o.cfg.DefaultDatastore = d
	default:
		return nil, fmt.Errorf("--default-datastore-type %q: want sqlite or etcd", o.defaultDatastore)
	}
	o.cfg.PullSecrets = splitList(o.pullSecrets)
	return o, nil
}

// apply parses the isolation flags into d.
func (f isolationFlags) apply(d *cluster.IsolationDefaults) error {
	for _, l := range []struct {
		flag, value string
		into        *corev1.ResourceList
	}{
		{"--default-quota", f.quota, &d.QuotaHard},
		{"--default-limit-request", f.limitRequest, &d.LimitDefaultRequest},
		{"--default-limit", f.limit, &d.LimitDefault},
		{"--default-limit-max", f.limitMax, &d.LimitMax},
	} {
		list, err := resourcelist.Parse(l.value)
		if err != nil {
			return fmt.Errorf("%s: %w", l.flag, err)
		}
		*l.into = list
	}
	d.DisableNetworkPolicy = !f.networkPolicy
	for _, c := range []struct {
		flag, value string
		into        *[]string
	}{
		{"--network-policy-egress-cidrs", f.egressCIDRs, &d.EgressCIDRs},
		{"--network-policy-egress-except", f.egressExcept, &d.EgressExcept},
	} {
		*c.into = splitList(c.value)
		for _, cidr := range *c.into {
			if _, _, err := net.ParseCIDR(cidr); err != nil {
				return fmt.Errorf("%s: %q is not a CIDR", c.flag, cidr)
			}
		}
	}
	return nil
}

// hostDomain is what --host-cluster-domain may be: a DNS name.
var hostDomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// apply parses the agent flags into d.
func (f agentFlags) apply(d *cluster.AgentDefaults) error {
	d.DisableSeccompDefault = !f.seccompDefault
	d.DisableAlwaysPullImages = !f.alwaysPullImages
	d.DisableStorageClassCopies = !f.storageClassCopies
	d.SeccompLocalhostProfiles = splitList(f.seccompProfiles)
	d.AppArmorLocalhostProfiles = splitList(f.appArmorProfiles)
	classes, err := parsePriorityClasses(f.priorityClasses)
	if err != nil {
		return fmt.Errorf("--agent-priority-classes: %w", err)
	}
	d.PriorityClasses = classes
	mode, err := cluster.ParseUserNamespacesMode(f.userNamespaces)
	if err != nil {
		return fmt.Errorf("--agent-user-namespaces %w", err)
	}
	d.UserNamespaces = mode
	for _, l := range []struct {
		flag, value string
		into        *corev1.ResourceList
	}{
		{"--agent-default-requests", f.defaultRequests, &d.DefaultRequests},
		{"--agent-default-limits", f.defaultLimits, &d.DefaultLimits},
	} {
		list, err := resourcelist.Parse(l.value)
		if err != nil {
			return fmt.Errorf("%s: %w", l.flag, err)
		}
		*l.into = list
	}
	if !hostDomain.MatchString(d.HostClusterDomain) {
		return fmt.Errorf("--host-cluster-domain %q: want a DNS name such as %s", d.HostClusterDomain, cluster.DefaultHostClusterDomain)
	}
	return nil
}

// parsePriorityClasses parses "virtual=host,…": both names of PriorityClass
// names' form, each virtual name once. Empty is none (nil).
func parsePriorityClasses(s string) (map[string]string, error) {
	var out map[string]string
	for _, pair := range splitList(s) {
		virtual, host, ok := strings.Cut(pair, "=")
		virtual, host = strings.TrimSpace(virtual), strings.TrimSpace(host)
		if !ok {
			return nil, fmt.Errorf("%q: want virtual=host", pair)
		}
		for _, name := range []string{virtual, host} {
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				return nil, fmt.Errorf("%q: %q is not a PriorityClass name: %s", pair, name, strings.Join(errs, "; "))
			}
		}
		if _, dup := out[virtual]; dup {
			return nil, fmt.Errorf("%q: %s mapped twice", pair, virtual)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[virtual] = host
	}
	return out, nil
}

// managerOptions are the manager's settings from the flags.
func managerOptions(o *options, scheme *runtime.Scheme) ctrl.Options {
	cacheOpts := cache.Options{ByObject: cluster.CacheByObject()}
	if ns := splitList(o.watchNamespaces); len(ns) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, n := range ns {
			cacheOpts.DefaultNamespaces[n] = cache.Config{}
		}
	}
	return ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "k3k-controller.k3k.io",
		LeaderElectionNamespace: o.leaderElectionNS,
		LeaseDuration:           &o.lease.duration,
		RenewDeadline:           &o.lease.renewDeadline,
		RetryPeriod:             &o.lease.retryPeriod,
		// Hand leadership over at once on a clean shutdown instead of after
		// the lease expires.
		LeaderElectionReleaseOnCancel: true,
	}
}

// lookupHostServiceCIDR reads the host's Service network into cfg unless
// --host-service-cidr named it.
func lookupHostServiceCIDR(ctx context.Context, r client.Reader, cfg *cluster.Config) error {
	if cfg.HostServiceCIDR != "" {
		return nil
	}
	cidr, found, err := cluster.LookupHostServiceCIDR(ctx, r)
	if err != nil {
		return fmt.Errorf("%w; grant get on servicecidrs.networking.k8s.io %q (the chart does), or name the network with --host-service-cidr", err, cluster.DefaultServiceCIDRName)
	}
	if !found {
		ctrl.Log.Info("the host's Service network is unknown (no IPv4 ServiceCIDR " + cluster.DefaultServiceCIDRName + "): new Clusters without spec.serviceCIDR get k3s's " + cluster.K3sDefaultServiceCIDR + ", and their ClusterIPs route on the host only where they happen to be free there; set --host-service-cidr")
		return nil
	}
	cfg.HostServiceCIDR = cidr
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func main() {
	zapOpts := zap.Options{}
	o, err := parseFlags(os.Args[1:], &zapOpts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := run(o); err != nil {
		ctrl.Log.Error(err, "controller stopped")
		os.Exit(1)
	}
}

func run(o *options) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), managerOptions(o, scheme))
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := cluster.CheckUserNamespacesAccess(ctx, mgr.GetClient(), o.cfg); err != nil {
		return err
	}
	if err := cluster.CheckNodeLossAccess(ctx, mgr.GetClient(), o.cfg); err != nil {
		return err
	}
	if err := cluster.CheckStorageClassAccess(ctx, mgr.GetClient(), o.cfg); err != nil {
		return err
	}
	if err := lookupHostServiceCIDR(ctx, mgr.GetAPIReader(), &o.cfg); err != nil {
		return err
	}
	r := &cluster.Reconciler{
		Client:             mgr.GetClient(),
		APIReader:          mgr.GetAPIReader(),
		Config:             o.cfg,
		ValidateKubeconfig: kubeconfig.Validate,
		Recorder:           mgr.GetEventRecorder("k3k-cluster"),
		Workers:            o.workers,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the cluster controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.Info("starting k3k controller", "watchNamespaces", o.watchNamespaces, "defaultDatastore", o.cfg.DefaultDatastore, "defaultPersistence", o.cfg.DefaultPersistence, "hostServiceCIDR", o.cfg.HostServiceCIDR)
	return mgr.Start(ctx)
}
