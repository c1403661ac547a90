package cluster

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// TestAFailedStepReachesTheStatus makes the Services step fail for real: a
// Service of the API Service's name is already controlled by another object,
// so the reconciler may not adopt it. The error is returned and Ready says
// which step failed and why, without the token; an unchanged failing Cluster
// is not written again; once the cause is gone the condition clears.
func TestAFailedStepReachesTheStatus(t *testing.T) {
	ctx := context.Background()
	r, writes := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "squatted"))

	squatter := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "squatter"}}
	if err := k8s.Create(ctx, squatter); err != nil {
		t.Fatal(err)
	}
	name := layout.NamesFor(c).Service
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: squatter.Name, UID: squatter.UID, Controller: ptr.To(true),
		}}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}
	if err := k8s.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}

	reconcile := func() error {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
		return err
	}
	err := reconcile()
	if err == nil || !strings.Contains(err.Error(), "Services") || !strings.Contains(err.Error(), name) {
		t.Fatalf("reconcile error %v, want the Services step's error about %s", err, name)
	}
	ready := condition(t, c, v1beta1.ConditionReady)
	if ready.Status != metav1.ConditionFalse || ready.Reason != v1beta1.ReasonReconcileError ||
		!strings.Contains(ready.Message, `step "Services" failed`) || !strings.Contains(ready.Message, name) {
		t.Fatalf("Ready %+v, want False/%s naming the Services step and %s", ready, v1beta1.ReasonReconcileError, name)
	}
	// The steps before it ran: the token exists, and is not in the message.
	token := &corev1.Secret{}
	get(t, c, layout.NamesFor(c).Token, token)
	if tok := string(token.Data[layout.SecretKeyToken]); tok == "" || strings.Contains(ready.Message, tok) {
		t.Fatalf("token Secret %q; Ready message %q", tok, ready.Message)
	}
	t.Logf("Ready: %s: %s", ready.Reason, ready.Message)

	start := writes.count()
	if err := reconcile(); err == nil {
		t.Fatal("the second reconcile succeeded while the Service is still someone else's")
	}
	if n := writes.count() - start; n != 0 {
		t.Fatalf("a second reconcile of an unchanged failing Cluster made %d writes", n)
	}

	// The owner lets go: the Service is adopted and Ready no longer reports
	// the failure.
	get(t, c, name, svc)
	svc.OwnerReferences = nil
	if err := k8s.Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := reconcile(); err != nil {
		t.Fatalf("reconcile after the cause is gone: %v", err)
	}
	ready = condition(t, c, v1beta1.ConditionReady)
	if ready.Reason == v1beta1.ReasonReconcileError {
		t.Fatalf("Ready still reports the failure: %+v", ready)
	}
	get(t, c, name, svc)
	if !metav1.IsControlledBy(svc, c) {
		t.Fatalf("the Service was not adopted: owners %+v", svc.OwnerReferences)
	}
}
