package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshot"
	"github.com/k3k-io/k3k/pkg/snapshotter"
)

// Restoring a snapshot into a new Cluster (`cluster create NAME
// --restore-from FILE`):
//
//  1. the file is checked here (every entry against its manifest) before
//     anything is created, and the cluster must have no volumes yet;
//  2. the Cluster is created with the annotation k3k.io/restore-pending: the
//     controller generates no token and starts the servers, whose datastores
//     are empty and whose k3s waits for its token file;
//  3. the snapshot's data is streamed through pods/exec into the first
//     server's datastore sidecar, which writes its live keys into the empty
//     datastore (`datastore restore`, refusing a datastore that holds any);
//  4. the snapshot's token is written into the token Secret and the
//     annotation removed: k3s starts, finds its bootstrap data (the old CA
//     keys, encrypted with that token) and serves the snapshot's objects.

// pendingRestore is a checked snapshot file waiting to be restored.
type pendingRestore struct {
	archive  snapshot.Archive
	dir      string
	dataPath string
	// replace loads it into a datastore that holds data (in-place restore).
	replace bool
}

// openRestore checks the snapshot at path and that the cluster about to be
// created has no volumes, and marks c as restore-pending.
func openRestore(ctx context.Context, s *session, path string, c *v1beta1.Cluster) (*pendingRestore, error) {
	claims := &corev1.PersistentVolumeClaimList{}
	if err := s.client.List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels{v1beta1.LabelCluster: c.Name}); err != nil {
		return nil, apiErr(err, "listing volumes of cluster "+c.Namespace+"/"+c.Name)
	}
	if len(claims.Items) > 0 {
		return nil, usageErr("restore into another name, or delete the PersistentVolumeClaims labelled "+v1beta1.LabelCluster+"="+c.Name,
			"--restore-from: volumes of an earlier cluster %s/%s exist (%s): a restore goes into a new cluster", c.Namespace, c.Name, claims.Items[0].Name)
	}
	p, err := readSnapshotFile(path, "--restore-from")
	if err != nil {
		return nil, err
	}
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[v1beta1.AnnotationRestorePending] = p.archive.Manifest.SHA256[:16]
	return p, nil
}

// readSnapshotFile checks the snapshot file at path, given with flag, entry
// by entry against its manifest, and keeps its data in a temporary file.
func readSnapshotFile(path, flag string) (*pendingRestore, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErr("give the file k3kcli cluster snapshot wrote", "%s: %v", flag, err)
	}
	defer f.Close()
	dir, err := os.MkdirTemp("", "k3k-restore-")
	if err != nil {
		return nil, err
	}
	p := &pendingRestore{dir: dir, dataPath: filepath.Join(dir, "data.db")}
	data, err := os.OpenFile(p.dataPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		p.cleanup()
		return nil, err
	}
	p.archive, err = snapshot.ReadArchive(f, data)
	if cerr := data.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		p.cleanup()
		return nil, usageErr("give the file k3kcli cluster snapshot wrote", "%s %s is not a usable snapshot: %v", flag, path, err)
	}
	return p, nil
}

func (p *pendingRestore) cleanup() { _ = os.RemoveAll(p.dir) }

// run loads the snapshot into the created cluster, then gives it its token.
func (p *pendingRestore) run(ctx context.Context, o Options, s *session, rc *rest.Config, c *v1beta1.Cluster, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m := p.archive.Manifest
	fmt.Fprintf(o.Err, "restoring the %s snapshot of cluster %s/%s at revision %d (taken %s); waiting for the first server's datastore\n",
		m.Datastore, m.Cluster.Namespace, m.Cluster.Name, m.Revision, m.CreatedAt.Format(time.RFC3339))
	pod, ds, err := p.waitDatastore(ctx, o, s, c)
	if err != nil {
		return err
	}
	said, err := p.load(ctx, rc, c, ds, pod)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Err, "%s\n", said)
	if err := p.giveToken(ctx, o, s, c); err != nil {
		return err
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+v1beta1.AnnotationRestorePending+`":null}}}`))
	if err := s.client.Patch(ctx, c, patch); err != nil {
		return apiErr(err, "removing the annotation "+v1beta1.AnnotationRestorePending)
	}
	fmt.Fprintf(o.Err, "the snapshot's data and token are in place; the servers start\n")
	return nil
}

func (p *pendingRestore) timeoutErr(c *v1beta1.Cluster, what string) error {
	return &Error{Code: ExitTimeout, Msg: fmt.Sprintf("cluster %s/%s not restored: %s", c.Namespace, c.Name, what),
		Hint: "delete the cluster (it holds no data yet) and run the restore again"}
}

