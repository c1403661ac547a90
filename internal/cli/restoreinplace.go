package cli

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshot"
)

// Restoring a snapshot in place (`cluster restore NAME --from FILE`): the
// Cluster keeps its servers, volumes, Services and agent; its datastore's
// data becomes the snapshot's.
//
//  1. The file is checked (every entry against its manifest) and the cluster
//     looked at before anything changes: the sqlite or etcd datastore, on
//     volumes (with ephemeral persistence, making the pods again would lose
//     the datastore itself), not paused, and the snapshot's token the
//     cluster's token (see below).
//  2. The Cluster is annotated k3k.io/restore-pending ("in-place/…"): the
//     controller generates no token for it and says so in TokenReady. The
//     token Secret is annotated too, with the time, and its token moved to
//     the key token-before-restore, which the pods do not mount: the
//     publisher restores no token into a Secret so marked (the servers'
//     own copy is the token of the data being replaced). The mark then
//     records the UIDs of the server pods that were there.
//  3. k3s is stopped and the datastore kept: every server pod that was
//     there when the Secret was marked is deleted. The StatefulSet makes them again, on the
//     same volumes; each new pod's datastore sidecar starts on its data (an
//     etcd member rejoins with its data dir), and its k3s, which finds no
//     token file, waits for one. No k3s serves, so nothing writes to the
//     datastore or caches it.
//  4. The snapshot is streamed through pods/exec into server 0's datastore
//     sidecar, which runs `datastore restore --replace`: every live key of
//     the snapshot written, every other key under /registry/ and /bootstrap/
//     deleted, through the etcd API, so every restored object gets a
//     revision higher than any a client holds; then the datastore is
//     compacted at the last one (SQLite in its file: kine does not honour a
//     Compact request exactly). A client that comes back with an older
//     resourceVersion gets 410 Gone and relists instead of seeing time go
//     backwards. With etcd the writes go through one member and raft
//     replicates them: no member's files are replaced, so membership, data
//     dirs and the controller's view of the members stay as they were.
//  5. The snapshot's token is written into the token Secret (it decrypts the
//     snapshot's bootstrap data, the CA keys) and both marks removed; k3s
//     starts once the kubelet has projected the token (about a minute) and
//     the command waits for Ready.
//
// Why not replace the datastore's files on the volume (etcdutl snapshot
// restore --bump-revision --mark-compacted, or copying state.db): the files
// must be replaced while the datastore is down, so by a container that
// does not exist (the sidecar serves the file it would replace), member by
// member with etcd (a new cluster ID, every member's data dir, the
// controller's membership state), and with SQLite the copied file keeps the
// snapshot's revisions, which are older than the clients' (kine has no
// bump-revision). Through the etcd API the datastore stays the only writer
// of its files and the revisions move forward by construction; it costs one
// write per key, seconds for 10,000 objects.
//
// Every step is idempotent and read back from the cluster, so running the
// same command again after an interruption finishes the job: the marks say
// that a restore is under way, pods made after the mark are not deleted
// again, and the replace writes and deletes again what it must.
//
// A snapshot whose token is not the cluster's is refused: it is of another
// cluster (another CA), and k3s compares the certificate files on the
// servers' volumes with the restored bootstrap data and refuses to start
// when they differ and the files on disk are newer. Such a snapshot goes
// into a new cluster (create --restore-from). A snapshot of another Cluster
// with the same token (one restored from it, or the other way) is fine. The
// same check of k3s's stops a restore of a snapshot taken before this
// cluster's CA or encryption keys were rotated; nothing here can see that.

// tokenBeforeRestoreKey is where the token Secret keeps the cluster's token
// while an in-place restore is pending: not projected into the pods, so k3s
// waits, and not lost.
const tokenBeforeRestoreKey = "token-before-restore"

// inPlacePrefix starts the value of the Cluster's restore-pending annotation
// during an in-place restore.
const inPlacePrefix = "in-place/"

const inPlaceHint = "its servers are stopped (k3s waits for its token) until the restore is done: run the same k3kcli cluster restore again to finish it"

type restoreFlags struct {
	from    string
	yes     bool
	timeout time.Duration
}

