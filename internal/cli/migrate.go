package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshot"
	"github.com/k3k-io/k3k/pkg/snapshotter"
)

// Migrating a live cluster from SQLite to etcd (`cluster migrate NAME --to
// etcd [--servers 3]`), one way. It is driven by k3kcli, like the restores,
// and not by the controller: it needs pods/exec into the server pod (the
// snapshot out of the SQLite sidecar, the data into etcd member 0), which the
// controller must never hold (internal/charttest), and every step it needs
// exists already as a step of the in-place restore. The controller-only path
// would be a Job like spec.backup's (its own ServiceAccount bound to the
// chart's exec ClusterRole) running these same steps, with the Job's progress
// turned into conditions; see docs/backup.md.
//
//  1. Checks, before anything changes (CheckMigrate): the datastore in
//     effect is sqlite (etcd to sqlite is refused: one way only), on volumes
//     (ephemeral persistence loses the data when the pod is made again), not
//     paused, no restore under way, an odd number of servers asked for.
//  2. Marks, as for the in-place restore: the Cluster's restore-pending
//     annotation "migrate/etcd" (the controller generates no token while the
//     Secret is empty, and TokenReady says a migration is under way), and the
//     token Secret's, its token moved to token-before-restore (not mounted,
//     not lost).
//  3. k3s stopped on the SQLite server (its pod is made again; kine serves
//     the file, k3s waits for its token), so nothing writes any more: the
//     snapshot taken next is the last state, no acknowledged write is lost.
//     The snapshot (pkg/snapshotter, as `cluster snapshot` takes it) goes to
//     a temporary file of k3kcli's.
//  4. The spec: datastore.type etcd, servers 1 and datastore.migrateFrom
//     sqlite, in one update; the CRD allows the type change only so. The
//     StatefulSet's pod is made again with an etcd sidecar; the controller
//     bootstraps member 0 although the volume holds data (it holds the
//     SQLite data: migrateFrom). etcd's data dir is the volume's "etcd"
//     subPath, the SQLite file is in its "datastore" subPath, which the etcd
//     pod does not mount: the SQLite data stays on the volume untouched.
//  5. The snapshot is streamed into member 0's sidecar, `datastore restore
//     --replace --revision-above-snapshot` (a replace rather than a load
//     into an empty datastore, so that a run interrupted midway and run
//     again finishes). A new etcd member's revisions start at 1, below the
//     resourceVersions the agent and users' watches hold from SQLite; a
//     watch from one of those would later be served etcd's history under
//     numbers the client already saw. So the member's revision is first
//     moved past the snapshot's (kvrestore.AdvanceRevision, one write per
//     revision, thousands a second), every key is written above it and the
//     revisions up to the end compacted: every client relists (410 Gone),
//     as after an in-place restore.
//  6. The switch: migrateFrom removed. From here the writes go to etcd and
//     the CRD refuses the type back to sqlite. Then the token is put back and
//     the annotations removed; k3s starts on etcd (once the kubelet projected
//     the token) and the command waits for Ready.
//  7. servers raised to the count asked for: the controller adds members as
//     learners, one at a time, and promotes them (docs/etcd.md).
//
// The controller reports the step in the Cluster's Migrating condition,
// read from the marks these steps leave (the annotation, migrateFrom).
//
// Every step reads the cluster first, so the same command run again after
// an interruption goes on. Interrupted between 4 and 6, the spec goes back to
// sqlite first and the migration starts again from a fresh snapshot (the
// one k3kcli held is gone with it). `--abort` before the switch puts the spec
// back to sqlite and the token back: the SQLite file, never written since k3s
// stopped, is served again.
//
// Downtime: from the pod deletion in 3 to Ready in 6: two pod starts, the
// snapshot and load (seconds for thousands of objects), and the kubelet's
// token projection (about a minute, twice not: the SQLite pod of step 3 needs
// no token). The agent's host pods are not touched: the agent is another
// Deployment, and its pods keep running while the API is down.

// migrateValue is the Cluster's restore-pending annotation during a migration.
const migrateValue = "migrate/etcd"

const migrateHint = "run the same k3kcli cluster migrate again to go on, or k3kcli cluster migrate --abort to serve the SQLite data again"

// MigrateStage is how far a migration got, read from the Cluster.
type MigrateStage int

