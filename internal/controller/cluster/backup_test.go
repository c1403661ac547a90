package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshotter"
)

const backupClaim = "snapshots"

// withBackup gives a sqlite Cluster spec.backup onto backupClaim.
func withBackup(schedule string, keep int32) func(*v1beta1.Cluster) {
	return func(c *v1beta1.Cluster) {
		c.Spec.Datastore.Type = v1beta1.SQLiteDatastore
		c.Spec.Backup = &v1beta1.BackupConfig{Schedule: schedule, Keep: keep, ClaimName: backupClaim}
	}
}

// createClaim makes a claim the way a Cluster's owner would, with labels.
func createClaim(t *testing.T, ns, name string, labels map[string]string) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")}},
		},
	}
	if err := k8s.Create(context.Background(), pvc); err != nil {
		t.Fatalf("creating claim %s: %v", name, err)
	}
}

func backupCondition(t *testing.T, c *v1beta1.Cluster) *metav1.Condition {
	t.Helper()
	live := &v1beta1.Cluster{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(c), live); err != nil {
		t.Fatal(err)
	}
	*c = *live
	return meta.FindStatusCondition(live.Status.Conditions, v1beta1.ConditionLastBackupSucceeded)
}

// TestBackupCronJobRunsRestrictedWithNarrowRights reconciles a Cluster with
// spec.backup and checks what was made against the real API server: the
// CronJob (schedule in UTC, Forbid, deadlines, small histories, the claim
// as its only volume, `datastore backup` with keep), a pod that the
// restricted Pod Security level admits (a privileged pod is refused in the
// same namespace, so the check is in force), the Role's exact rules, the two
// bindings, and that a second reconcile writes nothing.
func TestBackupCronJobRunsRestrictedWithNarrowRights(t *testing.T) {
	r, writes := newReconciler(t)
	r.Config.BackupExecClusterRole = "k3k-backup-exec"
	ns := newNamespace(t)
	ctx := context.Background()
	createClaim(t, ns, backupClaim, map[string]string{v1beta1.LabelBackupFor: "nightly"})
	c := createCluster(t, newCluster(ns, "nightly", withBackup("0 3 * * *", 3)))
	reconcileOnce(t, r, c)
	name := layout.BackupName(c.Name)

	cj := &batchv1.CronJob{}
	get(t, c, name, cj)
	if !metav1.IsControlledBy(cj, c) {
		t.Fatalf("the CronJob is not controlled by the Cluster: %v", cj.OwnerReferences)
	}
	s := cj.Spec
	if s.Schedule != "0 3 * * *" || ptr.Deref(s.TimeZone, "") != "Etc/UTC" || s.ConcurrencyPolicy != batchv1.ForbidConcurrent ||
		ptr.Deref(s.StartingDeadlineSeconds, 0) == 0 || ptr.Deref(s.Suspend, true) ||
		ptr.Deref(s.SuccessfulJobsHistoryLimit, 99) > 3 || ptr.Deref(s.FailedJobsHistoryLimit, 99) > 3 {
		t.Fatalf("CronJob spec: %+v", s)
	}
	js := s.JobTemplate.Spec
	if ptr.Deref(js.BackoffLimit, 99) > 1 || ptr.Deref(js.ActiveDeadlineSeconds, 0) == 0 {
		t.Fatalf("Job template: backoffLimit %v, activeDeadlineSeconds %v", js.BackoffLimit, js.ActiveDeadlineSeconds)
	}
	pod := js.Template.Spec
	if pod.ServiceAccountName != name || pod.HostNetwork || pod.HostPID || pod.HostIPC || len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("pod spec: %+v", pod)
	}
	if len(pod.Volumes) != 1 || pod.Volumes[0].PersistentVolumeClaim == nil || pod.Volumes[0].PersistentVolumeClaim.ClaimName != backupClaim {
		t.Fatalf("volumes: %+v", pod.Volumes)
	}
	ctr := pod.Containers[0]
	args := strings.Join(ctr.Args, " ")
	if ctr.Image != testConfig.DatastoreImage || ctr.Command[0] != "/usr/local/bin/datastore" ||
		!strings.Contains(args, "backup --namespace="+ns+" --cluster=nightly --dir="+layout.BackupDir+" --keep=3") {
		t.Fatalf("container: image %s, command %v %v", ctr.Image, ctr.Command, ctr.Args)
	}
	if len(ctr.VolumeMounts) != 1 || ctr.VolumeMounts[0].MountPath != layout.BackupDir || ctr.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Fatalf("mounts %+v, termination message policy %s", ctr.VolumeMounts, ctr.TerminationMessagePolicy)
	}
	psc, sc := pod.SecurityContext, ctr.SecurityContext
	if !ptr.Deref(psc.RunAsNonRoot, false) || ptr.Deref(psc.RunAsUser, 0) == 0 || ptr.Deref(sc.Privileged, true) ||
		ptr.Deref(sc.AllowPrivilegeEscalation, true) || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) {
		t.Fatalf("security contexts: pod %+v, container %+v", psc, sc)
	}

	// The restricted level admits the Job's pod, as the API server judges it.
	restricted := newNamespace(t)
	nsObj := &corev1.Namespace{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: restricted}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	if err := k8s.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	spec := pod.DeepCopy()
	spec.ServiceAccountName = ""
	spec.AutomountServiceAccountToken = ptr.To(false)
	if err := k8s.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: restricted, Name: "backup"}, Spec: *spec}); err != nil {
		t.Fatalf("the restricted level refuses the backup pod: %v", err)
	}
	bad := spec.DeepCopy()
	bad.Containers[0].SecurityContext.Privileged = ptr.To(true)
	bad.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
	if err := k8s.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: restricted, Name: "privileged"}, Spec: *bad}); err == nil {
		t.Fatal("a privileged pod was admitted: the Pod Security check is not in force")
	}

	role := &rbacv1.Role{}
	get(t, c, name, role)
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"k3k.io"}, Resources: []string{"clusters"}, ResourceNames: []string{"nightly"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"k3k-nightly-token"}, Verbs: []string{"get"}},
	}
	if diff := cmp.Diff(wantRules, role.Rules); diff != "" {
		t.Fatalf("backup Role rules (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"get", "create"}}}, BackupExecRules()); diff != "" {
		t.Fatalf("exec rules (-want +got):\n%s", diff)
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}
	for _, tc := range []struct{ binding, kind, role string }{{name, "Role", name}, {name + "-exec", "ClusterRole", "k3k-backup-exec"}} {
		rb := &rbacv1.RoleBinding{}
		get(t, c, tc.binding, rb)
		if rb.RoleRef.Kind != tc.kind || rb.RoleRef.Name != tc.role || !cmp.Equal(rb.Subjects, subject) {
			t.Fatalf("RoleBinding %s: %+v %+v", tc.binding, rb.RoleRef, rb.Subjects)
		}
	}
	get(t, c, name, &corev1.ServiceAccount{})
	if cond := backupCondition(t, c); cond == nil || cond.Status != metav1.ConditionUnknown || cond.Reason != v1beta1.ReasonBackupPending {
		t.Fatalf("LastBackupSucceeded before any Job: %+v", cond)
	}

	before := writes.count()
	reconcileOnce(t, r, c)
	if n := writes.count() - before; n != 0 {
		t.Fatalf("a second reconcile of an unchanged Cluster with backup wrote %d times", n)
	}
}

