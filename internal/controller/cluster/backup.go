package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshotter"
)

// Scheduled snapshots (spec.backup): a CronJob runs `datastore backup`
// (pkg/snapshotter), which writes one snapshot file onto the claim the
// Cluster names and reports the outcome as its container's termination
// message. The controller creates the CronJob and its narrow rights, and
// reads the finished Jobs back into status.backup, the LastBackupSucceeded
// condition, Events and metrics. It never creates, changes or deletes the
// claim: the snapshots outlive spec.backup and the Cluster.

// backupState is what one reconcile observed of the scheduled snapshots.
type backupState struct {
	// checked: problem was worked out in this reconcile.
	checked bool
	// problem is why no CronJob runs though spec.backup is set: the reason
	// and message of LastBackupSucceeded; empty when it runs.
	problem, problemMessage string
	// jobs are the backup Jobs (the CronJob's history) and pods their pods.
	jobs []batchv1.Job
	pods []corev1.Pod
}

// backupProblem is why spec.backup cannot be realised as asked, from the
// spec and settings alone; empty when nothing is wrong. Admission refuses an
// explicit external datastore and a schedule that is not five fields; what
// depends on the controller's defaults or needs a cron parser is checked here.
func backupProblem(c *v1beta1.Cluster, s Settings) (reason, message string) {
	b := c.Spec.Backup
	if !snapshotter.Supported(s.Datastore) {
		return v1beta1.ReasonBackupUnsupported, fmt.Sprintf("backup: the datastore in effect is %s; scheduled snapshots are taken of sqlite and etcd only (back an external datastore up with its own tools)", s.Datastore)
	}
	if _, err := cron.ParseStandard(b.Schedule); err != nil || strings.Contains(b.Schedule, "TZ") {
		msg := "backup.schedule " + fmt.Sprintf("%q", b.Schedule) + " is not a cron schedule"
		if err != nil {
			msg += ": " + err.Error()
		} else {
			msg += ": time zones are not supported, schedules are in UTC"
		}
		return v1beta1.ReasonInvalidSpec, msg
	}
	return "", ""
}

// reconcileBackup makes (or, without spec.backup, removes) the backup
// CronJob with its ServiceAccount, Role and RoleBinding. The claim must exist
// and not be one of k3k's own; until then nothing runs and the condition
// says why (the claim is not watched: requeues after tokenRetry).
func (r *Reconciler) reconcileBackup(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	if c.Spec.Backup == nil {
		return ctrl.Result{}, r.removeBackup(ctx, c)
	}
	if err := r.checkBackup(ctx, c, o); err != nil {
		return ctrl.Result{}, err
	}
	if o.backup.problem != "" {
		var res ctrl.Result
		if o.backup.problem == v1beta1.ReasonBackupClaimNotFound {
			res.RequeueAfter = tokenRetry
		}
		return res, r.removeBackup(ctx, c)
	}
	if err := r.ensureJobRights(ctx, c, DesiredBackupServiceAccount(c), DesiredBackupRole(c),
		DesiredBackupRoleBinding(c), DesiredBackupExecRoleBinding(c, r.Config.BackupExecClusterRole)); err != nil {
		return ctrl.Result{}, err
	}
	err := ensure(ctx, r.Client, c, DesiredBackupCronJob(c, r.Config, paused(c, o.settings)), func(live, d *batchv1.CronJob) { live.Spec = d.Spec })
	return ctrl.Result{}, err
}

