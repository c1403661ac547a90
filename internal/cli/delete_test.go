package cli

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

func keyOf(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func TestDeleteRemovesTheCluster(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "gone", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatalf("create: exit %d", r.code)
	}
	r := k3kcli(t, "cluster", "delete", "gone", "-n", ns)
	if r.code != ExitOK {
		t.Fatalf("delete: exit %d: %s", r.code, r.errOut)
	}
	err := k8s.Get(context.Background(), keyOf(ns, "gone"), &v1beta1.Cluster{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("cluster still there after delete: %v", err)
	}

	r = k3kcli(t, "cluster", "delete", "gone", "-n", ns)
	if r.code != ExitError {
		t.Fatalf("deleting a missing cluster: exit %d, want %d", r.code, ExitError)
	}
	assertOneLineError(t, r.errOut, `clusters.k3k.io "gone" not found`, "hint: list clusters with: k3kcli cluster list -A")
	if r := k3kcli(t, "cluster", "delete", "gone", "-n", ns, "--ignore-not-found"); r.code != ExitOK {
		t.Fatalf("--ignore-not-found: exit %d", r.code)
	}
}

func TestDeleteKeepDataRetainsVolumesBeforeDeleting(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	if r := k3kcli(t, "cluster", "create", "keep", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatalf("create: exit %d", r.code)
	}
	// The StatefulSet as the controller made it for whenDeleted: Delete.
	labels := map[string]string{"k3k.io/cluster": "keep"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "k3k-keep-server", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "k3s", Image: "rancher/k3s"}}},
			},
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
		},
	}
	if err := k8s.Create(ctx, sts); err != nil {
		t.Fatal(err)
	}
	done := make(chan result, 1)
	go func() { done <- k3kcli(t, "cluster", "delete", "keep", "-n", ns, "--keep-data", "--timeout", "2m") }()

	eventually(t, "the CLI sets whenDeleted: Retain", func() error {
		c := &v1beta1.Cluster{}
		if err := k8s.Get(ctx, keyOf(ns, "keep"), c); err != nil {
			return err
		}
		if c.Spec.Persistence.WhenDeleted != v1beta1.RetainVolumes {
			return fmt.Errorf("whenDeleted is %q", c.Spec.Persistence.WhenDeleted)
		}
		return nil
	})
	// The cluster must still exist: the StatefulSet would still take the volumes.
	select {
	case r := <-done:
		t.Fatalf("delete finished before the StatefulSet retained the volumes: exit %d, %s", r.code, r.out)
	default:
	}
	if err := k8s.Get(ctx, keyOf(ns, "keep"), &v1beta1.Cluster{}); err != nil {
		t.Fatalf("cluster deleted while its StatefulSet still deletes volumes: %v", err)
	}
	// Play the controller: apply the policy.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(sts), sts); err != nil {
		t.Fatal(err)
	}
	sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	if err := k8s.Update(ctx, sts); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != ExitOK {
		t.Fatalf("delete --keep-data: exit %d: %s", r.code, r.errOut)
	}
	if err := k8s.Get(ctx, keyOf(ns, "keep"), &v1beta1.Cluster{}); !apierrors.IsNotFound(err) {
		t.Fatalf("cluster not deleted: %v", err)
	}
}

func TestDeleteKeepDataRefusesAnEphemeralCluster(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "tmp", "-n", ns, "--wait=false", "--persistence-type", "ephemeral"); r.code != ExitOK {
		t.Fatalf("create: exit %d", r.code)
	}
	r := k3kcli(t, "cluster", "delete", "tmp", "-n", ns, "--keep-data")
	if r.code != ExitUsage {
		t.Fatalf("exit %d, want %d", r.code, ExitUsage)
	}
	assertOneLineError(t, r.errOut, "ephemeral persistence: it has no volumes to keep")
	getCluster(t, ns, "tmp") // not deleted
}