// finishJob creates a backup Job of c as the CronJob would and finishes it as
// the Job controller and kubelet would (none runs here): the pod terminated
// with message as its termination message.
func finishJob(t *testing.T, c *v1beta1.Cluster, name string, succeeded bool, message string, at time.Time) {
	t.Helper()
	finishJobOwnedBy(t, c, name, succeeded, message, at, true)
}

// finishJobOwnedBy is finishJob for a Job the backup CronJob made (byCronJob)
// or one that only carries its labels and template, as anyone who may
// create Jobs in the namespace could write.
func finishJobOwnedBy(t *testing.T, c *v1beta1.Cluster, name string, succeeded bool, message string, at time.Time, byCronJob bool) {
	t.Helper()
	ctx := context.Background()
	cj := &batchv1.CronJob{}
	get(t, c, layout.BackupName(c.Name), cj)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name, Labels: cj.Spec.JobTemplate.Labels},
		Spec:       *cj.Spec.JobTemplate.Spec.DeepCopy(),
	}
	if byCronJob {
		job.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))}
	}
	if err := k8s.Create(ctx, job); err != nil {
		t.Fatalf("creating Job: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name + "-x", Labels: cj.Spec.JobTemplate.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	exit, phase := int32(0), corev1.PodSucceeded
	if !succeeded {
		exit, phase = 1, corev1.PodFailed
	}
	pod.Status = corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
		Name: layout.BackupContainer, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: message,
			StartedAt: metav1.NewTime(at.Add(-time.Second)), FinishedAt: metav1.NewTime(at)}},
	}}}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatalf("setting pod status: %v", err)
	}
	start, end := metav1.NewTime(at.Add(-2*time.Second)), metav1.NewTime(at)
	job.Status = batchv1.JobStatus{StartTime: &start}
	if succeeded {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &end
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: end},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: end},
		}
	} else {
		job.Status.Failed = 2
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: end},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: end},
		}
	}
	if err := k8s.Status().Update(ctx, job); err != nil {
		t.Fatalf("setting Job status: %v", err)
	}
}

