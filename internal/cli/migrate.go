package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// Migrating a live cluster from SQLite to etcd (`cluster migrate NAME --to
// etcd [--servers 3]`), one way. The controller does the migration
// (docs/backup.md, internal/controller/cluster/migration.go) once the spec
// says so: this command checks that the cluster can be migrated, changes
// spec.datastore.type to etcd and spec.servers in one patch, and follows
// the Migrating condition until every server is ready. `--abort` puts the
// spec back to sqlite before the switch. It needs no pods/exec: get, patch
// and watch on the Cluster are enough.

const migrateHint = "kubectl describe clusters.k3k.io shows the Migrating condition; before the switch, k3kcli cluster migrate --abort serves the SQLite data again"

// MigrateStage is how far a migration got, read from the Cluster.
type MigrateStage int

const (
	// MigrateStart: a SQLite cluster with no migration under way.
	MigrateStart MigrateStage = iota
	// MigrateUnderway: the spec says etcd, the status still sqlite: before
	// the switch.
	MigrateUnderway
	// MigrateSwitched: status.datastore.type etcd and Migrating still
	// there: the cluster grows.
	MigrateSwitched
)

type migrateFlags struct {
	to      string
	servers int32
	yes     bool
	abort   bool
	timeout time.Duration
}

func newMigrateCommand(o Options, g *globalFlags) *cobra.Command {
	f := &migrateFlags{}
	cmd := &cobra.Command{
		Use:   "migrate NAME --to etcd [--servers 3]",
		Short: "Move a live virtual cluster from the sqlite datastore to etcd",
		Long: `Move a running virtual cluster from the sqlite datastore to etcd, one way,
keeping its objects, token, CA, addresses and agent; then grow it to --servers.

It changes the cluster's spec.datastore.type to etcd and spec.servers in one
patch, and the k3k controller does the rest: server 0 is made again with etcd
member 0, which loads the SQLite data of its volume before k3s starts on it;
once member 0 serves the data (the switch), the members are added one at a
time. The command prints each step of the Migrating condition and waits until
every server is ready. The cluster's API is down while server 0 is made again
and loads the data; the agent's pods keep running. The SQLite file stays on
the server volume untouched: until the switch, --abort serves it again.
etcd to sqlite is not possible.

It asks for confirmation unless --yes. Interrupted, run it again: it follows
the migration under way. See docs/backup.md.`,
		Example: `  k3kcli cluster migrate dev --to etcd --servers 3
  k3kcli cluster migrate dev --abort`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !f.abort && f.to != string(v1beta1.EtcdDatastore) {
				return usageErr("--to etcd", "--to: k3kcli migrates from sqlite to etcd only, got %q", f.to)
			}
			if f.servers < 1 || f.servers%2 == 0 || f.servers > 7 {
				return usageErr("e.g. --servers 3", "--servers: etcd needs an odd number of servers (1, 3, 5 or 7) to keep quorum, got %d", f.servers)
			}
			if f.timeout <= 0 {
				return usageErr("e.g. --timeout 30m", "--timeout must be positive, got %s", f.timeout)
			}
			s, err := g.connect()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			if f.abort {
				return runMigrateAbort(ctx, o, s, args[0])
			}
			return runMigrate(ctx, o, s, f, args[0])
		},
	}
	cmd.Flags().StringVar(&f.to, "to", "", "the datastore to move to: etcd (required unless --abort)")
	cmd.Flags().Int32Var(&f.servers, "servers", 3, "how many etcd servers the cluster ends with (odd)")
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&f.abort, "abort", false, "undo a migration that has not reached its switch: the cluster serves its SQLite data again")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 30*time.Minute, "how long the migration, until every server is Ready, may take")
	return cmd
}