// checkBackup records in o why spec.backup cannot run, if it cannot: the
// spec (backupProblem), or the claim, read uncached (it is the user's and
// carries none of k3k's labels). Once per reconcile.
func (r *Reconciler) checkBackup(ctx context.Context, c *v1beta1.Cluster, o *observation) error {
	if o.backup.checked {
		return nil
	}
	if reason, msg := backupProblem(c, o.settings); reason != "" {
		o.backup.problem, o.backup.problemMessage, o.backup.checked = reason, msg, true
		return nil
	}
	if r.Config.BackupExecClusterRole == "" {
		o.backup.problem, o.backup.checked = v1beta1.ReasonBackupUnsupported, true
		o.backup.problemMessage = "this controller runs without --backup-exec-cluster-role (the chart sets it): a backup Job could not reach the server pods"
		return nil
	}
	claim := &corev1.PersistentVolumeClaim{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.Backup.ClaimName}, claim)
	switch {
	case apierrors.IsNotFound(err):
		o.backup.problem = v1beta1.ReasonBackupClaimNotFound
		o.backup.problemMessage = fmt.Sprintf("backup.claimName: PersistentVolumeClaim %s not found in namespace %s; create it (the controller never does)", c.Spec.Backup.ClaimName, c.Namespace)
	case err != nil:
		return fmt.Errorf("getting backup claim %s: %w", c.Spec.Backup.ClaimName, err)
	case claim.Labels[v1beta1.LabelManagedBy] == v1beta1.ManagedByValue || claim.Labels[v1beta1.LabelCluster] != "":
		o.backup.problem = v1beta1.ReasonBackupClaimRefused
		o.backup.problemMessage = fmt.Sprintf("backup.claimName: PersistentVolumeClaim %s belongs to a k3k cluster (a server volume): snapshots must go to a claim of their own", claim.Name)
	case claim.Labels[v1beta1.LabelBackupFor] != c.Name:
		o.backup.problem = v1beta1.ReasonBackupClaimRefused
		o.backup.problemMessage = fmt.Sprintf("backup.claimName: PersistentVolumeClaim %s is not labelled %s=%s; label it to hand it to this cluster's backups (their Job writes onto it and sets its group through fsGroup)", claim.Name, v1beta1.LabelBackupFor, c.Name)
	}
	if o.backup.problem == "" && c.Spec.TokenSecretRef != nil {
		if err := r.checkBackupTokenSecret(ctx, c, o); err != nil {
			return err
		}
	}
	o.backup.checked = true
	return nil
}

// checkBackupTokenSecret refuses a backup of a cluster whose token Secret the
// Cluster's creator named (tokenSecretRef) unless that Secret is labelled for
// this cluster's backups. The backup Job reads the token Secret with its own
// rights and writes its "token" into every snapshot on the claim: without
// the owner's consent, naming another cluster's token Secret (or any Secret
// with a "token" key) would copy it onto a claim the creator can read.
func (r *Reconciler) checkBackupTokenSecret(ctx context.Context, c *v1beta1.Cluster, o *observation) error {
	name := c.Spec.TokenSecretRef.Name
	secret := &metav1.PartialObjectMetadata{}
	secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		// The cluster itself waits for it (TokenReady); nothing to copy.
	case err != nil:
		return fmt.Errorf("getting token Secret %s: %w", name, err)
	case secret.Labels[v1beta1.LabelBackupFor] != c.Name:
		o.backup.problem = v1beta1.ReasonBackupUnsupported
		o.backup.problemMessage = fmt.Sprintf("tokenSecretRef: Secret %s is not labelled %s=%s; every snapshot carries the token, so label the Secret to let this cluster's backups copy it onto the claim", name, v1beta1.LabelBackupFor, c.Name)
	}
	return nil
}

// replaceIfRoleRefChanged deletes c's live binding of desired's name when it
// refers to another role (the chart's ClusterRole was renamed): a roleRef is
// immutable, so only a new binding can change it; ensure then creates it.
func (r *Reconciler) replaceIfRoleRefChanged(ctx context.Context, c *v1beta1.Cluster, desired *rbacv1.RoleBinding) error {
	live := &rbacv1.RoleBinding{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting RoleBinding %s: %w", desired.Name, err)
	}
	if live.RoleRef == desired.RoleRef || !metav1.IsControlledBy(live, c) {
		return nil
	}
	if err := r.Client.Delete(ctx, live); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting RoleBinding %s to replace its roleRef: %w", desired.Name, err)
	}
	return nil
}