func resultMessage(t *testing.T, res snapshotter.Result) string {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBackupStatusComesFromTheFinishedJobs finishes backup Jobs the way the
// Job controller and kubelet would and checks what the Cluster says: the
// snapshot of a succeeded Job in status.backup.lastSuccessful, the condition,
// an Event each, the timestamp metric; then a failed run on top (reason from
// its result, the success kept, the failure counted once); and that the last
// success outlives its Job.
func TestBackupStatusComesFromTheFinishedJobs(t *testing.T) {
	r, writes := newReconciler(t)
	rec := events.NewFakeRecorder(20)
	r.Recorder = rec
	ns := newNamespace(t)
	ctx := context.Background()
	createClaim(t, ns, backupClaim, map[string]string{v1beta1.LabelBackupFor: "hourly"})
	c := createCluster(t, newCluster(ns, "hourly", withBackup("@hourly", 2)))
	reconcileOnce(t, r, c)
	drainEvents(rec)

	// The Job's result carries nanoseconds (datastore backup writes
	// time.Now()); status keeps whole seconds.
	taken := time.Date(2026, 12, 2, 3, 0, 5, 123456789, time.UTC)
	ok := snapshotter.Result{File: snapshotter.FileName("hourly", taken, 42), Revision: 42, Size: 8192, SHA256: strings.Repeat("ab", 32), CreatedAt: taken}
	finishJob(t, c, "k3k-hourly-backup-1", true, resultMessage(t, ok), taken.Add(3*time.Second))
	reconcileOnce(t, r, c)
	before := writes.count()
	reconcileOnce(t, r, c)
	if n := writes.count() - before; n != 0 {
		t.Fatalf("a reconcile after the result was recorded wrote %d times: the status it builds differs from the one stored", n)
	}
	taken = taken.Truncate(time.Second)
	cond := backupCondition(t, c)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1beta1.ReasonBackupSucceeded || !strings.Contains(cond.Message, ok.File) {
		t.Fatalf("LastBackupSucceeded after a successful Job: %+v", cond)
	}
	want := &v1beta1.BackupSnapshot{File: ok.File, Time: metav1.NewTime(taken), Revision: 42, Size: 8192, SHA256: ok.SHA256, Job: "k3k-hourly-backup-1"}
	if c.Status.Backup == nil || !cmp.Equal(c.Status.Backup.LastSuccessful, want) || c.Status.Backup.LastFailure != nil {
		t.Fatalf("status.backup: %+v, want lastSuccessful %+v", c.Status.Backup, want)
	}
	if got := testutil.ToFloat64(lastBackupTimestamp.WithLabelValues(ns, "hourly")); got != float64(taken.Unix()) {
		t.Fatalf("k3k_cluster_last_backup_timestamp_seconds = %v, want %d", got, taken.Unix())
	}
	if evs := drainEvents(rec); len(evs) != 1 || !strings.Contains(evs[0], "Normal BackupSucceeded") || !strings.Contains(evs[0], ok.File) {
		t.Fatalf("events after a success: %v", evs)
	}

	failedAt := taken.Add(time.Hour)
	fail := snapshotter.Result{Error: "no running server pod whose datastore is ready"}
	finishJob(t, c, "k3k-hourly-backup-2", false, resultMessage(t, fail), failedAt)
	reconcileOnce(t, r, c)
	reconcileOnce(t, r, c)
	cond = backupCondition(t, c)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != v1beta1.ReasonBackupFailed || !strings.Contains(cond.Message, fail.Error) {
		t.Fatalf("LastBackupSucceeded after a failed Job: %+v", cond)
	}
	if f := c.Status.Backup.LastFailure; f == nil || f.Job != "k3k-hourly-backup-2" || f.Reason != fail.Error || !f.Time.Time.Equal(failedAt) {
		t.Fatalf("lastFailure: %+v", f)
	}
	if !cmp.Equal(c.Status.Backup.LastSuccessful, want) {
		t.Fatalf("the last success changed with a failure: %+v", c.Status.Backup.LastSuccessful)
	}
	if got := testutil.ToFloat64(backupFailures.WithLabelValues(ns, "hourly")); got != 1 {
		t.Fatalf("k3k_cluster_backup_failures_total = %v after one failure and two reconciles", got)
	}
	if evs := drainEvents(rec); len(evs) != 1 || !strings.Contains(evs[0], "Warning BackupFailed") {
		t.Fatalf("events after a failure: %v", evs)
	}

	// The CronJob's history drops the Job that wrote the snapshot: the
	// fact stays.
	if err := k8s.Delete(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "k3k-hourly-backup-1"}}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "k3k-hourly-backup-1-x"}}); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	backupCondition(t, c)
	if !cmp.Equal(c.Status.Backup.LastSuccessful, want) {
		t.Fatalf("the last success was lost with its Job: %+v", c.Status.Backup.LastSuccessful)
	}
}