func newRestoreCommand(o Options, g *globalFlags) *cobra.Command {
	f := &restoreFlags{}
	cmd := &cobra.Command{
		Use:   "restore NAME --from FILE",
		Short: "Replace a virtual cluster's data with a snapshot, in place",
		Long: `Replace every object of a running virtual cluster with those of a snapshot that
k3kcli cluster snapshot wrote, keeping the cluster's servers, volumes, addresses,
agent and CA (sqlite and etcd datastores).

FILE is checked first. Then k3s is stopped on every server (their pods are made
again; the datastore keeps running, k3s waits for its token), the snapshot is
written into the datastore through its etcd API with new revisions and the old
ones compacted, so that every client that watched the cluster relists (410
Gone) instead of seeing time go backwards; the snapshot's token is put back and
k3s starts. The cluster's API is down meanwhile; objects written since the
snapshot are gone.

It asks for confirmation unless --yes. If it is interrupted, run it again: it
finishes the job. See docs/backup.md.`,
		Example: `  k3kcli cluster restore dev --from dev.snapshot
  k3kcli cluster restore ha -n tenants --from /backups/ha-2026-01-01.snapshot --yes`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.from == "" {
				return usageErr("e.g. --from "+args[0]+".snapshot", "--from FILE is required")
			}
			if f.timeout <= 0 {
				return usageErr("e.g. --timeout 30m", "--timeout must be positive, got %s", f.timeout)
			}
			return g.withExec(cmd, f.timeout, func(ctx context.Context, s *session, rc *rest.Config) error {
				return runRestoreInPlace(ctx, o, s, rc, f, args[0])
			})
		},
	}
	cmd.Flags().StringVar(&f.from, "from", "", "the snapshot file k3kcli cluster snapshot wrote (required)")
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 30*time.Minute, "how long the restore, until the cluster is Ready again, may take")
	return cmd
}

func runRestoreInPlace(ctx context.Context, o Options, s *session, rc *rest.Config, f *restoreFlags, name string) error {
	key := types.NamespacedName{Namespace: s.namespace, Name: name}
	c := &v1beta1.Cluster{}
	if err := s.client.Get(ctx, key, c); err != nil {
		return apiErr(err, fmt.Sprintf("getting cluster %s/%s", key.Namespace, key.Name))
	}
	p, err := readSnapshotFile(f.from, "--from")
	if err != nil {
		return err
	}
	defer p.cleanup()
	p.replace = true
	secret := &corev1.Secret{}
	secretKey := types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).Token}
	if err := s.client.Get(ctx, secretKey, secret); err != nil {
		return apiErr(err, fmt.Sprintf("reading the cluster token (Secret %s/%s)", secretKey.Namespace, secretKey.Name))
	}
	resuming, err := CheckInPlaceRestore(c, secret, p.archive)
	if err != nil {
		return err
	}
	m := p.archive.Manifest
	if !f.yes {
		if err := confirmInPlace(o, c, m, resuming); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.Err, "restoring cluster %s/%s in place from the %s snapshot of %s/%s at revision %d (taken %s)\n",
		c.Namespace, c.Name, m.Datastore, m.Cluster.Namespace, m.Cluster.Name, m.Revision, m.CreatedAt.Format(time.RFC3339))
	start := o.Now()
	if err := markInPlace(ctx, s, c, m); err != nil {
		return err
	}
	old, err := markTokenSecret(ctx, s, c, secretKey)
	if err != nil {
		return err
	}
	pod, err := stopServers(ctx, o, s, c, old)
	if err != nil {
		return err
	}
	said, err := p.load(ctx, rc, c, datastoreInEffect(c), pod)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Err, "%s\n", said)
	if err := giveBackToken(ctx, s, secretKey, p.archive.Token); err != nil {
		return err
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+v1beta1.AnnotationRestorePending+`":null}}}`))
	if err := s.client.Patch(ctx, c, patch); err != nil {
		return apiErr(err, "removing the annotation "+v1beta1.AnnotationRestorePending+" (the data and token are in place; remove it by hand)")
	}
	fmt.Fprintf(o.Err, "[%6s] the snapshot's data and token are in place; k3s starts once the kubelet has projected the token (about a minute)\n", o.Now().Sub(start).Round(time.Second))
	deadline, _ := ctx.Deadline()
	if _, err := waitReady(ctx, o, s, c, time.Until(deadline)); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "cluster %s/%s restored in place from %s (revision %d of %s/%s) after %s; clients relist\n",
		c.Namespace, c.Name, f.from, m.Revision, m.Cluster.Namespace, m.Cluster.Name, o.Now().Sub(start).Round(time.Second))
	return nil
}

