//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
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

// TestScheduledSnapshots: a sqlite cluster with spec.backup every minute,
// keep 2, onto a claim of its namespace, while objects are written. The
// status must report at least three different snapshots over time with
// advancing revisions (each a Job that exec'd into the server pod with its
// own narrow rights), the claim must then hold exactly two of the
// cluster's snapshots (inspected by a pod that mounts it, running as the
// backup's user), the newest must restore into a new cluster with every
// object it counts, and removing spec.backup must leave the claim and its
// files.
func TestScheduledSnapshots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := createCluster(t, "scheduled", "--datastore", "sqlite", "--persistence-type", "dynamic")
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: v.namespace, Name: "snapshots", Labels: map[string]string{v1beta1.LabelBackupFor: v.name}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := host.CoreV1().PersistentVolumeClaims(v.namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crc := clusterClient(t)
	setBackup(t, crc, v, &v1beta1.BackupConfig{Schedule: "* * * * *", Keep: 2, ClaimName: "snapshots"})

	w := workload{namespace: "backup-data"}
	w.create(t, v.client)
	seen := map[string]int64{}
	var order []string
	written := 0
	start, lastWrite := time.Now(), time.Time{}
	eventually(t, 8*time.Minute, "three different scheduled snapshots in the status", func(ctx context.Context) (bool, error) {
		// Writes go on between snapshots, so each holds more.
		if time.Since(lastWrite) > 5*time.Second {
			writeKept(t, v.client, w.namespace, fmt.Sprintf("object-%03d", written), 1)
			written++
			lastWrite = time.Now()
		}
		c := &v1beta1.Cluster{}
		if err := crc.Get(ctx, client.ObjectKey{Namespace: v.namespace, Name: v.name}, c); err != nil {
			return false, err
		}
		if c.Status.Backup == nil || c.Status.Backup.LastSuccessful == nil {
			cond := meta.FindStatusCondition(c.Status.Conditions, v1beta1.ConditionLastBackupSucceeded)
			return false, fmt.Errorf("no snapshot yet; LastBackupSucceeded %+v, backup %+v", cond, c.Status.Backup)
		}
		s := c.Status.Backup.LastSuccessful
		if _, ok := seen[s.File]; !ok {
			seen[s.File] = s.Revision
			order = append(order, s.File)
			t.Logf("%s: snapshot %s, revision %d, %d bytes (Job %s)", time.Since(start).Round(time.Second), s.File, s.Revision, s.Size, s.Job)
		}
		return len(order) >= 3, nil
	})
	for i := 1; i < len(order); i++ {
		if seen[order[i]] <= seen[order[i-1]] {
			t.Fatalf("the revision did not advance: %s (%d) after %s (%d)", order[i], seen[order[i]], order[i-1], seen[order[i-1]])
		}
	}
	if cond := condition(t, crc, v, v1beta1.ConditionLastBackupSucceeded); cond.Status != metav1.ConditionTrue {
		// The newest run may have failed meanwhile; say how.
		t.Logf("LastBackupSucceeded is %s now: %s", cond.Status, cond.Message)
	}

	// Stop the schedule, so the claim holds still while it is looked at: the
	// CronJob goes, the claim and its files stay.
	setBackup(t, crc, v, nil)
	eventually(t, 2*time.Minute, "the backup CronJob removed", func(ctx context.Context) (bool, error) {
		_, err := host.BatchV1().CronJobs(v.namespace).Get(ctx, "k3k-"+v.name+"-backup", metav1.GetOptions{})
		return err != nil, nil
	})
	eventually(t, 3*time.Minute, "no backup pod running", func(ctx context.Context) (bool, error) {
		pods, err := host.CoreV1().Pods(v.namespace).List(ctx, metav1.ListOptions{LabelSelector: "k3k.io/component=backup"})
		return err == nil && len(pods.Items) == 0, err
	})

	reader := claimReader(t, v.namespace, "snapshots")
	rc := restConfig(t, cfg.hostKubeconfig)
	var files []string
	eventually(t, time.Minute, "the claim listed", func(ctx context.Context) (bool, error) {
		out, stderr, err := execIn(ctx, rc, v.namespace, reader, "sh", "", "ls", "-1", "/backup")
		if err != nil {
			return false, fmt.Errorf("%v: %s", err, stderr)
		}
		files = nil
		for _, f := range strings.Fields(out) {
			if strings.HasPrefix(f, v.name+"-") {
				files = append(files, f)
			}
		}
		return true, nil
	})
	sort.Strings(files)
	t.Logf("the claim holds %v", files)
	if len(files) != 2 {
		t.Fatalf("the claim holds %d of the cluster's snapshots, want 2 (keep): %v", len(files), files)
	}
	for _, f := range files {
		if !strings.HasSuffix(f, ".k3ksnap") {
			t.Fatalf("a temporary or unknown file is left on the claim: %s", f)
		}
	}
	newest := files[len(files)-1]
	if newest != order[len(order)-1] && seen[newest] == 0 {
		t.Logf("the newest file %s was written after the status was last read", newest)
	}

	// Fetch the newest the way docs/backup.md tells users to, and restore it.
	data, stderr, err := execIn(ctx, rc, v.namespace, reader, "sh", "", "cat", "/backup/"+newest)
	if err != nil {
		t.Fatalf("reading %s off the claim: %v: %s", newest, err, stderr)
	}
	file := filepath.Join(cfg.workDir, newest)
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	m, n := snapshotObjects(t, file, w.namespace)
	t.Logf("%s: revision %d, %d objects of %d written", newest, m.Revision, n, written)
	if n == 0 || n > written {
		t.Fatalf("the snapshot holds %d objects; %d were written", n, written)
	}
	dst := &vcluster{name: "from-schedule", namespace: "e2e-from-schedule", kubeconfig: filepath.Join(cfg.workDir, "from-schedule.kubeconfig")}
	if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dst.namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = host.CoreV1().Namespaces().Delete(context.Background(), dst.namespace, metav1.DeleteOptions{})
		}
	})
	k3kcli(t, "cluster", "create", dst.name, "-n", dst.namespace, "--restore-from", file, "--expose", "nodeport",
		"--timeout", "10m", "--output-kubeconfig", dst.kubeconfig)
	dst.client = virtualClient(t, dst.kubeconfig)
	restored := 0
	for k := range keptObjects(t, dst.client) {
		if strings.HasPrefix(k, w.namespace+"/object-") {
			restored++
		}
	}
	if restored != n {
		t.Fatalf("the restored cluster holds %d objects, the snapshot %d", restored, n)
	}
}

// setBackup sets (nil: removes) the Cluster's spec.backup.
func setBackup(t *testing.T, crc client.Client, v *vcluster, b *v1beta1.BackupConfig) {
	t.Helper()
	if err := retry(func(ctx context.Context) error {
		c := &v1beta1.Cluster{}
		if err := crc.Get(ctx, client.ObjectKey{Namespace: v.namespace, Name: v.name}, c); err != nil {
			return err
		}
		c.Spec.Backup = b
		return crc.Update(ctx, c)
	}); err != nil {
		t.Fatalf("setting spec.backup: %v", err)
	}
}

// claimReader starts a pod that mounts claim read-only, as the backup's user
// (the snapshots are 0600), and returns its name once it runs.
func claimReader(t *testing.T, ns, claim string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "claim-reader"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)), RunAsGroup: ptr.To(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "sh", Image: toolboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts:    []corev1.VolumeMount{{Name: "backup", MountPath: "/backup", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "backup", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true},
			}}},
		},
	}
	if _, err := host.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the claim reader running", func(ctx context.Context) (bool, error) {
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