const (
	// MigrateStart: a SQLite cluster with no migration under way.
	MigrateStart MigrateStage = iota
	// MigrateMarked: marked, the spec still sqlite (interrupted in 2 or 3).
	MigrateMarked
	// MigrateEtcdPending: the spec etcd with migrateFrom (interrupted in 4
	// or 5, before the switch).
	MigrateEtcdPending
	// MigrateSwitched: migrateFrom removed, the mark still there
	// (interrupted in 6: the token is not back yet).
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

k3s is stopped, a snapshot of the SQLite data is taken, the cluster's
datastore becomes etcd with one member, the snapshot is written into it, k3s
starts on etcd, and the members are added one at a time. The cluster's API is
down for a few minutes; the agent's pods keep running. The SQLite file stays on
the server volume untouched: until the switch (the data in etcd, k3s about to
start on it), --abort serves it again. etcd to sqlite is not possible.

It asks for confirmation unless --yes. If it is interrupted, run it again: it
goes on. See docs/backup.md.`,
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
			return g.withExec(cmd, f.timeout, func(ctx context.Context, s *session, rc *rest.Config) error {
				if f.abort {
					return runMigrateAbort(ctx, o, s, f, args[0])
				}
				return runMigrate(ctx, o, s, rc, f, args[0])
			})
		},
	}
	cmd.Flags().StringVar(&f.to, "to", "", "the datastore to move to: etcd (required unless --abort)")
	cmd.Flags().Int32Var(&f.servers, "servers", 3, "how many etcd servers the cluster ends with (odd)")
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&f.abort, "abort", false, "stop a migration that has not reached its switch and serve the SQLite data again")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 30*time.Minute, "how long the migration, until every server is Ready, may take")
	return cmd
}

// CheckMigrate decides, before anything changes, whether cluster c may be
// migrated to etcd, and how far an earlier run got.
func CheckMigrate(c *v1beta1.Cluster) (MigrateStage, error) {
	name := c.Namespace + "/" + c.Name
	value, pending := c.Annotations[v1beta1.AnnotationRestorePending]
	if pending && value != migrateValue {
		return 0, usageErr("wait for the restore to finish (or run it again to finish it), then migrate",
			"cluster %s: a restore is under way (annotation %s)", name, v1beta1.AnnotationRestorePending)
	}
	if c.Spec.Datastore.MigrateFrom == v1beta1.SQLiteDatastore {
		return MigrateEtcdPending, nil
	}
	if pending && c.Spec.Datastore.Type == v1beta1.EtcdDatastore {
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
			"cluster %s keeps its data in an emptyDir (persistence ephemeral): stopping k3s means making its server pod again, which loses the SQLite data and any way back to it", name)
	}
	if c.Spec.Paused {
		return 0, usageErr("k3kcli cluster resume "+c.Name+" first", "cluster %s is paused: its datastore does not run", name)
	}
	if pending {
		return MigrateMarked, nil
	}
	return MigrateStart, nil
}

func runMigrate(ctx context.Context, o Options, s *session, rc *rest.Config, f *migrateFlags, name string) error {
	key := types.NamespacedName{Namespace: s.namespace, Name: name}
	c := &v1beta1.Cluster{}
	if err := s.client.Get(ctx, key, c); err != nil {
		return apiErr(err, fmt.Sprintf("getting cluster %s/%s", key.Namespace, key.Name))
	}
	stage, err := CheckMigrate(c)
	if err != nil {
		return err
	}
	secretKey := types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).Token}
	token, err := tokenOf(ctx, s, secretKey)
	if err != nil {
		return err
	}
	if !f.yes {
		if err := confirmMigrate(o, c, f.servers, stage); err != nil {
			return err
		}
	}
	start := o.Now()
	step := func(format string, a ...any) {
		fmt.Fprintf(o.Err, "[%6s] %s\n", o.Now().Sub(start).Round(time.Second), fmt.Sprintf(format, a...))
	}
	if stage == MigrateEtcdPending {
		step("an earlier run stopped before the switch: the spec goes back to sqlite and the migration starts again from the SQLite data")
		if err := setDatastore(ctx, s, c, v1beta1.SQLiteDatastore); err != nil {
			return err
		}
		stage = MigrateMarked
	}
	if stage != MigrateSwitched {
		if err := migrateToEtcd(ctx, o, s, rc, c, secretKey, token, step); err != nil {
			return err
		}
	}
	if err := finishSwitch(ctx, s, c, secretKey, token); err != nil {
		return err
	}
	step("the data is in etcd and the token back; k3s starts on etcd once the kubelet has projected the token (about a minute)")
	deadline, _ := ctx.Deadline()
	if _, err := waitReady(ctx, o, s, c, time.Until(deadline)); err != nil {
		return err
	}
	step("cluster %s/%s serves from etcd member 0 (API down for %s)", c.Namespace, c.Name, o.Now().Sub(start).Round(time.Second))
	if err := growServers(ctx, o, s, c, f.servers, step); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "cluster %s/%s migrated from sqlite to etcd with %d servers after %s; the SQLite file stays on server 0's volume, unused\n",
		c.Namespace, c.Name, f.servers, o.Now().Sub(start).Round(time.Second))
	return nil
}

// migrateToEtcd is steps 2 to 6 up to the switch: marks, k3s stopped,
// snapshot, spec, load, migrateFrom removed.
func migrateToEtcd(ctx context.Context, o Options, s *session, rc *rest.Config, c *v1beta1.Cluster, secretKey types.NamespacedName, token []byte, step func(string, ...any)) error {
	if err := markMigrating(ctx, s, c); err != nil {
		return err
	}
	old, err := markTokenSecret(ctx, s, c, secretKey)
	if err != nil {
		return migrateErr(err)
	}
	pod, err := waitServer0(ctx, o, s, c, v1beta1.SQLiteDatastore, old, true)
	if err != nil {
		return err
	}
	step("k3s stopped; the SQLite datastore of %s serves the data nothing writes to any more", pod.Name)
	p, err := takeMigrationSnapshot(ctx, rc, c, pod, token)
	if err != nil {
		return err
	}
	defer p.cleanup()
	step("snapshot of the SQLite data taken at revision %d (%d bytes)", p.archive.Manifest.Revision, p.archive.Manifest.Size)
	old[string(pod.UID)] = true
	if err := setDatastore(ctx, s, c, v1beta1.EtcdDatastore); err != nil {
		return err
	}
	step("datastore.type etcd (migrateFrom sqlite), servers 1: server 0 is made again with etcd member 0, the SQLite file stays on its volume")
	pod, err = waitServer0(ctx, o, s, c, v1beta1.EtcdDatastore, old, false)
	if err != nil {
		return err
	}
	said, err := p.load(ctx, rc, c, v1beta1.EtcdDatastore, pod)
	if err != nil {
		return migrateErr(err)
	}
	step("%s", said)
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"datastore":{"migrateFrom":null}}}`))
	if err := s.client.Patch(ctx, c, patch); err != nil {
		return migrateErr(apiErr(err, "removing spec.datastore.migrateFrom (the switch; the data is in etcd)"))
	}
	step("the switch: spec.datastore.migrateFrom removed, the cluster is an etcd cluster from now on")
	return nil
}