// removeBackup deletes what reconcileBackup made, if it exists; the
// CronJob's Jobs and pods go with it (background deletion). Never the claim.
func (r *Reconciler) removeBackup(ctx context.Context, c *v1beta1.Cluster) error {
	name := layout.BackupName(c.Name)
	om := metav1.ObjectMeta{Namespace: c.Namespace, Name: name}
	execOM := metav1.ObjectMeta{Namespace: c.Namespace, Name: name + "-exec"}
	for _, obj := range []client.Object{
		&batchv1.CronJob{ObjectMeta: om}, &rbacv1.RoleBinding{ObjectMeta: execOM}, &rbacv1.RoleBinding{ObjectMeta: om},
		&rbacv1.Role{ObjectMeta: om}, &corev1.ServiceAccount{ObjectMeta: om},
	} {
		// Read from the cache first: an unchanged Cluster without backup
		// writes nothing, not even a delete that finds nothing.
		live := obj.DeepCopyObject().(client.Object)
		err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), live)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("getting %T %s: %w", obj, obj.GetName(), err)
		}
		if !metav1.IsControlledBy(live, c) {
			continue
		}
		if err := r.Client.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// observeBackup reads the backup Jobs and their pods (from the cache: both
// carry backupLabels).
func (r *Reconciler) observeBackup(ctx context.Context, c *v1beta1.Cluster, o *observation) error {
	if c.Spec.Backup == nil || o.settingsErr != nil {
		return nil
	}
	if err := r.checkBackup(ctx, c, o); err != nil {
		return err
	}
	jobs := &batchv1.JobList{}
	if err := r.Client.List(ctx, jobs, client.InNamespace(c.Namespace), client.MatchingLabels(backupLabels(c))); err != nil {
		return fmt.Errorf("listing backup Jobs: %w", err)
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(backupLabels(c))); err != nil {
		return fmt.Errorf("listing backup pods: %w", err)
	}
	// Only the Jobs the backup CronJob made count: a Job that merely carries
	// the labels (anyone who may create Jobs in the namespace can write one,
	// with any termination message) must not set the status or the metric.
	cj := &batchv1.CronJob{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: layout.BackupName(c.Name)}, cj)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading the backup CronJob: %w", err)
	}
	var own []batchv1.Job
	for _, j := range jobs.Items {
		if err == nil && metav1.IsControlledBy(&j, cj) {
			own = append(own, j)
		}
	}
	o.backup.jobs, o.backup.pods = own, pods.Items
	return nil
}

// backupRun is one finished backup Job as observed.
type backupRun struct {
	job       string
	succeeded bool
	at        time.Time
	result    snapshotter.Result
	reason    string
}

// finishedBackupRuns are the finished Jobs of o, with their results.
func finishedBackupRuns(o backupState) []backupRun {
	var runs []backupRun
	for _, j := range o.jobs {
		done, ok := jobFinished(j)
		if done == nil {
			continue
		}
		run := backupRun{job: j.Name, succeeded: ok, at: done.LastTransitionTime.Time}
		res, found := jobResult(j, o.pods, ok)
		switch {
		case ok && found && res.Error == "" && res.File != "":
			run.result = res
			if !res.CreatedAt.IsZero() {
				// Whole seconds, as status stores them: a time with
				// nanoseconds never equals its stored copy, so status
				// would be written on every reconcile, each write
				// causing the next.
				run.at = res.CreatedAt.UTC().Truncate(time.Second)
			}
		case ok:
			// Complete, but its result is gone (the pod was removed) or
			// unreadable: the file exists, the facts do not; not reported.
			continue
		case found && res.Error != "":
			run.reason = res.Error
		default:
			run.reason = strings.TrimSpace(done.Reason + ": " + done.Message)
		}
		runs = append(runs, run)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].at.Before(runs[j].at) })
	return runs
}

// jobFinished is the condition that ended j (Complete or Failed), or nil.
func jobFinished(j batchv1.Job) (*batchv1.JobCondition, bool) {
	for i := range j.Status.Conditions {
		cond := &j.Status.Conditions[i]
		if cond.Status != corev1.ConditionTrue {
			continue
		}
		switch cond.Type {
		case batchv1.JobComplete:
			return cond, true
		case batchv1.JobFailed:
			return cond, false
		}
	}
	return nil, false
}