// CheckInPlaceRestore decides, before anything changes, whether the snapshot
// described by a may replace the data of cluster c whose token Secret is
// secret, and whether an earlier run of the restore is being continued.
func CheckInPlaceRestore(c *v1beta1.Cluster, secret *corev1.Secret, a snapshot.Archive) (resuming bool, err error) {
	name := c.Namespace + "/" + c.Name
	switch ds := datastoreInEffect(c); ds {
	case v1beta1.SQLiteDatastore, v1beta1.EtcdDatastore:
	case "":
		return false, &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s: its datastore type is not known yet (status.datastore.type is empty)", name),
			Hint: "the k3k controller records it on its first reconcile; check that it runs"}
	default:
		return false, usageErr("restore an external datastore with its own tools, while the cluster is paused",
			"cluster %s uses the %s datastore: k3kcli restores the sqlite and etcd datastores in place, whose data k3k holds; an external datastore's data is yours, and k3k cannot move its revisions forward or compact it", name, ds)
	}
	if persistenceInEffect(c) == v1beta1.EphemeralPersistence {
		return false, usageErr("restore it into a new cluster: k3kcli cluster create NAME --restore-from FILE",
			"cluster %s keeps its data in emptyDirs (persistence ephemeral): stopping k3s means making its server pods again, which would lose the datastore the restore goes through (and with etcd every member's data)", name)
	}
	if c.Spec.Paused {
		return false, usageErr("k3kcli cluster resume "+c.Name+" first", "cluster %s is paused: its datastore does not run", name)
	}
	if stage, _ := CheckMigrate(c); stage != MigrateStart {
		return false, usageErr("wait for it with k3kcli cluster migrate "+c.Name+" --to etcd, or undo it with --abort before its switch, then restore",
			"cluster %s is being migrated to etcd (Migrating condition)", name)
	}
	value, pending := c.Annotations[v1beta1.AnnotationRestorePending]
	if pending && !strings.HasPrefix(value, inPlacePrefix) {
		return false, usageErr("wait for k3kcli cluster create --restore-from to finish, or delete the cluster",
			"cluster %s is being created from a snapshot (annotation %s)", name, v1beta1.AnnotationRestorePending)
	}
	_, marked := secret.Annotations[v1beta1.AnnotationRestorePending]
	current := secret.Data[layout.SecretKeyToken]
	if marked && len(current) == 0 {
		current = secret.Data[tokenBeforeRestoreKey]
	}
	if len(current) == 0 {
		return false, &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s has no token yet (Secret %s is empty)", name, secret.Name),
			Hint: "restore into a cluster whose TokenReady condition is True"}
	}
	sum := sha256.Sum256(current)
	if hex.EncodeToString(sum[:]) != a.Manifest.TokenSHA256 {
		return false, usageErr("restore it into a new cluster: k3kcli cluster create NAME --restore-from FILE",
			"the snapshot is of another cluster (%s/%s, another token and so another CA): k3s on this cluster's volumes would refuse the restored certificates", a.Manifest.Cluster.Namespace, a.Manifest.Cluster.Name)
	}
	return pending || marked, nil
}

// confirmInPlace asks on o.In whether to go on; anything but y or yes is a no.
func confirmInPlace(o Options, c *v1beta1.Cluster, m snapshot.Manifest, resuming bool) error {
	no := usageErr("run it again and answer yes, or pass --yes", "cluster %s/%s not restored: not confirmed", c.Namespace, c.Name)
	if o.In == nil {
		return no
	}
	what := "This replaces every object of cluster %s/%s with the snapshot's (%s/%s, revision %d, taken %s);\n" +
		"objects written since are lost, its API is down for a few minutes and every client relists.\n"
	if resuming {
		what = "A restore of cluster %s/%s was interrupted; this finishes it with the snapshot of %s/%s (revision %d, taken %s).\n"
	}
	fmt.Fprintf(o.Err, what, c.Namespace, c.Name, m.Cluster.Namespace, m.Cluster.Name, m.Revision, m.CreatedAt.Format(time.RFC3339))
	if !confirmed(o, "Restore?") {
		return no
	}
	return nil
}

