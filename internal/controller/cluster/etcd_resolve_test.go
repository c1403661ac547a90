package cluster

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// Defect 7 (issue 16): a Cluster that leaves its datastore and persistence
// types to the controller keeps the types it was created with when the
// controller's defaults change.
func TestResolvedTypesAreKeptWhenTheControllerDefaultsChange(t *testing.T) {
	r, _ := newReconciler(t)
	r.EtcdDial = (&dialTable{}).dial
	r.Config.DefaultDatastore = v1beta1.EtcdDatastore
	r.Config.DefaultPersistence = v1beta1.EphemeralPersistence
	c := createCluster(t, newCluster(newNamespace(t), "keep-types", func(c *v1beta1.Cluster) { c.Spec.Servers = 3 }))
	reconcileOnce(t, r, c)
	get(t, c, c.Name, c)
	if c.Status.Datastore == nil || c.Status.Datastore.Type != v1beta1.EtcdDatastore || c.Status.PersistenceType != v1beta1.EphemeralPersistence {
		t.Fatalf("status %+v / %s, want etcd and ephemeral recorded", c.Status.Datastore, c.Status.PersistenceType)
	}

	r.Config.DefaultDatastore = v1beta1.SQLiteDatastore
	r.Config.DefaultPersistence = v1beta1.DynamicPersistence
	reconcileOnce(t, r, c)
	get(t, c, c.Name, c)
	if c.Status.Datastore.Type != v1beta1.EtcdDatastore || c.Status.PersistenceType != v1beta1.EphemeralPersistence {
		t.Fatalf("after the defaults changed: status %s / %s, want etcd and ephemeral kept", c.Status.Datastore.Type, c.Status.PersistenceType)
	}
	if got := condition(t, c, v1beta1.ConditionReady); got.Reason == v1beta1.ReasonInvalidSpec {
		t.Fatalf("Ready %s: %s: servers: 3 was judged against the new default", got.Reason, got.Message)
	}
	sts := &appsv1.StatefulSet{}
	get(t, c, layout.NamesFor(c).StatefulSet, sts)
	if len(sts.Spec.VolumeClaimTemplates) != 0 {
		t.Error("the StatefulSet gained volume claims: the persistence type switched to the new default")
	}
	etcdSidecar := false
	for _, ic := range sts.Spec.Template.Spec.InitContainers {
		etcdSidecar = etcdSidecar || (ic.Name == "datastore" && len(ic.Command) > 1 && ic.Command[1] == "etcd")
	}
	if !etcdSidecar {
		t.Error("the server pods no longer run an etcd member: the datastore switched to the new default")
	}
}

// Defect 7: with etcd as the default, servers: 4 passes admission and the
// controller refuses it; the deleted server pods must not hang Terminating on
// the etcd finalizer meanwhile.
func TestAnInvalidServerCountStillReleasesDeletedEtcdPods(t *testing.T) {
	r, _ := newReconciler(t)
	r.EtcdDial = (&dialTable{}).dial
	r.Config.DefaultDatastore = v1beta1.EtcdDatastore
	c := createCluster(t, newCluster(newNamespace(t), "four", func(c *v1beta1.Cluster) { c.Spec.Servers = 3 }))
	reconcileOnce(t, r, c)
	pods := []*corev1.Pod{createServerPod(t, c, 0, true), createServerPod(t, c, 1, true)}

	get(t, c, c.Name, c)
	c.Spec.Servers = 4
	if err := k8s.Update(context.Background(), c); err != nil {
		t.Fatalf("servers: 4 with the datastore type unset should pass admission: %v", err)
	}
	reconcileOnce(t, r, c)
	if got := condition(t, c, v1beta1.ConditionReady); got.Status != metav1.ConditionFalse || got.Reason != v1beta1.ReasonInvalidSpec {
		t.Fatalf("Ready %s/%s, want False/%s", got.Status, got.Reason, v1beta1.ReasonInvalidSpec)
	}
	for _, p := range pods {
		deletePod(t, p)
	}
	reconcileOnce(t, r, c)
	for _, p := range pods {
		if s := podState(t, c, p.Name); s != "gone" {
			t.Errorf("pod %s is %s under an invalid spec, want gone: nothing answers, holding it could only deadlock", p.Name, s)
		}
	}
}
