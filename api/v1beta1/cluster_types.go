package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
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
// +kubebuilder:printcolumn:name="Servers",type=integer,JSONPath=`.spec.servers`
// +kubebuilder:printcolumn:name="Datastore",type=string,JSONPath=`.status.datastore.type`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
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
// +kubebuilder:validation:XValidation:rule="(has(self.datastore) && has(self.datastore.type) ? self.datastore.type : '-') == (has(oldSelf.datastore) && has(oldSelf.datastore.type) ? oldSelf.datastore.type : '-')",message="datastore.type is immutable: create a new cluster to change it"
// +kubebuilder:validation:XValidation:rule="(has(self.persistence) && has(self.persistence.type) ? self.persistence.type : '-') == (has(oldSelf.persistence) && has(oldSelf.persistence.type) ? oldSelf.persistence.type : '-')",message="persistence.type is immutable: create a new cluster to change it"
// +kubebuilder:validation:XValidation:rule="(has(self.clusterCIDR) ? self.clusterCIDR : '-') == (has(oldSelf.clusterCIDR) ? oldSelf.clusterCIDR : '-')",message="clusterCIDR is immutable"
// +kubebuilder:validation:XValidation:rule="(has(self.serviceCIDR) ? self.serviceCIDR : '-') == (has(oldSelf.serviceCIDR) ? oldSelf.serviceCIDR : '-')",message="serviceCIDR is immutable"
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

	// ServiceCIDR is the virtual cluster's Service network. Immutable.
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="serviceCIDR must be a CIDR such as 10.43.0.0/16"
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`

	// ClusterDNS is the IP address of the virtual cluster's DNS Service.
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="clusterDNS must be an IP address"
	// +optional
	ClusterDNS string `json:"clusterDNS,omitempty"`

	// TLSSANs are extra names and addresses the API server's certificate is valid
	// for, on top of the ones the controller adds for its Services.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	TLSSANs []string `json:"tlsSANs,omitempty"`

	// ServerArgs are extra `k3s server` arguments, appended after the ones the
	// controller generates. Flags the controller owns are rejected.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(a, !['--datastore-endpoint', '--token', '--token-file', '--agent-token', '--data-dir', '-d', '--write-kubeconfig', '--cluster-init', '--server', '--cluster-reset'].exists(f, a == f || a.startsWith(f + '=')))",message="serverArgs: --datastore-endpoint, --token, --token-file, --agent-token, --data-dir, --write-kubeconfig, --cluster-init, --server and --cluster-reset are managed by k3k and cannot be set"
	// +optional
	ServerArgs []string `json:"serverArgs,omitempty"`

	// ServerEnvs are extra environment variables for the k3s container.
	// +optional
	ServerEnvs []corev1.EnvVar `json:"serverEnvs,omitempty"`

	// ServerResources are the k3s container's resource requests and limits.
	// +optional
	ServerResources *corev1.ResourceRequirements `json:"serverResources,omitempty"`

	// NodeSelector constrains which host nodes run the server pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

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

	// PodSecurityLevel is the Pod Security Standard every host pod of the
	// shared-mode agent must meet: baseline (the default), restricted, or
	// privileged, which takes effect only where the host administrator allowed
	// it (the chart's sharedAgent.allowPrivilegedPods); otherwise baseline holds.
	// +kubebuilder:default=baseline
	// +optional
	PodSecurityLevel PodSecurityLevel `json:"podSecurityLevel,omitempty"`
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

	// StorageRequestSize of each claim. It may grow but never shrink.
	// +kubebuilder:default="2Gi"
	// +kubebuilder:validation:XValidation:rule="isQuantity(self)",message="persistence.storageRequestSize must be a quantity such as 2Gi"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(self) || !isQuantity(oldSelf) || quantity(self).compareTo(quantity(oldSelf)) >= 0",message="persistence.storageRequestSize may only grow"
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
type DatastoreConfig struct {
	// Type is sqlite, etcd or external. Empty means the controller's default.
	// Immutable.
	// +optional
	Type DatastoreType `json:"type,omitempty"`

	// External is the endpoint of a datastore the user runs.
	// +optional
	External *ExternalDatastoreConfig `json:"external,omitempty"`
}

// ExternalDatastoreConfig is a datastore the user runs, passed to k3s as
// --datastore-endpoint.
type ExternalDatastoreConfig struct {
	// Endpoint is the datastore endpoint without credentials, e.g.
	// postgres://db.example:5432/k3s or https://etcd.example:2379.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Endpoint string `json:"endpoint"`

	// SecretRef names a Secret whose key "endpoint", when present, replaces
	// Endpoint (so credentials stay out of the Cluster object), and whose keys
	// "ca.crt", "tls.crt" and "tls.key" are the client TLS material.
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
// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Failed;Terminating
type ClusterPhase string

const (
	// PhasePending: nothing created yet.
	PhasePending ClusterPhase = "Pending"
	// PhaseProvisioning: objects exist, servers not all ready yet.
	PhaseProvisioning ClusterPhase = "Provisioning"
	// PhaseReady: servers ready and kubeconfig published.
	PhaseReady ClusterPhase = "Ready"
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

	// ReadyServers is the number of server pods that are ready.
	// +optional
	ReadyServers int32 `json:"readyServers,omitempty"`

	// PersistenceType is the persistence in effect (spec or controller default).
	// +optional
	PersistenceType PersistenceType `json:"persistenceType,omitempty"`

	// Datastore describes the datastore in effect.
	// +optional
	Datastore *DatastoreStatus `json:"datastore,omitempty"`
}

// DatastoreStatus describes the datastore in effect.
type DatastoreStatus struct {
	// Type is the datastore in effect (spec or controller default).
	Type DatastoreType `json:"type"`
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
