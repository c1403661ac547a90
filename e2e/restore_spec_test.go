//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// TestRestoreFromSpec: the GitOps path of a restore. A sqlite cluster with
// objects, `k3kcli cluster snapshot`, more objects written, the file copied
// onto a claim labelled k3k.io/restore-for for the new cluster, and a
// Cluster created from a manifest alone with spec.restoreFrom → Restored,
// Ready, exactly the snapshot's objects, the source's token, writable.
func TestRestoreFromSpec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := createCluster(t, "spec-src", "--datastore", "sqlite", "--persistence-type", "dynamic")
	writeKept(t, src.client, "default", "object", 40)
	before := contents(keptObjects(t, src.client))
	file := filepath.Join(cfg.workDir, "spec-src.k3ksnap")
	k3kcli(t, "cluster", "snapshot", src.name, "-n", src.namespace, "-o", file)
	writeKept(t, src.client, "default", "after-snapshot", 5)
	token := secretData(t, src, src.tokenSecret())
	snap, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}

	v := &vcluster{name: "from-spec", namespace: "e2e-from-spec", kubeconfig: filepath.Join(cfg.workDir, "from-spec.kubeconfig")}
	if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v.namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpPod(t, v)
			return
		}
		_ = host.CoreV1().Namespaces().Delete(context.Background(), v.namespace, metav1.DeleteOptions{})
	})
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: v.namespace, Name: "snapshots", Labels: map[string]string{v1beta1.LabelRestoreFor: v.name}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := host.CoreV1().PersistentVolumeClaims(v.namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writer := claimWriter(t, v.namespace, "snapshots")
	rc := restConfig(t, cfg.hostKubeconfig)
	if _, stderr, err := execIn(ctx, rc, v.namespace, writer, "sh", string(snap), "sh", "-c", "cat > /backup/spec-src.k3ksnap && chmod 600 /backup/spec-src.k3ksnap"); err != nil {
		t.Fatalf("copying the snapshot onto the claim: %v: %s", err, stderr)
	}
	// The restore Job and the writer may not share a node-local claim at once.
	if err := host.CoreV1().Pods(v.namespace).Delete(ctx, writer, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}

	crc := clusterClient(t)
	c := &v1beta1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: v.namespace, Name: v.name},
		Spec: v1beta1.ClusterSpec{
			Datastore:   v1beta1.DatastoreConfig{Type: v1beta1.SQLiteDatastore},
			Persistence: v1beta1.PersistenceConfig{Type: v1beta1.DynamicPersistence},
			Expose:      &v1beta1.ExposeConfig{NodePort: &v1beta1.NodePortConfig{}},
			RestoreFrom: &v1beta1.RestoreSource{ClaimName: "snapshots", File: "spec-src.k3ksnap"},
			// What k3kcli adds for a node-port cluster (the test reaches the
			// node port at the node's address). Without it the test passed
			// only when k3s kept the SANs of the restored k3s-serving Secret,
			// the source's certificate, which k3kcli made with this address.
			TLSSANs: []string{cfg.nodeIP},
		},
	}
	start := time.Now()
	if err := crc.Create(ctx, c); err != nil {
		t.Fatalf("creating the Cluster from its manifest: %v", err)
	}
	eventually(t, 12*time.Minute, "the Cluster restored and Ready", func(ctx context.Context) (bool, error) {
		live := &v1beta1.Cluster{}
		if err := crc.Get(ctx, client.ObjectKeyFromObject(c), live); err != nil {
			return false, err
		}
		restored := meta.FindStatusCondition(live.Status.Conditions, v1beta1.ConditionRestored)
		if restored != nil && restored.Reason == v1beta1.ReasonRestoreFailed {
			t.Fatalf("the restore failed: %s", restored.Message)
		}
		ready := meta.IsStatusConditionTrue(live.Status.Conditions, v1beta1.ConditionReady)
		if restored == nil || restored.Status != metav1.ConditionTrue || !ready {
			return false, fmt.Errorf("Restored %+v, Ready %v", restored, ready)
		}
		return true, nil
	})
	t.Logf("restored from the spec and Ready after %s", time.Since(start).Round(time.Second))
	eventually(t, 2*time.Minute, "the kubeconfig published", func(ctx context.Context) (bool, error) {
		s, err := host.CoreV1().Secrets(v.namespace).Get(ctx, v.kubeconfigSecret(), metav1.GetOptions{})
		return err == nil && len(s.Data["kubeconfig.yaml"]) > 0, err
	})
	k3kcli(t, "kubeconfig", "get", v.name, "-n", v.namespace, "--output-kubeconfig", v.kubeconfig)
	v.client = virtualClient(t, v.kubeconfig)
	serving(t, v.client, 3*time.Minute)

	after := contents(keptObjects(t, v.client))
	t.Logf("objects in the snapshot: %d; in the restored cluster: %d", len(before), len(after))
	if len(before) != 40 || !maps.Equal(before, after) {
		t.Fatalf("the restored cluster holds other objects than the snapshot:\nsnapshot %v\nrestored %v", before, after)
	}
	if got := secretData(t, v, v.tokenSecret()); !equalData(got, token) {
		t.Fatal("the restored cluster's token is not the snapshot's")
	}
	writes := workload{namespace: "written-after-restore"}
	writes.create(t, v.client)
	writes.check(t, v.client)
}

// claimWriter starts a pod that mounts claim writable as the backup's user
// (fsGroup makes the volume its group's) and returns its name once it runs.
func claimWriter(t *testing.T, ns, claim string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "claim-writer"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)), RunAsGroup: ptr.To(int64(65532)), FSGroup: ptr.To(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "sh", Image: toolboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts:    []corev1.VolumeMount{{Name: "backup", MountPath: "/backup"}},
			}},
			Volumes: []corev1.Volume{{Name: "backup", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}
	if _, err := host.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the claim writer running", func(ctx context.Context) (bool, error) {
		p, err := host.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !podReady(p) {
			return false, fmt.Errorf("phase %s, not ready", p.Status.Phase)
		}
		return true, nil
	})
	return pod.Name
}
