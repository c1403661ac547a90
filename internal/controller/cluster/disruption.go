package cluster

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// What keeps a Cluster serving while host nodes go away: its server pods
// spread over nodes (a node's loss or drain takes as few as it can), and a
// PodDisruptionBudget that lets a drain take them only as fast as the
// datastore can lose them.

// DesiredServerDisruptionBudget is the PodDisruptionBudget that keeps a
// voluntary disruption (a drain's eviction, a node upgrade) from taking more
// server pods at once than the Cluster can lose while it serves, or nil where
// no budget protects anything. pods is how many server pods run (the
// StatefulSet's replicas: while etcd members are removed one at a time it
// exceeds spec.servers, and the members still count).
//
//   - etcd with two pods or more: at least a quorum of members must stay
//     Ready (pods/2+1), so a drain evicts one member of three, waits for it
//     to come back, then the next. Two pods run only while a scale-down
//     removes members one at a time, and then both must stay
//     (docs/etcd.md, "Placement, drains and node restarts").
//   - an external datastore with two servers or more: the servers hold no
//     data, and one at a time keeps the API serving.
//   - one server (SQLite always): none. A single server cannot stay up
//     through its own eviction, and a budget refusing it would hold the
//     node's maintenance until someone deleted the budget; the server is
//     evicted and starts again where its volume can be mounted.
//
// unhealthyPodEvictionPolicy is AlwaysAllow: a server pod that is not Ready
// (crash-looping, never started) adds nothing to the quorum the budget
// counts, and must not hold a drain.
func DesiredServerDisruptionBudget(c *v1beta1.Cluster, datastore v1beta1.DatastoreType, pods int32) *policyv1.PodDisruptionBudget {
	var spec policyv1.PodDisruptionBudgetSpec
	switch {
	case pods < 2:
		return nil
	case datastore == v1beta1.EtcdDatastore:
		spec.MinAvailable = ptr.To(intstr.FromInt32(pods/2 + 1))
	case datastore == v1beta1.ExternalDatastore:
		spec.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	default:
		return nil
	}
	spec.Selector = &metav1.LabelSelector{MatchLabels: serverLabels(c)}
	spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.AlwaysAllow)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).StatefulSet),
		Spec:       spec,
	}
}

// reconcileDisruptionBudget keeps the server pods' PodDisruptionBudget as
// DesiredServerDisruptionBudget says for pods running server pods, and
// deletes the one it made when none is wanted any more (scaled to one
// server, paused).
func (r *Reconciler) reconcileDisruptionBudget(ctx context.Context, c *v1beta1.Cluster, datastore v1beta1.DatastoreType, pods int32) error {
	desired := DesiredServerDisruptionBudget(c, datastore, pods)
	if desired == nil {
		return r.removeOwned(ctx, c, layout.NamesFor(c).StatefulSet, &policyv1.PodDisruptionBudget{})
	}
	return ensure(ctx, r.Client, c, desired, func(live, d *policyv1.PodDisruptionBudget) { live.Spec = d.Spec })
}

// spreads says whether the server pods are placed apart: with etcd or an
// external datastore, whatever spec.servers is now, so that scaling from one
// server to three changes no pod template and restarts no running server.
func spreads(s Settings) bool {
	return s.Datastore == v1beta1.EtcdDatastore || s.Datastore == v1beta1.ExternalDatastore
}

// serverAffinity keeps two server pods of the Cluster off one node when
// serverSpread is Required.
func serverAffinity(c *v1beta1.Cluster, s Settings) *corev1.Affinity {
	if !spreads(s) || s.ServerSpread != v1beta1.SpreadRequired {
		return nil
	}
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: serverLabels(c)},
			TopologyKey:   corev1.LabelHostname,
		}},
	}}
}

// serverSpreadConstraints asks the scheduler to spread the server pods over
// nodes when serverSpread is Preferred; a pod that cannot be spread still
// starts (ScheduleAnyway), on a one-node host too.
func serverSpreadConstraints(c *v1beta1.Cluster, s Settings) []corev1.TopologySpreadConstraint {
	if !spreads(s) || s.ServerSpread != v1beta1.SpreadPreferred {
		return nil
	}
	return []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       corev1.LabelHostname,
		WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: serverLabels(c)},
	}}
}
