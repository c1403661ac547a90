package cluster

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

func retainVolumes(c *v1beta1.Cluster) { c.Spec.Persistence.WhenDeleted = v1beta1.RetainVolumes }

// createRetainedClaim makes server i's volume claim as the StatefulSet made
// it and whenDeleted: Retain left it: labelled, owned by nothing.
func createRetainedClaim(t *testing.T, c *v1beta1.Cluster, i int) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: fmt.Sprintf("%s-%s-%d", layout.DataVolume, layout.NamesFor(c).StatefulSet, i), Labels: serverLabels(c)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
	}
	if err := k8s.Create(context.Background(), pvc); err != nil {
		t.Fatalf("creating retained claim: %v", err)
	}
}

// deleteLikeTheGarbageCollector deletes the Cluster and what it owned (envtest
// runs no garbage collector), and its server pod; volume claims stay.
func deleteLikeTheGarbageCollector(t *testing.T, c *v1beta1.Cluster) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Delete(ctx, c); err != nil {
		t.Fatalf("deleting Cluster: %v", err)
	}
	objs := ownedObjects(c)
	objs["Pod/"+layout.NamesFor(c).StatefulSet+"-0"] = &corev1.Pod{}
	for key, obj := range objs {
		obj.SetNamespace(c.Namespace)
		obj.SetName(nameOf(key))
		if err := k8s.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("deleting %s: %v", key, err)
		}
	}
}

// drainEvents returns the Events recorded so far.
func drainEvents(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestRetainedVolumesComeBackWithTheirOwnToken is `delete --keep-data`, then
// `create` with the same name: the new Cluster finds the server volume, mints
// no token, starts the servers anyway (k3s waits for the token file) so that
// the publisher can restore the token from the server's own copy, and says so
// in TokenReady and in one Event. Once restored, the original token is in use
// and the servers are not started a second time.
func TestRetainedVolumesComeBackWithTheirOwnToken(t *testing.T) {
	r, _ := newReconciler(t)
	rec := events.NewFakeRecorder(20)
	r.Recorder = rec
	ns := newNamespace(t)
	ctx := context.Background()

	first := createCluster(t, newCluster(ns, "phoenix", retainVolumes))
	reconcileOnce(t, r, first)
	makeReady(t, first)
	reconcileOnce(t, r, first)
	n := layout.NamesFor(first)
	token := &corev1.Secret{}
	get(t, first, n.Token, token)
	original := string(token.Data[layout.SecretKeyToken])
	if len(original) == 0 {
		t.Fatal("the first cluster got no token")
	}
	createRetainedClaim(t, first, 0)
	deleteLikeTheGarbageCollector(t, first)
	if got := startedToRestore(drainEvents(rec)); len(got) != 0 {
		t.Fatalf("events before the cluster came back: %v", got)
	}

	second := createCluster(t, newCluster(ns, "phoenix", retainVolumes))
	reconcileOnce(t, r, second)

	get(t, second, n.Token, token)
	if len(token.Data[layout.SecretKeyToken]) != 0 {
		t.Fatal("a new token was minted for the retained data")
	}
	cond := condition(t, second, v1beta1.ConditionTokenReady)
	if cond.Status != metav1.ConditionFalse || cond.Reason != v1beta1.ReasonTokenAwaitingRestore || !strings.Contains(cond.Message, "servers start on their volumes") {
		t.Fatalf("TokenReady %+v, want False/%s saying the servers start to restore it", cond, v1beta1.ReasonTokenAwaitingRestore)
	}
	sts := &appsv1.StatefulSet{}
	get(t, second, n.StatefulSet, sts)
	if !metav1.IsControlledBy(sts, second) {
		t.Fatalf("StatefulSet not owned by the new Cluster: %+v", sts.OwnerReferences)
	}
	var tokenVolume *corev1.Volume
	for i, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == layout.TokenVolume {
			tokenVolume = &sts.Spec.Template.Spec.Volumes[i]
		}
	}
	if tokenVolume == nil || tokenVolume.Secret == nil || tokenVolume.Secret.SecretName != n.Token || tokenVolume.Secret.Optional == nil || !*tokenVolume.Secret.Optional {
		t.Fatalf("the token volume must be the optional Secret %s, got %+v", n.Token, tokenVolume)
	}
	// k3s is never started without a token: it is given the token file,
	// which it waits for, and nothing else.
	cm := &corev1.ConfigMap{}
	get(t, second, n.ServerConfig, cm)
	if !strings.Contains(cm.Data[layout.ConfigMapKeyConfig], "token-file: "+layout.TokenPath) {
		t.Fatalf("k3s config without token-file %s:\n%s", layout.TokenPath, cm.Data[layout.ConfigMapKeyConfig])
	}
	cl := &v1beta1.Cluster{}
	get(t, second, second.Name, cl)
	if cl.Status.Phase != v1beta1.PhaseProvisioning {
		t.Fatalf("phase %s, want %s: the servers were started", cl.Status.Phase, v1beta1.PhaseProvisioning)
	}
	all := drainEvents(rec)
	if got := startedToRestore(all); len(got) != 1 {
		t.Fatalf("events %v, want one %s", all, v1beta1.ReasonServersStartedToRestoreToken)
	}
	for _, e := range all {
		if strings.Contains(e, original) {
			t.Fatalf("an event contains the token: %s", e)
		}
	}

	// Nothing changes until the publisher restored the token.
	reconcileOnce(t, r, second)
	get(t, second, n.Token, token)
	if len(token.Data) != 0 {
		t.Fatal("a second reconcile minted a token")
	}
	if got := drainEvents(rec); len(got) != 0 {
		t.Fatalf("a second reconcile recorded %v", got)
	}

	// What the publisher does: restore the server's own copy.
	token.Data = map[string][]byte{layout.SecretKeyToken: []byte(original)}
	if err := k8s.Update(ctx, token); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, second)
	if cond := condition(t, second, v1beta1.ConditionTokenReady); cond.Status != metav1.ConditionTrue {
		t.Fatalf("TokenReady after restore: %+v", cond)
	}
	get(t, second, n.Token, token)
	if string(token.Data[layout.SecretKeyToken]) != original {
		t.Fatal("the token changed after the restore")
	}
	again := &appsv1.StatefulSet{}
	get(t, second, n.StatefulSet, again)
	if again.UID != sts.UID {
		t.Fatal("the StatefulSet was replaced after the restore")
	}
}