// TestRemovingBackupKeepsTheClaim removes spec.backup: the CronJob, its
// ServiceAccount, Role and bindings go, status.backup and the condition
// too, the claim (and so the snapshots) stays.
func TestRemovingBackupKeepsTheClaim(t *testing.T) {
	r, writes := newReconciler(t)
	ns := newNamespace(t)
	ctx := context.Background()
	createClaim(t, ns, backupClaim, map[string]string{v1beta1.LabelBackupFor: "weekly"})
	c := createCluster(t, newCluster(ns, "weekly", withBackup("@weekly", 7)))
	reconcileOnce(t, r, c)
	name := layout.BackupName(c.Name)
	get(t, c, name, &batchv1.CronJob{})

	backupCondition(t, c)
	c.Spec.Backup = nil
	if err := k8s.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	for _, obj := range []client.Object{&batchv1.CronJob{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &corev1.ServiceAccount{}} {
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj); !apierrors.IsNotFound(err) {
			t.Fatalf("%T %s after spec.backup was removed: %v", obj, name, err)
		}
	}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-exec"}, &rbacv1.RoleBinding{}); !apierrors.IsNotFound(err) {
		t.Fatalf("exec RoleBinding after spec.backup was removed: %v", err)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: backupClaim}, pvc); err != nil || pvc.DeletionTimestamp != nil {
		t.Fatalf("the backup claim after spec.backup was removed: %v %v", err, pvc.DeletionTimestamp)
	}
	if cond := backupCondition(t, c); cond != nil || c.Status.Backup != nil {
		t.Fatalf("backup status after removal: %+v %+v", cond, c.Status.Backup)
	}
	before := writes.count()
	reconcileOnce(t, r, c)
	if n := writes.count() - before; n != 0 {
		t.Fatalf("a reconcile of a Cluster without backup wrote %d times", n)
	}
}

