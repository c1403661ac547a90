package cli

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// migratePod makes server pod 0 of c with a datastore sidecar running ds, as
// the StatefulSet would (no kubelet runs here); ready sets its status as a
// started pod whose datastore is ready and whose k3s waits.
func migratePod(t *testing.T, c *v1beta1.Cluster, ds v1beta1.DatastoreType, ready bool) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: layout.ServerPodName(c, 0),
		Labels: map[string]string{v1beta1.LabelCluster: c.Name, v1beta1.LabelComponent: v1beta1.ComponentServer}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "datastore", Image: "datastore", Args: []string{"/usr/local/bin/datastore", string(ds)}}},
			Containers:     []corev1.Container{{Name: "k3s", Image: "k3s"}},
		}}
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if ready {
		p.Status.Phase = corev1.PodRunning
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "datastore", Ready: true}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "k3s", Ready: false}}
		if err := k8s.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// assertNotMigrating fails unless cluster name is as it was before any
// migration: no annotation, sqlite, the token where the pods mount it.
func assertNotMigrating(t *testing.T, ns, name string) {
	t.Helper()
	c := &v1beta1.Cluster{}
	if err := k8s.Get(context.Background(), keyOf(ns, name), c); apierrors.IsNotFound(err) {
		return
	} else if err != nil {
		t.Fatal(err)
	}
	if v := c.Annotations[v1beta1.AnnotationRestorePending]; v == migrateValue {
		t.Fatalf("the cluster is marked %q", v)
	}
	if c.Spec.Datastore.MigrateFrom != "" {
		t.Fatalf("spec.datastore.migrateFrom %q", c.Spec.Datastore.MigrateFrom)
	}
	s := tokenSecret(t, c)
	if _, marked := s.Annotations[v1beta1.AnnotationRestorePending]; marked || len(s.Data[tokenBeforeRestoreKey]) != 0 {
		t.Fatalf("the token Secret was marked: %v, %d bytes under %s", s.Annotations, len(s.Data[tokenBeforeRestoreKey]), tokenBeforeRestoreKey)
	}
}

// TestMigrateRefusals: what cannot be migrated is refused with a reason
// before anything changes.
func TestMigrateRefusals(t *testing.T) {
	ns := newNamespace(t)
	inPlaceCluster(t, ns, "plain", "tok", nil)
	inPlaceCluster(t, ns, "ha", "tok", func(c *v1beta1.Cluster) { c.Spec.Datastore.Type = v1beta1.EtcdDatastore })
	inPlaceCluster(t, ns, "paused", "tok", func(c *v1beta1.Cluster) { c.Spec.Paused = true })
	inPlaceCluster(t, ns, "ext", "tok", func(c *v1beta1.Cluster) {
		c.Spec.Datastore.Type = v1beta1.ExternalDatastore
		c.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "postgres://db.example:5432/k3s"}
	})
	inPlaceCluster(t, ns, "ephemeral", "tok", func(c *v1beta1.Cluster) { c.Spec.Persistence.Type = v1beta1.EphemeralPersistence })
	inPlaceCluster(t, ns, "creating", "", func(c *v1beta1.Cluster) {
		c.Annotations = map[string]string{v1beta1.AnnotationRestorePending: "0123456789abcdef"}
	})
	inPlaceCluster(t, ns, "restoring", "tok", func(c *v1beta1.Cluster) {
		c.Annotations = map[string]string{v1beta1.AnnotationRestorePending: inPlacePrefix + "0123456789abcdef"}
	})
	inPlaceCluster(t, ns, "empty", "", nil)
	cases := []struct {
		name, cluster string
		args          []string
		code          int
		want          []string
	}{
		{"without --to", "plain", []string{"--yes"}, ExitUsage, []string{"from sqlite to etcd only"}},
		{"to sqlite", "plain", []string{"--to", "sqlite", "--yes"}, ExitUsage, []string{"from sqlite to etcd only"}},
		{"an even number of servers", "plain", []string{"--to", "etcd", "--servers", "2", "--yes"}, ExitUsage, []string{"odd number of servers"}},
		{"a cluster that does not exist", "nope", []string{"--to", "etcd", "--yes"}, ExitError, []string{"nope"}},
		{"an etcd cluster (one way only)", "ha", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"uses etcd already", "never back"}},
		{"an external datastore", "ext", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"external datastore"}},
		{"a cluster whose data is in an emptyDir", "ephemeral", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"persistence ephemeral", "create NAME --datastore etcd --restore-from"}},
		{"a paused cluster", "paused", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"paused"}},
		{"a cluster being created from a snapshot", "creating", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"a restore is under way"}},
		{"a cluster being restored in place", "restoring", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"a restore is under way"}},
		{"a cluster with no token yet", "empty", []string{"--to", "etcd", "--yes"}, ExitError, []string{"has no token yet"}},
		{"no confirmation (nothing to read it from)", "plain", []string{"--to", "etcd"}, ExitUsage, []string{"not confirmed", "--yes"}},
		{"abort with no migration under way", "plain", []string{"--abort"}, ExitUsage, []string{"no migration is under way"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := k3kcli(t, append([]string{"cluster", "migrate", tc.cluster, "-n", ns}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d", r.code, tc.code)
			}
			assertOneLineError(t, r.errOut, tc.want...)
			if tc.cluster != "nope" {
				assertNotMigrating(t, ns, tc.cluster)
			}
		})
	}
	// And an in-place restore refuses a cluster being migrated.
	inPlaceCluster(t, ns, "migrating", "tok", func(c *v1beta1.Cluster) {
		c.Annotations = map[string]string{v1beta1.AnnotationRestorePending: migrateValue}
	})
	r := k3kcli(t, "cluster", "restore", "migrating", "-n", ns, "--from", snapshotFile(t), "--yes")
	if r.code != ExitUsage {
		t.Fatalf("restore of a cluster being migrated: exit %d, want %d", r.code, ExitUsage)
	}
	assertOneLineError(t, r.errOut, "being migrated to etcd", "--abort")
}

