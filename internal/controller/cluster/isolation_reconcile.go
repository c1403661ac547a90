package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// reconcileIsolation applies c's ResourceQuota, LimitRange and
// NetworkPolicies (isolation.go) through the hash-guarded ensure, and removes
// the ones the spec or the defaults turned off. It runs before the servers and
// the agent are made, so their pods are admitted under the LimitRange from
// the start. It never requeues: the objects are owned, so a change or a
// deletion brings the Cluster back.
func (r *Reconciler) reconcileIsolation(ctx context.Context, c *v1beta1.Cluster, _ *observation) (ctrl.Result, error) {
	d := r.Config.Isolation
	n := IsolationNamesFor(c)
	if q := DesiredQuota(c, d); q != nil {
		if err := ensure(ctx, r.Client, c, q, func(live, d *corev1.ResourceQuota) { live.Spec = d.Spec }); err != nil {
			return ctrl.Result{}, err
		}
	} else if err := r.removeOwned(ctx, c, n.Quota, &corev1.ResourceQuota{}); err != nil {
		return ctrl.Result{}, err
	}
	if lr := DesiredLimitRange(c, d); lr != nil {
		if err := ensure(ctx, r.Client, c, lr, func(live, d *corev1.LimitRange) { live.Spec = d.Spec }); err != nil {
			return ctrl.Result{}, err
		}
	} else if err := r.removeOwned(ctx, c, n.LimitRange, &corev1.LimitRange{}); err != nil {
		return ctrl.Result{}, err
	}
	policies := DesiredNetworkPolicies(c, d)
	for _, p := range policies {
		if err := ensure(ctx, r.Client, c, p, func(live, d *networkingv1.NetworkPolicy) { live.Spec = d.Spec }); err != nil {
			return ctrl.Result{}, err
		}
	}
	if policies == nil {
		for _, name := range []string{n.WorkloadPolicy, n.ServerPolicy, n.AgentPolicy} {
			if err := r.removeOwned(ctx, c, name, &networkingv1.NetworkPolicy{}); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	return ctrl.Result{}, nil
}

// removeOwned deletes the named object of c's namespace when c controls it;
// an object someone else made under that name is left alone.
func (r *Reconciler) removeOwned(ctx context.Context, c *v1beta1.Cluster, name string, obj client.Object) error {
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting %T %s: %w", obj, name, err)
	}
	if !metav1.IsControlledBy(obj, c) {
		return nil
	}
	if err := r.Client.Delete(ctx, obj, client.Preconditions{UID: ptrUID(obj)}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %T %s: %w", obj, name, err)
	}
	return nil
}

func ptrUID(obj client.Object) *types.UID {
	uid := obj.GetUID()
	return &uid
}