// waitDatastore waits until the controller resolved the datastore and the
// first server's datastore sidecar is ready.
func (p *pendingRestore) waitDatastore(ctx context.Context, o Options, s *session, c *v1beta1.Cluster) (*corev1.Pod, v1beta1.DatastoreType, error) {
	name := layout.ServerPodName(c, 0)
	for {
		live := &v1beta1.Cluster{}
		err := s.client.Get(ctx, client.ObjectKeyFromObject(c), live)
		if err == nil {
			ds := datastoreInEffect(live)
			if ds != "" && ds != v1beta1.SQLiteDatastore && ds != v1beta1.EtcdDatastore {
				return nil, "", usageErr("restore into a cluster with the sqlite or etcd datastore", "--restore-from: cluster %s/%s uses the %s datastore", c.Namespace, c.Name, ds)
			}
			pod := &corev1.Pod{}
			perr := s.client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, pod)
			if ds != "" && perr == nil {
				if ready := snapshotSource([]corev1.Pod{*pod}); ready != nil {
					return ready, ds, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, "", p.timeoutErr(c, "the datastore of "+name+" was not ready")
		case <-time.After(o.PollInterval):
		}
	}
}

// SidecarRestoreCommand is what loads a snapshot in the datastore sidecar of pod.
func SidecarRestoreCommand(c *v1beta1.Cluster, ds v1beta1.DatastoreType, pod string) []string {
	return snapshotter.RestoreCommand(c, ds, pod)
}

// SidecarReplaceCommand is what replaces the data of pod's datastore with a
// snapshot's (in-place restore): SidecarRestoreCommand with --replace, and
// for sqlite the data dir, whose database the sidecar compacts itself.
func SidecarReplaceCommand(c *v1beta1.Cluster, ds v1beta1.DatastoreType, pod string) []string {
	command := append(SidecarRestoreCommand(c, ds, pod), "--replace")
	if ds == v1beta1.SQLiteDatastore {
		command = append(command, "--sqlite-data-dir="+layout.DatastoreDataDir)
	}
	return command
}

// load streams the snapshot's data into the sidecar's `datastore restore`
// and returns what it said.
func (p *pendingRestore) load(ctx context.Context, rc *rest.Config, c *v1beta1.Cluster, ds v1beta1.DatastoreType, pod *corev1.Pod) (string, error) {
	command := SidecarRestoreCommand(c, ds, pod.Name)
	if p.replace {
		command = SidecarReplaceCommand(c, ds, pod.Name)
	}
	data, err := os.Open(p.dataPath)
	if err != nil {
		return "", err
	}
	defer data.Close()
	said, err := snapshotter.Load(ctx, snapshotter.Source{Config: rc, Cluster: c, Pod: pod, Datastore: ds}, command, p.archive.Manifest, data)
	var le *snapshotter.LoadError
	if errors.As(err, &le) {
		hint := "delete the cluster (its token was not given, so k3s never started on partial data) and run the restore again"
		if p.replace {
			hint = inPlaceHint
		}
		return "", &Error{Code: ExitError,
			Msg:  fmt.Sprintf("loading the snapshot in pod %s: %v; the sidecar said: %s", le.Pod, le.Err, le.Stderr),
			Hint: hint, Err: le.Err}
	}
	return said, err
}

// giveToken writes the snapshot's token into the token Secret the controller
// made empty.
func (p *pendingRestore) giveToken(ctx context.Context, o Options, s *session, c *v1beta1.Cluster) error {
	key := types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).Token}
	for {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			secret := &corev1.Secret{}
			if err := s.client.Get(ctx, key, secret); err != nil {
				return err
			}
			if got := secret.Data[layout.SecretKeyToken]; len(got) > 0 && !bytes.Equal(got, p.archive.Token) {
				return errors.New("the token Secret holds another token")
			}
			secret.Data = map[string][]byte{layout.SecretKeyToken: p.archive.Token}
			return s.client.Update(ctx, secret)
		})
		switch {
		case err == nil:
			return nil
		case apierrors.IsNotFound(err):
		case strings.Contains(err.Error(), "another token"):
			return &Error{Code: ExitError, Msg: fmt.Sprintf("Secret %s/%s holds a token that is not the snapshot's: the cluster was not restored", key.Namespace, key.Name)}
		default:
			return apiErr(err, fmt.Sprintf("writing the snapshot's token into Secret %s/%s", key.Namespace, key.Name))
		}
		select {
		case <-ctx.Done():
			return p.timeoutErr(c, "its token Secret was not made")
		case <-time.After(o.PollInterval):
		}
	}
}