// TestMigrateStopsTheServerAndCanBeRunAgainOrAborted: a confirmed migration
// marks the Cluster and the token Secret (the token kept under
// token-before-restore) and deletes the SQLite server pod so that k3s
// stops; with no StatefulSet here to make it again, it times out saying what
// it waits for and how to go on, the spec still sqlite. Run again it keeps
// the marks; with a new SQLite pod whose datastore is ready it goes on to
// take the snapshot, which fails here (no kubelet to exec in) before the
// spec changed. An earlier run that got to the etcd spec is put back to
// sqlite by the next run or by --abort; --abort then waits for the SQLite
// pod and gives the token back.
func TestMigrateStopsTheServerAndCanBeRunAgainOrAborted(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := inPlaceCluster(t, ns, "live", "tok", nil)
	old := migratePod(t, c, v1beta1.SQLiteDatastore, true)
	old.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "k3s", Ready: true}}
	if err := k8s.Status().Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	marked := func(wantDatastore v1beta1.DatastoreType) {
		t.Helper()
		live := getCluster(t, ns, "live")
		if v := live.Annotations[v1beta1.AnnotationRestorePending]; v != migrateValue {
			t.Fatalf("cluster annotation %q, want %s", v, migrateValue)
		}
		if live.Spec.Datastore.Type != wantDatastore {
			t.Fatalf("spec.datastore.type %q, want %q", live.Spec.Datastore.Type, wantDatastore)
		}
		s := tokenSecret(t, c)
		if s.Annotations[v1beta1.AnnotationRestorePending] != string(old.UID) {
			t.Fatalf("token Secret mark %q, want the old pod's UID %s", s.Annotations[v1beta1.AnnotationRestorePending], old.UID)
		}
		if len(s.Data[layout.SecretKeyToken]) != 0 || string(s.Data[tokenBeforeRestoreKey]) != "tok" {
			t.Fatalf("token Secret: want the token moved to %s", tokenBeforeRestoreKey)
		}
	}

	r := k3kcli(t, "cluster", "migrate", "live", "-n", ns, "--to", "etcd", "--yes", "--timeout", "2s")
	if r.code != ExitTimeout {
		t.Fatalf("exit %d, want %d", r.code, ExitTimeout)
	}
	assertOneLineError(t, r.errOut, "not migrated", "server pod k3k-live-server-0 to be made again", "run the same k3kcli cluster migrate again", "--abort")
	if !strings.Contains(r.errOut, "deleted server pod k3k-live-server-0") {
		t.Fatalf("stderr does not say the server pod was deleted: %s", r.errOut)
	}
	marked(v1beta1.SQLiteDatastore)
	if err := k8s.Get(ctx, keyOf(ns, old.Name), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the server pod was not deleted: %v", err)
	}

	// What the StatefulSet would do: a new SQLite pod, its datastore ready,
	// k3s waiting. It is not deleted; the snapshot is asked of it, which
	// fails without a kubelet, before the spec changed.
	fresh := migratePod(t, c, v1beta1.SQLiteDatastore, true)
	r = k3kcli(t, "cluster", "migrate", "live", "-n", ns, "--to", "etcd", "--yes", "--timeout", "20s")
	if r.code != ExitError {
		t.Fatalf("second run: exit %d, want %d", r.code, ExitError)
	}
	assertOneLineError(t, r.errOut, "run the same k3kcli cluster migrate again")
	if !strings.Contains(r.errOut, "the SQLite datastore of k3k-live-server-0 serves") {
		t.Fatalf("stderr does not say k3s stopped: %s", r.errOut)
	}
	live := &corev1.Pod{}
	if err := k8s.Get(ctx, keyOf(ns, fresh.Name), live); err != nil || live.UID != fresh.UID || live.DeletionTimestamp != nil {
		t.Fatalf("the pod made after the mark was deleted: %v", err)
	}
	marked(v1beta1.SQLiteDatastore)

	// An earlier run got as far as the etcd spec (the patch it sends, through
	// the CRD's rules): --abort puts it back to sqlite, then waits for a
	// SQLite pod 0 whose datastore is ready before it gives the token back.
	if err := k8s.Patch(ctx, getCluster(t, ns, "live"), client.RawPatch(types.MergePatchType, MigrateSpecPatch(v1beta1.EtcdDatastore))); err != nil {
		t.Fatalf("the migration's etcd spec was refused: %v", err)
	}
	if err := k8s.Delete(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	etcdPod := migratePod(t, c, v1beta1.EtcdDatastore, true)
	r = k3kcli(t, "cluster", "migrate", "live", "-n", ns, "--abort", "--timeout", "2s")
	if r.code != ExitTimeout {
		t.Fatalf("abort: exit %d, want %d", r.code, ExitTimeout)
	}
	assertOneLineError(t, r.errOut, "server pod k3k-live-server-0 to be made again with the sqlite datastore")
	marked(v1beta1.SQLiteDatastore)
	if got := getCluster(t, ns, "live"); got.Spec.Datastore.MigrateFrom != "" || got.Spec.Servers != 1 {
		t.Fatalf("abort left migrateFrom %q, servers %d", got.Spec.Datastore.MigrateFrom, got.Spec.Servers)
	}

	// The SQLite pod back: the token is given back and the marks removed;
	// Ready is then waited for (no controller here).
	if err := k8s.Delete(ctx, etcdPod); err != nil {
		t.Fatal(err)
	}
	migratePod(t, c, v1beta1.SQLiteDatastore, true)
	r = k3kcli(t, "cluster", "migrate", "live", "-n", ns, "--abort", "--timeout", "3s")
	if r.code == ExitOK {
		t.Fatalf("second abort: exit %d, want a failure waiting for Ready (no controller here)", r.code)
	}
	assertNotMigrating(t, ns, "live")
	if s := tokenSecret(t, c); string(s.Data[layout.SecretKeyToken]) != "tok" || len(s.Annotations[v1beta1.AnnotationRestorePending]) != 0 {
		t.Fatalf("abort did not give the token back: %v", s.Annotations)
	}
}

