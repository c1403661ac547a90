package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshotter"
)

const restoreClaim = "old-snapshots"

// withRestore gives a sqlite Cluster spec.restoreFrom of file on restoreClaim.
func withRestore(file string) func(*v1beta1.Cluster) {
	return func(c *v1beta1.Cluster) {
		c.Spec.Datastore.Type = v1beta1.SQLiteDatastore
		c.Spec.RestoreFrom = &v1beta1.RestoreSource{ClaimName: restoreClaim, File: file}
	}
}

// tokenOf is what c's token Secret holds; "" when it is empty, and fails
// the test when it does not exist.
func tokenOf(t *testing.T, c *v1beta1.Cluster) string {
	t.Helper()
	s := &corev1.Secret{}
	get(t, c, layout.NamesFor(c).Token, s)
	return string(s.Data[layout.SecretKeyToken])
}

// TestRestoreJobRunsRestrictedWithNarrowRights reconciles a Cluster with
// spec.restoreFrom and checks against the real API server: no token is
// generated (the Secret is made empty, TokenAwaitingRestore), the servers
// start, the restore Job runs `datastore restore-from-file` once with the
// claim read-only and an emptyDir, in a pod the restricted Pod Security level
// admits; its Role's exact rules (update on the token Secret only, by name),
// its bindings, Restored=False RestorePending, and that a second reconcile
// writes nothing.
func TestRestoreJobRunsRestrictedWithNarrowRights(t *testing.T) {
	r, writes := newReconciler(t)
	r.Config.BackupExecClusterRole = "k3k-backup-exec"
	ns := newNamespace(t)
	ctx := context.Background()
	createClaim(t, ns, restoreClaim, map[string]string{v1beta1.LabelRestoreFor: "again"})
	c := createCluster(t, newCluster(ns, "again", withRestore("old-20261202T030000Z-r42.k3ksnap")))
	reconcileOnce(t, r, c)
	name := layout.RestoreName(c.Name)

	if tok := tokenOf(t, c); tok != "" {
		t.Fatalf("a token was generated for a Cluster with restoreFrom: %d bytes", len(tok))
	}
	if cond := condition(t, c, v1beta1.ConditionTokenReady); cond.Reason != v1beta1.ReasonTokenAwaitingRestore || !strings.Contains(cond.Message, "spec.restoreFrom") {
		t.Fatalf("TokenReady: %+v", cond)
	}
	get(t, c, layout.NamesFor(c).StatefulSet, &appsv1.StatefulSet{})

	job := &batchv1.Job{}
	get(t, c, name, job)
	if !metav1.IsControlledBy(job, c) || ptr.Deref(job.Spec.BackoffLimit, 99) != 0 || ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0) == 0 || job.Spec.TTLSecondsAfterFinished != nil {
		t.Fatalf("Job: owners %v, spec %+v", job.OwnerReferences, job.Spec)
	}
	pod := job.Spec.Template.Spec
	if pod.ServiceAccountName != name || pod.HostNetwork || pod.HostPID || len(pod.Containers) != 1 || pod.SecurityContext.FSGroup != nil {
		t.Fatalf("pod spec: %+v", pod)
	}
	wantVolumes := []corev1.Volume{
		{Name: layout.RestoreVolume, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: restoreClaim, ReadOnly: true}}},
		{Name: layout.RestoreTmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if diff := cmp.Diff(wantVolumes, pod.Volumes); diff != "" {
		t.Fatalf("volumes (-want +got):\n%s", diff)
	}
	ctr := pod.Containers[0]
	wantArgs := []string{"restore-from-file", "--namespace=" + ns, "--cluster=again", "--dir=" + layout.RestoreDir,
		"--file=old-20261202T030000Z-r42.k3ksnap", "--tmp-dir=" + layout.RestoreTmpDir, "--result-file=/dev/termination-log"}
	if ctr.Name != layout.RestoreContainer || ctr.Image != testConfig.DatastoreImage || !cmp.Equal(ctr.Args, wantArgs) {
		t.Fatalf("container %s: image %s, args %v", ctr.Name, ctr.Image, ctr.Args)
	}
	for _, m := range ctr.VolumeMounts {
		if m.Name == layout.RestoreVolume && !m.ReadOnly {
			t.Fatalf("the claim is mounted writable: %+v", m)
		}
	}

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
	if err := k8s.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: restricted, Name: "restore"}, Spec: *spec}); err != nil {
		t.Fatalf("the restricted level refuses the restore pod: %v", err)
	}

	role := &rbacv1.Role{}
	get(t, c, name, role)
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"k3k.io"}, Resources: []string{"clusters"}, ResourceNames: []string{"again"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"k3k-again-token"}, Verbs: []string{"get", "update"}},
	}
	if diff := cmp.Diff(wantRules, role.Rules); diff != "" {
		t.Fatalf("restore Role rules (-want +got):\n%s", diff)
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
	if cond := condition(t, c, v1beta1.ConditionRestored); cond.Status != metav1.ConditionFalse || cond.Reason != v1beta1.ReasonRestorePending {
		t.Fatalf("Restored: %+v", cond)
	}

	before := writes.count()
	reconcileOnce(t, r, c)
	if n := writes.count() - before; n != 0 {
		t.Fatalf("a second reconcile of an unchanged Cluster with restoreFrom wrote %d times", n)
	}
	if tok := tokenOf(t, c); tok != "" {
		t.Fatal("a token was generated on the second reconcile")
	}
}

