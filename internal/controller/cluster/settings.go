package cluster

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// Settings resolution: a Cluster's choices with the controller's defaults
// applied, and what admission could not check. Pure, like desired.go.

// Config is what the controller deploys and the defaults it applies to Clusters
// that leave a choice empty. The Helm chart sets it through flags.
type Config struct {
	// ServerImage is the k3s image repository; the tag is spec.version or
	// DefaultVersion.
	ServerImage string
	// DefaultVersion is the k3s tag used when spec.version is empty.
	DefaultVersion string
	// DatastoreImage runs the datastore sidecar and the kubeconfig publisher.
	DatastoreImage string
	// AgentImage runs the shared-mode agent; empty deploys no agent.
	AgentImage string
	// AgentClusterRole is the ClusterRole holding AgentRules (installed by the
	// chart) that each cluster's agent is bound to in its namespace.
	AgentClusterRole string
	// BackupExecClusterRole is the ClusterRole holding BackupExecRules
	// (installed by the chart) that each cluster's backup Job is bound to in
	// its namespace.
	BackupExecClusterRole string
	// AllowPrivilegedPods lets Clusters choose spec.podSecurityLevel
	// privileged (the chart's sharedAgent.allowPrivilegedPods); without it
	// such a Cluster's agent holds its pods to baseline.
	AllowPrivilegedPods bool
	// PullPolicy applies to every image the controller deploys.
	PullPolicy corev1.PullPolicy
	// PullSecrets are added to every pod the controller deploys.
	PullSecrets []string
	// DefaultPersistence applies when spec.persistence.type is empty.
	DefaultPersistence v1beta1.PersistenceType
	// DefaultStorageClass applies when spec.persistence.storageClassName is nil.
	DefaultStorageClass string
	// DefaultDatastore applies when spec.datastore.type is empty.
	DefaultDatastore v1beta1.DatastoreType
	// DefaultServerSpread applies when spec.serverSpread is empty; empty:
	// Preferred.
	DefaultServerSpread v1beta1.ServerSpread
	// Isolation holds the defaults of spec.quota, spec.limits and
	// spec.networkPolicy (isolation.go).
	Isolation IsolationDefaults
	// ServerGOGC is the GOGC the k3s container gets unless the Cluster's
	// serverEnvs sets one; 0 sets none (Go's default, 100). See serverEnv.
	ServerGOGC int
	// Agent holds what every shared-mode agent is started with besides the
	// Cluster's own choices (the chart's sharedAgent values).
	Agent AgentDefaults
	// HostServiceCIDR is the host cluster's Service network (one CIDR). New
	// shared-mode Clusters that leave spec.serviceCIDR empty get it, so that
	// the ClusterIP the virtual API server allocates is free on the host too
	// and the agent's host copy takes the same address: a virtual ClusterIP
	// then routes. Empty: k3s's own default.
	HostServiceCIDR string
	// NodeLossTimeout is how long a host node holding a server pod may stay
	// not Ready before the controller counts it lost and replaces the pod
	// where that is safe (nodeloss.go); 0 turns node-loss handling off.
	NodeLossTimeout time.Duration
}

// K3sDefaultServiceCIDR is the Service network k3s uses when none is named:
// what every Cluster reconciled before status.serviceCIDR existed runs with.
const K3sDefaultServiceCIDR = "10.43.0.0/16"

// DefaultHostClusterDomain is the host cluster's DNS domain unless
// AgentDefaults.HostClusterDomain says otherwise; the agent assumes it too.
const DefaultHostClusterDomain = "cluster.local"