// TestMissingUserTokenHoldsBackServersWithData: with tokenSecretRef the
// Secret is the user's and nothing restores it, so servers with a retained
// volume are not started without it.
func TestMissingUserTokenHoldsBackServersWithData(t *testing.T) {
	r, _ := newReconciler(t)
	c := newCluster(newNamespace(t), "byo", retainVolumes, func(c *v1beta1.Cluster) {
		c.Spec.TokenSecretRef = &v1beta1.TokenSecretReference{Name: "my-token"}
	})
	createRetainedClaim(t, c, 0)
	createCluster(t, c)
	reconcileOnce(t, r, c)
	if got := condition(t, c, v1beta1.ConditionTokenReady); got.Reason != v1beta1.ReasonTokenSecretNotFound {
		t.Fatalf("TokenReady %+v, want %s", got, v1beta1.ReasonTokenSecretNotFound)
	}
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).StatefulSet}, &appsv1.StatefulSet{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("servers started without the user's token; get StatefulSet: %v", err)
	}
}

// TestRetainedEtcdVolumesComeBack: an etcd cluster created over three retained
// volumes starts its three servers without a token (they restore it) and
// without publishing a bootstrapping roster, which could start a second etcd
// cluster beside the retained one; members with data start from it.
func TestRetainedEtcdVolumesComeBack(t *testing.T) {
	r, _ := newReconciler(t)
	r.EtcdDial = (&dialTable{}).dial // the members are not running: every dial fails at once
	rec := events.NewFakeRecorder(20)
	r.Recorder = rec
	c := newEtcdCluster(newNamespace(t), "ha", 3)
	retainVolumes(c)
	for i := range 3 {
		createRetainedClaim(t, c, i)
	}
	createCluster(t, c)
	reconcileOnce(t, r, c)

	n := layout.NamesFor(c)
	token := &corev1.Secret{}
	get(t, c, n.Token, token)
	if len(token.Data[layout.SecretKeyToken]) != 0 {
		t.Fatal("a new token was minted for the retained data")
	}
	if got := condition(t, c, v1beta1.ConditionTokenReady); got.Reason != v1beta1.ReasonTokenAwaitingRestore {
		t.Fatalf("TokenReady %+v, want %s", got, v1beta1.ReasonTokenAwaitingRestore)
	}
	sts := &appsv1.StatefulSet{}
	get(t, c, n.StatefulSet, sts)
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Fatalf("StatefulSet replicas %v, want 3", sts.Spec.Replicas)
	}
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: c.Namespace, Name: n.EtcdRoster}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("a roster was published for a cluster whose members hold data (get: %v)", err)
	}
	if got := startedToRestore(drainEvents(rec)); len(got) != 1 {
		t.Fatalf("events %v, want one %s", got, v1beta1.ReasonServersStartedToRestoreToken)
	}
}