// finishSwitch puts the token back and removes the marks.
func finishSwitch(ctx context.Context, s *session, c *v1beta1.Cluster, secretKey types.NamespacedName, token []byte) error {
	if err := giveBackToken(ctx, s, secretKey, token); err != nil {
		return migrateErr(err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+v1beta1.AnnotationRestorePending+`":null}}}`))
	if err := s.client.Patch(ctx, c, patch); err != nil {
		return apiErr(err, "removing the annotation "+v1beta1.AnnotationRestorePending+" (the data and token are in place; remove it by hand)")
	}
	return nil
}

func runMigrateAbort(ctx context.Context, o Options, s *session, f *migrateFlags, name string) error {
	key := types.NamespacedName{Namespace: s.namespace, Name: name}
	c := &v1beta1.Cluster{}
	if err := s.client.Get(ctx, key, c); err != nil {
		return apiErr(err, fmt.Sprintf("getting cluster %s/%s", key.Namespace, key.Name))
	}
	stage, err := CheckMigrate(c)
	if err != nil {
		return err
	}
	switch stage {
	case MigrateStart:
		return usageErr("", "cluster %s/%s: no migration is under way", c.Namespace, c.Name)
	case MigrateSwitched:
		return usageErr("run k3kcli cluster migrate "+c.Name+" --to etcd again to finish it",
			"cluster %s/%s: the migration passed its switch (the data is in etcd): there is no way back to the SQLite data", c.Namespace, c.Name)
	}
	secretKey := types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).Token}
	token, err := tokenOf(ctx, s, secretKey)
	if err != nil {
		return err
	}
	if stage == MigrateEtcdPending {
		if err := setDatastore(ctx, s, c, v1beta1.SQLiteDatastore); err != nil {
			return err
		}
		fmt.Fprintf(o.Err, "datastore.type back to sqlite: server 0 is made again on its SQLite file\n")
		// The token goes back only once the SQLite pod waits for it: k3s in
		// the etcd pod would start on an etcd that may hold nothing yet, and
		// bootstrap a new CA there and on the volume.
		if _, err := waitServer0(ctx, o, s, c, v1beta1.SQLiteDatastore, map[string]bool{}, false); err != nil {
			return err
		}
	}
	if err := finishSwitch(ctx, s, c, secretKey, token); err != nil {
		return err
	}
	deadline, _ := ctx.Deadline()
	if _, err := waitReady(ctx, o, s, c, time.Until(deadline)); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "migration of cluster %s/%s aborted: it serves its SQLite data again\n", c.Namespace, c.Name)
	return nil
}