// jobResult is the result the backup container of j's newest pod wrote (of
// a succeeded pod when the Job succeeded).
func jobResult(j batchv1.Job, pods []corev1.Pod, succeeded bool) (snapshotter.Result, bool) {
	return containerResult(j, pods, layout.BackupContainer, succeeded)
}

// containerResult is the result the container of j's newest pod wrote as its
// termination message (of a succeeded pod when the Job succeeded).
func containerResult(j batchv1.Job, pods []corev1.Pod, container string, succeeded bool) (snapshotter.Result, bool) {
	var best *corev1.ContainerStateTerminated
	for i := range pods {
		p := &pods[i]
		if !metav1.IsControlledBy(p, &j) {
			continue
		}
		if succeeded && p.Status.Phase != corev1.PodSucceeded {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != container || cs.State.Terminated == nil {
				continue
			}
			if t := cs.State.Terminated; best == nil || t.FinishedAt.After(best.FinishedAt.Time) {
				best = t
			}
		}
	}
	if best == nil || best.Message == "" {
		return snapshotter.Result{}, false
	}
	var res snapshotter.Result
	if err := json.Unmarshal([]byte(best.Message), &res); err != nil {
		return snapshotter.Result{Error: fmt.Sprintf("exit code %d, result unreadable", best.ExitCode)}, !succeeded
	}
	return res, true
}

// backupStatus derives status.backup and the LastBackupSucceeded condition.
// The last success and failure are the newest of what the Jobs now show and
// of what the status held: the CronJob keeps a short history, and the fact
// that a snapshot was written must outlive the Job that wrote it.
func backupStatus(c *v1beta1.Cluster, o observation) (*v1beta1.BackupStatus, *metav1.Condition) {
	if c.Spec.Backup == nil || o.settingsErr != nil {
		return nil, nil
	}
	st := &v1beta1.BackupStatus{}
	if prev := c.Status.Backup; prev != nil {
		st.LastSuccessful = prev.LastSuccessful.DeepCopy()
		st.LastFailure = prev.LastFailure.DeepCopy()
	}
	var newest *backupRun
	runs := finishedBackupRuns(o.backup)
	for i := range runs {
		run := &runs[i]
		newest = run
		if run.succeeded {
			if st.LastSuccessful == nil || !run.at.Before(st.LastSuccessful.Time.Time) {
				st.LastSuccessful = &v1beta1.BackupSnapshot{
					File: run.result.File, Time: metav1.NewTime(run.at.UTC()), Revision: run.result.Revision,
					Size: run.result.Size, SHA256: run.result.SHA256, Job: run.job,
				}
			}
		} else if st.LastFailure == nil || !run.at.Before(st.LastFailure.Time.Time) {
			st.LastFailure = &v1beta1.BackupFailure{Time: metav1.NewTime(run.at.UTC()), Job: run.job, Reason: clip(run.reason)}
		}
	}
	cond := &metav1.Condition{Type: v1beta1.ConditionLastBackupSucceeded, ObservedGeneration: c.Generation}
	switch {
	case o.backup.problem != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, o.backup.problem, o.backup.problemMessage
	case newest != nil && newest.succeeded:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1beta1.ReasonBackupSucceeded
		cond.Message = fmt.Sprintf("snapshot %s written by Job %s (revision %d, %d bytes)", newest.result.File, newest.job, newest.result.Revision, newest.result.Size)
	case newest != nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, v1beta1.ReasonBackupFailed
		cond.Message = clip(fmt.Sprintf("Job %s failed: %s", newest.job, newest.reason))
	default:
		cond.Status, cond.Reason = metav1.ConditionUnknown, v1beta1.ReasonBackupPending
		cond.Message = fmt.Sprintf("no backup Job has finished yet (schedule %q, UTC)", c.Spec.Backup.Schedule)
	}
	return st, cond
}

// setBackupStatus puts backupStatus into st.
func setBackupStatus(c *v1beta1.Cluster, o observation, st *v1beta1.ClusterStatus) {
	bs, cond := backupStatus(c, o)
	st.Backup = bs
	if cond == nil {
		meta.RemoveStatusCondition(&st.Conditions, v1beta1.ConditionLastBackupSucceeded)
		return
	}
	meta.SetStatusCondition(&st.Conditions, *cond)
}