// TestBackupThatCannotRunSaysWhy: a schedule admission lets through but no
// cron parser accepts, a claim that does not exist, a server volume as the
// claim, and external as the controller's default datastore. Each is a
// False condition with its reason, and no CronJob.
func TestBackupThatCannotRunSaysWhy(t *testing.T) {
	ns := newNamespace(t)
	createClaim(t, ns, backupClaim, map[string]string{v1beta1.LabelBackupFor: "cannot-0"})
	createClaim(t, ns, "someones-data", map[string]string{v1beta1.LabelBackupFor: "another-cluster"})
	serverVolume := "data-k3k-victim-server-0"
	createClaim(t, ns, serverVolume, map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue, v1beta1.LabelCluster: "victim"})
	// Another cluster's token Secret, which a Cluster creator names as this
	// cluster's token: its backups would copy it onto their claim.
	createClaim(t, ns, "claim-5", map[string]string{v1beta1.LabelBackupFor: "cannot-5"})
	victimToken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "k3k-victim-token"}, Data: map[string][]byte{"token": []byte("victims-token")}}
	if err := k8s.Create(context.Background(), victimToken); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		spec       func(*v1beta1.Cluster)
		cfg        func(*Config)
		wantReason string
		wantIn     string
	}{
		{"minute 61 is no minute", withBackup("61 * * * *", 2), nil, v1beta1.ReasonInvalidSpec, "backup.schedule \"61 * * * *\" is not a cron schedule"},
		{"a missing claim", func(c *v1beta1.Cluster) {
			withBackup("@daily", 2)(c)
			c.Spec.Backup.ClaimName = "nowhere"
		}, nil, v1beta1.ReasonBackupClaimNotFound, "PersistentVolumeClaim nowhere not found"},
		{"a server volume as the claim", func(c *v1beta1.Cluster) {
			withBackup("@daily", 2)(c)
			c.Spec.Backup.ClaimName = serverVolume
		}, nil, v1beta1.ReasonBackupClaimRefused, "belongs to a k3k cluster"},
		{"a claim not handed to this cluster", func(c *v1beta1.Cluster) {
			withBackup("@daily", 2)(c)
			c.Spec.Backup.ClaimName = "someones-data"
		}, nil, v1beta1.ReasonBackupClaimRefused, "is not labelled k3k.io/backup-for=cannot-3"},
		{"external by default", func(c *v1beta1.Cluster) {
			withBackup("@daily", 2)(c)
			c.Spec.Datastore.Type = ""
		}, func(cfg *Config) { cfg.DefaultDatastore = v1beta1.ExternalDatastore }, v1beta1.ReasonBackupUnsupported, "datastore in effect is external"},
		{"another cluster's token Secret as its token", func(c *v1beta1.Cluster) {
			withBackup("@daily", 2)(c)
			c.Spec.Backup.ClaimName = "claim-5"
			c.Spec.TokenSecretRef = &v1beta1.TokenSecretReference{Name: victimToken.Name}
		}, nil, v1beta1.ReasonBackupUnsupported, "Secret k3k-victim-token is not labelled k3k.io/backup-for=cannot-5"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newReconciler(t)
			if tc.cfg != nil {
				tc.cfg(&r.Config)
			}
			c := createCluster(t, newCluster(ns, fmt.Sprintf("cannot-%d", i), tc.spec))
			_, _ = r.Reconcile(context.Background(), reconcileRequest(c))
			cond := backupCondition(t, c)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != tc.wantReason || !strings.Contains(cond.Message, tc.wantIn) {
				t.Fatalf("LastBackupSucceeded: %+v, want reason %s with %q", cond, tc.wantReason, tc.wantIn)
			}
			err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: layout.BackupName(c.Name)}, &batchv1.CronJob{})
			if !apierrors.IsNotFound(err) {
				t.Fatalf("a CronJob exists: %v", err)
			}
		})
	}
}

