package cluster

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// The restore Job's objects (spec.restoreFrom), pure functions of the
// Cluster like backup_desired.go, whose pod, bindings and exec ClusterRole
// they reuse. The Job restores the way `k3kcli cluster create --restore-from`
// does: it needs the rights a user of that command needs, narrowed to this
// cluster, and nothing more.

// Bounds of the restore Job. One attempt: a second one would find the
// datastore holding the first one's keys and be refused, so a failure is
// final (the cluster is deleted and created again).
const (
	restoreDeadline     = 3600
	restoreBackoffLimit = 0
)

// restoreLabels select c's restore Job, its pod and its rights.
func restoreLabels(c *v1beta1.Cluster) map[string]string {
	l := commonLabels(c)
	l[v1beta1.LabelComponent] = v1beta1.ComponentRestore
	return l
}

// DesiredRestoreServiceAccount is the restore Job pod's identity.
func DesiredRestoreServiceAccount(c *v1beta1.Cluster) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: layout.RestoreName(c.Name), Namespace: c.Namespace, Labels: restoreLabels(c)}}
}

// DesiredRestoreRole holds what a restore needs besides exec: find server 0
// (get, list on pods), read this Cluster (its datastore in effect), and get
// and update this cluster's token Secret, by name, to put the snapshot's
// token into it once the data is in.
//
// Why the Job writes the token itself: the token is in the snapshot file, on
// a claim only the Job mounts; the controller cannot read the claim, and the
// only other way out of the Job, its termination message, is readable by
// anyone who may get pods in the namespace, which is more than may read the
// token Secret. So the Job gets update on exactly that one Secret (RBAC
// narrows update by name), and reports only facts that are not secret
// (file, revision, size, sha256, or the error) in its termination message.
// It gets no right on the Cluster other than get: the controller sees the
// restore finish from the Job and the token Secret.
func DesiredRestoreRole(c *v1beta1.Cluster) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: layout.RestoreName(c.Name), Namespace: c.Namespace, Labels: restoreLabels(c)},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{v1beta1.GroupVersion.Group}, Resources: []string{"clusters"}, ResourceNames: []string{c.Name}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{layout.NamesFor(c).Token}, Verbs: []string{"get", "update"}},
		},
	}
}

// DesiredRestoreRoleBinding binds DesiredRestoreRole to DesiredRestoreServiceAccount.
func DesiredRestoreRoleBinding(c *v1beta1.Cluster) *rbacv1.RoleBinding {
	return jobRoleBinding(c, layout.RestoreName(c.Name), restoreLabels(c))
}

// DesiredRestoreExecRoleBinding binds the chart's backup exec ClusterRole
// (BackupExecRules) to DesiredRestoreServiceAccount in c's namespace: the
// restore streams into server 0's datastore sidecar through pods/exec.
func DesiredRestoreExecRoleBinding(c *v1beta1.Cluster, clusterRole string) *rbacv1.RoleBinding {
	return jobExecRoleBinding(c, layout.RestoreName(c.Name), restoreLabels(c), clusterRole)
}

// RestoreArgs is the restore container's command line (`datastore
// restore-from-file`). c.Spec.RestoreFrom must be set.
func RestoreArgs(c *v1beta1.Cluster) []string {
	return []string{"restore-from-file",
		"--namespace=" + c.Namespace, "--cluster=" + c.Name,
		"--dir=" + layout.RestoreDir, "--file=" + c.Spec.RestoreFrom.File,
		"--tmp-dir=" + layout.RestoreTmpDir,
		"--result-file=/dev/termination-log"}
}

// DesiredRestoreJob runs `datastore restore-from-file` once, from the
// datastore image, in the restricted pod the backup runs in
// (snapshotJobPod), with the claim mounted read-only (no fsGroup: nothing on
// it changes) and an emptyDir for the checked data. It is never deleted by
// the controller while the Cluster exists (no TTL): its existence tells a
// restore the controller began from volumes that were there before
// (restoreIgnored). c.Spec.RestoreFrom must be set.
func DesiredRestoreJob(c *v1beta1.Cluster, cfg Config) *batchv1.Job {
	labels := restoreLabels(c)
	name := layout.RestoreName(c.Name)
	pod := snapshotJobPod(cfg, snapshotJobParts{
		serviceAccount: name, container: layout.RestoreContainer, args: RestoreArgs(c),
		mounts: []corev1.VolumeMount{
			{Name: layout.RestoreVolume, MountPath: layout.RestoreDir, ReadOnly: true},
			{Name: layout.RestoreTmpVolume, MountPath: layout.RestoreTmpDir},
		},
		volumes: []corev1.Volume{
			{Name: layout.RestoreVolume, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: c.Spec.RestoreFrom.ClaimName, ReadOnly: true,
			}}},
			{Name: layout.RestoreTmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	})
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To(int32(restoreBackoffLimit)),
			ActiveDeadlineSeconds: ptr.To(int64(restoreDeadline)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       pod,
			},
		},
	}
}
