package cluster

import (
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// The backup CronJob's objects, pure functions of the Cluster like desired.go.
// The Job takes its snapshot the way k3kcli does (pkg/snapshotter): it needs
// the rights a user of `k3kcli cluster snapshot` needs and nothing more.

// Bounds of one backup run. A run that is still going when the next is due is
// left alone (Forbid); one that hangs ends at backupDeadline.
const (
	backupStartingDeadline = 300
	backupDeadline         = 3600
	backupBackoffLimit     = 1
	backupSuccessHistory   = 3
	backupFailedHistory    = 2
)

// backupLabels select c's backup CronJob, its Jobs and their pods.
func backupLabels(c *v1beta1.Cluster) map[string]string {
	l := commonLabels(c)
	l[v1beta1.LabelComponent] = v1beta1.ComponentBackup
	return l
}

// DesiredBackupServiceAccount is the backup Job pod's identity.
func DesiredBackupServiceAccount(c *v1beta1.Cluster) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: layout.BackupName(c.Name), Namespace: c.Namespace, Labels: backupLabels(c)}}
}

// DesiredBackupRole holds what taking a snapshot needs besides exec: find
// the server pods (get, list: a list cannot be narrowed by name), read this
// Cluster (its datastore type) and its token Secret (the snapshot carries
// it). Nothing can be written, and no other Secret or Cluster read.
func DesiredBackupRole(c *v1beta1.Cluster) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: layout.BackupName(c.Name), Namespace: c.Namespace, Labels: backupLabels(c)},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{v1beta1.GroupVersion.Group}, Resources: []string{"clusters"}, ResourceNames: []string{c.Name}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{layout.NamesFor(c).Token}, Verbs: []string{"get"}},
		},
	}
}

// BackupExecRules are the rights of the chart's backup exec ClusterRole:
// exec into pods, which `datastore backup` needs to reach the server pod's
// datastore sidecar (create, which the API server checks for an exec over
// WebSockets, and get, which older API servers check instead). They are
// granted to each backup Job in its cluster's namespace only, through a
// RoleBinding to that ClusterRole, for the reason the agent's are (AgentRules):
// RBAC lets the controller grant only rights it holds, and the controller
// must not hold exec; nor can a Role narrow exec to the server pods without
// it. The backup's own Role is narrowed by name wherever RBAC allows it.
func BackupExecRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"get", "create"}},
	}
}

// DesiredBackupExecClusterRole is the ClusterRole holding BackupExecRules,
// rendered into the chart by hack/agentguard.
func DesiredBackupExecClusterRole(name string) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue}},
		Rules:      BackupExecRules(),
	}
}

// DesiredBackupRoleBinding binds DesiredBackupRole to DesiredBackupServiceAccount.
func DesiredBackupRoleBinding(c *v1beta1.Cluster) *rbacv1.RoleBinding {
	return jobRoleBinding(c, layout.BackupName(c.Name), backupLabels(c))
}

// DesiredBackupExecRoleBinding binds the backup exec ClusterRole to
// DesiredBackupServiceAccount in c's namespace.
func DesiredBackupExecRoleBinding(c *v1beta1.Cluster, clusterRole string) *rbacv1.RoleBinding {
	return jobExecRoleBinding(c, layout.BackupName(c.Name), backupLabels(c), clusterRole)
}

// jobRoleBinding binds the Role called name to the ServiceAccount of the
// same name in c's namespace: a snapshot Job's own rights (backup, restore).
func jobRoleBinding(c *v1beta1.Cluster, name string, labels map[string]string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: c.Namespace}},
	}
}

// jobExecRoleBinding binds the chart's exec ClusterRole (BackupExecRules) to
// the ServiceAccount called name, in c's namespace only.
func jobExecRoleBinding(c *v1beta1.Cluster, name string, labels map[string]string, clusterRole string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-exec", Namespace: c.Namespace, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: c.Namespace}},
	}
}

// BackupArgs is the backup container's command line (`datastore backup`).
func BackupArgs(c *v1beta1.Cluster) []string {
	return []string{"backup",
		"--namespace=" + c.Namespace, "--cluster=" + c.Name,
		"--dir=" + layout.BackupDir, "--keep=" + strconv.Itoa(int(backupKeep(c))),
		"--result-file=/dev/termination-log"}
}

func backupKeep(c *v1beta1.Cluster) int32 {
	if c.Spec.Backup == nil || c.Spec.Backup.Keep < 1 {
		return 7
	}
	return c.Spec.Backup.Keep
}

