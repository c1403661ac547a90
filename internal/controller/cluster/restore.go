package cluster

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshotter"
)

// Restore into a new Cluster from a manifest alone (spec.restoreFrom): the
// controller's path of `k3kcli cluster create --restore-from`.
//
// A Cluster with spec.restoreFrom is treated as restore-pending for as long
// as its token Secret is empty: reconcileToken never generates a token for it
// (TokenAwaitingRestore), the servers start with empty datastores and k3s
// waits for its token file. A Job k3k-<name>-restore (DesiredRestoreJob) runs
// `datastore restore-from-file`, which checks the file on the claim, waits for
// server 0's datastore, streams the data into it through pods/exec, and only
// then writes the snapshot's token into the token Secret (DesiredRestoreRole
// says why the Job, not the controller, writes it). A Job that fails leaves
// the token empty: k3s never starts on the empty datastores.
//
// The Job is made before the servers: while restoreFrom is set, no Job
// exists and the claim is not usable, the servers are held back
// (o.restore.hold). So server volumes without a restore Job are volumes that
// were there before (delete --keep-data): the restore is ignored, the kept
// data served as for any Cluster (RestoreIgnored).

// restoreState is what one reconcile observed of spec.restoreFrom.
type restoreState struct {
	checked bool
	// job is the restore Job, nil when it does not exist; pods its pods.
	job  *batchv1.Job
	pods []corev1.Pod
	// ignored: the servers held data before any restore Job existed.
	ignored bool
	// problem is why no Job can run (a Restored reason), with its message.
	problem, problemMessage string
	// hold keeps the servers from starting until the Job exists.
	hold bool
}

// observeRestore fills o.restore, once per reconcile. The Job is read from
// the cache and, when the cache has none, from the API server: a Job that
// was just made must not look like kept volumes.
func (r *Reconciler) observeRestore(ctx context.Context, c *v1beta1.Cluster, o *observation) error {
	if c.Spec.RestoreFrom == nil || o.settingsErr != nil || o.restore.checked {
		return nil
	}
	st := restoreState{}
	key := types.NamespacedName{Namespace: c.Namespace, Name: layout.RestoreName(c.Name)}
	job := &batchv1.Job{}
	err := r.Client.Get(ctx, key, job)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, job)
	}
	switch {
	case err == nil && metav1.IsControlledBy(job, c):
		st.job = job
		pods := &corev1.PodList{}
		if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(restoreLabels(c))); err != nil {
			return fmt.Errorf("listing restore pods: %w", err)
		}
		st.pods = pods.Items
	case err == nil:
		// A Job of that name someone else made: adopting it (ensure would)
		// would run their pod spec as the restore's identity and take its
		// outcome as the restore's. The servers wait until it is gone.
		st.problem = v1beta1.ReasonRestoreUnsupported
		st.problemMessage = fmt.Sprintf("Job %s exists and was not made for this Cluster's restore; delete it so that the restore Job can be made", key.Name)
		st.hold, st.checked = true, true
		o.restore = st
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("getting restore Job: %w", err)
	}
	if st.job == nil {
		hasData, err := r.serverHasData(ctx, c)
		if err != nil {
			return err
		}
		st.ignored = hasData
	}
	if st.job == nil && !st.ignored {
		if err := r.checkRestoreClaim(ctx, c, o.settings, &st); err != nil {
			return err
		}
		st.hold = true
	}
	st.checked = true
	o.restore = st
	return nil
}

// checkRestoreClaim records in st why the restore Job cannot run, if it
// cannot: the datastore in effect, the controller's exec ClusterRole, or the
// claim (read uncached: it is the user's and carries none of k3k's labels).
func (r *Reconciler) checkRestoreClaim(ctx context.Context, c *v1beta1.Cluster, s Settings, st *restoreState) error {
	rf := c.Spec.RestoreFrom
	if !snapshotter.Supported(s.Datastore) {
		st.problem = v1beta1.ReasonRestoreUnsupported
		st.problemMessage = fmt.Sprintf("restoreFrom: the datastore in effect is %s; snapshots are restored into sqlite and etcd only", s.Datastore)
		return nil
	}
	if r.Config.BackupExecClusterRole == "" {
		st.problem = v1beta1.ReasonRestoreUnsupported
		st.problemMessage = "this controller runs without --backup-exec-cluster-role (the chart sets it): a restore Job could not reach the server pods"
		return nil
	}
	claim := &corev1.PersistentVolumeClaim{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: rf.ClaimName}, claim)
	switch {
	case apierrors.IsNotFound(err):
		st.problem = v1beta1.ReasonRestoreClaimNotFound
		st.problemMessage = fmt.Sprintf("restoreFrom.claimName: PersistentVolumeClaim %s not found in namespace %s; the servers start once it exists", rf.ClaimName, c.Namespace)
	case err != nil:
		return fmt.Errorf("getting restore claim %s: %w", rf.ClaimName, err)
	case claim.Labels[v1beta1.LabelManagedBy] == v1beta1.ManagedByValue || claim.Labels[v1beta1.LabelCluster] != "":
		st.problem = v1beta1.ReasonRestoreClaimRefused
		st.problemMessage = fmt.Sprintf("restoreFrom.claimName: PersistentVolumeClaim %s belongs to a k3k cluster (a server volume), not a claim of snapshots", claim.Name)
	case claim.Labels[v1beta1.LabelRestoreFor] != c.Name && claim.Labels[v1beta1.LabelBackupFor] != c.Name:
		st.problem = v1beta1.ReasonRestoreClaimRefused
		st.problemMessage = fmt.Sprintf("restoreFrom.claimName: PersistentVolumeClaim %s is not labelled %s=%s (or %s=%s); label it to hand it to this cluster's restore Job, which mounts it read-only",
			claim.Name, v1beta1.LabelRestoreFor, c.Name, v1beta1.LabelBackupFor, c.Name)
	}
	return nil
}