// AgentDefaults are the host administrator's security defaults for every
// shared-mode agent. The zero value adds nothing to an agent's command line:
// the agent's built-in defaults apply, and the Deployments of existing agents
// do not change (and restart them) on an upgrade of the controller.
type AgentDefaults struct {
	// DisableSeccompDefault passes --seccomp-default=false: a workload
	// container that asks for no seccomp profile no longer gets the agent's
	// RuntimeDefault (the host kubelet's default applies, usually
	// Unconfined).
	DisableSeccompDefault bool
	// SeccompLocalhostProfiles are the Localhost seccomp profiles (relative
	// to the host kubelet's seccomp directory) a workload may name
	// (--seccomp-localhost-profiles); empty: the agent allows none.
	SeccompLocalhostProfiles []string
	// AppArmorLocalhostProfiles are the Localhost AppArmor profiles (loaded
	// on every host node) a workload may name
	// (--apparmor-localhost-profiles); empty: the agent allows none.
	AppArmorLocalhostProfiles []string
	// DefaultRequests and DefaultLimits are the requests and limits a
	// workload container that sets none gets (--default-requests,
	// --default-limits); empty: the agent's own, cpu=10m,memory=32Mi and
	// memory=512Mi.
	DefaultRequests, DefaultLimits corev1.ResourceList
	// HostClusterDomain is the host cluster's DNS domain; empty means
	// DefaultHostClusterDomain. Passed to agents (--host-cluster-domain)
	// only when it is another, and used to resolve a one-label external
	// datastore host the way a server pod's resolver would.
	HostClusterDomain string
	// DisableAlwaysPullImages passes --always-pull-images=false: host
	// containers keep the tenant's pull policy, and a tenant can run an
	// image another tenant's credentials brought into a node's cache. For
	// hosts whose images are loaded into the nodes, never pulled.
	DisableAlwaysPullImages bool
	// PriorityClasses maps virtual priority class names to host
	// PriorityClasses (--priority-classes): the only host classes the
	// agents' pods may carry, since a host pod's priority decides whom the
	// host's scheduler preempts. Empty: none, every workload at the host's
	// default priority.
	PriorityClasses map[string]string
	// DisableStorageClassCopies passes --storage-class-copies=false: the
	// virtual clusters show no StorageClasses, and the controller does not
	// read the host's (storageclass.go).
	DisableStorageClassCopies bool
	// AllowRegistryAddresses passes --allow-registry-addresses: images may
	// name their registry by IP, localhost or a one-label name.
	AllowRegistryAddresses bool
	// UserNamespaces is whether agents run their pods in user namespaces
	// (--user-namespaces), decided per Cluster (userns.go) and reported in
	// its UserNamespaces condition; off when empty.
	UserNamespaces UserNamespacesMode
}

// hostClusterDomain is d.HostClusterDomain or the default.
func (d AgentDefaults) hostClusterDomain() string {
	if d.HostClusterDomain == "" {
		return DefaultHostClusterDomain
	}
	return d.HostClusterDomain
}

// Settings are a Cluster's choices with the controller's defaults applied.
type Settings struct {
	Persistence  v1beta1.PersistenceType
	Datastore    v1beta1.DatastoreType
	StorageClass *string
	StorageSize  resource.Quantity
	ServerImage  string
	Servers      int32
	// ServerSpread is spec.serverSpread or the controller's default.
	ServerSpread v1beta1.ServerSpread
	// EtcdQuotaBytes is spec.datastore.etcd.quotaBackendSize in bytes; 0 when
	// unset (etcd's own default applies).
	EtcdQuotaBytes int64
	// ExternalSecret is which keys the external datastore Secret holds, as
	// observed by reconcileExternalSecret (zero without a secretRef).
	ExternalSecret ExternalSecretKeys
	// Migrating: a migration from sqlite to etcd is under way, before its
	// switch (the spec says etcd, status.datastore.type still sqlite).
	// Datastore is etcd and Servers 1: server pod 0 runs etcd member 0,
	// which loads the SQLite data (migration.go).
	Migrating bool
	// MigratedFrom is sqlite for a cluster migrated from sqlite to etcd
	// (status.datastore.migratedFrom): its pods keep the migration's flag.
	MigratedFrom v1beta1.DatastoreType
	// ServiceCIDR is the virtual Service network in effect (serviceCIDR).
	ServiceCIDR string
}

// InvalidSpecError is a spec that admission accepted but the controller cannot
// realise with its defaults (for example servers: 3 with the default sqlite).
type InvalidSpecError struct{ Message string }

func (e *InvalidSpecError) Error() string { return e.Message }

