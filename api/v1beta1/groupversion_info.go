// Package v1beta1 holds the k3k.io/v1beta1 API: the Cluster kind, which describes
// one virtual Kubernetes cluster whose k3s servers run as pods in the host
// cluster, and the VirtualClusterPolicy kind, which bounds the Clusters of
// the namespaces bound to it.
//
// +kubebuilder:object:generate=true
// +groupName=k3k.io
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every kind in this package.
var GroupVersion = schema.GroupVersion{Group: "k3k.io", Version: "v1beta1"}

// AddToScheme registers the kinds of this package with a runtime.Scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Cluster{}, &ClusterList{}, &VirtualClusterPolicy{}, &VirtualClusterPolicyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
