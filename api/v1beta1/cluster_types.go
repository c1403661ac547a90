package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterMode says how the virtual cluster's workloads run on the host.
// +kubebuilder:validation:Enum=shared;virtual
type ClusterMode string

const (
	// SharedMode runs the virtual cluster's pods as pods of the host cluster,
	// through an agent that registers as a node of the virtual cluster.
	SharedMode ClusterMode = "shared"
	// VirtualMode runs full k3s agents in pods. It is not supported yet.
	VirtualMode ClusterMode = "virtual"
)

// PersistenceType says where a server keeps its data.
// +kubebuilder:validation:Enum=dynamic;ephemeral
type PersistenceType string

const (
	// DynamicPersistence gives every server a PersistentVolumeClaim: data survives
	// pod deletion and rescheduling.
	DynamicPersistence PersistenceType = "dynamic"
	// EphemeralPersistence keeps data in an emptyDir: it is lost with the pod.
	EphemeralPersistence PersistenceType = "ephemeral"
)

// DatastoreType says what stores the virtual cluster's state.
// +kubebuilder:validation:Enum=sqlite;etcd;external
type DatastoreType string

const (
	// SQLiteDatastore is a SQLite file served over the etcd API by kine in a
	// sidecar. It records no IP address, so a server can come back anywhere. One
	// server only.
	SQLiteDatastore DatastoreType = "sqlite"
	// EtcdDatastore runs an etcd member in every server pod, for HA.
	EtcdDatastore DatastoreType = "etcd"
	// ExternalDatastore is an endpoint the user runs (PostgreSQL, MySQL, etcd).
	ExternalDatastore DatastoreType = "external"
)

// ServerSpread says how a Cluster's server pods are placed over the host's
// nodes.
// +kubebuilder:validation:Enum=Preferred;Required
type ServerSpread string

const (
	// SpreadPreferred spreads the servers over nodes where the scheduler can
	// (a topology spread constraint over kubernetes.io/hostname that never
	// keeps a pod from starting), and places them together where it cannot.
	SpreadPreferred ServerSpread = "Preferred"
	// SpreadRequired never places two servers of a Cluster on one node (pod
	// anti-affinity): with fewer eligible nodes than servers, a server stays
	// Pending and the Cluster says why.
	SpreadRequired ServerSpread = "Required"
)

// VolumeRetention says what happens to server volumes when the Cluster is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type VolumeRetention string

const (
	// DeleteVolumes removes the server PersistentVolumeClaims with the Cluster.
	DeleteVolumes VolumeRetention = "Delete"
	// RetainVolumes keeps them, so a Cluster of the same name and namespace
	// created later starts from the same data.
	RetainVolumes VolumeRetention = "Retain"
)