func TestCheckMigrateStages(t *testing.T) {
	cluster := func(ds v1beta1.DatastoreType, from v1beta1.DatastoreType, annotation string) *v1beta1.Cluster {
		c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
		c.Spec.Datastore.Type, c.Spec.Datastore.MigrateFrom = ds, from
		if annotation != "" {
			c.Annotations = map[string]string{v1beta1.AnnotationRestorePending: annotation}
		}
		return c
	}
	cases := []struct {
		name string
		c    *v1beta1.Cluster
		want MigrateStage
	}{
		{"a sqlite cluster starts", cluster(v1beta1.SQLiteDatastore, "", ""), MigrateStart},
		{"marked, still sqlite: interrupted before the spec changed", cluster(v1beta1.SQLiteDatastore, "", migrateValue), MigrateMarked},
		{"etcd with migrateFrom: interrupted before the switch", cluster(v1beta1.EtcdDatastore, v1beta1.SQLiteDatastore, migrateValue), MigrateEtcdPending},
		{"etcd, marked, no migrateFrom: past the switch, the token not back", cluster(v1beta1.EtcdDatastore, "", migrateValue), MigrateSwitched},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckMigrate(tc.c)
			if err != nil || got != tc.want {
				t.Fatalf("CheckMigrate = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestServer0Waiting(t *testing.T) {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	pod := func(uid string, ds v1beta1.DatastoreType, datastoreReady, k3sReady bool) corev1.Pod {
		p := serverPod("k3k-c-server-0", true, datastoreReady, false)
		p.UID = types.UID(uid)
		p.Spec.InitContainers = []corev1.Container{{Name: "datastore", Args: []string{"/usr/local/bin/datastore", string(ds)}}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "k3s", Ready: k3sReady}}
		return p
	}
	old := map[string]bool{"old": true}
	cases := []struct {
		name string
		pods []corev1.Pod
		want string // the pod's UID, else what is waited for
	}{
		{"the pod of before the mark is waited out", []corev1.Pod{pod("old", v1beta1.SQLiteDatastore, true, false)}, "server pod k3k-c-server-0 to be made again"},
		{"a pod of the other datastore is waited out (the rollout)", []corev1.Pod{pod("new", v1beta1.SQLiteDatastore, true, false)}, "server pod k3k-c-server-0 to be made again with the etcd datastore"},
		{"a pod whose k3s runs is waited out", []corev1.Pod{pod("new", v1beta1.EtcdDatastore, true, true)}, "k3s in k3k-c-server-0 to stop"},
		{"a pod whose datastore is not ready is waited for", []corev1.Pod{pod("new", v1beta1.EtcdDatastore, false, false)}, "the etcd datastore of k3k-c-server-0 to be ready"},
		{"the etcd member 0 waiting for its token gets the data", []corev1.Pod{pod("old", v1beta1.SQLiteDatastore, true, false), pod("new", v1beta1.EtcdDatastore, true, false)}, "new"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, waiting := Server0Waiting(c, tc.pods, v1beta1.EtcdDatastore, old)
			if got != nil {
				waiting = string(got.UID)
			}
			if waiting != tc.want {
				t.Fatalf("Server0Waiting = %q, want %q", waiting, tc.want)
			}
		})
	}
}