// finishRestoreJob finishes c's restore Job as the Job controller and
// kubelet would (none runs here): its pod terminated with message.
func finishRestoreJob(t *testing.T, c *v1beta1.Cluster, succeeded bool, message string) {
	t.Helper()
	ctx := context.Background()
	job := &batchv1.Job{}
	get(t, c, layout.RestoreName(c.Name), job)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: job.Name + "-x", Labels: job.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	at := time.Now()
	exit, phase := int32(0), corev1.PodSucceeded
	if !succeeded {
		exit, phase = 1, corev1.PodFailed
	}
	pod.Status = corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
		Name: layout.RestoreContainer, Image: pod.Spec.Containers[0].Image,
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
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: end},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: end},
		}
	}
	if err := k8s.Status().Update(ctx, job); err != nil {
		t.Fatalf("setting Job status: %v", err)
	}
}

// TestRestoreConditionComesFromTheFinishedJob: a failed Job's reason (from
// its termination message) in Restored=False RestoreFailed, the token still
// empty and no token generated however often it reconciles; a succeeded Job
// (which wrote the token, as `datastore restore-from-file` does) makes it
// Restored=True and the token is the Job's, untouched.
func TestRestoreConditionComesFromTheFinishedJob(t *testing.T) {
	ns := newNamespace(t)
	createClaim(t, ns, restoreClaim, map[string]string{v1beta1.LabelBackupFor: "failing", v1beta1.LabelRestoreFor: "working"})
	t.Run("a failed Job leaves the cluster without a token", func(t *testing.T) {
		r, _ := newReconciler(t)
		r.Config.BackupExecClusterRole = "k3k-backup-exec"
		c := createCluster(t, newCluster(ns, "failing", withRestore("x.k3ksnap")))
		reconcileOnce(t, r, c)
		finishRestoreJob(t, c, false, resultMessage(t, snapshotter.Result{Error: "x.k3ksnap is not a usable snapshot: sha256 mismatch"}))
		reconcileOnce(t, r, c)
		reconcileOnce(t, r, c)
		cond := condition(t, c, v1beta1.ConditionRestored)
		if cond.Status != metav1.ConditionFalse || cond.Reason != v1beta1.ReasonRestoreFailed || !strings.Contains(cond.Message, "sha256 mismatch") {
			t.Fatalf("Restored: %+v", cond)
		}
		if tok := tokenOf(t, c); tok != "" {
			t.Fatal("a token was generated after the restore failed")
		}
		if ready := condition(t, c, v1beta1.ConditionReady); ready.Status == metav1.ConditionTrue {
			t.Fatalf("Ready after a failed restore: %+v", ready)
		}
	})
	t.Run("a succeeded Job makes it Restored", func(t *testing.T) {
		r, _ := newReconciler(t)
		r.Config.BackupExecClusterRole = "k3k-backup-exec"
		c := createCluster(t, newCluster(ns, "working", withRestore("x.k3ksnap")))
		reconcileOnce(t, r, c)
		s := &corev1.Secret{}
		get(t, c, layout.NamesFor(c).Token, s)
		s.Data = map[string][]byte{layout.SecretKeyToken: []byte("the-snapshots-token")}
		if err := k8s.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		finishRestoreJob(t, c, true, resultMessage(t, snapshotter.Result{File: "x.k3ksnap", Revision: 42, Size: 4096}))
		reconcileOnce(t, r, c)
		cond := condition(t, c, v1beta1.ConditionRestored)
		if cond.Status != metav1.ConditionTrue || cond.Reason != v1beta1.ReasonRestored || !strings.Contains(cond.Message, "revision 42") {
			t.Fatalf("Restored: %+v", cond)
		}
		if tok := tokenOf(t, c); tok != "the-snapshots-token" {
			t.Fatalf("token Secret holds %q, want the one the Job wrote", tok)
		}
		if tr := condition(t, c, v1beta1.ConditionTokenReady); tr.Status != metav1.ConditionTrue {
			t.Fatalf("TokenReady: %+v", tr)
		}
	})
}