// TestRestorePendingClusterStartsWithoutAToken is the controller's half of
// `create --restore-from`: a new Cluster annotated restore-pending gets no
// generated token and its servers start (k3s waits for the token); once the
// CLI wrote the snapshot's token and removed the annotation the token is
// ready, unchanged, and the servers are not replaced. With etcd the first
// roster is still published: the members start empty and form a cluster the
// restore writes into.
func TestRestorePendingClusterStartsWithoutAToken(t *testing.T) {
	for _, ds := range []v1beta1.DatastoreType{v1beta1.SQLiteDatastore, v1beta1.EtcdDatastore} {
		t.Run(string(ds), func(t *testing.T) {
			r, _ := newReconciler(t)
			r.EtcdDial = (&dialTable{}).dial
			rec := events.NewFakeRecorder(20)
			r.Recorder = rec
			c := newCluster(newNamespace(t), "restored", func(c *v1beta1.Cluster) {
				c.Spec.Datastore.Type = ds
				c.Annotations = map[string]string{v1beta1.AnnotationRestorePending: "abc"}
			})
			createCluster(t, c)
			reconcileOnce(t, r, c)
			n := layout.NamesFor(c)
			token := &corev1.Secret{}
			get(t, c, n.Token, token)
			if len(token.Data[layout.SecretKeyToken]) != 0 {
				t.Fatal("a token was generated for a cluster being restored")
			}
			cond := condition(t, c, v1beta1.ConditionTokenReady)
			if cond.Reason != v1beta1.ReasonTokenAwaitingRestore || !strings.Contains(cond.Message, "restoring from a snapshot") {
				t.Fatalf("TokenReady %+v", cond)
			}
			sts := &appsv1.StatefulSet{}
			get(t, c, n.StatefulSet, sts)
			if got := startedToRestore(drainEvents(rec)); len(got) != 1 || !strings.Contains(got[0], "restoring from a snapshot") {
				t.Fatalf("events %v", got)
			}
			if ds == v1beta1.EtcdDatastore {
				get(t, c, n.EtcdRoster, &corev1.ConfigMap{})
			}

			// What k3kcli does once the data is loaded.
			token.Data = map[string][]byte{layout.SecretKeyToken: []byte("the-snapshots-token")}
			if err := k8s.Update(context.Background(), token); err != nil {
				t.Fatal(err)
			}
			get(t, c, c.Name, c)
			delete(c.Annotations, v1beta1.AnnotationRestorePending)
			if err := k8s.Update(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			reconcileOnce(t, r, c)
			if cond := condition(t, c, v1beta1.ConditionTokenReady); cond.Status != metav1.ConditionTrue {
				t.Fatalf("TokenReady after the restore: %+v", cond)
			}
			get(t, c, n.Token, token)
			again := &appsv1.StatefulSet{}
			get(t, c, n.StatefulSet, again)
			if string(token.Data[layout.SecretKeyToken]) != "the-snapshots-token" || again.UID != sts.UID {
				t.Fatal("the token or the StatefulSet changed after the restore")
			}
		})
	}
}

// TestRestorePendingNeverEmptiesAToken: the annotation on a cluster that has
// its token changes nothing.
func TestRestorePendingNeverEmptiesAToken(t *testing.T) {
	r, writes := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "running"))
	reconcileOnce(t, r, c)
	token := &corev1.Secret{}
	get(t, c, layout.NamesFor(c).Token, token)
	original := string(token.Data[layout.SecretKeyToken])
	get(t, c, c.Name, c)
	c.Annotations = map[string]string{v1beta1.AnnotationRestorePending: "late"}
	if err := k8s.Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	before := writes.count()
	reconcileOnce(t, r, c)
	get(t, c, layout.NamesFor(c).Token, token)
	if string(token.Data[layout.SecretKeyToken]) != original || condition(t, c, v1beta1.ConditionTokenReady).Status != metav1.ConditionTrue {
		t.Fatal("the annotation changed a cluster that has its token")
	}
	if writes.count() != before {
		t.Fatalf("a steady reconcile wrote %d times", writes.count()-before)
	}
}