// DesiredBackupCronJob runs `datastore backup` on spec.backup.schedule, in
// UTC, from the datastore image (the same binary as the sidecar it talks to,
// so the stream format always matches). Its pod meets the restricted Pod
// Security Standard: non-root, no privilege escalation, no capabilities, a
// read-only root, no host namespace or path; it mounts the backup claim and
// nothing else but its ServiceAccount token. It is suspended while the
// cluster is paused: no server runs to take a snapshot of. c.Spec.Backup
// must be set.
func DesiredBackupCronJob(c *v1beta1.Cluster, cfg Config, paused bool) *batchv1.CronJob {
	labels := backupLabels(c)
	name := layout.BackupName(c.Name)
	pod := snapshotJobPod(cfg, snapshotJobParts{
		serviceAccount: name, container: layout.BackupContainer, args: BackupArgs(c), fsGroup: true,
		mounts: []corev1.VolumeMount{{Name: layout.BackupVolume, MountPath: layout.BackupDir}},
		volumes: []corev1.Volume{{
			Name: layout.BackupVolume,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: c.Spec.Backup.ClaimName,
			}},
		}},
	})
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: labels},
		Spec: batchv1.CronJobSpec{
			Schedule:                   c.Spec.Backup.Schedule,
			TimeZone:                   ptr.To("Etc/UTC"),
			StartingDeadlineSeconds:    ptr.To(int64(backupStartingDeadline)),
			ConcurrencyPolicy:          batchv1.ForbidConcurrent,
			Suspend:                    ptr.To(paused),
			SuccessfulJobsHistoryLimit: ptr.To(int32(backupSuccessHistory)),
			FailedJobsHistoryLimit:     ptr.To(int32(backupFailedHistory)),
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: batchv1.JobSpec{
					BackoffLimit:          ptr.To(int32(backupBackoffLimit)),
					ActiveDeadlineSeconds: ptr.To(int64(backupDeadline)),
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec:       pod,
					},
				},
			},
		},
	}
}

// snapshotJobParts is what differs between the pods of the backup and the
// restore Jobs.
type snapshotJobParts struct {
	serviceAccount, container string
	args                      []string
	// fsGroup makes the volumes writable for BackupUID (the backup writes
	// onto its claim; the restore only reads).
	fsGroup bool
	mounts  []corev1.VolumeMount
	volumes []corev1.Volume
}

// snapshotJobPod is the pod of a Job that runs the datastore binary against
// a cluster's server pods through pods/exec (`datastore backup`, `datastore
// restore-from-file`). It meets the restricted Pod Security Standard:
// non-root, no privilege escalation, no capabilities, a read-only root, no
// host namespace or path; it mounts p.volumes and nothing else but its
// ServiceAccount token.
func snapshotJobPod(cfg Config, p snapshotJobParts) corev1.PodSpec {
	var pullSecrets []corev1.LocalObjectReference
	for _, s := range cfg.PullSecrets {
		pullSecrets = append(pullSecrets, corev1.LocalObjectReference{Name: s})
	}
	pod := corev1.PodSpec{
		ServiceAccountName:           p.serviceAccount,
		AutomountServiceAccountToken: ptr.To(true),
		RestartPolicy:                corev1.RestartPolicyNever,
		EnableServiceLinks:           ptr.To(false),
		ImagePullSecrets:             pullSecrets,
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To(int64(layout.BackupUID)),
			RunAsGroup:     ptr.To(int64(layout.BackupUID)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:            p.container,
			Image:           cfg.DatastoreImage,
			ImagePullPolicy: cfg.PullPolicy,
			Command:         []string{"/usr/local/bin/datastore"},
			Args:            p.args,
			// The result is written to the termination message on purpose;
			// FallbackToLogsOnError would put log lines there instead.
			TerminationMessagePath:   corev1.TerminationMessagePathDefault,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			SecurityContext: &corev1.SecurityContext{
				Privileged:               ptr.To(false),
				RunAsNonRoot:             ptr.To(true),
				AllowPrivilegeEscalation: ptr.To(false),
				ReadOnlyRootFilesystem:   ptr.To(true),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			// Requests and limits of its own, so a LimitRange or quota of the
			// namespace neither refuses nor starves it. The data goes to the
			// claim, never into memory.
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			},
			VolumeMounts: p.mounts,
		}},
		Volumes: p.volumes,
	}
	if p.fsGroup {
		pod.SecurityContext.FSGroup = ptr.To(int64(layout.BackupUID))
		pod.SecurityContext.FSGroupChangePolicy = ptr.To(corev1.FSGroupChangeOnRootMismatch)
	}
	return pod
}
