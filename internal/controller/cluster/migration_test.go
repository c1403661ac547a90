package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/layout"
)

// migrationPatch is the user's patch: the datastore type and servers.
func migrationPatch(t *testing.T, c *v1beta1.Cluster, ds v1beta1.DatastoreType, servers int32) error {
	t.Helper()
	raw := fmt.Sprintf(`{"spec":{"servers":%d,"datastore":{"type":%q}}}`, servers, ds)
	return k8s.Patch(context.Background(), c, client.RawPatch(types.MergePatchType, []byte(raw)))
}

// migratingReason reconciles c once and returns the Migrating condition's
// reason ("" when it is absent; it must be True when present).
func migratingReason(t *testing.T, r *Reconciler, c *v1beta1.Cluster) string {
	t.Helper()
	reconcileOnce(t, r, c)
	get(t, c, c.Name, c)
	got := meta.FindStatusCondition(c.Status.Conditions, v1beta1.ConditionMigrating)
	if got == nil {
		return ""
	}
	if got.Status != metav1.ConditionTrue {
		t.Fatalf("Migrating %+v, want True", got)
	}
	return got.Reason
}

func serverSet(t *testing.T, c *v1beta1.Cluster) *appsv1.StatefulSet {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	get(t, c, layout.NamesFor(c).StatefulSet, sts)
	return sts
}

// migrationSidecar reports whether the StatefulSet's datastore sidecar is
// etcd with the migration's flag and the SQLite directory mounted read-only.
func migrationSidecar(t *testing.T, sts *appsv1.StatefulSet) (etcdSidecar, flag, readOnlyMount bool) {
	t.Helper()
	for _, ct := range sts.Spec.Template.Spec.InitContainers {
		if ct.Name != "datastore" {
			continue
		}
		etcdSidecar = len(ct.Command) > 1 && ct.Command[1] == "etcd"
		flag = slices.Contains(ct.Command, "--migrate-from-sqlite="+layout.DatastoreDataDir)
		for _, m := range ct.VolumeMounts {
			if m.MountPath == layout.DatastoreDataDir {
				readOnlyMount = m.ReadOnly && m.SubPath == "datastore" && m.Name == layout.DataVolume
			}
		}
	}
	return etcdSidecar, flag, readOnlyMount
}

func recordedType(c *v1beta1.Cluster) v1beta1.DatastoreType {
	if c.Status.Datastore == nil {
		return ""
	}
	return c.Status.Datastore.Type
}