// startedToRestore keeps the ServersStartedToRestoreToken Events of got: the
// condition Events every reconcile records are not what these tests count.
func startedToRestore(got []string) []string {
	var out []string
	for _, e := range got {
		if strings.Contains(e, " "+v1beta1.ReasonServersStartedToRestoreToken+" ") {
			out = append(out, e)
		}
	}
	return out
}

// TestInPlaceRestoreHoldsTheTokenBack is the controller's half of `cluster
// restore` (in place): once k3kcli annotated the Cluster restore-pending
// (in-place/…) and moved the token out of the Secret's token key, the
// controller generates no token, leaves the kept one alone and says in
// TokenReady that the restore is under way and how to finish it; once the
// snapshot's token is back and the annotation gone, the token is ready.
func TestInPlaceRestoreHoldsTheTokenBack(t *testing.T) {
	r, _ := newReconciler(t)
	c := newCluster(newNamespace(t), "inplace", func(*v1beta1.Cluster) {})
	createCluster(t, c)
	reconcileOnce(t, r, c)
	n := layout.NamesFor(c)
	token := &corev1.Secret{}
	get(t, c, n.Token, token)
	before := token.Data[layout.SecretKeyToken]
	if len(before) == 0 {
		t.Fatal("no token generated")
	}

	// What k3kcli cluster restore does before it stops the servers.
	get(t, c, c.Name, c)
	c.Annotations = map[string]string{v1beta1.AnnotationRestorePending: "in-place/0123456789abcdef"}
	if err := k8s.Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	token.Annotations = map[string]string{v1beta1.AnnotationRestorePending: ""}
	token.Data = map[string][]byte{"token-before-restore": before}
	if err := k8s.Update(context.Background(), token); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	get(t, c, n.Token, token)
	if len(token.Data[layout.SecretKeyToken]) != 0 || !bytes.Equal(token.Data["token-before-restore"], before) {
		t.Fatal("the controller wrote the token Secret during an in-place restore")
	}
	cond := condition(t, c, v1beta1.ConditionTokenReady)
	if cond.Status != metav1.ConditionFalse || cond.Reason != v1beta1.ReasonTokenAwaitingRestore ||
		!strings.Contains(cond.Message, "restoring in place") || !strings.Contains(cond.Message, "run the same k3kcli cluster restore again") {
		t.Fatalf("TokenReady during an in-place restore: %+v", cond)
	}

	token.Annotations = nil
	token.Data = map[string][]byte{layout.SecretKeyToken: before}
	if err := k8s.Update(context.Background(), token); err != nil {
		t.Fatal(err)
	}
	get(t, c, c.Name, c)
	delete(c.Annotations, v1beta1.AnnotationRestorePending)
	if err := k8s.Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	if cond := condition(t, c, v1beta1.ConditionTokenReady); cond.Status != metav1.ConditionTrue {
		t.Fatalf("TokenReady after the restore: %+v", cond)
	}
}