// markInPlace annotates the Cluster restore-pending, so that the controller
// generates no token while the token Secret is empty.
func markInPlace(ctx context.Context, s *session, c *v1beta1.Cluster, m snapshot.Manifest) error {
	value := inPlacePrefix + m.SHA256[:16]
	if c.Annotations[v1beta1.AnnotationRestorePending] == value {
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+v1beta1.AnnotationRestorePending+`":"`+value+`"}}}`))
	if err := s.client.Patch(ctx, c, patch); err != nil {
		return apiErr(err, "annotating the cluster "+v1beta1.AnnotationRestorePending+" (nothing changed yet)")
	}
	return nil
}

// markTokenSecret moves the token out of the key the pods mount and marks
// the Secret, once. The mark's value comes after: the UIDs of the server
// pods that were there once the Secret was marked, which may run k3s (a pod
// made after found no token file and waits). Any listing after the mark
// holds every pod made before it, so a run interrupted before the UIDs were
// written lists them again.
func markTokenSecret(ctx context.Context, s *session, c *v1beta1.Cluster, key types.NamespacedName) (map[string]bool, error) {
	var uids string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		secret := &corev1.Secret{}
		if err := s.client.Get(ctx, key, secret); err != nil {
			return err
		}
		v, ok := secret.Annotations[v1beta1.AnnotationRestorePending]
		if ok {
			uids = v
			return nil
		}
		if secret.Annotations == nil {
			secret.Annotations = map[string]string{}
		}
		secret.Annotations[v1beta1.AnnotationRestorePending] = ""
		secret.Data = map[string][]byte{tokenBeforeRestoreKey: secret.Data[layout.SecretKeyToken]}
		return s.client.Update(ctx, secret)
	})
	if err != nil {
		return nil, withHint(apiErr(err, fmt.Sprintf("marking the token Secret %s/%s for the restore", key.Namespace, key.Name)))
	}
	old := map[string]bool{}
	if uids != "" {
		for _, u := range strings.Split(uids, ",") {
			old[u] = true
		}
		return old, nil
	}
	pods, err := serverPods(ctx, s, c)
	if err != nil {
		return nil, err
	}
	var list []string
	for _, p := range pods {
		old[string(p.UID)] = true
		list = append(list, string(p.UID))
	}
	if len(list) > 0 {
		value, _ := json.Marshal(strings.Join(list, ","))
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+v1beta1.AnnotationRestorePending+`":`+string(value)+`}}}`))
		if err := s.client.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, patch); err != nil {
			return nil, withHint(apiErr(err, "recording the server pods to stop on Secret "+key.Name))
		}
	}
	return old, nil
}

func serverPods(ctx context.Context, s *session, c *v1beta1.Cluster) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := s.client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels{v1beta1.LabelCluster: c.Name, v1beta1.LabelComponent: v1beta1.ComponentServer}); err != nil {
		return nil, withHint(apiErr(err, "listing the server pods of cluster "+c.Namespace+"/"+c.Name))
	}
	return pods.Items, nil
}

// ServersToStop are the server pods whose k3s may still run: those that
// were there when the token Secret was marked (old, by UID).
func ServersToStop(pods []corev1.Pod, old map[string]bool) []*corev1.Pod {
	var stop []*corev1.Pod
	for i := range pods {
		if pods[i].DeletionTimestamp == nil && old[string(pods[i].UID)] {
			stop = append(stop, &pods[i])
		}
	}
	return stop
}

// ServersStopped reports whether every one of servers server pods was made
// after the token Secret was marked (not in old) and none runs k3s, and
// returns server 0 once its datastore is ready; else what it waits for.
func ServersStopped(c *v1beta1.Cluster, pods []corev1.Pod, servers int32, old map[string]bool) (*corev1.Pod, string) {
	byName := map[string]*corev1.Pod{}
	for i := range pods {
		byName[pods[i].Name] = &pods[i]
	}
	for i := range max(servers, 1) {
		name := layout.ServerPodName(c, int(i))
		p := byName[name]
		switch {
		case p == nil || p.DeletionTimestamp != nil || old[string(p.UID)]:
			return nil, "server pod " + name + " to be made again"
		case k3sReady(p):
			return nil, "k3s in " + name + " to stop"
		}
	}
	first := byName[layout.ServerPodName(c, 0)]
	if snapshotSource([]corev1.Pod{*first}) == nil {
		return nil, "the datastore of " + first.Name + " to be ready"
	}
	return first, ""
}