// CheckMigrate decides, before anything changes, whether cluster c may be
// migrated to etcd, and how far an earlier run got.
func CheckMigrate(c *v1beta1.Cluster) (MigrateStage, error) {
	name := c.Namespace + "/" + c.Name
	recorded := v1beta1.DatastoreType("")
	if c.Status.Datastore != nil {
		recorded = c.Status.Datastore.Type
	}
	switch {
	case recorded == v1beta1.SQLiteDatastore && c.Spec.Datastore.Type == v1beta1.EtcdDatastore:
		return MigrateUnderway, nil
	case recorded == v1beta1.EtcdDatastore && meta.FindStatusCondition(c.Status.Conditions, v1beta1.ConditionMigrating) != nil:
		return MigrateSwitched, nil
	}
	switch ds := datastoreInEffect(c); {
	case ds == "":
		return 0, &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s: its datastore type is not known yet (status.datastore.type is empty)", name),
			Hint: "the k3k controller records it on its first reconcile; check that it runs"}
	case ds == v1beta1.EtcdDatastore || c.Spec.Datastore.Type == v1beta1.EtcdDatastore:
		return 0, usageErr("grow it with k3kcli cluster update "+c.Name+" --servers N",
			"cluster %s uses etcd already: a migration goes from sqlite to etcd only, never back", name)
	case ds != v1beta1.SQLiteDatastore:
		return 0, usageErr("move an external datastore's data with its own tools",
			"cluster %s uses the %s datastore: k3kcli migrates the sqlite datastore, whose data k3k holds", name, ds)
	}
	if persistenceInEffect(c) == v1beta1.EphemeralPersistence {
		return 0, usageErr("snapshot it and restore into a new etcd cluster: k3kcli cluster snapshot, then k3kcli cluster create NAME --datastore etcd --restore-from FILE",
			"cluster %s keeps its data in an emptyDir (persistence ephemeral): its server pod made again with etcd would lose the SQLite data and any way back to it", name)
	}
	if c.Spec.Paused {
		return 0, usageErr("k3kcli cluster resume "+c.Name+" first", "cluster %s is paused: its datastore does not run", name)
	}
	if _, pending := c.Annotations[v1beta1.AnnotationRestorePending]; pending || restoreUnderway(c) {
		return 0, usageErr("wait for the restore to finish (or run it again to finish it), then migrate",
			"cluster %s: a restore is under way", name)
	}
	return MigrateStart, nil
}

// restoreUnderway: spec.restoreFrom whose Restored condition is not True.
func restoreUnderway(c *v1beta1.Cluster) bool {
	return c.Spec.RestoreFrom != nil && !meta.IsStatusConditionTrue(c.Status.Conditions, v1beta1.ConditionRestored)
}

// MigrateSpecPatch is the merge patch that starts the migration (etcd with
// servers) or undoes it (sqlite, one server).
func MigrateSpecPatch(ds v1beta1.DatastoreType, servers int32) []byte {
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"servers": servers, "datastore": map[string]any{"type": ds, "migrateFrom": nil}}})
	return b
}

func runMigrate(ctx context.Context, o Options, s *session, f *migrateFlags, name string) error {
	key := types.NamespacedName{Namespace: s.namespace, Name: name}
	c := &v1beta1.Cluster{}
	if err := s.client.Get(ctx, key, c); err != nil {
		return apiErr(err, fmt.Sprintf("getting cluster %s/%s", key.Namespace, key.Name))
	}
	stage, err := CheckMigrate(c)
	if err != nil {
		return err
	}
	if stage == MigrateStart && !f.yes {
		if err := confirmMigrate(o, c, f.servers); err != nil {
			return err
		}
	}
	start := o.Now()
	if stage != MigrateSwitched && (stage == MigrateStart || c.Spec.Servers != f.servers) {
		if err := s.client.Patch(ctx, c, client.RawPatch(types.MergePatchType, MigrateSpecPatch(v1beta1.EtcdDatastore, f.servers))); err != nil {
			return hinted(apiErr(err, "setting spec.datastore.type etcd"), migrateHint)
		}
		fmt.Fprintf(o.Err, "[%6s] spec.datastore.type etcd, servers %d: the controller migrates cluster %s/%s\n", time.Duration(0), f.servers, c.Namespace, c.Name)
	}
	done := func(cur *v1beta1.Cluster) (bool, error) {
		cond := meta.FindStatusCondition(cur.Status.Conditions, v1beta1.ConditionMigrating)
		if cond != nil && cond.Reason == v1beta1.ReasonMigrationFailed {
			return false, &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s/%s: %s", cur.Namespace, cur.Name, cond.Message), Hint: migrateHint}
		}
		if cur.Spec.Datastore.Type != v1beta1.EtcdDatastore {
			return false, &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s/%s: spec.datastore.type is %q now: the migration was undone", cur.Namespace, cur.Name, cur.Spec.Datastore.Type)}
		}
		return cond == nil && cur.Status.Datastore != nil && cur.Status.Datastore.Type == v1beta1.EtcdDatastore &&
			meta.IsStatusConditionTrue(cur.Status.Conditions, v1beta1.ConditionReady) && cur.Status.ReadyServers >= cur.Spec.Servers, nil
	}
	cur, err := followMigration(ctx, o, s, c, start, done)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "cluster %s/%s migrated from sqlite to etcd with %s after %s; the SQLite file stays on server 0's volume, unused\n",
		cur.Namespace, cur.Name, serverCount(cur.Status.ReadyServers), o.Now().Sub(start).Round(time.Second))
	return nil
}