// TestRestoreThatCannotRunSaysWhy: a missing claim, a claim not handed to
// this cluster, a server volume, and an external datastore in effect (the
// controller's default, which admission cannot see) each leave no Job, no
// servers and no token, with the reason in Restored; and kept volumes make
// the restore ignored (no Job, the servers start on their data, still no
// token generated).
func TestRestoreThatCannotRunSaysWhy(t *testing.T) {
	ns := newNamespace(t)
	createClaim(t, ns, "someones-data", map[string]string{v1beta1.LabelBackupFor: "another-cluster", v1beta1.LabelRestoreFor: "another-cluster"})
	serverVolume := "data-k3k-victim-server-0"
	createClaim(t, ns, serverVolume, map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue, v1beta1.LabelCluster: "victim"})
	createClaim(t, ns, restoreClaim, map[string]string{v1beta1.LabelRestoreFor: "norestore-3"})
	createClaim(t, ns, "data-k3k-norestore-4-server-0", map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue, v1beta1.LabelCluster: "norestore-4", v1beta1.LabelComponent: v1beta1.ComponentServer})
	createClaim(t, ns, "for-4", map[string]string{v1beta1.LabelRestoreFor: "norestore-4"})
	claim := func(name string) func(*v1beta1.Cluster) {
		return func(c *v1beta1.Cluster) {
			withRestore("x.k3ksnap")(c)
			c.Spec.RestoreFrom.ClaimName = name
		}
	}
	cases := []struct {
		name        string
		spec        func(*v1beta1.Cluster)
		cfg         func(*Config)
		wantReason  string
		wantIn      string
		wantServers bool
	}{
		{"a missing claim", claim("nowhere"), nil, v1beta1.ReasonRestoreClaimNotFound, "PersistentVolumeClaim nowhere not found", false},
		{"a claim not handed to this cluster", claim("someones-data"), nil, v1beta1.ReasonRestoreClaimRefused, "is not labelled k3k.io/restore-for=norestore-1", false},
		{"a server volume as the claim", claim(serverVolume), nil, v1beta1.ReasonRestoreClaimRefused, "belongs to a k3k cluster", false},
		{"external by default", func(c *v1beta1.Cluster) {
			withRestore("x.k3ksnap")(c)
			c.Spec.Datastore.Type = ""
		}, func(cfg *Config) { cfg.DefaultDatastore = v1beta1.ExternalDatastore }, v1beta1.ReasonRestoreUnsupported, "datastore in effect is external", false},
		{"kept volumes are served instead", claim("for-4"), nil, v1beta1.ReasonRestoreIgnored, "restoreFrom ignored", true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newReconciler(t)
			r.Config.BackupExecClusterRole = "k3k-backup-exec"
			if tc.cfg != nil {
				tc.cfg(&r.Config)
			}
			c := createCluster(t, newCluster(ns, fmt.Sprintf("norestore-%d", i), tc.spec))
			_, _ = r.Reconcile(context.Background(), reconcileRequest(c))
			_, _ = r.Reconcile(context.Background(), reconcileRequest(c))
			cond := condition(t, c, v1beta1.ConditionRestored)
			if cond.Status != metav1.ConditionFalse || cond.Reason != tc.wantReason || !strings.Contains(cond.Message, tc.wantIn) {
				t.Fatalf("Restored: %+v, want reason %s with %q", cond, tc.wantReason, tc.wantIn)
			}
			if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: layout.RestoreName(c.Name)}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
				t.Fatalf("a restore Job exists: %v", err)
			}
			err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: layout.NamesFor(c).StatefulSet}, &appsv1.StatefulSet{})
			if tc.wantServers != (err == nil) {
				t.Fatalf("servers started: %v, want %v", err == nil, tc.wantServers)
			}
			s := &corev1.Secret{}
			if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: layout.NamesFor(c).Token}, s); err == nil && len(s.Data[layout.SecretKeyToken]) > 0 {
				t.Fatal("a token was generated")
			}
		})
	}
}

