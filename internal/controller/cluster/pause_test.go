package cluster

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

func setPaused(t *testing.T, c *v1beta1.Cluster, paused bool) {
	t.Helper()
	get(t, c, c.Name, c)
	c.Spec.Paused = paused
	if err := k8s.Update(context.Background(), c); err != nil {
		t.Fatalf("setting spec.paused: %v", err)
	}
}

func replicasOf(t *testing.T, c *v1beta1.Cluster) (servers, agent int32) {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	get(t, c, layout.NamesFor(c).StatefulSet, sts)
	d := &appsv1.Deployment{}
	get(t, c, layout.AgentName(c.Name), d)
	return ptr.Deref(sts.Spec.Replicas, -1), ptr.Deref(d.Spec.Replicas, -1)
}

// TestPauseScalesToZeroKeepsTheDataAndResumes pauses a ready sqlite cluster:
// servers and agent go to zero replicas, the phase is Paused at once and the
// Paused condition turns True once the pods are gone; the volume claim and
// the Secrets are untouched; an unchanged paused cluster causes no writes;
// resuming brings both back and drops the condition.
func TestPauseScalesToZeroKeepsTheDataAndResumes(t *testing.T) {
	ctx := context.Background()
	r, writes := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "nap"))
	reconcileOnce(t, r, c)
	makeReady(t, c)
	reconcileOnce(t, r, c)
	if got := condition(t, c, v1beta1.ConditionReady); got.Status != metav1.ConditionTrue {
		t.Fatalf("not Ready before the pause: %+v", got)
	}
	n := layout.NamesFor(c)
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: layout.DataVolume + "-" + n.StatefulSet + "-0", Labels: serverLabels(c)},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}}},
	}
	if err := k8s.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	token := &corev1.Secret{}
	get(t, c, n.Token, token)

	setPaused(t, c, true)
	reconcileOnce(t, r, c)
	if s, a := replicasOf(t, c); s != 0 || a != 0 {
		t.Fatalf("paused: server replicas %d, agent replicas %d, want 0 and 0", s, a)
	}
	cl := &v1beta1.Cluster{}
	get(t, c, c.Name, cl)
	if cl.Status.Phase != v1beta1.PhasePaused {
		t.Errorf("phase %s, want Paused", cl.Status.Phase)
	}
	if got := condition(t, c, v1beta1.ConditionPaused); got.Status != metav1.ConditionFalse || got.Reason != v1beta1.ReasonPausing {
		t.Errorf("Paused condition while the pod still runs: %+v", got)
	}
	if got := condition(t, c, v1beta1.ConditionReady); got.Status != metav1.ConditionFalse || got.Reason != v1beta1.ReasonPaused {
		t.Errorf("Ready while paused: %+v", got)
	}

	// What the StatefulSet controller does when scaled to zero.
	if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: n.StatefulSet + "-0"}}); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	get(t, c, n.StatefulSet, sts)
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation}
	if err := k8s.Status().Update(ctx, sts); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	if got := condition(t, c, v1beta1.ConditionPaused); got.Status != metav1.ConditionTrue || got.Reason != v1beta1.ReasonPaused {
		t.Errorf("Paused condition once the pods are gone: %+v", got)
	}
	start := writes.count()
	reconcileOnce(t, r, c)
	if d := writes.count() - start; d != 0 {
		t.Errorf("a reconcile of the unchanged paused cluster made %d writes", d)
	}
	stillClaim := &corev1.PersistentVolumeClaim{}
	get(t, c, claim.Name, stillClaim)
	if stillClaim.UID != claim.UID || !stillClaim.DeletionTimestamp.IsZero() {
		t.Error("the volume claim was replaced or deleted while paused")
	}
	stillToken := &corev1.Secret{}
	get(t, c, n.Token, stillToken)
	if string(stillToken.Data[layout.SecretKeyToken]) != string(token.Data[layout.SecretKeyToken]) {
		t.Error("the token changed while paused")
	}

	setPaused(t, c, false)
	reconcileOnce(t, r, c)
	if s, a := replicasOf(t, c); s != 1 || a != 1 {
		t.Fatalf("resumed: server replicas %d, agent replicas %d, want 1 and 1", s, a)
	}
	get(t, c, c.Name, cl)
	if meta.FindStatusCondition(cl.Status.Conditions, v1beta1.ConditionPaused) != nil || cl.Status.Phase == v1beta1.PhasePaused {
		t.Errorf("resumed but still reported paused: phase %s, conditions %+v", cl.Status.Phase, cl.Status.Conditions)
	}
}

func TestPauseIsRefusedWhereItWouldHarm(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name    string
		cluster *v1beta1.Cluster
		servers int32
	}{
		{"etcd members are not stopped all at once", newEtcdCluster(ns, "ha", 3), 3},
		{"an ephemeral cluster's data would be lost", newCluster(ns, "eph", func(c *v1beta1.Cluster) { c.Spec.Persistence.Type = v1beta1.EphemeralPersistence }), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newReconciler(t)
			r.EtcdDial = (&dialTable{}).dial
			c := createCluster(t, tc.cluster)
			reconcileOnce(t, r, c)
			setPaused(t, c, true)
			reconcileOnce(t, r, c)
			if s, a := replicasOf(t, c); s != tc.servers || a != 1 {
				t.Errorf("replicas %d/%d, want the cluster left running (%d/1)", s, a, tc.servers)
			}
			got := condition(t, c, v1beta1.ConditionPaused)
			if got.Status != metav1.ConditionFalse || got.Reason != v1beta1.ReasonPauseUnsupported {
				t.Errorf("Paused condition %+v, want False/PauseUnsupported", got)
			}
			cl := &v1beta1.Cluster{}
			get(t, c, c.Name, cl)
			if cl.Status.Phase == v1beta1.PhasePaused {
				t.Error("phase Paused for a pause that was not honoured")
			}
		})
	}
}
