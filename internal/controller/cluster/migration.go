package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/layout"
)

// The migration from sqlite to etcd (docs/backup.md, "Migrate SQLite to
// etcd"), driven by the spec alone and without pods/exec: the user changes
// spec.datastore.type from sqlite to etcd (and servers, in the same update);
// status.datastore.type still says sqlite, and that pair is the migration
// under way (Settings.Migrating).
//
//  1. Server pod 0 is made again (the StatefulSet's template changes) with
//     the etcd sidecar bootstrapping member 0 (reconcileEtcdRoster publishes
//     the first roster although the volume holds the SQLite data), the
//     SQLite directory mounted read-only and --migrate-from-sqlite: before
//     the sidecar reports started, it loads the SQLite data into the member
//     and writes the marker (cmd/datastore/migrate.go). k3s starts after it,
//     on etcd holding the cluster's data: the same CA (k3s's bootstrap keys
//     are among the data) and the same token Secret, never withheld.
//     The StatefulSet stays at 1 replica.
//  2. The switch: once member 0 is healthy and holds the marker
//     (observeMigration), status.datastore.type becomes etcd (and
//     migratedFrom sqlite). From there the spec can no longer go back.
//  3. The next reconcile resolves servers to spec.servers: the members are
//     added as for any scale-up.
//
// Before the switch, datastore.type back to sqlite (with servers 1) makes
// server pod 0 again with the SQLite sidecar on the untouched SQLite data.
// The pods of a migrated cluster keep the sidecar flag and the read-only
// mount (status.datastore.migratedFrom), so that the switch changes no pod
// template: a sidecar that finds the marker, or other members, loads nothing.

// migrationRequeue is how soon a migration waiting for member 0's load is
// looked at again (the pod's status changes bring it back sooner).
const migrationRequeue = 5 * time.Second

// migrationState is what a reconcile observed of a migration under way.
type migrationState struct {
	// switched: member 0 is healthy and holds the marker: the data is in
	// etcd; the status records the switch.
	switched bool
	// marker is the SQLite revision the marker names.
	marker string
	// failed is the sidecar's report of a failed load.
	failed string
}

// migrationPod reports whether the server pods carry the migration's
// sidecar flag and read-only SQLite mount: during the migration and, so that
// the switch changes no pod, ever after.
func migrationPod(s Settings) bool {
	return s.Datastore == v1beta1.EtcdDatastore && (s.Migrating || s.MigratedFrom == v1beta1.SQLiteDatastore)
}

// observeMigration looks for the switch: member 0 (server pod 0) healthy
// and holding the marker its sidecar writes once the SQLite data is loaded.
// It also reads the sidecar's report of a failed load.
func (r *Reconciler) observeMigration(ctx context.Context, c *v1beta1.Cluster, cl *etcd.EtcdClient, observed etcd.Observed, pods []corev1.Pod, o *observation) {
	peer := EtcdPeer(c, 0)
	for _, m := range observed.Members {
		if m.Name != peer.Name || !observed.Healthy(m.ID) {
			continue
		}
		marker, err := cl.MigrationMarker(ctx, peer.ClientURL)
		if err != nil {
			log.FromContext(ctx).Info("reading the migration's marker from etcd member 0", "error", err.Error())
		}
		if marker != "" {
			o.migration.switched, o.migration.marker = true, marker
			return
		}
	}
	for i := range pods {
		if pods[i].Name == peer.Name && pods[i].DeletionTimestamp.IsZero() {
			o.migration.failed = migrationFailure(&pods[i])
		}
	}
}

// migrationFailure is the report of a failed load in the etcd sidecar's
// termination message (current or last), or "".
func migrationFailure(pod *corev1.Pod) string {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name != "datastore" {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
			if t == nil {
				continue
			}
			if why, ok := etcd.ParseMigrationFailedReport(t.Message); ok {
				return why
			}
		}
	}
	return ""
}

// recordedDatastore is status.datastore's type and migratedFrom: the
// datastore in effect, but sqlite during a migration until its switch.
func recordedDatastore(o observation) (v1beta1.DatastoreType, v1beta1.DatastoreType) {
	switch {
	case o.settings.Migrating && !o.migration.switched:
		return v1beta1.SQLiteDatastore, ""
	case o.settings.Migrating:
		return v1beta1.EtcdDatastore, v1beta1.SQLiteDatastore
	}
	return o.settings.Datastore, o.settings.MigratedFrom
}

// migratingCondition is Migrating's reason and message while a migration is
// under way, and after its switch until every server asked for is ready
// (srvReady); ok is false when there is none.
func migratingCondition(c *v1beta1.Cluster, o observation, srvReady bool) (reason, message string, ok bool) {
	pod := layout.ServerPodName(c, 0)
	switch {
	case o.settings.Migrating && o.migration.switched:
		return v1beta1.ReasonMigrationSwitched, fmt.Sprintf("etcd member 0 (%s) serves the SQLite data loaded at revision %s: status.datastore.type is etcd, there is no way back; the cluster grows to %s next", pod, o.migration.marker, serverCount(max(c.Spec.Servers, 1))), true
	case o.settings.Migrating && o.migration.failed != "":
		return v1beta1.ReasonMigrationFailed, clip(fmt.Sprintf("the load of the SQLite data into etcd member 0 (%s) failed, and is tried again from the start as its sidecar restarts: %s. The SQLite data is untouched: datastore.type sqlite with servers 1 serves it again", pod, o.migration.failed)), true
	case o.settings.Migrating:
		return v1beta1.ReasonMigrationLoadingEtcd, fmt.Sprintf("server pod %s is made again with etcd member 0, whose sidecar loads the SQLite data of its volume before k3s starts; until the switch, datastore.type sqlite with servers 1 serves the untouched SQLite data again", pod), true
	case o.settings.MigratedFrom == v1beta1.SQLiteDatastore && meta.FindStatusCondition(c.Status.Conditions, v1beta1.ConditionMigrating) != nil && !srvReady:
		return v1beta1.ReasonMigrationSwitched, fmt.Sprintf("the data is in etcd (no way back); the cluster grows to %s, one member at a time (EtcdMembership)", serverCount(o.settings.Servers)), true
	}
	return "", "", false
}

// recordMigrationEnd records an Event when the Migrating condition goes: the
// migration is done, or was undone before its switch.
func (r *Reconciler) recordMigrationEnd(c *v1beta1.Cluster, before, after v1beta1.ClusterStatus) {
	if meta.FindStatusCondition(before.Conditions, v1beta1.ConditionMigrating) == nil || meta.FindStatusCondition(after.Conditions, v1beta1.ConditionMigrating) != nil || after.Datastore == nil {
		return
	}
	if after.Datastore.Type == v1beta1.EtcdDatastore {
		r.event(c, corev1.EventTypeNormal, ReasonMigrationDone, "Migrate", fmt.Sprintf("migrated from sqlite to etcd: %d servers ready", after.ReadyServers))
		return
	}
	r.event(c, corev1.EventTypeNormal, ReasonMigrationUndone, "Migrate", "the migration to etcd was undone before its switch: the server serves its SQLite data again")
}

// Reasons of the Events recordMigrationEnd records (no condition carries
// them: Migrating goes).
const (
	ReasonMigrationDone   = "MigrationDone"
	ReasonMigrationUndone = "MigrationUndone"
)

// serverCount says "1 server" or "n servers".
func serverCount(n int32) string {
	if n == 1 {
		return "1 server"
	}
	return fmt.Sprintf("%d servers", n)
}
