package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// A step that lost an update race (a conflict: the cache was behind) is
// retried without being reported, while any other failure reaches Ready.
func TestAConflictIsRetriedNotReported(t *testing.T) {
	base := observation{settings: Settings{Datastore: v1beta1.SQLiteDatastore, Persistence: v1beta1.DynamicPersistence, Servers: 1},
		token: tokenState{true, v1beta1.ReasonTokenAvailable, "ok"}}
	conflict := fmt.Errorf("updating StatefulSet k3k-demo-server: %w",
		apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, "k3k-demo-server", errors.New("the object has been modified")))
	for _, tc := range []struct {
		name       string
		err        error
		wantReason string
	}{
		{"a conflict is retried quietly", conflict, v1beta1.ReasonNotReady},
		{"another failure names the step", errors.New("the API server is gone"), v1beta1.ReasonReconcileError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			err := o.fail("servers", tc.err)
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), "servers") {
				t.Fatalf("fail returned %v, want the step's error named by the step", err)
			}
			ready := meta.FindStatusCondition(computeStatus(sampleCluster(), o).Conditions, v1beta1.ConditionReady)
			if ready == nil || ready.Reason != tc.wantReason {
				t.Fatalf("Ready %+v, want reason %s", ready, tc.wantReason)
			}
		})
	}
}