// tokenOf is the cluster's token, wherever the Secret keeps it.
func tokenOf(ctx context.Context, s *session, key types.NamespacedName) ([]byte, error) {
	secret := &corev1.Secret{}
	if err := s.client.Get(ctx, key, secret); err != nil {
		return nil, apiErr(err, fmt.Sprintf("reading the cluster token (Secret %s/%s)", key.Namespace, key.Name))
	}
	token := secret.Data[layout.SecretKeyToken]
	if _, marked := secret.Annotations[v1beta1.AnnotationRestorePending]; marked && len(token) == 0 {
		token = secret.Data[tokenBeforeRestoreKey]
	}
	if len(token) == 0 {
		return nil, &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s has no token yet (Secret %s is empty)", key.Namespace, key.Name),
			Hint: "migrate a cluster whose TokenReady condition is True"}
	}
	return token, nil
}

func confirmMigrate(o Options, c *v1beta1.Cluster, servers int32, stage MigrateStage) error {
	no := usageErr("run it again and answer yes, or pass --yes", "cluster %s/%s not migrated: not confirmed", c.Namespace, c.Name)
	if o.In == nil {
		return no
	}
	if stage == MigrateStart {
		fmt.Fprintf(o.Err, "This moves cluster %s/%s from sqlite to etcd with %d servers, one way; its API is down for a few minutes.\n", c.Namespace, c.Name, servers)
	} else {
		fmt.Fprintf(o.Err, "A migration of cluster %s/%s to etcd was interrupted; this goes on with it (%d servers).\n", c.Namespace, c.Name, servers)
	}
	if !confirmed(o, "Migrate?") {
		return no
	}
	return nil
}

// markMigrating annotates the Cluster restore-pending "migrate/etcd".
func markMigrating(ctx context.Context, s *session, c *v1beta1.Cluster) error {
	if c.Annotations[v1beta1.AnnotationRestorePending] == migrateValue {
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+v1beta1.AnnotationRestorePending+`":"`+migrateValue+`"}}}`))
	if err := s.client.Patch(ctx, c, patch); err != nil {
		return apiErr(err, "annotating the cluster "+v1beta1.AnnotationRestorePending+" (nothing changed yet)")
	}
	return nil
}

// MigrateSpecPatch is the merge patch that sets the datastore to ds during a
// migration: etcd with one server and migrateFrom sqlite, or sqlite with
// one server and no migrateFrom (back).
func MigrateSpecPatch(ds v1beta1.DatastoreType) []byte {
	from := any(nil)
	if ds == v1beta1.EtcdDatastore {
		from = v1beta1.SQLiteDatastore
	}
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"servers": 1, "datastore": map[string]any{"type": ds, "migrateFrom": from}}})
	return b
}

func setDatastore(ctx context.Context, s *session, c *v1beta1.Cluster, ds v1beta1.DatastoreType) error {
	if err := s.client.Patch(ctx, c, client.RawPatch(types.MergePatchType, MigrateSpecPatch(ds))); err != nil {
		return migrateErr(apiErr(err, "setting spec.datastore.type "+string(ds)))
	}
	return nil
}

// PodDatastore is the datastore the sidecar of server pod p runs, from its
// command line; empty when it has none.
func PodDatastore(p *corev1.Pod) v1beta1.DatastoreType {
	for _, ct := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		if ct.Name != snapshotter.SidecarContainer {
			continue
		}
		args := slices.Concat(ct.Command, ct.Args)
		if len(args) > 1 {
			return v1beta1.DatastoreType(args[1])
		}
	}
	return ""
}