func k3sReady(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "k3s" && cs.Ready {
			return true
		}
	}
	return false
}

// stopServers deletes the server pods that may run k3s and waits until
// their successors wait for the token, and server 0's datastore is ready.
func stopServers(ctx context.Context, o Options, s *session, c *v1beta1.Cluster, old map[string]bool) (*corev1.Pod, error) {
	return waitServers(ctx, o, s, c, old, true, func(pods []corev1.Pod) (*corev1.Pod, string) {
		return ServersStopped(c, pods, c.Spec.Servers, old)
	}, "restored", inPlaceHint)
}

// waitServers polls the server pods of c until ready returns one. With
// stop, it first deletes those of old (by UID) that may run k3s, once each.
// Errors say that c was not <done>, with hint: the in-place restore's and
// the migration's steps after their marks.
func waitServers(ctx context.Context, o Options, s *session, c *v1beta1.Cluster, old map[string]bool, stop bool,
	ready func([]corev1.Pod) (*corev1.Pod, string), done, hint string) (*corev1.Pod, error) {
	deleted := map[string]bool{}
	var last string
	for {
		// A failed listing is waited out like anything else: the API server
		// may blip while the servers restart.
		if pods, err := serverPods(ctx, s, c); err == nil {
			for _, p := range ServersToStop(pods, old) {
				if !stop || deleted[string(p.UID)] {
					continue
				}
				if err := s.client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
					return nil, hinted(apiErr(err, "deleting server pod "+p.Name+" to stop its k3s"), hint)
				}
				deleted[string(p.UID)] = true
				fmt.Fprintf(o.Err, "stopping k3s: deleted server pod %s; it is made again with its volume, its datastore starts and its k3s waits for the token\n", p.Name)
			}
			pod, waiting := ready(pods)
			if pod != nil {
				return pod, nil
			}
			if waiting != last {
				fmt.Fprintf(o.Err, "waiting for %s\n", waiting)
				last = waiting
			}
		}
		select {
		case <-ctx.Done():
			return nil, &Error{Code: ExitTimeout, Msg: fmt.Sprintf("cluster %s/%s not %s: timed out waiting for %s", c.Namespace, c.Name, done, last), Hint: hint}
		case <-time.After(o.PollInterval):
		}
	}
}

// confirmed asks question on o.Err and reads the answer from o.In:
// anything but y or yes is a no.
func confirmed(o Options, question string) bool {
	if o.In == nil {
		return false
	}
	fmt.Fprintf(o.Err, "%s [y/N] ", question)
	answer, err := bufio.NewReader(o.In).ReadString('\n')
	if err != nil && err != io.EOF {
		return false
	}
	a := strings.ToLower(strings.TrimSpace(answer))
	return a == "y" || a == "yes"
}

// giveBackToken writes the snapshot's token into the token Secret and
// removes the restore's mark: the kubelet projects it, k3s starts.
func giveBackToken(ctx context.Context, s *session, key types.NamespacedName, token []byte) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		secret := &corev1.Secret{}
		if err := s.client.Get(ctx, key, secret); err != nil {
			return err
		}
		delete(secret.Annotations, v1beta1.AnnotationRestorePending)
		secret.Data = map[string][]byte{layout.SecretKeyToken: token}
		return s.client.Update(ctx, secret)
	})
	if err != nil {
		return withHint(apiErr(err, fmt.Sprintf("writing the snapshot's token into Secret %s/%s (the data is restored)", key.Namespace, key.Name)))
	}
	return nil
}

// withHint adds inPlaceHint to an error of a step after the servers were
// stopped.
func withHint(err error) error { return hinted(err, inPlaceHint) }

// hinted gives err the hint of the command whose step failed after its
// marks (how to go on), unless it says something more specific already. The
// in-place restore's hint of a shared step is replaced too.
func hinted(err error, hint string) error {
	var e *Error
	if errors.As(err, &e) {
		if e.Hint == "" || e.Hint == inPlaceHint {
			e.Hint = hint
		}
		return e
	}
	return &Error{Code: ExitError, Msg: err.Error(), Hint: hint}
}

// persistenceInEffect is the persistence the controller resolved, else the
// one asked for.
func persistenceInEffect(c *v1beta1.Cluster) v1beta1.PersistenceType {
	if c.Status.PersistenceType != "" {
		return c.Status.PersistenceType
	}
	return c.Spec.Persistence.Type
}