// Cluster is a virtual Kubernetes cluster whose k3s servers run as pods of the
// host cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=k3kc
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyServers`,description="Server pods that are ready"
// +kubebuilder:printcolumn:name="Servers",type=integer,JSONPath=`.spec.servers`,description="Server pods asked for"
// +kubebuilder:printcolumn:name="Datastore",type=string,JSONPath=`.status.datastore.type`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`,priority=1,description="k3s version asked for; empty: the controller's default"
// +kubebuilder:printcolumn:name="Persistence",type=string,JSONPath=`.status.persistenceType`,priority=1
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.status.policyName`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// Rules that read the status (the datastore and persistence in effect, which
// the controller records; an update of the spec cannot change the status, so
// these see the stored one): the migration from sqlite to etcd.
// +kubebuilder:validation:XValidation:rule="(has(oldSelf.spec.datastore) && has(oldSelf.spec.datastore.type) ? oldSelf.spec.datastore.type : '-') != 'etcd' || (has(self.spec.datastore) && has(self.spec.datastore.type) ? self.spec.datastore.type : '-') != 'sqlite' || (has(self.status) && has(self.status.datastore) && self.status.datastore.type == 'sqlite')",message="datastore.type back to sqlite is allowed only while a migration from sqlite has not switched (status.datastore.type still sqlite): after the switch the writes went to etcd only"
// +kubebuilder:validation:XValidation:rule="(has(oldSelf.spec.datastore) && has(oldSelf.spec.datastore.type) ? oldSelf.spec.datastore.type : '-') == (has(self.spec.datastore) && has(self.spec.datastore.type) ? self.spec.datastore.type : '-') || (has(self.spec.datastore) && has(self.spec.datastore.type) ? self.spec.datastore.type : '-') != 'etcd' || (has(self.spec.persistence) && has(self.spec.persistence.type) ? self.spec.persistence.type : (has(self.status) && has(self.status.persistenceType) ? self.status.persistenceType : '-')) != 'ephemeral'",message="datastore.type: a cluster with persistence ephemeral cannot be migrated to etcd (its server pod made again would lose the SQLite data): snapshot it and restore into a new etcd cluster"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 41",message="metadata.name may be at most 41 characters: it prefixes the host objects' names, and the StatefulSet's revision label must stay within 63"
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	Spec   ClusterSpec   `json:"spec,omitempty"`
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterSpec is what the user asks for.
//
// Rules that span fields. Unset persistence and datastore types are resolved by
// the controller's defaults (set through the Helm chart); setting one later counts
// as a change, so choose them at creation.
//
// +kubebuilder:validation:XValidation:rule="!has(self.datastore) || !has(self.datastore.type) || self.datastore.type != 'sqlite' || self.servers == 1",message="servers: datastore.type sqlite runs exactly 1 server; use datastore.type etcd for more"
// +kubebuilder:validation:XValidation:rule="!has(self.datastore) || !has(self.datastore.type) || self.datastore.type != 'etcd' || self.servers % 2 == 1",message="servers: datastore.type etcd needs an odd number of servers (1, 3, 5 or 7) to keep quorum"
// +kubebuilder:validation:XValidation:rule="(has(self.datastore) && has(self.datastore.type) ? self.datastore.type : '-') == (has(oldSelf.datastore) && has(oldSelf.datastore.type) ? oldSelf.datastore.type : '-') || ((has(oldSelf.datastore) && has(oldSelf.datastore.type) ? oldSelf.datastore.type : '-') in ['sqlite', '-'] && (has(self.datastore) && has(self.datastore.type) ? self.datastore.type : '-') == 'etcd' && (has(oldSelf.datastore) && has(oldSelf.datastore.migrateFrom) ? oldSelf.datastore.migrateFrom : '-') == '-') || ((has(oldSelf.datastore) && has(oldSelf.datastore.type) ? oldSelf.datastore.type : '-') == 'etcd' && (has(self.datastore) && has(self.datastore.type) ? self.datastore.type : '-') == 'sqlite' && (has(self.datastore) && has(self.datastore.migrateFrom) ? self.datastore.migrateFrom : '-') == '-')",message="datastore.type is immutable: create a new cluster to change it; the one change allowed is sqlite to etcd (the migration, docs/backup.md), and back before the migration's switch"
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || !has(self.datastore) || !has(self.datastore.migrateFrom)",message="datastore.migrateFrom cannot be set when a cluster is created: it marks a migration of an existing SQLite cluster (k3kcli cluster migrate)",optionalOldSelf=true
// +kubebuilder:validation:XValidation:rule="(has(self.datastore) && has(self.datastore.migrateFrom) ? self.datastore.migrateFrom : '-') == '-' || (has(self.datastore) && has(self.datastore.migrateFrom) ? self.datastore.migrateFrom : '-') == (has(oldSelf.datastore) && has(oldSelf.datastore.migrateFrom) ? oldSelf.datastore.migrateFrom : '-') || (has(self.datastore) && has(self.datastore.type) ? self.datastore.type : '-') != (has(oldSelf.datastore) && has(oldSelf.datastore.type) ? oldSelf.datastore.type : '-')",message="datastore.migrateFrom is set only together with the change of datastore.type from sqlite to etcd (k3kcli cluster migrate)"
// +kubebuilder:validation:XValidation:rule="(has(self.persistence) && has(self.persistence.type) ? self.persistence.type : '-') == (has(oldSelf.persistence) && has(oldSelf.persistence.type) ? oldSelf.persistence.type : '-')",message="persistence.type is immutable: create a new cluster to change it"
// +kubebuilder:validation:XValidation:rule="(has(self.clusterCIDR) ? self.clusterCIDR : '-') == (has(oldSelf.clusterCIDR) ? oldSelf.clusterCIDR : '-')",message="clusterCIDR is immutable"
// +kubebuilder:validation:XValidation:rule="(has(self.serviceCIDR) ? self.serviceCIDR : '-') == (has(oldSelf.serviceCIDR) ? oldSelf.serviceCIDR : '-')",message="serviceCIDR is immutable"
// +kubebuilder:validation:XValidation:rule="!has(self.clusterDNS) || !has(self.serviceCIDR) || !isIP(self.clusterDNS) || !isCIDR(self.serviceCIDR) || cidr(self.serviceCIDR).containsIP(self.clusterDNS)",message="clusterDNS must be an address inside serviceCIDR"
// +kubebuilder:validation:XValidation:rule="!has(self.datastore) || !has(self.datastore.etcd) || !has(self.datastore.etcd.quotaBackendSize) || !isQuantity(self.datastore.etcd.quotaBackendSize) || quantity(self.datastore.etcd.quotaBackendSize).compareTo(has(self.persistence) && has(self.persistence.storageRequestSize) && isQuantity(self.persistence.storageRequestSize) ? quantity(self.persistence.storageRequestSize) : quantity('2Gi')) <= 0",message="datastore.etcd.quotaBackendSize may not exceed persistence.storageRequestSize (unset, and with ephemeral persistence, 2Gi): the database must fit on the server volume"
// +kubebuilder:validation:XValidation:rule="!has(self.restoreFrom) || !has(self.datastore) || !has(self.datastore.type) || self.datastore.type != 'external'",message="restoreFrom: a snapshot cannot be restored into datastore.type external (k3k does not hold its data)"
// +kubebuilder:validation:XValidation:rule="!has(self.restoreFrom) || !has(self.tokenSecretRef)",message="restoreFrom: the cluster gets the snapshot's token (its data is encrypted with it); tokenSecretRef cannot be set with it"
// +kubebuilder:validation:XValidation:rule="has(self.restoreFrom) == has(oldSelf.restoreFrom) && (!has(self.restoreFrom) || self.restoreFrom == oldSelf.restoreFrom)",message="restoreFrom is immutable: it is honoured only when the cluster is created"
// +kubebuilder:validation:XValidation:rule="!has(self.backup) || !has(self.datastore) || !has(self.datastore.type) || self.datastore.type != 'external'",message="backup: scheduled snapshots are not supported with datastore.type external (k3k does not hold its data): back it up with the datastore's own tools"
// +kubebuilder:validation:XValidation:rule="(has(self.persistence) && has(self.persistence.storageRequestSize) && isQuantity(self.persistence.storageRequestSize) ? quantity(self.persistence.storageRequestSize) : quantity('2Gi')).compareTo(has(oldSelf.persistence) && has(oldSelf.persistence.storageRequestSize) && isQuantity(oldSelf.persistence.storageRequestSize) ? quantity(oldSelf.persistence.storageRequestSize) : quantity('2Gi')) >= 0",message="persistence.storageRequestSize may only grow (unset means 2Gi)"
type ClusterSpec struct {
	// Mode is how workloads run: shared (the virtual cluster's pods run as host
	// pods). virtual is reserved and rejected until it is built. Immutable.
	// +kubebuilder:default=shared
	// +kubebuilder:validation:XValidation:rule="self == 'shared'",message="mode: only 'shared' is supported; 'virtual' is not supported yet"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="mode is immutable"
	// +optional
	Mode ClusterMode `json:"mode,omitempty"`

	// Servers is the number of k3s server pods. sqlite: 1; etcd: 1, 3, 5 or 7.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=7
	// +optional
	Servers int32 `json:"servers,omitempty"`

	// Paused stops the cluster while keeping its data: the server StatefulSet
	// and the agent are scaled to zero, volumes, Secrets and Services stay, and
	// the phase becomes Paused. Setting it back to false starts the same
	// servers on the same volumes. Honoured for sqlite and external datastores
	// with dynamic persistence; with etcd or ephemeral persistence the
	// controller keeps the cluster running and says why in the Paused condition.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// Version is the k3s image tag the servers run, e.g. v1.34.3-k3s1. Empty means
	// the controller's default.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_.+-]*$`
	// +optional
	Version string `json:"version,omitempty"`

	// ClusterCIDR is the virtual cluster's pod network. Immutable.
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="clusterCIDR must be a CIDR such as 10.42.0.0/16"
	// +optional
	ClusterCIDR string `json:"clusterCIDR,omitempty"`

	// ServiceCIDR is the virtual cluster's Service network. Immutable. When
	// empty, a shared-mode Cluster created by this controller gets the host's
	// Service network (the controller's --host-service-cidr, or the host's
	// ServiceCIDR "kubernetes"), so that a virtual Service's ClusterIP is its
	// host copy's and routes on the host; otherwise k3s's 10.43.0.0/16. The
	// network chosen is recorded in status.serviceCIDR and kept.
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="serviceCIDR must be a CIDR such as 10.43.0.0/16"
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`

	// ClusterDNS is the IP address of the virtual cluster's DNS Service.
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="clusterDNS must be an IP address"
	// +optional
	ClusterDNS string `json:"clusterDNS,omitempty"`

	// TLSSANs are extra names and addresses the API server's certificate is valid
	// for, on top of the ones the controller adds for its Services: DNS names in
	// lower case (a leading "*." makes a wildcard) or IP addresses.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.all(s, isIP(s) || s.matches('^([*][.])?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?([.][a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$'))",message="tlsSANs: every entry must be a DNS name in lower case (e.g. k3k.example.com, *.example.com) or an IP address"
	// +optional
	TLSSANs []string `json:"tlsSANs,omitempty"`

	// ServerArgs are extra `k3s server` arguments, appended after the ones the
	// controller generates, so they would win over them: every flag that sets
	// something k3k generates is refused, under each of its names and forms
	// (`--flag`, `-flag`, `--flag=value`, k3s's short aliases), with a message
	// naming the flag. docs/architecture.md lists them and says why.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.all(a, !a.contains('$('))",message="serverArgs may not contain $( (the kubelet would expand it from the server container's environment, which holds Secret values; see docs/security.md)"
	// +kubebuilder:validation:XValidation:rule="self.all(a, !a.matches('^--?(config|c|token|t|token-file|agent-token|agent-token-file|server|s|cluster-init|cluster-reset|cluster-reset-restore-path|data-dir|d|datastore-endpoint|datastore-cafile|datastore-certfile|datastore-keyfile|kine-tls|write-kubeconfig|o|write-kubeconfig-mode|write-kubeconfig-group|https-listen-port|supervisor-port|apiserver-port|apiserver-bind-address|bind-address|advertise-address|advertise-port|node-ip|i|node-external-ip|tls-san|cluster-cidr|service-cidr|cluster-dns|cluster-domain|egress-selector-mode|disable-agent|disable-apiserver|disable-etcd|disable-controller-manager|disable-cloud-controller|help|h)(=.*)?$'))",messageExpression="'serverArgs: ' + self.filter(a, a.matches('^--?(config|c|token|t|token-file|agent-token|agent-token-file|server|s|cluster-init|cluster-reset|cluster-reset-restore-path|data-dir|d|datastore-endpoint|datastore-cafile|datastore-certfile|datastore-keyfile|kine-tls|write-kubeconfig|o|write-kubeconfig-mode|write-kubeconfig-group|https-listen-port|supervisor-port|apiserver-port|apiserver-bind-address|bind-address|advertise-address|advertise-port|node-ip|i|node-external-ip|tls-san|cluster-cidr|service-cidr|cluster-dns|cluster-domain|egress-selector-mode|disable-agent|disable-apiserver|disable-etcd|disable-controller-manager|disable-cloud-controller|help|h)(=.*)?$'))[0].split('=')[0] + ' is set by k3k and cannot be overridden: the config file, token, datastore, data directory, kubeconfig, listen addresses and ports and the components k3k runs are generated; TLS SANs, networks and cluster DNS come from spec.tlsSANs, spec.clusterCIDR, spec.serviceCIDR and spec.clusterDNS'",reason=FieldValueForbidden
	// +kubebuilder:validation:XValidation:rule="self.all(a, a != '--kube-apiserver-arg' && a != '-kube-apiserver-arg')",message="serverArgs: write --kube-apiserver-arg=<flag>=<value> as one item, so that admission can check which API server flag it sets",reason=FieldValueInvalid
	// +kubebuilder:validation:XValidation:rule="self.all(a, !a.matches('^--?kube-apiserver-arg=(--)?(etcd-[a-z-]*|storage-backend|secure-port|bind-address)[+-]?(=.*)?$'))",message="serverArgs: --kube-apiserver-arg may not set etcd-*, storage-backend, secure-port or bind-address: the API server's storage and listener are k3k's (they would bypass the datastore k3k runs)",reason=FieldValueForbidden
	// +kubebuilder:validation:XValidation:rule="self.all(a, !a.matches('^--?kube-apiserver-arg=[^a-z-]'))",message="serverArgs: --kube-apiserver-arg=<flag>=<value> must start with the flag's name: k3s trims leading white space, so the flag could not be checked",reason=FieldValueInvalid
	// +optional
	ServerArgs []string `json:"serverArgs,omitempty"`

	// ServerEnvs are extra environment variables for the k3s container, limited
	// to what cannot change what k3k generates (see ServerEnvVar).
	// +kubebuilder:validation:MaxItems=32
	// +optional
	ServerEnvs []ServerEnvVar `json:"serverEnvs,omitempty"`

	// ServerResources are the k3s container's resource requests and limits.
	// +optional
	ServerResources *corev1.ResourceRequirements `json:"serverResources,omitempty"`

	// NodeSelector constrains which host nodes run the server pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// ServerSpread says how the server pods of an etcd or external-datastore
	// Cluster are placed over the host's nodes, so that one node's loss or
	// drain takes as few servers as it can: Preferred (over nodes where the
	// scheduler can) or Required (never two on one node). Empty: the
	// controller's default (chart value serverSpread, itself Preferred). A
	// SQLite Cluster's one server is placed as any pod.
	// +optional
	ServerSpread ServerSpread `json:"serverSpread,omitempty"`

	// TokenSecretRef names a Secret (key "token") holding the cluster token. When
	// empty the controller generates one into Secret k3k-<name>-token, once.
	// +optional
	TokenSecretRef *TokenSecretReference `json:"tokenSecretRef,omitempty"`

	// Persistence says where servers keep their data.
	// +optional
	Persistence PersistenceConfig `json:"persistence,omitempty"`

	// Datastore says what stores the cluster state.
	// +optional
	Datastore DatastoreConfig `json:"datastore,omitempty"`

	// Expose says how the API is reached from outside the host cluster. Empty
	// means in-cluster only, through Service k3k-<name>-service.
	// +optional
	Expose *ExposeConfig `json:"expose,omitempty"`

	// Isolation on the host (docs/security.md). Each field left empty takes
	// the controller's default, set through the Helm chart.

	// Quota bounds what the namespace may use on the host: a ResourceQuota
	// k3k-<name>-quota in the Cluster's namespace. It counts every pod of the
	// namespace, the cluster's own servers and agent included.
	// +optional
	Quota *QuotaConfig `json:"quota,omitempty"`

	// Limits gives containers that set no resources a default and caps each
	// container: a LimitRange k3k-<name>-limits in the Cluster's namespace. It
	// applies to the server containers too.
	// +optional
	Limits *LimitsConfig `json:"limits,omitempty"`

	// NetworkPolicy keeps the virtual cluster's pods to their own cluster:
	// NetworkPolicies k3k-<name>-* in the Cluster's namespace.
	// +optional
	NetworkPolicy *NetworkPolicyConfig `json:"networkPolicy,omitempty"`

	// PodSecurityLevel is the Pod Security Standard every host pod of the
	// shared-mode agent must meet: baseline (the default), restricted, or
	// privileged, which takes effect only where the host administrator allowed
	// it (the chart's sharedAgent.allowPrivilegedPods); otherwise baseline holds.
	// +kubebuilder:default=baseline
	// +optional
	PodSecurityLevel PodSecurityLevel `json:"podSecurityLevel,omitempty"`

	// StorageClasses are the host storage classes the virtual cluster's
	// PersistentVolumeClaims and generic ephemeral volumes may name, on top
	// of the host's default class (a claim that names no class), which is
	// always allowed. Empty: only the default class. The class "" (no class,
	// which binds volumes an administrator made by hand) is never allowed.
	// The shared-mode agent passes nothing else of a claim to the host than
	// its size, access modes, volume mode and class (docs/agent.md).
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +listType=set
	// +optional
	StorageClasses []string `json:"storageClasses,omitempty"`

	// Ingresses copies the virtual cluster's Ingresses into the Cluster's
	// namespace, where the host's ingress controller serves them, routed to
	// the host copies of the virtual Services. Off unless enabled.
	// +optional
	Ingresses *IngressSyncConfig `json:"ingresses,omitempty"`

	// MaxTerminationGracePeriodSeconds is the longest grace period a host pod
	// of the virtual cluster's workloads gets (a pod asking for more gets
	// this), and the longest a deleted workload runs on after its virtual pod
	// or the Cluster is gone. Unset: the shared-mode agent's default, 300.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	MaxTerminationGracePeriodSeconds *int64 `json:"maxTerminationGracePeriodSeconds,omitempty"`

	// Backup takes snapshots of the datastore on a schedule (a CronJob
	// k3k-<name>-backup in the Cluster's namespace) onto a volume claim of the
	// namespace. Removing it removes the CronJob and its rights, never the
	// claim or the snapshots on it. Not for datastore.type external, whose
	// data k3k does not hold: back that up with its own tools.
	// +optional
	Backup *BackupConfig `json:"backup,omitempty"`

	// RestoreFrom creates the cluster from a snapshot file on a volume claim
	// of the namespace (e.g. one spec.backup wrote) instead of empty: the
	// controller generates no token, starts the servers with empty
	// datastores, and a Job k3k-<name>-restore loads the snapshot into the
	// first server's datastore and gives the cluster the snapshot's token
	// (docs/backup.md). Honoured only at creation: it cannot be set, changed
	// or removed later, and it is ignored (condition Restored, reason
	// RestoreIgnored) when server volumes of this cluster exist already. Not
	// for datastore.type external, nor with tokenSecretRef: the cluster gets
	// the snapshot's token.
	// +optional
	RestoreFrom *RestoreSource `json:"restoreFrom,omitempty"`
}

// RestoreSource is a snapshot file on a PersistentVolumeClaim of the
// Cluster's namespace. The claim must carry the label
// k3k.io/restore-for=<cluster name> (or k3k.io/backup-for=<cluster name>,
// which hands over more): the restore Job mounts it read-only, and without
// the owner's label whoever may create a Cluster could have that Job read
// any claim of the namespace.
type RestoreSource struct {
	// ClaimName is the PersistentVolumeClaim holding the file.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	ClaimName string `json:"claimName"`

	// File is the snapshot's file name on the claim, at its top level (as
	// spec.backup writes them): a plain name, no '/' and not '.' or '..'.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="!self.contains('/') && self != '.' && self != '..'",message="restoreFrom.file must be a plain file name on the claim: no '/', not '.' or '..'",reason=FieldValueInvalid
	File string `json:"file"`
}

// BackupConfig is a Cluster's scheduled snapshots (docs/backup.md).
//
// The snapshots go to a PersistentVolumeClaim the Cluster's owner made, named
// by claimName, rather than to one the controller would create: a backup
// that is deleted with what it backs up is no backup, and the claim's size,
// class, access mode and lifetime are the owner's choice. The controller
// never creates, resizes or deletes it. The claim must be labelled
// k3k.io/backup-for=<cluster>; claims k3k made (the server volumes) are
// refused: snapshots would fill the volume they are taken of.
type BackupConfig struct {
	// Schedule is when a snapshot is taken, in cron syntax (five fields,
	// minute hour day-of-month month day-of-week, in UTC, or a macro such as
	// @daily), as a CronJob's schedule. A run that would start while the
	// previous one is still running is skipped.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[0-9A-Za-z*/,?-]+( +[0-9A-Za-z*/,?-]+){4})$')",message="backup.schedule must be a cron schedule of five fields (minute hour day-of-month month day-of-week, e.g. '0 3 * * *') or a macro such as @daily; time zones (CRON_TZ=, TZ=) are not supported: schedules are in UTC",reason=FieldValueInvalid
	Schedule string `json:"schedule"`

	// Keep is how many of this cluster's snapshots stay on the claim; after
	// each successful snapshot the oldest beyond it are deleted. Only files
	// the backup wrote (named <cluster>-<time>-r<revision>.k3ksnap) count and
	// are ever deleted. Each snapshot holds every secret of the cluster, so
	// fewer is safer. Default 7.
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	Keep int32 `json:"keep,omitempty"`

	// ClaimName is a PersistentVolumeClaim in the Cluster's namespace that
	// holds the snapshots. It must exist and carry the label
	// k3k.io/backup-for=<cluster name>: the claim's owner hands it over, so
	// that whoever may create a Cluster cannot have the backup Job mount
	// (and, through fsGroup, change the group of) any claim of the
	// namespace. A name only: the claim is always the Cluster's namespace's.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	ClaimName string `json:"claimName"`
}

// IngressSyncConfig says whether and how the shared-mode agent copies the
// virtual cluster's Ingresses to the host (docs/agent.md).
type IngressSyncConfig struct {
	// Enabled copies Ingresses to the host.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// Classes maps the ingress classes a virtual Ingress may name to host
	// IngressClasses. An Ingress that names no class gets the host's default
	// class; one naming a class not listed here is not copied.
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	Classes map[string]IngressClassName `json:"classes,omitempty"`
	// Hosts are the hostnames a virtual Ingress may claim on the host's
	// ingress controller, which serves every tenant: a name
	// (shop.example.com), or a wildcard (*.tenant.example.com) for every
	// name under it. An Ingress whose rule or TLS entry names any other
	// host, a rule without a host, or a default backend (both answer for
	// every name the controller serves that nobody else claimed) is not
	// copied, with a Warning Event that says why. Empty: no Ingress is
	// copied.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`
	// +listType=set
	// +optional
	Hosts []string `json:"hosts,omitempty"`
}