// Resolve applies cfg's defaults to c and checks what admission could not
// check because it depends on those defaults.
func Resolve(c *v1beta1.Cluster, cfg Config) (Settings, error) {
	s := Settings{
		Persistence:  c.Spec.Persistence.Type,
		Datastore:    c.Spec.Datastore.Type,
		StorageClass: c.Spec.Persistence.StorageClassName,
		Servers:      c.Spec.Servers,
		ServiceCIDR:  serviceCIDR(c, cfg),
	}
	// A type left unset is resolved once, when the Cluster is created, and
	// recorded in its status; from then on the recorded type holds, so that a
	// changed controller default never switches an existing cluster.
	if s.Persistence == "" {
		s.Persistence = c.Status.PersistenceType
	}
	if s.Persistence == "" {
		s.Persistence = cfg.DefaultPersistence
	}
	if s.Persistence == "" {
		s.Persistence = v1beta1.DynamicPersistence
	}
	var recorded v1beta1.DatastoreType
	if c.Status.Datastore != nil {
		recorded = c.Status.Datastore.Type
		if recorded == v1beta1.EtcdDatastore {
			s.MigratedFrom = c.Status.Datastore.MigratedFrom
		}
	}
	if s.Datastore == "" {
		s.Datastore = recorded
	}
	if s.Datastore == "" {
		s.Datastore = cfg.DefaultDatastore
	}
	if s.Datastore == "" {
		s.Datastore = v1beta1.SQLiteDatastore
	}
	if s.StorageClass == nil && cfg.DefaultStorageClass != "" {
		s.StorageClass = ptr.To(cfg.DefaultStorageClass)
	}
	if s.Servers == 0 {
		s.Servers = 1
	}
	s.ServerSpread = c.Spec.ServerSpread
	if s.ServerSpread == "" {
		s.ServerSpread = cfg.DefaultServerSpread
	}
	if s.ServerSpread == "" {
		s.ServerSpread = v1beta1.SpreadPreferred
	}
	size := c.Spec.Persistence.StorageRequestSize
	if size == "" {
		size = "2Gi"
	}
	q, err := resource.ParseQuantity(size)
	if err != nil {
		return s, &InvalidSpecError{Message: fmt.Sprintf("persistence.storageRequestSize %q is not a quantity", size)}
	}
	s.StorageSize = q
	version := c.Spec.Version
	if version == "" {
		version = cfg.DefaultVersion
	}
	s.ServerImage = cfg.ServerImage + ":" + version
	switch {
	case s.Datastore == v1beta1.EtcdDatastore && recorded == v1beta1.SQLiteDatastore:
		// The migration: one server, member 0, until the switch; then
		// spec.servers, grown as any etcd cluster grows.
		s.Migrating, s.Servers = true, 1
	case s.Datastore == v1beta1.SQLiteDatastore && recorded == v1beta1.EtcdDatastore:
		// The CRD refuses it; a Cluster stored before its rules were
		// installed is refused here.
		return s, &InvalidSpecError{Message: "datastore.type sqlite, but the cluster's data is in etcd (status.datastore.type etcd): a migration goes from sqlite to etcd only, and there is no way back after its switch; set datastore.type etcd again"}
	}
	if s.Datastore == v1beta1.SQLiteDatastore && s.Servers != 1 {
		return s, &InvalidSpecError{Message: fmt.Sprintf(
			"servers: %d needs datastore.type etcd; the datastore in effect is sqlite, which runs exactly 1 server", s.Servers)}
	}
	if c.Spec.Datastore.Etcd != nil && s.Datastore != v1beta1.EtcdDatastore {
		return s, &InvalidSpecError{Message: fmt.Sprintf(
			"datastore.etcd is set but the datastore in effect is %s: set datastore.type etcd, or remove datastore.etcd", s.Datastore)}
	}
	if s.EtcdQuotaBytes, err = etcdQuotaBytes(c); err != nil {
		return s, &InvalidSpecError{Message: err.Error()}
	}
	if s.Datastore == v1beta1.EtcdDatastore && s.Servers%2 == 0 {
		return s, &InvalidSpecError{Message: fmt.Sprintf(
			"servers: %d; the datastore in effect is etcd, which needs an odd number of servers (1, 3, 5 or 7) to keep quorum", s.Servers)}
	}
	return s, nil
}

// serviceCIDR is the virtual Service network: spec.serviceCIDR; else the one
// recorded in status; else, for a Cluster never reconciled, the host's when
// its agent runs pods on the host (and spec.clusterDNS, an address picked for
// k3s's network, is unset); else k3s's default. A Cluster whose status was
// written before status.serviceCIDR existed has run with k3s's default all
// along and keeps it: moving an existing cluster's Service network would
// strand every ClusterIP it has handed out.
func serviceCIDR(c *v1beta1.Cluster, cfg Config) string {
	switch {
	case c.Spec.ServiceCIDR != "":
		return c.Spec.ServiceCIDR
	case c.Status.ServiceCIDR != "":
		return c.Status.ServiceCIDR
	case c.Status.PersistenceType != "":
		return K3sDefaultServiceCIDR
	case cfg.AgentImage != "" && cfg.HostServiceCIDR != "" && c.Spec.ClusterDNS == "":
		return cfg.HostServiceCIDR
	}
	return K3sDefaultServiceCIDR
}

// etcdQuotaBytes is spec.datastore.etcd.quotaBackendSize in bytes, 0 when it
// is unset (etcd's default applies).
func etcdQuotaBytes(c *v1beta1.Cluster) (int64, error) {
	e := c.Spec.Datastore.Etcd
	if e == nil || e.QuotaBackendSize == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(e.QuotaBackendSize)
	if err != nil {
		return 0, fmt.Errorf("datastore.etcd.quotaBackendSize %q is not a quantity", e.QuotaBackendSize)
	}
	return q.Value(), nil
}