// Backup Events, recorded when a new snapshot or failure shows in the status.
const (
	eventBackupSucceeded = v1beta1.ReasonBackupSucceeded
	eventBackupFailed    = v1beta1.ReasonBackupFailed
)

// recordBackupEvents records an Event, and counts a failure, for what is new
// in after's status.backup compared with before's.
func (r *Reconciler) recordBackupEvents(c *v1beta1.Cluster, before, after *v1beta1.BackupStatus) {
	if after == nil {
		return
	}
	var prevOK *v1beta1.BackupSnapshot
	var prevFail *v1beta1.BackupFailure
	if before != nil {
		prevOK, prevFail = before.LastSuccessful, before.LastFailure
	}
	if s := after.LastSuccessful; s != nil && (prevOK == nil || prevOK.File != s.File) && r.Recorder != nil {
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, eventBackupSucceeded, "Backup", "snapshot %s written (revision %d, %d bytes)", s.File, s.Revision, s.Size)
	}
	if f := after.LastFailure; f != nil && (prevFail == nil || prevFail.Job != f.Job || !prevFail.Time.Equal(&f.Time)) {
		backupFailures.WithLabelValues(c.Namespace, c.Name).Inc()
		if r.Recorder != nil {
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, eventBackupFailed, "Backup", "backup Job %s failed: %s", f.Job, f.Reason)
		}
	}
}

// Metrics of the scheduled snapshots, on the controller's metrics endpoint.
// The age of the newest snapshot is time() - k3k_cluster_last_backup_timestamp_seconds.
var (
	lastBackupTimestamp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "k3k_cluster_last_backup_timestamp_seconds",
		Help: "When the newest scheduled snapshot of the cluster was taken (Unix time); absent until one was.",
	}, []string{"namespace", "cluster"})
	backupFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "k3k_cluster_backup_failures_total",
		Help: "Scheduled snapshot runs of the cluster that failed, as seen by this controller process.",
	}, []string{"namespace", "cluster"})
	registerMetricsOnce sync.Once
)

// registerBackupMetrics adds the backup metrics to controller-runtime's
// registry (served by the manager) once per process.
func registerBackupMetrics() {
	registerMetricsOnce.Do(func() {
		metrics.Registry.MustRegister(lastBackupTimestamp, backupFailures)
	})
}

// setBackupMetrics makes the metrics say what st says of c.
func setBackupMetrics(namespace, name string, st *v1beta1.BackupStatus) {
	if st == nil || st.LastSuccessful == nil {
		lastBackupTimestamp.DeleteLabelValues(namespace, name)
		if st == nil {
			backupFailures.DeleteLabelValues(namespace, name)
		}
		return
	}
	lastBackupTimestamp.WithLabelValues(namespace, name).Set(float64(st.LastSuccessful.Time.Unix()))
}

// ensureJobRights makes a snapshot Job's identity and rights (backup,
// restore): its ServiceAccount, its Role, and the RoleBindings to that Role
// and to the chart's exec ClusterRole, each replaced when its roleRef (which
// is immutable) changed.
func (r *Reconciler) ensureJobRights(ctx context.Context, c *v1beta1.Cluster, sa *corev1.ServiceAccount, role *rbacv1.Role, bindings ...*rbacv1.RoleBinding) error {
	if err := ensure(ctx, r.Client, c, sa, func(_, _ *corev1.ServiceAccount) {}); err != nil {
		return err
	}
	if err := ensure(ctx, r.Client, c, role, func(live, d *rbacv1.Role) { live.Rules = d.Rules }); err != nil {
		return err
	}
	for _, rb := range bindings {
		if err := r.replaceIfRoleRefChanged(ctx, c, rb); err != nil {
			return err
		}
		if err := ensure(ctx, r.Client, c, rb, func(live, d *rbacv1.RoleBinding) { live.Subjects = d.Subjects }); err != nil {
			return err
		}
	}
	return nil
}