// IngressClassName names a host IngressClass.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
type IngressClassName string

// QuotaConfig is the ResourceQuota of a Cluster.
type QuotaConfig struct {
	// Hard are ResourceQuota hard limits (pods, requests.cpu, limits.memory,
	// requests.storage, persistentvolumeclaims, services, count/<resource>,
	// ...), each replacing the controller's default of the same name.
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['pods', 'services', 'services.loadbalancers', 'services.nodeports', 'secrets', 'configmaps', 'persistentvolumeclaims', 'replicationcontrollers', 'resourcequotas', 'cpu', 'memory', 'storage', 'ephemeral-storage'] || k.startsWith('requests.') || k.startsWith('limits.') || k.startsWith('count/') || k.contains('.storageclass.storage.k8s.io/'))",message="quota.hard: keys must be ResourceQuota resource names such as pods, requests.cpu, limits.memory, requests.storage or count/deployments.apps"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !string(self[k]).startsWith('-'))",message="quota.hard: values may not be negative"
	// +optional
	Hard map[corev1.ResourceName]resource.Quantity `json:"hard,omitempty"`
}

// LimitsConfig is the LimitRange of a Cluster, for containers. Each list
// replaces the controller's default entry of the same resource.
// +kubebuilder:validation:XValidation:rule="!has(self.defaultRequest) || !has(self.default) || self.defaultRequest.all(k, !(k in self.default) || quantity(string(self.defaultRequest[k])).compareTo(quantity(string(self.default[k]))) <= 0)",message="limits: defaultRequest may not exceed default"
// +kubebuilder:validation:XValidation:rule="!has(self.max) || !has(self.default) || self.default.all(k, !(k in self.max) || quantity(string(self.default[k])).compareTo(quantity(string(self.max[k]))) <= 0)",message="limits: default may not exceed max"
// +kubebuilder:validation:XValidation:rule="!has(self.max) || !has(self.defaultRequest) || self.defaultRequest.all(k, !(k in self.max) || quantity(string(self.defaultRequest[k])).compareTo(quantity(string(self.max[k]))) <= 0)",message="limits: defaultRequest may not exceed max"
type LimitsConfig struct {
	// DefaultRequest are the requests of a container that sets none.
	// +kubebuilder:validation:MaxProperties=6
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'] || k.contains('/'))",message="limits.defaultRequest: keys must be cpu, memory, ephemeral-storage or an extended resource"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !string(self[k]).startsWith('-'))",message="limits.defaultRequest: values may not be negative"
	// +optional
	DefaultRequest map[corev1.ResourceName]resource.Quantity `json:"defaultRequest,omitempty"`
	// Default are the limits of a container that sets none.
	// +kubebuilder:validation:MaxProperties=6
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'] || k.contains('/'))",message="limits.default: keys must be cpu, memory, ephemeral-storage or an extended resource"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !string(self[k]).startsWith('-'))",message="limits.default: values may not be negative"
	// +optional
	Default map[corev1.ResourceName]resource.Quantity `json:"default,omitempty"`
	// Max is the most one container may ask for (its limit).
	// +kubebuilder:validation:MaxProperties=6
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'] || k.contains('/'))",message="limits.max: keys must be cpu, memory, ephemeral-storage or an extended resource"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !string(self[k]).startsWith('-'))",message="limits.max: values may not be negative"
	// +optional
	Max map[corev1.ResourceName]resource.Quantity `json:"max,omitempty"`
}

