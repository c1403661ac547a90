package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/hostclient"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshot"
	"github.com/k3k-io/k3k/pkg/snapshotter"
)

type restoreFileOptions struct {
	namespace, cluster, dir, file, tmpDir, resultFile, kubeconfig string
	poll                                                          time.Duration
}

// newRestoreFromFileCommand is `datastore restore-from-file`: the restore
// Job of a Cluster with spec.restoreFrom
// (internal/controller/cluster/restore.go). It does what k3kcli cluster
// create --restore-from does after creating the Cluster, with the Job's own
// narrow rights: check the file, wait for server 0's datastore, load the
// data through pods/exec (pkg/snapshotter, the CLI's code), then write the
// snapshot's token into the token Secret, the step that lets k3s start.
func newRestoreFromFileCommand() *cobra.Command {
	o := restoreFileOptions{poll: 2 * time.Second}
	cmd := &cobra.Command{
		Use:   "restore-from-file --namespace NS --cluster NAME --dir DIR --file FILE --tmp-dir DIR",
		Short: "Restore a snapshot file into a new virtual cluster's first server and give it the snapshot's token",
		Long: `Check the snapshot file DIR/FILE entry by entry against its manifest (FILE a
plain name in DIR), before anything else; then wait for the first server pod of
cluster NAME in namespace NS to run with its datastore ready, stream the data
into its datastore sidecar's datastore restore through pods/exec, and only then
write the snapshot's token into the cluster's token Secret (never replacing
another token). k3s waits for that token, so a failure at any step leaves it
stopped on the empty datastores.

The outcome, as JSON (file, revision, size, sha256, createdAt, or error; never
the token), is written to --result-file: the container's termination message,
which the controller reads into the Cluster's Restored condition.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRestoreFromFile(cmd.Context(), o, func() (restoreTarget, error) {
				rc, err := hostclient.Config(o.kubeconfig)
				if err != nil {
					return nil, err
				}
				rc.UserAgent = "k3k-restore"
				return &clusterTarget{config: rc, namespace: o.namespace, name: o.cluster, poll: o.poll}, nil
			}, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.namespace, "namespace", "", "the Cluster's namespace (required)")
	f.StringVar(&o.cluster, "cluster", "", "the Cluster's name (required)")
	f.StringVar(&o.dir, "dir", "", "directory the snapshot file is in: the claim's mount (required)")
	f.StringVar(&o.file, "file", "", "the snapshot file's name in --dir (required)")
	f.StringVar(&o.tmpDir, "tmp-dir", "", "directory for the checked data while it is streamed (required)")
	f.StringVar(&o.resultFile, "result-file", "/dev/termination-log", "file the outcome is written to as JSON; empty: none")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "host cluster kubeconfig; empty: the pod's ServiceAccount")
	f.DurationVar(&o.poll, "poll-interval", o.poll, "how often the first server pod is looked at while waiting for it")
	for _, name := range []string{"namespace", "cluster", "dir", "file", "tmp-dir"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// restoreTarget is the new cluster a checked snapshot goes into.
type restoreTarget interface {
	// Load waits for the first server's datastore and loads data into it.
	Load(ctx context.Context, m snapshot.Manifest, data io.Reader) (string, error)
	// GiveToken writes token into the empty token Secret.
	GiveToken(ctx context.Context, token []byte) error
}

// runRestoreFromFile checks the file, then (and only then) connects to the
// host API through connect and restores. Whatever happens, the checked data
// is removed and the outcome goes to o.resultFile.
func runRestoreFromFile(ctx context.Context, o restoreFileOptions, connect func() (restoreTarget, error), stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	res, err := restoreFromFile(ctx, o, connect, stderr)
	if err != nil {
		res = snapshotter.Result{Error: clipMessage(err.Error(), 3000)}
	}
	if o.resultFile != "" {
		b, _ := json.Marshal(res)
		if werr := os.WriteFile(o.resultFile, b, 0o644); werr != nil && err == nil {
			err = fmt.Errorf("writing the result: %w", werr)
		}
	}
	return err
}

// plainFileName reports whether name names a file directly in a directory.
func plainFileName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, `/\`) && !strings.ContainsRune(name, 0)
}

func restoreFromFile(ctx context.Context, o restoreFileOptions, connect func() (restoreTarget, error), stderr io.Writer) (snapshotter.Result, error) {
	if !plainFileName(o.file) {
		return snapshotter.Result{}, fmt.Errorf("--file %q must be a plain file name in %s", o.file, o.dir)
	}
	path := filepath.Join(o.dir, o.file)
	// Opened without following a symbolic link and without blocking on a
	// FIFO, then checked on the open file: whoever may write to the claim
	// cannot swap a link (to the pod's ServiceAccount token, say) in between
	// a check of the path and the open.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return snapshotter.Result{}, fmt.Errorf("the snapshot file %s on the claim is a symbolic link, not a regular file", o.file)
		}
		return snapshotter.Result{}, fmt.Errorf("the snapshot file %s on the claim: %w", o.file, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return snapshotter.Result{}, fmt.Errorf("the snapshot file %s on the claim: %w", o.file, err)
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return snapshotter.Result{}, fmt.Errorf("the snapshot file %s on the claim is not a regular file (%s)", o.file, info.Mode().Type())
	}
	defer f.Close()
	data, err := os.CreateTemp(o.tmpDir, "restore-*.db")
	if err != nil {
		return snapshotter.Result{}, fmt.Errorf("creating the file for the checked data: %w", err)
	}
	defer os.Remove(data.Name())
	defer data.Close()
	archive, err := snapshot.ReadArchive(f, data)
	if err != nil {
		return snapshotter.Result{}, fmt.Errorf("%s is not a usable snapshot: %w", o.file, err)
	}
	if _, err := data.Seek(0, io.SeekStart); err != nil {
		return snapshotter.Result{}, err
	}
	m := archive.Manifest
	fmt.Fprintf(stderr, "%s: the %s snapshot of cluster %s/%s at revision %d (taken %s) is intact; waiting for the first server's datastore\n",
		o.file, m.Datastore, m.Cluster.Namespace, m.Cluster.Name, m.Revision, m.CreatedAt.Format(time.RFC3339))
	target, err := connect()
	if err != nil {
		return snapshotter.Result{}, err
	}
	said, err := target.Load(ctx, m, data)
	if err != nil {
		return snapshotter.Result{}, err
	}
	fmt.Fprintf(stderr, "%s\n", said)
	if err := target.GiveToken(ctx, archive.Token); err != nil {
		return snapshotter.Result{}, fmt.Errorf("the data is loaded, but the token was not given (k3s stays stopped): %w", err)
	}
	fmt.Fprintf(stderr, "the snapshot's token is in place; the servers start\n")
	return snapshotter.Result{File: o.file, Revision: m.Revision, Size: m.Size, SHA256: m.SHA256, CreatedAt: m.CreatedAt.UTC()}, nil
}

// clusterTarget is a live Cluster reached through the host API.
type clusterTarget struct {
	config          *rest.Config
	namespace, name string
	poll            time.Duration
}

func (t *clusterTarget) clients() (dynamic.Interface, kubernetes.Interface, error) {
	// Requests other than the exec stream must not hang the run.
	short := rest.CopyConfig(t.config)
	short.Timeout = 30 * time.Second
	dyn, err := dynamic.NewForConfig(short)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(short)
	return dyn, cs, err
}

func (t *clusterTarget) Load(ctx context.Context, m snapshot.Manifest, data io.Reader) (string, error) {
	dyn, cs, err := t.clients()
	if err != nil {
		return "", err
	}
	for {
		u, err := dyn.Resource(clusterResource).Namespace(t.namespace).Get(ctx, t.name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("getting cluster %s/%s: %w", t.namespace, t.name, err)
		}
		c := &v1beta1.Cluster{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, c); err != nil {
			return "", fmt.Errorf("reading cluster %s/%s: %w", t.namespace, t.name, err)
		}
		ds := snapshotter.DatastoreInEffect(c)
		if ds != "" && !snapshotter.Supported(ds) {
			return "", fmt.Errorf("cluster %s/%s uses the %s datastore: snapshots are restored into sqlite and etcd only", t.namespace, t.name, ds)
		}
		name := layout.ServerPodName(c, 0)
		pod, err := cs.CoreV1().Pods(t.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("getting server pod %s: %w", name, err)
		}
		if ds != "" && err == nil {
			if ready := snapshotter.PickPod([]corev1.Pod{*pod}); ready != nil {
				src := snapshotter.Source{Config: t.config, Cluster: c, Pod: ready, Datastore: ds}
				return snapshotter.Load(ctx, src, snapshotter.RestoreCommand(c, ds, ready.Name), m, data)
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the datastore of %s was not ready: %w", name, ctx.Err())
		case <-time.After(t.poll):
		}
	}
}

// errAnotherToken: the token Secret holds a token that is not the snapshot's.
var errAnotherToken = errors.New("the token Secret holds another token than the snapshot's: the cluster was not restored")

func (t *clusterTarget) GiveToken(ctx context.Context, token []byte) error {
	_, cs, err := t.clients()
	if err != nil {
		return err
	}
	name := layout.NamesFor(&v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: t.name}}).Token
	return giveToken(ctx, cs, t.namespace, name, token)
}

// giveToken writes token into the Secret ns/name when it holds none; one
// that holds this token already is left as it is (a run after a lost
// reply), one that holds another is refused and left as it is.
func giveToken(ctx context.Context, cs kubernetes.Interface, ns, name string, token []byte) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		secret, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("getting the token Secret %s: %w", name, err)
		}
		if got := secret.Data[layout.SecretKeyToken]; len(got) > 0 {
			if bytes.Equal(got, token) {
				return nil
			}
			return errAnotherToken
		}
		secret.Data = map[string][]byte{layout.SecretKeyToken: token}
		if _, err := cs.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("writing the token Secret %s: %w", name, err)
		}
		return nil
	})
}
