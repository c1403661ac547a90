package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshot"
	"github.com/k3k-io/k3k/pkg/snapshotter"
)

// The snapshot travels as kubectl exec's output does: k3kcli asks the host
// API server, with the user's own credentials, to exec `datastore snapshot`
// in the server pod's datastore sidecar (pods/exec), and reads its stdout. So
// whoever may take a snapshot is whoever may exec into the server pods and
// read the token Secret, and no port is opened for it.

type snapshotFlags struct {
	output  string
	timeout time.Duration
}

func newSnapshotCommand(o Options, g *globalFlags) *cobra.Command {
	f := &snapshotFlags{}
	cmd := &cobra.Command{
		Use:   "snapshot NAME -o FILE",
		Short: "Write a consistent snapshot of a virtual cluster's datastore to a file",
		Long: `Take a consistent snapshot of a running virtual cluster's datastore and write it,
with the cluster token, to FILE (mode 0600): SQLite through VACUUM INTO, etcd
through its maintenance snapshot, while the cluster keeps serving.

The snapshot is taken inside the server pod's datastore sidecar through the host
API's pods/exec, as kubectl exec would, with your own rights: you need create on
pods/exec and get on the cluster's token Secret in its namespace.

FILE holds every secret of the virtual cluster (its token, and the CA keys that
the token decrypts): keep it like the cluster's admin kubeconfig. See docs/backup.md.`,
		Example: `  k3kcli cluster snapshot dev -o dev.snapshot
  k3kcli cluster snapshot ha -n tenants -o /backups/ha-$(date +%F).snapshot`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.output == "" {
				return usageErr("e.g. -o "+args[0]+".snapshot", "-o FILE is required")
			}
			if f.timeout <= 0 {
				return usageErr("e.g. --timeout 10m", "--timeout must be positive, got %s", f.timeout)
			}
			return g.withExec(cmd, f.timeout, func(ctx context.Context, s *session, rc *rest.Config) error {
				return runSnapshot(ctx, o, s, rc, f, args[0])
			})
		},
	}
	cmd.Flags().StringVarP(&f.output, "output", "o", "", "file to write the snapshot to; it must not exist (required)")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 30*time.Minute, "how long the snapshot may take")
	return cmd
}

// withExec connects to the host cluster and runs fn with the session, the
// client configuration pods/exec needs, and a context ending after timeout:
// what every command that streams a snapshot through a server pod starts
// with.
func (g *globalFlags) withExec(cmd *cobra.Command, timeout time.Duration, fn func(ctx context.Context, s *session, rc *rest.Config) error) error {
	s, err := g.connect()
	if err != nil {
		return err
	}
	rc, err := g.restConfig()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	return fn(ctx, s, rc)
}

// restConfig is the host cluster's client configuration, loaded as connect
// loads it.
func (g *globalFlags) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: g.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, configErr(err)
	}
	return cfg, nil
}

func runSnapshot(ctx context.Context, o Options, s *session, rc *rest.Config, f *snapshotFlags, name string) error {
	if _, err := os.Lstat(f.output); err == nil {
		return usageErr("choose another file, or remove it first", "%s exists already", f.output)
	}
	key := types.NamespacedName{Namespace: s.namespace, Name: name}
	c := &v1beta1.Cluster{}
	if err := s.client.Get(ctx, key, c); err != nil {
		return apiErr(err, fmt.Sprintf("getting cluster %s/%s", key.Namespace, key.Name))
	}
	ds := datastoreInEffect(c)
	if ds == "" {
		return &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s/%s: its datastore type is not known yet (status.datastore.type is empty)", key.Namespace, key.Name),
			Hint: "the k3k controller records it on its first reconcile; check that it runs"}
	}
	if !snapshotter.Supported(ds) {
		return usageErr("snapshot an external datastore with its own tools", "cluster %s/%s: k3kcli snapshots the sqlite and etcd datastores, this cluster's is %q", key.Namespace, key.Name, ds)
	}
	pods := &corev1.PodList{}
	if err := s.client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels{v1beta1.LabelCluster: c.Name, v1beta1.LabelComponent: v1beta1.ComponentServer}); err != nil {
		return apiErr(err, "listing the server pods of cluster "+key.String())
	}
	pod := snapshotSource(pods.Items)
	if pod == nil {
		return &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s/%s has no running server pod whose datastore is ready", key.Namespace, key.Name),
			Hint: "a snapshot is taken from a running server; see k3kcli cluster list"}
	}
	token, err := clusterToken(ctx, s, c)
	if err != nil {
		return err
	}

	// Both files are made beside the output, so the final link stays on
	// one file system, and both are 0600: the data is as secret as the token.
	dataFile, err := os.OpenFile(f.output+".data.partial", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("creating the snapshot's temporary file: %w", err)
	}
	defer os.Remove(dataFile.Name())
	defer dataFile.Close()

	start := o.Now()
	m, err := snapshotter.Receive(ctx, snapshotter.Source{Config: rc, Cluster: c, Pod: pod, Datastore: ds}, dataFile)
	var execErr *snapshotter.ExecError
	if errors.As(err, &execErr) {
		return &Error{Code: ExitError, Msg: execErr.Error(), Hint: "you need create on pods/exec in the cluster's namespace", Err: execErr.Err}
	}
	if err != nil {
		return err
	}
	if _, err := dataFile.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := writeSnapshotFile(f.output, m, token, dataFile); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "snapshot of cluster %s/%s (%s, revision %d, %d bytes, from %s) written to %s after %s\n",
		c.Namespace, c.Name, ds, m.Revision, m.Size, pod.Name, f.output, o.Now().Sub(start).Round(time.Millisecond))
	fmt.Fprintf(o.Out, "it holds the cluster token and, through it, the cluster's CA keys: keep it as secret as the admin kubeconfig\n")
	return nil
}

// datastoreInEffect is the datastore type the controller resolved, else the
// one asked for.
func datastoreInEffect(c *v1beta1.Cluster) v1beta1.DatastoreType {
	return snapshotter.DatastoreInEffect(c)
}

// snapshotSource picks the server pod to take the snapshot in (snapshotter.PickPod).
func snapshotSource(pods []corev1.Pod) *corev1.Pod { return snapshotter.PickPod(pods) }

// clusterToken reads the cluster token, which a restore needs: k3s encrypts
// its bootstrap data with it.
func clusterToken(ctx context.Context, s *session, c *v1beta1.Cluster) ([]byte, error) {
	name := layout.NamesFor(c).Token
	secret := &corev1.Secret{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, secret); err != nil {
		return nil, apiErr(err, fmt.Sprintf("reading the cluster token (Secret %s/%s), without which a snapshot cannot be restored", c.Namespace, name))
	}
	token := secret.Data[layout.SecretKeyToken]
	if len(token) == 0 {
		return nil, &Error{Code: ExitError, Msg: fmt.Sprintf("Secret %s/%s holds no token yet", c.Namespace, name),
			Hint: "wait until the cluster's TokenReady condition is True"}
	}
	return token, nil
}

// SidecarSnapshotCommand is what runs in the datastore sidecar of pod.
func SidecarSnapshotCommand(c *v1beta1.Cluster, ds v1beta1.DatastoreType, pod string) []string {
	return snapshotter.SidecarCommand(c, ds, pod)
}

// writeSnapshotFile writes the snapshot file at path through a temporary
// file, made durable before it takes the final name: path exists only
// complete.
func writeSnapshotFile(path string, m snapshot.Manifest, token []byte, data io.Reader) error {
	return snapshotter.WriteFile(path, m, token, data)
}