// TestMigrationFromSQLiteIsDrivenByTheSpec: a sqlite cluster with data, its
// spec changed to etcd with 3 servers in one patch → the StatefulSet stays
// at 1 replica with etcd member 0's sidecar carrying --migrate-from-sqlite
// and the SQLite directory read-only, the first roster bootstraps member 0,
// status.datastore.type stays sqlite and Migrating says
// MigrationLoadingEtcd. Back to sqlite before the switch: the SQLite
// sidecar again, no Migrating, the etcd finalizer dropped. Forward again: a
// sidecar's failed load is MigrationFailed with its message; member 0
// healthy without the marker is no switch; with the marker the switch is
// recorded (status etcd, migratedFrom sqlite, MigrationSwitched) while the
// StatefulSet is still at 1 replica; then sqlite is refused by the API, the
// next reconciles grow the cluster (a learner added, more replicas) with
// the pod template unchanged.
func TestMigrationFromSQLiteIsDrivenByTheSpec(t *testing.T) {
	ctx := context.Background()
	table := &dialTable{}
	r, _ := newReconciler(t)
	r.EtcdDial = table.dial
	c := createCluster(t, newCluster(newNamespace(t), "grow", func(c *v1beta1.Cluster) { c.Spec.Datastore.Type = v1beta1.SQLiteDatastore }))
	reconcileOnce(t, r, c)
	makeReady(t, c)
	if got := migratingReason(t, r, c); got != "" || recordedType(c) != v1beta1.SQLiteDatastore {
		t.Fatalf("a sqlite cluster: Migrating %q, status.datastore.type %q", got, recordedType(c))
	}

	if err := migrationPatch(t, c, v1beta1.EtcdDatastore, 3); err != nil {
		t.Fatalf("the type change sqlite → etcd with 3 servers was refused: %v", err)
	}
	if got := migratingReason(t, r, c); got != v1beta1.ReasonMigrationLoadingEtcd || recordedType(c) != v1beta1.SQLiteDatastore {
		t.Fatalf("after the type change: Migrating %q, status.datastore.type %q; want %s, sqlite", got, recordedType(c), v1beta1.ReasonMigrationLoadingEtcd)
	}
	sts := serverSet(t, c)
	if e, flag, ro := migrationSidecar(t, sts); !e || !flag || !ro || ptr.Deref(sts.Spec.Replicas, 0) != 1 {
		t.Fatalf("StatefulSet during the migration: etcd sidecar %v, flag %v, read-only SQLite mount %v, replicas %d; want all, 1", e, flag, ro, ptr.Deref(sts.Spec.Replicas, 0))
	}
	roster := readRoster(t, c)
	if roster.State != etcd.ClusterStateNew || len(roster.Members) != 1 || roster.Members[0].Name != layout.ServerPodName(c, 0) {
		t.Fatalf("roster %+v, want member 0 alone, bootstrapping", roster)
	}

	// The way back, before the switch. The member's pod (makeReady made it)
	// holds the etcd finalizer, as the etcd reconcile adds it.
	pod := &corev1.Pod{}
	get(t, c, layout.ServerPodName(c, 0), pod)
	if !slices.Contains(pod.Finalizers, v1beta1.FinalizerEtcdMember) {
		t.Fatalf("server pod 0 of the migration has no etcd finalizer: %v", pod.Finalizers)
	}
	if err := migrationPatch(t, c, v1beta1.SQLiteDatastore, 1); err != nil {
		t.Fatalf("back to sqlite before the switch was refused: %v", err)
	}
	if got := migratingReason(t, r, c); got != "" || recordedType(c) != v1beta1.SQLiteDatastore {
		t.Fatalf("after the way back: Migrating %q, status %q", got, recordedType(c))
	}
	if e, flag, ro := migrationSidecar(t, serverSet(t, c)); e || flag || ro {
		t.Fatalf("after the way back the sidecar is etcd %v, flag %v, SQLite read-only %v; want the SQLite sidecar", e, flag, ro)
	}
	get(t, c, pod.Name, pod)
	if slices.Contains(pod.Finalizers, v1beta1.FinalizerEtcdMember) {
		t.Fatalf("the sqlite cluster's pod %s keeps the etcd finalizer", pod.Name)
	}

	// Forward again; the sidecar's load fails.
	if err := migrationPatch(t, c, v1beta1.EtcdDatastore, 3); err != nil {
		t.Fatal(err)
	}
	migratingReason(t, r, c)
	get(t, c, pod.Name, pod)
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "datastore", Image: "x", ImageID: "x",
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "the migration from sqlite failed: the SQLite database to migrate: stat /var/lib/k3k/datastore/state.db: no such file or directory\n"}},
	}}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := migratingReason(t, r, c); got != v1beta1.ReasonMigrationFailed {
		t.Fatalf("after a failed load: Migrating %q, want %s", got, v1beta1.ReasonMigrationFailed)
	}
	if msg := meta.FindStatusCondition(c.Status.Conditions, v1beta1.ConditionMigrating).Message; !strings.Contains(msg, "state.db: no such file") {
		t.Fatalf("MigrationFailed does not carry the sidecar's message: %s", msg)
	}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "datastore", Image: "x", ImageID: "x", Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}

	// Member 0 runs, healthy, without the marker: no switch.
	m0 := startMember(t, c, table, 0, t.TempDir())
	if got := migratingReason(t, r, c); got != v1beta1.ReasonMigrationLoadingEtcd || recordedType(c) != v1beta1.SQLiteDatastore {
		t.Fatalf("member 0 without the marker: Migrating %q, status %q; want %s, sqlite", got, recordedType(c), v1beta1.ReasonMigrationLoadingEtcd)
	}
	before := serverSet(t, c).Spec.Template

	// The sidecar's marker: the switch.
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{m0.peer.ClientURL}, TLS: testClientTLS(t, c), DialTimeout: 5 * time.Second,
		DialOptions: etcd.DialTo(table.addrs[strings.TrimPrefix(m0.peer.ClientURL, "https://")]), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Put(ctx, etcd.MigrationMarkerKey, "4242"); err != nil {
		t.Fatal(err)
	}
	if got := migratingReason(t, r, c); got != v1beta1.ReasonMigrationSwitched || recordedType(c) != v1beta1.EtcdDatastore || c.Status.Datastore.MigratedFrom != v1beta1.SQLiteDatastore {
		t.Fatalf("with the marker: Migrating %q, status %+v; want %s, etcd migrated from sqlite", got, c.Status.Datastore, v1beta1.ReasonMigrationSwitched)
	}
	if n := ptr.Deref(serverSet(t, c).Spec.Replicas, 0); n != 1 {
		t.Fatalf("the switch reconcile made %d replicas: the switch is recorded before the growth", n)
	}
	if !strings.Contains(meta.FindStatusCondition(c.Status.Conditions, v1beta1.ConditionMigrating).Message, "4242") {
		t.Fatalf("MigrationSwitched does not name the loaded revision")
	}

	// No way back after the switch.
	err = migrationPatch(t, c, v1beta1.SQLiteDatastore, 1)
	if err == nil || !strings.Contains(err.Error(), "only while a migration from sqlite has not switched") {
		t.Fatalf("back to sqlite after the switch: %v, want it refused", err)
	}

	// The growth: member 1 added as a learner, the StatefulSet raised, the
	// template as it was.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		reconcileOnce(t, r, c)
		if ptr.Deref(serverSet(t, c).Spec.Replicas, 0) > 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the migrated cluster did not grow: replicas %d", ptr.Deref(serverSet(t, c).Spec.Replicas, 0))
		}
	}
	get(t, c, c.Name, c)
	if got := meta.FindStatusCondition(c.Status.Conditions, v1beta1.ConditionMigrating); got == nil || got.Reason != v1beta1.ReasonMigrationSwitched {
		t.Fatalf("while growing Migrating %+v, want %s", got, v1beta1.ReasonMigrationSwitched)
	}
	if after := serverSet(t, c).Spec.Template; !equality.Semantic.DeepEqual(before, after) {
		t.Fatalf("the switch changed the pod template (server pod 0 would be made again)")
	}
	members, err := cl.MemberList(ctx)
	if err != nil || len(members.Members) != 2 || !members.Members[0].IsLearner && !members.Members[1].IsLearner {
		t.Fatalf("members after the growth began: %v %v, want member 0 and a learner", err, members)
	}
}
