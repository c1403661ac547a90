package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VirtualClusterPolicy is what a platform team holds every Cluster of a set of
// namespaces to: a namespace labelled policy.k3k.io/policy-name=<name> is
// bound to the policy of that name (LabelPolicyName). Its Cluster's creator
// cannot loosen it: the host API refuses a Cluster that breaks it, naming the
// policy, and for a Cluster made before the policy (or its binding) the
// stricter of the two is what the controller deploys, its Policy condition
// saying what was tightened and what breaks the policy without a way to
// tighten it (docs/policy.md). Every field left empty bounds nothing.
//
// Only who may label namespaces can bind one (namespace update rights, which
// a namespace's own admin does not get from a RoleBinding).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=vcp
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.allowedMode`
// +kubebuilder:printcolumn:name="Max Servers",type=integer,JSONPath=`.spec.maxServers`
// +kubebuilder:printcolumn:name="Pod Security",type=string,JSONPath=`.spec.podSecurityLevel`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualClusterPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	// +optional
	Spec VirtualClusterPolicySpec `json:"spec,omitempty"`
}

// VirtualClusterPolicySpec are the bounds; each one left empty bounds nothing.
type VirtualClusterPolicySpec struct {
	// AllowedMode is the only spec.mode a Cluster may have.
	// +optional
	AllowedMode ClusterMode `json:"allowedMode,omitempty"`

	// AllowedDatastores are the spec.datastore.type values a Cluster may
	// have (at least one). A Cluster must then name its type: the
	// controller's default is not known where the host API checks the
	// policy.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +listType=set
	// +optional
	AllowedDatastores []DatastoreType `json:"allowedDatastores,omitempty"`

	// MaxServers is the most spec.servers a Cluster may ask for.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=7
	// +optional
	MaxServers *int32 `json:"maxServers,omitempty"`

	// PodSecurityLevel is the loosest spec.podSecurityLevel a Cluster may
	// have (privileged is looser than baseline, which is looser than
	// restricted).
	// +optional
	PodSecurityLevel PodSecurityLevel `json:"podSecurityLevel,omitempty"`

	// Quota bounds spec.quota.hard name by name: a Cluster may set each to
	// at most the policy's, and one that sets none (or the controller's
	// default, where larger) gets the policy's.
	// +optional
	Quota *QuotaConfig `json:"quota,omitempty"`

	// MaxLimits bounds spec.limits.max name by name like Quota bounds
	// spec.quota.hard (the default and default request of a container are
	// cut to it too).
	// +kubebuilder:validation:MaxProperties=6
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'] || k.contains('/'))",message="maxLimits: keys must be cpu, memory, ephemeral-storage or an extended resource"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !string(self[k]).startsWith('-'))",message="maxLimits: values may not be negative"
	// +optional
	MaxLimits map[corev1.ResourceName]resource.Quantity `json:"maxLimits,omitempty"`

	// StorageClasses are the host storage classes a Cluster's
	// spec.storageClasses may name; a Cluster made before keeps only those
	// of its classes the policy names. Unset: any (an empty list is
	// refused: it would read as "none" to the host API and "any" here).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +listType=set
	// +optional
	StorageClasses []string `json:"storageClasses,omitempty"`

	// MaxTerminationGracePeriodSeconds bounds a Cluster's
	// spec.maxTerminationGracePeriodSeconds; a Cluster that sets none gets
	// the policy's where it is below the agent's default (300).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	MaxTerminationGracePeriodSeconds *int64 `json:"maxTerminationGracePeriodSeconds,omitempty"`
}

// VirtualClusterPolicyList is a list of VirtualClusterPolicies.
//
// +kubebuilder:object:root=true
type VirtualClusterPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualClusterPolicy `json:"items"`
}