// Server0Waiting returns server pod 0 of c once it was made after the marks
// (not in old), runs datastore ds with its sidecar ready and no k3s ready;
// else what it waits for.
func Server0Waiting(c *v1beta1.Cluster, pods []corev1.Pod, ds v1beta1.DatastoreType, old map[string]bool) (*corev1.Pod, string) {
	name := layout.ServerPodName(c, 0)
	for i := range pods {
		p := &pods[i]
		if p.Name != name || p.DeletionTimestamp != nil || old[string(p.UID)] {
			continue
		}
		switch {
		case PodDatastore(p) != ds:
			return nil, "server pod " + name + " to be made again with the " + string(ds) + " datastore"
		case k3sReady(p):
			return nil, "k3s in " + name + " to stop"
		case snapshotSource([]corev1.Pod{*p}) == nil:
			return nil, "the " + string(ds) + " datastore of " + name + " to be ready"
		}
		return p, ""
	}
	return nil, "server pod " + name + " to be made again"
}

// waitServer0 waits for Server0Waiting, deleting first (stop) the pods of
// old that may run k3s.
func waitServer0(ctx context.Context, o Options, s *session, c *v1beta1.Cluster, ds v1beta1.DatastoreType, old map[string]bool, stop bool) (*corev1.Pod, error) {
	return waitServers(ctx, o, s, c, old, stop, func(pods []corev1.Pod) (*corev1.Pod, string) {
		return Server0Waiting(c, pods, ds, old)
	}, "migrated", migrateHint)
}

// takeMigrationSnapshot takes the snapshot of the stopped SQLite server
// into a temporary file of k3kcli's, as `cluster snapshot` takes one.
func takeMigrationSnapshot(ctx context.Context, rc *rest.Config, c *v1beta1.Cluster, pod *corev1.Pod, token []byte) (*pendingRestore, error) {
	dir, err := os.MkdirTemp("", "k3k-migrate-")
	if err != nil {
		return nil, err
	}
	p := &pendingRestore{dir: dir, dataPath: filepath.Join(dir, "data.db"), replace: true, aboveSnapshot: true}
	data, err := os.OpenFile(p.dataPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		p.cleanup()
		return nil, err
	}
	defer data.Close()
	m, err := snapshotter.Receive(ctx, snapshotter.Source{Config: rc, Cluster: c, Pod: pod, Datastore: v1beta1.SQLiteDatastore}, data)
	if err != nil {
		p.cleanup()
		var execErr *snapshotter.ExecError
		if errors.As(err, &execErr) {
			return nil, &Error{Code: ExitError, Msg: execErr.Error(), Hint: "you need create on pods/exec in the cluster's namespace; " + migrateHint, Err: execErr.Err}
		}
		return nil, migrateErr(err)
	}
	p.archive = snapshot.Archive{Manifest: m, Token: token}
	return p, nil
}

// growServers raises spec.servers to n and waits until n servers are ready.
func growServers(ctx context.Context, o Options, s *session, c *v1beta1.Cluster, n int32, step func(string, ...any)) error {
	if n > 1 {
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"servers":%d}}`, n)))
		if err := s.client.Patch(ctx, c, patch); err != nil {
			return apiErr(err, fmt.Sprintf("setting spec.servers %d (the cluster serves from etcd member 0; grow it with k3kcli cluster update --servers)", n))
		}
		step("servers %d: the controller adds the members one at a time, as learners, then promotes them", n)
	}
	sts := &appsv1.StatefulSet{}
	stsKey := types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).StatefulSet}
	for {
		if err := s.client.Get(ctx, stsKey, sts); err == nil && sts.Status.ReadyReplicas >= n && sts.Status.UpdatedReplicas >= n {
			break
		}
		select {
		case <-ctx.Done():
			return &Error{Code: ExitTimeout, Msg: fmt.Sprintf("cluster %s/%s is on etcd, but not %d of its servers became ready in time", c.Namespace, c.Name, n),
				Hint: "kubectl describe clusters.k3k.io " + c.Name + " -n " + c.Namespace + " shows the members"}
		case <-time.After(o.PollInterval):
		}
	}
	deadline, _ := ctx.Deadline()
	_, err := waitReady(ctx, o, s, c, time.Until(deadline))
	return err
}

// migrateErr adds migrateHint to an error of a step after the marks.
func migrateErr(err error) error { return hinted(err, migrateHint) }