// TestMigratePastTheSwitchFinishesAndCannotBeAborted: a run interrupted
// after the switch (etcd, no migrateFrom, the marks still there) refuses
// --abort (the writes may go to etcd already) and, run again, puts the
// token back and removes the marks; Ready is then waited for.
func TestMigratePastTheSwitchFinishesAndCannotBeAborted(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := inPlaceCluster(t, ns, "switched", "tok", func(c *v1beta1.Cluster) {
		c.Spec.Datastore.Type = v1beta1.EtcdDatastore
		c.Annotations = map[string]string{v1beta1.AnnotationRestorePending: migrateValue}
	})
	secret := tokenSecret(t, c)
	secret.Annotations = map[string]string{v1beta1.AnnotationRestorePending: "some-uid"}
	secret.Data = map[string][]byte{tokenBeforeRestoreKey: []byte("tok")}
	if err := k8s.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}

	r := k3kcli(t, "cluster", "migrate", "switched", "-n", ns, "--abort")
	if r.code != ExitUsage {
		t.Fatalf("abort past the switch: exit %d, want %d", r.code, ExitUsage)
	}
	assertOneLineError(t, r.errOut, "passed its switch", "no way back")
	if s := tokenSecret(t, c); len(s.Data[layout.SecretKeyToken]) != 0 {
		t.Fatal("the refused abort gave the token back")
	}

	r = k3kcli(t, "cluster", "migrate", "switched", "-n", ns, "--to", "etcd", "--yes", "--timeout", "3s")
	if r.code == ExitOK {
		t.Fatalf("exit %d, want a failure waiting for Ready (no controller here)", r.code)
	}
	if !strings.Contains(r.errOut, "the data is in etcd and the token back") {
		t.Fatalf("stderr does not say the token is back: %s", r.errOut)
	}
	if got := getCluster(t, ns, "switched"); got.Annotations[v1beta1.AnnotationRestorePending] != "" {
		t.Fatalf("the mark stays: %v", got.Annotations)
	}
	if s := tokenSecret(t, c); string(s.Data[layout.SecretKeyToken]) != "tok" || s.Annotations[v1beta1.AnnotationRestorePending] != "" || len(s.Data[tokenBeforeRestoreKey]) != 0 {
		t.Fatalf("the token is not back where the pods mount it: annotations %v", s.Annotations)
	}
}