func reconcileRequest(c *v1beta1.Cluster) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)}
}

// createRaw creates an object as JSON, with the zero values a typed client
// would leave out.
func createRaw(obj map[string]any) error {
	u := &unstructured.Unstructured{Object: obj}
	return k8s.Create(context.Background(), u)
}

// TestBackupExecBindingFollowsARenamedClusterRole: a roleRef is immutable, so
// when the chart's exec ClusterRole gets another name the binding is
// replaced, after which reconciles write nothing again.
func TestBackupExecBindingFollowsARenamedClusterRole(t *testing.T) {
	r, writes := newReconciler(t)
	ns := newNamespace(t)
	createClaim(t, ns, backupClaim, map[string]string{v1beta1.LabelBackupFor: "renamed"})
	c := createCluster(t, newCluster(ns, "renamed", withBackup("@daily", 2)))
	reconcileOnce(t, r, c)
	r.Config.BackupExecClusterRole = "prod-k3k-backup-exec"
	reconcileOnce(t, r, c)
	rb := &rbacv1.RoleBinding{}
	get(t, c, layout.BackupName(c.Name)+"-exec", rb)
	if rb.RoleRef.Name != "prod-k3k-backup-exec" {
		t.Fatalf("the exec binding still refers to %s", rb.RoleRef.Name)
	}
	before := writes.count()
	reconcileOnce(t, r, c)
	if n := writes.count() - before; n != 0 {
		t.Fatalf("a reconcile after the replacement wrote %d times", n)
	}
}

// TestAForgedBackupJobSetsNoStatus: a finished Job with the backup labels and
// a well-formed result, but not made by the cluster's backup CronJob, is not
// taken as a backup run: no status, condition or metric from it.
func TestAForgedBackupJobSetsNoStatus(t *testing.T) {
	r, _ := newReconciler(t)
	r.Recorder = events.NewFakeRecorder(20)
	ns := newNamespace(t)
	createClaim(t, ns, backupClaim, map[string]string{v1beta1.LabelBackupFor: "forged"})
	c := createCluster(t, newCluster(ns, "forged", withBackup("@hourly", 2)))
	reconcileOnce(t, r, c)
	taken := time.Date(2026, 12, 2, 3, 0, 5, 0, time.UTC)
	fake := snapshotter.Result{File: snapshotter.FileName("forged", taken, 7), Revision: 7, Size: 1, SHA256: strings.Repeat("cd", 32), CreatedAt: taken}
	finishJobOwnedBy(t, c, "k3k-forged-backup-1", true, resultMessage(t, fake), taken, false)
	reconcileOnce(t, r, c)
	cond := backupCondition(t, c) // reads c again
	if c.Status.Backup != nil && c.Status.Backup.LastSuccessful != nil {
		t.Fatalf("a Job the CronJob did not make set status.backup.lastSuccessful: %+v", c.Status.Backup.LastSuccessful)
	}
	if cond != nil && cond.Reason == v1beta1.ReasonBackupSucceeded {
		t.Fatalf("a Job the CronJob did not make set LastBackupSucceeded: %+v", cond)
	}
	// The same Job made by the CronJob is taken: the test above can fail.
	finishJobOwnedBy(t, c, "k3k-forged-backup-2", true, resultMessage(t, fake), taken, true)
	reconcileOnce(t, r, c)
	backupCondition(t, c)
	if c.Status.Backup == nil || c.Status.Backup.LastSuccessful == nil || c.Status.Backup.LastSuccessful.Job != "k3k-forged-backup-2" {
		t.Fatalf("the CronJob's Job was not taken: %+v", c.Status.Backup)
	}
}