// reconcileRestore makes the restore Job and its rights for a Cluster with
// spec.restoreFrom whose servers hold no data yet. Until it can (the claim
// is missing or refused) the servers are held back and it requeues after
// tokenRetry. Once the Job exists nothing here changes it: it runs once.
func (r *Reconciler) reconcileRestore(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	if c.Spec.RestoreFrom == nil {
		return ctrl.Result{}, nil
	}
	if err := r.observeRestore(ctx, c, o); err != nil {
		return ctrl.Result{}, err
	}
	st := &o.restore
	if st.job != nil || st.ignored {
		return ctrl.Result{}, nil
	}
	if st.problem != "" {
		return ctrl.Result{RequeueAfter: tokenRetry}, nil
	}
	if err := r.ensureJobRights(ctx, c, DesiredRestoreServiceAccount(c), DesiredRestoreRole(c),
		DesiredRestoreRoleBinding(c), DesiredRestoreExecRoleBinding(c, r.Config.BackupExecClusterRole)); err != nil {
		return ctrl.Result{}, err
	}
	job := DesiredRestoreJob(c, r.Config)
	if err := ensure(ctx, r.Client, c, job, func(_, _ *batchv1.Job) {}); err != nil {
		return ctrl.Result{}, err
	}
	st.job, st.hold = job, false
	r.event(c, corev1.EventTypeNormal, v1beta1.ReasonRestorePending, "Restore",
		fmt.Sprintf("restoring from %s on claim %s: Job %s loads it into server 0's datastore, then gives the cluster the snapshot's token", c.Spec.RestoreFrom.File, c.Spec.RestoreFrom.ClaimName, job.Name))
	return ctrl.Result{}, nil
}

// restoreCondition derives Restored from what o observed; nil without
// spec.restoreFrom.
func restoreCondition(c *v1beta1.Cluster, o observation) *metav1.Condition {
	if c.Spec.RestoreFrom == nil || o.settingsErr != nil || !o.restore.checked {
		return nil
	}
	st := o.restore
	rf := c.Spec.RestoreFrom
	cond := &metav1.Condition{Type: v1beta1.ConditionRestored, Status: metav1.ConditionFalse, ObservedGeneration: c.Generation}
	switch {
	case st.ignored:
		cond.Reason = v1beta1.ReasonRestoreIgnored
		cond.Message = fmt.Sprintf("restoreFrom ignored: the cluster held data before any restore Job of it existed (kept volumes, or the restore Job was deleted): that data is served, not %s", rf.File)
	case st.problem != "":
		cond.Reason, cond.Message = st.problem, st.problemMessage
	case st.job == nil:
		cond.Reason, cond.Message = v1beta1.ReasonRestorePending, "the restore Job is being made"
	default:
		done, ok := jobFinished(*st.job)
		res, found := containerResult(*st.job, st.pods, layout.RestoreContainer, ok)
		switch {
		case done == nil:
			cond.Reason = v1beta1.ReasonRestorePending
			cond.Message = fmt.Sprintf("Job %s is loading %s from claim %s into server 0's datastore; k3s waits for the snapshot's token", st.job.Name, rf.File, rf.ClaimName)
		case ok:
			cond.Status, cond.Reason = metav1.ConditionTrue, v1beta1.ReasonRestored
			cond.Message = fmt.Sprintf("Job %s restored %s", st.job.Name, rf.File)
			if found && res.Revision != 0 {
				cond.Message += fmt.Sprintf(" (revision %d, %d bytes) and gave the cluster its token", res.Revision, res.Size)
			}
		default:
			reason := strings.TrimSpace(done.Reason + ": " + done.Message)
			if found && res.Error != "" {
				reason = res.Error
			}
			cond.Reason = v1beta1.ReasonRestoreFailed
			cond.Message = clip(fmt.Sprintf("Job %s failed: %s. The token was not given, so k3s never started on the empty datastores: delete the Cluster and create it again", st.job.Name, reason))
		}
	}
	return cond
}

// setRestoreStatus puts restoreCondition into st.
func setRestoreStatus(c *v1beta1.Cluster, o observation, st *v1beta1.ClusterStatus) {
	cond := restoreCondition(c, o)
	if cond == nil {
		if c.Spec.RestoreFrom == nil {
			meta.RemoveStatusCondition(&st.Conditions, v1beta1.ConditionRestored)
		}
		return
	}
	meta.SetStatusCondition(&st.Conditions, *cond)
}

// recordRestoreEvents records an Event when Restored became Restored,
// RestoreFailed or RestoreIgnored.
func (r *Reconciler) recordRestoreEvents(c *v1beta1.Cluster, before, after []metav1.Condition) {
	now := meta.FindStatusCondition(after, v1beta1.ConditionRestored)
	if now == nil {
		return
	}
	if prev := meta.FindStatusCondition(before, v1beta1.ConditionRestored); prev != nil && prev.Reason == now.Reason {
		return
	}
	switch now.Reason {
	case v1beta1.ReasonRestored, v1beta1.ReasonRestoreIgnored:
		r.event(c, corev1.EventTypeNormal, now.Reason, "Restore", now.Message)
	case v1beta1.ReasonRestoreFailed, v1beta1.ReasonRestoreClaimRefused, v1beta1.ReasonRestoreClaimNotFound, v1beta1.ReasonRestoreUnsupported:
		r.event(c, corev1.EventTypeWarning, now.Reason, "Restore", now.Message)
	}
}
