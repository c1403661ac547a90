package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// holdToPolicy applies the VirtualClusterPolicy c's namespace is bound to,
// if any, to c's spec in place (applyPolicy) and records the outcome for the
// status. It runs before the steps rather than as one, so each builds from
// the spec the policy left; it asks for no requeue of its own (a change of
// the policy or of the namespace's label comes by a watch).
func (r *Reconciler) holdToPolicy(ctx context.Context, c *v1beta1.Cluster, o *observation) error {
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: c.Namespace}, ns); err != nil {
		return fmt.Errorf("getting namespace %s: %w", c.Namespace, err)
	}
	name := ns.Labels[v1beta1.LabelPolicyName]
	if name == "" {
		return nil
	}
	p := &v1beta1.VirtualClusterPolicy{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Name: name}, p); {
	case apierrors.IsNotFound(err):
		o.policy = &policyOutcome{name: name}
	case err != nil:
		return fmt.Errorf("getting VirtualClusterPolicy %s: %w", name, err)
	default:
		out := applyPolicy(c, p, o.settings.Datastore, r.Config.Isolation)
		o.policy = &out
	}
	return nil
}

// clustersOfPolicy maps a VirtualClusterPolicy to the Clusters of the
// namespaces bound to it.
func (r *Reconciler) clustersOfPolicy(ctx context.Context, obj client.Object) []reconcile.Request {
	namespaces := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, namespaces, client.MatchingLabels{v1beta1.LabelPolicyName: obj.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing the namespaces of a VirtualClusterPolicy", "policy", obj.GetName())
		return nil
	}
	var out []reconcile.Request
	for _, ns := range namespaces.Items {
		out = append(out, r.clustersOfNamespace(ctx, &ns)...)
	}
	return out
}

// clustersOfNamespace maps a Namespace to its Clusters.
func (r *Reconciler) clustersOfNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &v1beta1.ClusterList{}
	if err := r.Client.List(ctx, list, client.InNamespace(obj.GetName())); err != nil {
		log.FromContext(ctx).Error(err, "listing the Clusters of a namespace", "namespace", obj.GetName())
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return out
}

// policyBindingChanged passes a Namespace whose policy label changed; a
// new Namespace holds no Cluster yet.
var policyBindingChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetLabels()[v1beta1.LabelPolicyName] != e.ObjectNew.GetLabels()[v1beta1.LabelPolicyName]
	},
}

// trimNamespace keeps of a cached Namespace what holdToPolicy reads.
func trimNamespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{
		TypeMeta: ns.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: ns.Name, UID: ns.UID, ResourceVersion: ns.ResourceVersion, Labels: ns.Labels,
		},
	}, nil
}