func runMigrateAbort(ctx context.Context, o Options, s *session, name string) error {
	key := types.NamespacedName{Namespace: s.namespace, Name: name}
	c := &v1beta1.Cluster{}
	if err := s.client.Get(ctx, key, c); err != nil {
		return apiErr(err, fmt.Sprintf("getting cluster %s/%s", key.Namespace, key.Name))
	}
	stage, err := CheckMigrate(c)
	if err != nil {
		if c.Status.Datastore != nil && c.Status.Datastore.Type == v1beta1.EtcdDatastore {
			return usageErr("", "cluster %s/%s is on etcd (status.datastore.type etcd): there is no way back to the SQLite data after the migration's switch", c.Namespace, c.Name)
		}
		return err
	}
	switch stage {
	case MigrateStart:
		return usageErr("", "cluster %s/%s: no migration is under way", c.Namespace, c.Name)
	case MigrateSwitched:
		return usageErr("run k3kcli cluster migrate "+c.Name+" --to etcd again to follow it",
			"cluster %s/%s: the migration passed its switch (the data is in etcd): there is no way back to the SQLite data", c.Namespace, c.Name)
	}
	start := o.Now()
	if err := s.client.Patch(ctx, c, client.RawPatch(types.MergePatchType, MigrateSpecPatch(v1beta1.SQLiteDatastore, 1))); err != nil {
		return apiErr(err, "setting spec.datastore.type back to sqlite (refused after the switch)")
	}
	fmt.Fprintf(o.Err, "[%6s] spec.datastore.type back to sqlite, servers 1: server 0 is made again on its SQLite data\n", time.Duration(0))
	done := func(cur *v1beta1.Cluster) (bool, error) {
		return meta.FindStatusCondition(cur.Status.Conditions, v1beta1.ConditionMigrating) == nil && cur.Status.Datastore != nil &&
			cur.Status.Datastore.Type == v1beta1.SQLiteDatastore && meta.IsStatusConditionTrue(cur.Status.Conditions, v1beta1.ConditionReady), nil
	}
	if _, err := followMigration(ctx, o, s, c, start, done); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "migration of cluster %s/%s undone: it serves its SQLite data again\n", c.Namespace, c.Name)
	return nil
}

// followMigration follows the cluster (followCluster), printing the
// Migrating condition and the ready servers whenever they change, until
// done says so or fails.
func followMigration(ctx context.Context, o Options, s *session, c *v1beta1.Cluster, start time.Time, done func(*v1beta1.Cluster) (bool, error)) (*v1beta1.Cluster, error) {
	return followCluster(ctx, o, s, c, start, migrationState, done, func(last string) error {
		return &Error{Code: ExitTimeout, Msg: fmt.Sprintf("cluster %s/%s: the migration did not finish in time; last: %s", c.Namespace, c.Name, last), Hint: migrateHint}
	})
}

// migrationState is one line for the Migrating condition and the servers.
func migrationState(c *v1beta1.Cluster) string {
	ds := "?"
	if c.Status.Datastore != nil {
		ds = string(c.Status.Datastore.Type)
	}
	state := fmt.Sprintf("status.datastore.type %s, %d/%d servers ready", ds, c.Status.ReadyServers, c.Spec.Servers)
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1beta1.ConditionMigrating); cond != nil {
		return state + "; Migrating=" + string(cond.Status) + " " + cond.Reason + ": " + cond.Message
	}
	if !meta.IsStatusConditionTrue(c.Status.Conditions, v1beta1.ConditionReady) {
		return state + "; " + progress(c)
	}
	return state + "; Ready"
}

func confirmMigrate(o Options, c *v1beta1.Cluster, servers int32) error {
	no := usageErr("run it again and answer yes, or pass --yes", "cluster %s/%s not migrated: not confirmed", c.Namespace, c.Name)
	if o.In == nil {
		return no
	}
	fmt.Fprintf(o.Err, "This moves cluster %s/%s from sqlite to etcd with %s, one way; its API is down while server 0 is made again and loads the data.\n", c.Namespace, c.Name, serverCount(servers))
	if !confirmed(o, "Migrate?") {
		return no
	}
	return nil
}

// serverCount is "1 server" or "N servers".
func serverCount(n int32) string {
	if n == 1 {
		return "1 server"
	}
	return fmt.Sprintf("%d servers", n)
}