// TestAdmissionOfRestoreFrom: a file that is not a plain name and an
// external datastore are refused at create; restoreFrom cannot be added,
// changed or removed later, while other fields of such a Cluster still can.
func TestAdmissionOfRestoreFrom(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	file := func(f string) func(*v1beta1.Cluster) { return withRestore(f) }
	creates := []struct {
		name   string
		spec   func(*v1beta1.Cluster)
		wantIn string
	}{
		{"a path into a directory is refused", file("dir/x.k3ksnap"), "restoreFrom.file must be a plain file name"},
		{"a path out of the claim is refused", file("../x.k3ksnap"), "restoreFrom.file must be a plain file name"},
		{"the parent directory is refused", file(".."), "restoreFrom.file must be a plain file name"},
		{"the claim's root is refused", file("."), "restoreFrom.file must be a plain file name"},
		{"an empty file name is refused", file(""), "spec.restoreFrom.file"},
		{"an external datastore is refused", func(c *v1beta1.Cluster) {
			withRestore("x.k3ksnap")(c)
			c.Spec.Datastore.Type = v1beta1.ExternalDatastore
			c.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "postgres://db:5432/k3s"}
		}, "restoreFrom: a snapshot cannot be restored into datastore.type external"},
		{"a token of the user's is refused", func(c *v1beta1.Cluster) {
			withRestore("x.k3ksnap")(c)
			c.Spec.TokenSecretRef = &v1beta1.TokenSecretReference{Name: "mine"}
		}, "tokenSecretRef cannot be set with it"},
	}
	for i, tc := range creates {
		t.Run(tc.name, func(t *testing.T) {
			err := k8s.Create(ctx, newCluster(ns, fmt.Sprintf("badrestore-%d", i), tc.spec))
			if err == nil || !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("create: %v, want an error containing %q", err, tc.wantIn)
			}
		})
	}
	updates := []struct {
		name   string
		start  func(*v1beta1.Cluster)
		change func(*v1beta1.Cluster)
	}{
		{"adding it later is refused", func(c *v1beta1.Cluster) { c.Spec.Datastore.Type = v1beta1.SQLiteDatastore }, withRestore("x.k3ksnap")},
		{"changing the file is refused", withRestore("x.k3ksnap"), func(c *v1beta1.Cluster) { c.Spec.RestoreFrom.File = "y.k3ksnap" }},
		{"changing the claim is refused", withRestore("x.k3ksnap"), func(c *v1beta1.Cluster) { c.Spec.RestoreFrom.ClaimName = "other" }},
		{"removing it is refused", withRestore("x.k3ksnap"), func(c *v1beta1.Cluster) { c.Spec.RestoreFrom = nil }},
	}
	for i, tc := range updates {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(ns, fmt.Sprintf("restoreupdate-%d", i), tc.start)
			if err := k8s.Create(ctx, c); err != nil {
				t.Fatalf("creating a valid Cluster: %v", err)
			}
			tc.change(c)
			err := k8s.Update(ctx, c)
			if err == nil || !strings.Contains(err.Error(), "restoreFrom is immutable") {
				t.Fatalf("update: %v, want restoreFrom is immutable", err)
			}
		})
	}
	t.Run("other fields of a restored Cluster still change", func(t *testing.T) {
		c := newCluster(ns, "restoreother", withRestore("x.k3ksnap"))
		if err := k8s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		c.Spec.ServerEnvs = []v1beta1.ServerEnvVar{{Name: "GOMAXPROCS", Value: "2"}}
		if err := k8s.Update(ctx, c); err != nil {
			t.Fatalf("updating serverEnvs: %v", err)
		}
	})
}

// TestAForeignJobNamedLikeTheRestoreIsNotAdopted: a Job named like the
// restore Job that someone else made first is neither adopted nor taken as
// the restore: the condition says so, and the servers wait.
func TestAForeignJobNamedLikeTheRestoreIsNotAdopted(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	createClaim(t, ns, restoreClaim, map[string]string{v1beta1.LabelRestoreFor: "squatted"})
	foreign := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: layout.RestoreName("squatted")},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "mine", Image: "example.invalid/anything"}},
		}}},
	}
	if err := k8s.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	r, _ := newReconciler(t)
	r.Config.BackupExecClusterRole = "k3k-backup-exec"
	c := createCluster(t, newCluster(ns, "squatted", withRestore("x.k3ksnap")))
	_, _ = r.Reconcile(ctx, reconcileRequest(c))
	_, _ = r.Reconcile(ctx, reconcileRequest(c))
	cond := condition(t, c, v1beta1.ConditionRestored)
	if cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "was not made for this Cluster's restore") {
		t.Fatalf("Restored: %+v, want the foreign Job named", cond)
	}
	live := &batchv1.Job{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: foreign.Name}, live); err != nil {
		t.Fatal(err)
	}
	if metav1.IsControlledBy(live, c) || live.Spec.Template.Spec.ServiceAccountName != "" {
		t.Fatalf("the foreign Job was adopted or changed: owners %v, serviceAccount %q", live.OwnerReferences, live.Spec.Template.Spec.ServiceAccountName)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: layout.NamesFor(c).StatefulSet}, &appsv1.StatefulSet{}); err == nil {
		t.Fatal("the servers started")
	}
}
