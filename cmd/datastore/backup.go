package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/hostclient"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshot"
	"github.com/k3k-io/k3k/pkg/snapshotter"
)

type backupOptions struct {
	namespace, cluster, dir, resultFile, kubeconfig string
	keep                                            int
}

// newBackupCommand is `datastore backup`: one scheduled snapshot, run by the
// Cluster's backup CronJob (internal/controller/cluster/backup.go). It takes
// the snapshot exactly as k3kcli cluster snapshot does (pkg/snapshotter):
// through pods/exec into the lowest-numbered ready server pod's datastore
// sidecar, with the Job's own narrow rights.
func newBackupCommand() *cobra.Command {
	var o backupOptions
	cmd := &cobra.Command{
		Use:   "backup --namespace NS --cluster NAME --dir DIR --keep N",
		Short: "Take one snapshot of a virtual cluster into a directory and keep the newest N",
		Long: `Take a consistent snapshot of cluster NAME in namespace NS, as k3kcli cluster
snapshot does (pods/exec into a server pod's datastore sidecar, the stream
checked), and write it into --dir as <cluster>-<UTC time>-r<revision>.k3ksnap
through a temporary file: the name exists only complete, synced. Then delete
the cluster's snapshots beyond the --keep newest. Only names of that pattern
are counted or deleted; other files in --dir are left alone.

The outcome, as JSON (file, revision, size, sha256, createdAt, or error), is
written to --result-file: the container's termination message, which the
controller reads into the Cluster's status.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := hostclient.Config(o.kubeconfig)
			if err != nil {
				return err
			}
			rc.UserAgent = "k3k-backup"
			src := &clusterSource{config: rc, namespace: o.namespace, name: o.cluster}
			_, err = runBackup(cmd.Context(), o, src, time.Now, cmd.OutOrStdout())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.namespace, "namespace", "", "the Cluster's namespace (required)")
	f.StringVar(&o.cluster, "cluster", "", "the Cluster's name (required)")
	f.StringVar(&o.dir, "dir", "", "directory the snapshots are kept in (required)")
	f.IntVar(&o.keep, "keep", 7, "how many of the cluster's snapshots to keep")
	f.StringVar(&o.resultFile, "result-file", "/dev/termination-log", "file the outcome is written to as JSON; empty: none")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "host cluster kubeconfig; empty: the pod's ServiceAccount")
	for _, name := range []string{"namespace", "cluster", "dir"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// backupSource delivers one snapshot: its data into data, and the manifest
// and token it is to be written with.
type backupSource interface {
	Receive(ctx context.Context, data *os.File) (snapshot.Manifest, []byte, error)
}

// runBackup takes one snapshot from src into o.dir and rotates. Whatever
// happens, no temporary file is left and the outcome goes to o.resultFile.
func runBackup(ctx context.Context, o backupOptions, src backupSource, now func() time.Time, out io.Writer) (snapshotter.Result, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	res, err := backupOnce(ctx, o, src)
	if err != nil {
		res = snapshotter.Result{Error: clipMessage(err.Error(), 3000)}
	}
	if o.resultFile != "" {
		b, _ := json.Marshal(res)
		if werr := os.WriteFile(o.resultFile, b, 0o644); werr != nil && err == nil {
			err = fmt.Errorf("writing the result: %w", werr)
		}
	}
	if err != nil {
		return res, err
	}
	fmt.Fprintf(out, "%s: snapshot %s written (revision %d, %d bytes) at %s; %d older removed\n",
		o.cluster, res.File, res.Revision, res.Size, now().UTC().Format(time.RFC3339), res.Removed)
	return res, nil
}

func backupOnce(ctx context.Context, o backupOptions, src backupSource) (snapshotter.Result, error) {
	if o.keep < 1 {
		return snapshotter.Result{}, fmt.Errorf("--keep must be at least 1, got %d", o.keep)
	}
	dir := snapshotter.Dir{Path: o.dir, Cluster: o.cluster}
	// A run killed before it could clean up (the Job's deadline, a node that
	// went away) leaves its temporary files; they are this cluster's, named
	// so, and never complete.
	if _, err := dir.RemovePartials(); err != nil {
		return snapshotter.Result{}, err
	}
	data, err := os.OpenFile(dir.ReceivingPath(), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return snapshotter.Result{}, fmt.Errorf("creating the snapshot's temporary file: %w", err)
	}
	defer os.Remove(data.Name())
	defer data.Close()
	m, token, err := src.Receive(ctx, data)
	if err != nil {
		return snapshotter.Result{}, err
	}
	if _, err := data.Seek(0, io.SeekStart); err != nil {
		return snapshotter.Result{}, err
	}
	name := snapshotter.FileName(o.cluster, m.CreatedAt, m.Revision)
	if err := snapshotter.WriteFile(filepath.Join(o.dir, name), m, token, data); err != nil {
		return snapshotter.Result{}, err
	}
	removed, err := dir.Rotate(o.keep)
	res := snapshotter.Result{File: name, Revision: m.Revision, Size: m.Size, SHA256: m.SHA256, CreatedAt: m.CreatedAt.UTC(), Removed: len(removed)}
	if err != nil {
		// The snapshot is written; an old one that could not be deleted is
		// deleted by the next run.
		return res, fmt.Errorf("snapshot %s written, but deleting older ones failed: %w", name, err)
	}
	return res, nil
}

func clipMessage(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// clusterSource takes the snapshot of a live Cluster through the host API.
type clusterSource struct {
	config          *rest.Config
	namespace, name string
}

var clusterResource = schema.GroupVersionResource{Group: v1beta1.GroupVersion.Group, Version: v1beta1.GroupVersion.Version, Resource: "clusters"}

func (s *clusterSource) Receive(ctx context.Context, data *os.File) (snapshot.Manifest, []byte, error) {
	// Requests other than the exec stream must not hang the run.
	short := rest.CopyConfig(s.config)
	short.Timeout = 30 * time.Second
	dyn, err := dynamic.NewForConfig(short)
	if err != nil {
		return snapshot.Manifest{}, nil, err
	}
	u, err := dyn.Resource(clusterResource).Namespace(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return snapshot.Manifest{}, nil, fmt.Errorf("getting cluster %s/%s: %w", s.namespace, s.name, err)
	}
	c := &v1beta1.Cluster{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, c); err != nil {
		return snapshot.Manifest{}, nil, fmt.Errorf("reading cluster %s/%s: %w", s.namespace, s.name, err)
	}
	ds := snapshotter.DatastoreInEffect(c)
	if !snapshotter.Supported(ds) {
		return snapshot.Manifest{}, nil, fmt.Errorf("cluster %s/%s: snapshots are taken of the sqlite and etcd datastores, this cluster's is %q", s.namespace, s.name, ds)
	}
	cs, err := kubernetes.NewForConfig(short)
	if err != nil {
		return snapshot.Manifest{}, nil, err
	}
	sel := labels.SelectorFromSet(labels.Set{v1beta1.LabelCluster: c.Name, v1beta1.LabelComponent: v1beta1.ComponentServer}).String()
	pods, err := cs.CoreV1().Pods(s.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return snapshot.Manifest{}, nil, fmt.Errorf("listing the server pods: %w", err)
	}
	pod := snapshotter.PickPod(pods.Items)
	if pod == nil {
		return snapshot.Manifest{}, nil, errors.New("no running server pod whose datastore is ready")
	}
	tokenName := layout.NamesFor(c).Token
	secret, err := cs.CoreV1().Secrets(s.namespace).Get(ctx, tokenName, metav1.GetOptions{})
	if err != nil {
		return snapshot.Manifest{}, nil, fmt.Errorf("reading the cluster token (Secret %s): %w", tokenName, err)
	}
	token := secret.Data[layout.SecretKeyToken]
	if len(token) == 0 {
		return snapshot.Manifest{}, nil, fmt.Errorf("the token Secret %s holds no token yet", tokenName)
	}
	m, err := snapshotter.Receive(ctx, snapshotter.Source{Config: s.config, Cluster: c, Pod: pod, Datastore: ds}, data)
	return m, token, err
}