// NetworkPolicyConfig switches a Cluster's NetworkPolicies.
type NetworkPolicyConfig struct {
	// Enabled makes the NetworkPolicies; false removes them. Empty means the
	// controller's default (on unless the chart turned it off).
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// ServerEnvVar is an environment variable of the k3s container: the fields of
// a container's env entry, with what k3k accepts in them narrowed.
//
// Only names that cannot change what k3k generates are accepted: the proxy
// variables (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, upper or lower case), the Go
// runtime's GOMAXPROCS, GOMEMLIMIT and GOGC, and TZ. Every K3S_* variable is a
// second way to set a k3s flag (K3S_CONFIG_FILE even replaces k3k's config
// file), and others redirect k3s or what it runs (KUBECONFIG, HOME,
// KINE_*, LD_PRELOAD); set k3s flags through serverArgs. Values are literal or
// from the downward API (fieldRef, resourceFieldRef): a secretKeyRef or
// configMapKeyRef would let whoever writes the Cluster hand the server pod any
// Secret or ConfigMap of the namespace.
type ServerEnvVar struct {
	// Name of the variable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self in ['HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'http_proxy', 'https_proxy', 'no_proxy', 'GOMAXPROCS', 'GOMEMLIMIT', 'GOGC', 'TZ']",messageExpression="'serverEnvs: ' + self + ' is not allowed: only HTTP_PROXY, HTTPS_PROXY, NO_PROXY (either case), GOMAXPROCS, GOMEMLIMIT, GOGC and TZ are; K3S_* variables and the like would override what k3k generates (set k3s flags through serverArgs)'",reason=FieldValueForbidden
	Name string `json:"name"`
	// Value of the variable. It may not hold $( : the kubelet would expand
	// $(VAR) from the container's environment, which can hold a Secret's value
	// (the external datastore endpoint), into a variable k3s may send elsewhere.
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="!self.contains('$(')",message="serverEnvs: values may not contain $( (the kubelet would expand it from the server container's environment, which holds Secret values; see docs/security.md)",reason=FieldValueForbidden
	// +optional
	Value string `json:"value,omitempty"`
	// ValueFrom takes the value from the downward API.
	// +kubebuilder:validation:XValidation:rule="(has(self.fieldRef) || has(self.resourceFieldRef)) && !has(self.secretKeyRef) && !has(self.configMapKeyRef) && !has(self.fileKeyRef)",message="serverEnvs: valueFrom may only use fieldRef or resourceFieldRef; secretKeyRef, configMapKeyRef and fileKeyRef would hand the server pod any Secret, ConfigMap or file of the namespace",reason=FieldValueForbidden
	// +optional
	ValueFrom *corev1.EnvVarSource `json:"valueFrom,omitempty"`
}

// EnvVar is e as a container's environment variable.
func (e ServerEnvVar) EnvVar() corev1.EnvVar {
	out := corev1.EnvVar{Name: e.Name, Value: e.Value}
	if e.ValueFrom != nil {
		out.ValueFrom = e.ValueFrom.DeepCopy()
	}
	return out
}

// PodSecurityLevel is a Pod Security Standards level
// (https://kubernetes.io/docs/concepts/security/pod-security-standards/).
// +kubebuilder:validation:Enum=baseline;restricted;privileged
type PodSecurityLevel string

const (
	// PodSecurityBaseline refuses the known privilege escalations: host
	// namespaces, privileged containers, added capabilities beyond the default
	// set, unconfined seccomp and AppArmor, SELinux options, unmasked /proc,
	// unsafe sysctls, probe and lifecycle hosts.
	PodSecurityBaseline PodSecurityLevel = "baseline"
	// PodSecurityRestricted adds the hardening rules: non-root, no privilege
	// escalation, all capabilities dropped, a seccomp profile.
	PodSecurityRestricted PodSecurityLevel = "restricted"
	// PodSecurityPrivileged lifts the Pod Security Standards (the agent's own
	// refusals of host namespaces, hostPath and host ports still hold).
	PodSecurityPrivileged PodSecurityLevel = "privileged"
)

// TokenSecretReference names a Secret in the Cluster's namespace.
type TokenSecretReference struct {
	// Name of the Secret; its key "token" holds the token.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// PersistenceConfig says where servers keep their data.
// +kubebuilder:validation:XValidation:rule="!has(self.type) || self.type != 'ephemeral' || !has(self.storageRequestSize)",message="persistence.storageRequestSize cannot be set with persistence.type ephemeral: an emptyDir has no claim to size"
type PersistenceConfig struct {
	// Type is dynamic (a PersistentVolumeClaim per server) or ephemeral (an
	// emptyDir: data is lost when a pod is deleted). Empty means the controller's
	// default. Immutable.
	// +optional
	Type PersistenceType `json:"type,omitempty"`

	// StorageClassName of the claims; empty means the controller's default, then
	// the host cluster's default class.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// StorageRequestSize of each claim; empty means 2Gi. It may grow but never
	// shrink (a rule on the spec), must be above zero, and may not be set with
	// type ephemeral (there is no claim).
	// +kubebuilder:validation:XValidation:rule="isQuantity(self)",message="persistence.storageRequestSize must be a quantity such as 2Gi"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(self) || quantity(self).isGreaterThan(quantity('0'))",message="persistence.storageRequestSize must be greater than zero"
	// +optional
	StorageRequestSize string `json:"storageRequestSize,omitempty"`

	// WhenDeleted says what happens to the claims when the Cluster is deleted:
	// Delete (default) or Retain (a Cluster created later under the same name
	// and namespace reuses the data).
	// +kubebuilder:default=Delete
	// +optional
	WhenDeleted VolumeRetention `json:"whenDeleted,omitempty"`
}

// DatastoreConfig says what stores the cluster state.
// +kubebuilder:validation:XValidation:rule="!has(self.type) || self.type != 'external' || (has(self.external) && size(self.external.endpoint) > 0)",message="datastore.external.endpoint is required when datastore.type is external"
// +kubebuilder:validation:XValidation:rule="!has(self.external) || (has(self.type) && self.type == 'external')",message="datastore.external may only be set when datastore.type is external"
// +kubebuilder:validation:XValidation:rule="!has(self.etcd) || !has(self.type) || self.type == 'etcd'",message="datastore.etcd may only be set when datastore.type is etcd (or empty, with etcd as the controller's default)"
// +kubebuilder:validation:XValidation:rule="!has(self.migrateFrom) || (has(self.type) && self.type == 'etcd')",message="datastore.migrateFrom may only be set when datastore.type is etcd"
type DatastoreConfig struct {
	// Type is sqlite, etcd or external. Empty means the controller's default.
	// Immutable, but for the migration from sqlite to etcd (docs/backup.md):
	// sqlite (or unset, resolved to sqlite) to etcd, and back to sqlite
	// until the migration's switch (status.datastore.type etcd).
	// +optional
	Type DatastoreType `json:"type,omitempty"`

	// External is the endpoint of a datastore the user runs.
	// +optional
	External *ExternalDatastoreConfig `json:"external,omitempty"`

	// Etcd tunes the members of datastore.type etcd.
	// +optional
	Etcd *EtcdDatastoreConfig `json:"etcd,omitempty"`

	// MigrateFrom sqlite may accompany the change of datastore.type from
	// sqlite (or unset) to etcd, in the same update; it is accepted for
	// compatibility with earlier k3kcli versions and changes nothing: the
	// type change alone starts the migration (docs/backup.md), and the
	// controller tells a migration from a new etcd cluster by the type it
	// recorded in status.datastore.type. It cannot be set otherwise.
	// +kubebuilder:validation:Enum=sqlite
	// +optional
	MigrateFrom DatastoreType `json:"migrateFrom,omitempty"`
}

// EtcdDatastoreConfig tunes the etcd members of datastore.type etcd.
type EtcdDatastoreConfig struct {
	// QuotaBackendSize is the size of a member's database at which etcd raises
	// the NOSPACE alarm and refuses every write that adds data (etcd's
	// --quota-backend-bytes). Empty means etcd's default, 2Gi. Between 256Mi
	// and 8Gi (etcd's suggested maximum), and no larger than the server
	// volume (2Gi with ephemeral persistence, whose emptyDir has no size of
	// its own to hold it to). Raising it is how a cluster whose live data outgrew the quota
	// gets writable again (docs/etcd.md, Alarms); a change restarts the
	// members one at a time.
	// +kubebuilder:validation:XValidation:rule="isQuantity(self) && quantity(self).compareTo(quantity('256Mi')) >= 0 && quantity(self).compareTo(quantity('8Gi')) <= 0",message="datastore.etcd.quotaBackendSize must be a quantity between 256Mi and 8Gi"
	// +optional
	QuotaBackendSize string `json:"quotaBackendSize,omitempty"`
}

// ExternalDatastoreConfig is a datastore the user runs, passed to k3s as
// --datastore-endpoint.
type ExternalDatastoreConfig struct {
	// Endpoint is the datastore endpoint without credentials, e.g.
	// postgres://db.example:5432/k3s or https://etcd.example:2379. Only the
	// schemes of datastores that live outside the server pod are accepted: k3s
	// given anything else (sqlite://, a bare path) would keep the cluster in a
	// file inside the pod instead.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.matches('^(postgres|postgresql|mysql|http|https|nats)://[^ ]+$')",message="datastore.external.endpoint must be a postgres://, postgresql://, mysql://, http(s):// (etcd) or nats:// URL: with anything else k3s would keep the cluster in a SQLite file inside the server pod",reason=FieldValueInvalid
	Endpoint string `json:"endpoint"`

	// SecretRef names a Secret whose key "endpoint", when present, replaces
	// Endpoint (so credentials stay out of the Cluster object), and whose keys
	// "ca.crt", "tls.crt" and "tls.key" are the client TLS material. Only the
	// keys present are passed to k3s; "tls.crt" and "tls.key" go together. The
	// controller does not start servers while the Secret is missing and reports
	// why in the DatastoreReady condition.
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
}

// ExposeConfig says how the API is reached from outside the host cluster. At
// most one way may be set.
// +kubebuilder:validation:XValidation:rule="(has(self.ingress) ? 1 : 0) + (has(self.loadBalancer) ? 1 : 0) + (has(self.nodePort) ? 1 : 0) <= 1",message="expose: ingress, loadBalancer and nodePort are mutually exclusive"
type ExposeConfig struct {
	// Ingress exposes the API through an Ingress with TLS passthrough.
	// +optional
	Ingress *IngressConfig `json:"ingress,omitempty"`
	// LoadBalancer makes the API Service of type LoadBalancer.
	// +optional
	LoadBalancer *LoadBalancerConfig `json:"loadBalancer,omitempty"`
	// NodePort makes the API Service of type NodePort.
	// +optional
	NodePort *NodePortConfig `json:"nodePort,omitempty"`
}

// IngressConfig exposes the API through an Ingress.
type IngressConfig struct {
	// Host is the name clients use; it is added to the TLS SANs.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`
	// IngressClassName selects the ingress controller.
	// +optional
	IngressClassName *string `json:"ingressClassName,omitempty"`
	// Annotations are added to the Ingress (e.g. to turn on TLS passthrough).
	// Snippet annotations (ingress-nginx's *-snippet) are refused: they run
	// configuration in the host's ingress controller, outside the namespace.
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.lowerAscii().contains('snippet'))",message="expose.ingress.annotations: snippet annotations are not allowed (they configure the host's ingress controller for every namespace; see docs/security.md)"
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// LoadBalancerConfig makes the API Service of type LoadBalancer.
type LoadBalancerConfig struct {
	// ServerPort is the Service port; default 443.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	ServerPort *int32 `json:"serverPort,omitempty"`
}

// NodePortConfig makes the API Service of type NodePort.
type NodePortConfig struct {
	// ServerPort is the node port; empty lets Kubernetes pick one.
	// +kubebuilder:validation:Minimum=30000
	// +kubebuilder:validation:Maximum=32767
	// +optional
	ServerPort *int32 `json:"serverPort,omitempty"`
}

// ClusterPhase summarizes the conditions for people and the CLI.
// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Paused;Failed;Terminating
type ClusterPhase string

const (
	// PhasePending: nothing created yet.
	PhasePending ClusterPhase = "Pending"
	// PhaseProvisioning: objects exist, servers not all ready yet.
	PhaseProvisioning ClusterPhase = "Provisioning"
	// PhaseReady: servers ready and kubeconfig published.
	PhaseReady ClusterPhase = "Ready"
	// PhasePaused: spec.paused is honoured; servers and agent are scaled to
	// zero (the Paused condition says when the last pod is gone), data kept.
	PhasePaused ClusterPhase = "Paused"
	// PhaseFailed: the spec cannot be realised; a condition says why.
	PhaseFailed ClusterPhase = "Failed"
	// PhaseTerminating: the Cluster is being deleted.
	PhaseTerminating ClusterPhase = "Terminating"
)

// ClusterStatus is what the controller observed.
type ClusterStatus struct {
	// Phase summarizes the conditions.
	// +optional
	Phase ClusterPhase `json:"phase,omitempty"`

	// Conditions: Ready, DatastoreReady, ServersReady, TokenReady,
	// KubeconfigPublished.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Endpoint is the in-cluster URL of the virtual API server.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// ReadyServers is the number of server pods that are ready. Written also
	// when 0, so the Ready printer column shows 0 rather than nothing.
	// +optional
	ReadyServers int32 `json:"readyServers"`

	// PersistenceType is the persistence in effect (spec or controller default).
	// +optional
	PersistenceType PersistenceType `json:"persistenceType,omitempty"`

	// ServiceCIDR is the Service network the servers run with: spec.serviceCIDR,
	// or the one chosen when the Cluster was first reconciled (see
	// spec.serviceCIDR), kept from then on so that a changed host or
	// controller never moves an existing cluster's Services.
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`

	// Datastore describes the datastore in effect.
	// +optional
	Datastore *DatastoreStatus `json:"datastore,omitempty"`

	// Backup is what became of the scheduled snapshots (spec.backup); nil
	// without spec.backup.
	// +optional
	Backup *BackupStatus `json:"backup,omitempty"`

	// PolicyName is the VirtualClusterPolicy the Cluster's namespace is bound
	// to (its label policy.k3k.io/policy-name); the Policy condition says
	// what it changed.
	// +optional
	PolicyName string `json:"policyName,omitempty"`

	// PolicyBounds are what the agent is held to once the policy is applied,
	// where that is stricter than the spec says: the agent guard (the host
	// API's backstop behind the agent) reads them here, since the stored
	// spec of a Cluster made before its policy may be looser.
	// +optional
	PolicyBounds *PolicyBounds `json:"policyBounds,omitempty"`
}

// PolicyBounds are the agent's bounds in effect under a VirtualClusterPolicy.
type PolicyBounds struct {
	// PodSecurityLevel is the level the agent holds pods to.
	// +optional
	PodSecurityLevel PodSecurityLevel `json:"podSecurityLevel,omitempty"`
	// MaxTerminationGracePeriodSeconds is the longest grace period the
	// agent gives; unset: the spec's, or the agent's default.
	// +optional
	MaxTerminationGracePeriodSeconds *int64 `json:"maxTerminationGracePeriodSeconds,omitempty"`
}

// BackupStatus reports the scheduled snapshots, as the backup Jobs reported
// them (each Job's result is its pod's termination message).
type BackupStatus struct {
	// LastSuccessful is the newest snapshot written; its time gives the age of
	// the newest backup. It is kept when the Job that wrote it is gone.
	// +optional
	LastSuccessful *BackupSnapshot `json:"lastSuccessful,omitempty"`
	// LastFailure is the newest backup run that failed.
	// +optional
	LastFailure *BackupFailure `json:"lastFailure,omitempty"`
}

// BackupSnapshot is one snapshot file a backup Job wrote.
type BackupSnapshot struct {
	// File is the file's name on the claim.
	File string `json:"file"`
	// Time is when the snapshot was taken (the manifest's createdAt).
	Time metav1.Time `json:"time"`
	// Revision is the datastore revision the snapshot holds every write up to.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Size of the datastore data in the file, in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// SHA256 of the datastore data in the file (hex).
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// Job is the backup Job that wrote it.
	// +optional
	Job string `json:"job,omitempty"`
}

// BackupFailure is a backup run that failed.
type BackupFailure struct {
	// Time is when the failed Job finished (or started, when it never ran).
	Time metav1.Time `json:"time"`
	// Job is the backup Job that failed.
	// +optional
	Job string `json:"job,omitempty"`
	// Reason is why, as the Job or its pod reported it.
	// +optional
	Reason string `json:"reason,omitempty"`
}

// DatastoreStatus describes the datastore in effect.
type DatastoreStatus struct {
	// Type is the datastore in effect (spec or controller default). While a
	// migration from sqlite to etcd is under way it stays sqlite (the spec
	// says etcd) until the switch: the SQLite data is loaded into etcd member
	// 0 and the member serves it.
	Type DatastoreType `json:"type"`
	// MigratedFrom is sqlite for a cluster that was migrated from sqlite to
	// etcd, recorded at the switch and kept: its server pods keep the
	// migration's sidecar flag, so the switch changes no pod.
	// +optional
	MigratedFrom DatastoreType `json:"migratedFrom,omitempty"`
	// Members are the etcd members as the cluster lists them (etcd only),
	// in name order; empty while no member answers.
	// +optional
	// +listType=map
	// +listMapKey=id
	Members []EtcdMemberStatus `json:"members,omitempty"`
	// Quorum summarises the voting members (etcd only); nil while no member
	// answers.
	// +optional
	Quorum *EtcdQuorumStatus `json:"quorum,omitempty"`
	// RecoveryRequest is the last request for a recovery from etcd quorum
	// loss (the value of annotation k3k.io/etcd-recover) that the controller
	// handled, performed or refused; it never acts on that value again. The
	// EtcdRecovery condition says what became of it.
	// +optional
	RecoveryRequest string `json:"recoveryRequest,omitempty"`
}

// EtcdMemberStatus is one etcd member as the controller last observed it.
type EtcdMemberStatus struct {
	// Name is the server pod the member belongs to (empty for a member that
	// was added but never started and belongs to no desired pod).
	// +optional
	Name string `json:"name,omitempty"`
	// ID is the etcd member ID in hex, as etcdctl prints it.
	ID string `json:"id"`
	// Learner is true for a member that does not vote yet.
	// +optional
	Learner bool `json:"learner,omitempty"`
	// Healthy is true when the member answered and knows a leader.
	// +optional
	Healthy bool `json:"healthy,omitempty"`
	// Leader is true for the current raft leader.
	// +optional
	Leader bool `json:"leader,omitempty"`
}

// EtcdQuorumStatus counts the voting members.
type EtcdQuorumStatus struct {
	// Voters is the number of voting members (learners excluded).
	Voters int32 `json:"voters"`
	// HealthyVoters is how many of them answered and know a leader.
	HealthyVoters int32 `json:"healthyVoters"`
	// Needed is the quorum: the voters that must be healthy for etcd to
	// accept writes (voters/2 + 1).
	Needed int32 `json:"needed"`
}

// ClusterList is a list of Clusters.
//
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}
