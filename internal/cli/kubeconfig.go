package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
)

// errNotYet marks what a starting cluster does not have yet (its kubeconfig
// Secret, a load balancer address); waiting may fix it.
var errNotYet = errors.New("not yet")

// notYet is an errNotYet with what is missing.
type notYet string

func (n notYet) Error() string { return string(n) }
func (n notYet) Is(target error) bool {
	return target == errNotYet
}

// access is how the user reaches a virtual cluster's API server.
type access struct {
	// server is the URL the kubeconfig points at.
	server string
	// note says what the user must know about that address, e.g. that it only
	// works inside the host cluster; empty when there is nothing to add.
	note string
	// inClusterOnly is true when server is the Service's cluster-internal name,
	// which k3kcli cannot expect to reach from where it runs.
	inClusterOnly bool
}

type kubeconfigFlags struct {
	output string
	server string
	mergeFlags
}

func newKubeconfigGetCommand(o Options, g *globalFlags) *cobra.Command {
	f := &kubeconfigFlags{}
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Print or write a virtual cluster's kubeconfig",
		Long: `Print a virtual cluster's kubeconfig, or write it with mode 0600 with
--output-kubeconfig. Its server address is rewritten to how the cluster is exposed
(spec.expose); --server overrides it, e.g. for kubectl port-forward.`,
		Example: `  k3kcli kubeconfig get dev > dev.yaml
  k3kcli kubeconfig get dev -n tenants --output-kubeconfig ~/.kube/dev.yaml
  k3kcli kubeconfig get dev -n tenants --merge --switch-context
  kubectl -n tenants port-forward svc/k3k-dev-service 6443:443 &
  k3kcli kubeconfig get dev -n tenants --server https://127.0.0.1:6443`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.output != "" && f.wanted() {
				return usageErr("choose one", "--output-kubeconfig and --merge both say where the kubeconfig goes")
			}
			if f.server != "" {
				if err := checkServerURL(f.server); err != nil {
					return err
				}
			}
			s, err := g.connect()
			if err != nil {
				return err
			}
			c, err := s.getCluster(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			rc, err := fetchKubeconfig(cmd.Context(), s, c, f.server)
			if err != nil {
				return noKubeconfigYet(c, err)
			}
			noteBeside(o, &f.mergeFlags, f.output, rc)
			return handOut(o, s.paths, &f.mergeFlags, f.output, rc)
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&f.output, "output-kubeconfig", "", "write the kubeconfig to this file (mode 0600) instead of printing it")
	cmd.Flags().StringVar(&f.server, "server", "", "server URL to put in the kubeconfig instead of the one k3kcli works out")
	return cmd
}

// checkServerURL refuses a --server that is not an https URL.
func checkServerURL(server string) error {
	if u, err := url.Parse(server); err != nil || u.Scheme != "https" || u.Host == "" {
		return usageErr("e.g. --server https://127.0.0.1:6443", "--server %q is not an https URL", server)
	}
	return nil
}

// noKubeconfigYet words fetchKubeconfig's errNotYet for a starting cluster;
// other errors pass unchanged.
func noKubeconfigYet(c *v1beta1.Cluster, err error) error {
	if !errors.Is(err, errNotYet) {
		return err
	}
	return &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s/%s has no usable kubeconfig yet", c.Namespace, c.Name), Err: err,
		Hint: fmt.Sprintf("it is still starting (phase %q); wait for it with k3kcli cluster list -n %s", c.Status.Phase, c.Namespace)}
}

// noteBeside prints what the user must know about the kubeconfig's address
// on stderr when the kubeconfig itself goes to stdout (written or merged,
// handOut says it).
func noteBeside(o Options, m *mergeFlags, output string, rc *readyCluster) {
	if output == "" && !m.wanted() && rc.access.note != "" {
		fmt.Fprintf(o.Err, "note: %s\n", rc.access.note)
	}
}

// fetchKubeconfig reads the cluster's published kubeconfig and rewrites it for
// the user: server address per spec.expose (or server when given), names
// k3k-NAMESPACE-NAME so it merges with other kubeconfigs.
func fetchKubeconfig(ctx context.Context, s *session, c *v1beta1.Cluster, server string) (*readyCluster, error) {
	names := layout.NamesFor(c)
	secret := &corev1.Secret{}
	err := s.client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: names.Kubeconfig}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return nil, notYet("kubeconfig Secret " + names.Kubeconfig + " not published yet")
	case err != nil:
		return nil, apiErr(err, fmt.Sprintf("getting Secret %s/%s", c.Namespace, names.Kubeconfig))
	case len(secret.Data[layout.SecretKeyKubeconfig]) == 0:
		return nil, notYet("kubeconfig Secret " + names.Kubeconfig + " is still empty")
	}
	a := access{server: server}
	if server == "" {
		if a, err = resolveAccess(ctx, s, c); err != nil {
			return nil, err
		}
	}
	name := contextName(c)
	creds, out, err := renderKubeconfig(secret.Data[layout.SecretKeyKubeconfig], a.server, name)
	if err != nil {
		return nil, &Error{Code: ExitError, Msg: fmt.Sprintf("reading Secret %s/%s", c.Namespace, names.Kubeconfig), Err: err,
			Hint: "the published kubeconfig is damaged; the server pod's publisher rewrites it when it changes, see its logs"}
	}
	return &readyCluster{cluster: c, kubeconfig: out, creds: creds, context: name, access: a}, nil
}

// resolveAccess works out the URL the user reaches the cluster on, from
// spec.expose and the API Service.
func resolveAccess(ctx context.Context, s *session, c *v1beta1.Cluster) (access, error) {
	e := c.Spec.Expose
	switch {
	case e != nil && e.Ingress != nil:
		return access{server: "https://" + e.Ingress.Host}, nil
	case e != nil && (e.NodePort != nil || e.LoadBalancer != nil):
		svc := &corev1.Service{}
		name := layout.NamesFor(c).Service
		if err := s.client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, svc); err != nil {
			if apierrors.IsNotFound(err) {
				return access{}, notYet("Service " + name + " not created yet")
			}
			return access{}, apiErr(err, fmt.Sprintf("getting Service %s/%s", c.Namespace, name))
		}
		return serviceAccess(svc, e, hostOf(s.hostServer))
	}
	endpoint := c.Status.Endpoint
	if endpoint == "" {
		endpoint = layout.Endpoint(c)
	}
	return access{server: endpoint, inClusterOnly: true, note: fmt.Sprintf(
		"the cluster is not exposed, so %s works only inside the host cluster; from here run k3kcli cluster connect %s -n %s --merge (it forwards a local port through the host API server)",
		endpoint, c.Name, c.Namespace)}, nil
}

// serviceAccess is the URL of a NodePort or LoadBalancer API Service. A node
// port is reached on the host API server's name, which create adds to the TLS
// SANs.
func serviceAccess(svc *corev1.Service, e *v1beta1.ExposeConfig, host string) (access, error) {
	var port corev1.ServicePort
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.IntValue() == layout.APIPort || p.Port == layout.ServicePort || len(svc.Spec.Ports) == 1 {
			port = p
			break
		}
	}
	if e.NodePort != nil {
		if port.NodePort == 0 {
			return access{}, notYet("node port not assigned yet")
		}
		if host == "" {
			return access{}, &Error{Code: ExitError, Msg: "cannot tell which host serves the node port", Hint: "pass --server https://NODE:" + strconv.Itoa(int(port.NodePort))}
		}
		return access{server: "https://" + net.JoinHostPort(host, strconv.Itoa(int(port.NodePort))),
			note: "the node port is reached on the host API server's address; if that is not a node, use --server https://NODE:" + strconv.Itoa(int(port.NodePort))}, nil
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		addr := in.IP
		if addr == "" {
			addr = in.Hostname
		}
		if addr != "" && port.Port != 0 {
			return access{server: "https://" + net.JoinHostPort(addr, strconv.Itoa(int(port.Port)))}, nil
		}
	}
	return access{}, notYet("load balancer address not assigned yet")
}

// contextName is the name of the cluster, user and context in the kubeconfig
// k3kcli writes: unique per virtual cluster, so files can be merged.
func contextName(c *v1beta1.Cluster) string {
	return "k3k-" + c.Namespace + "-" + c.Name
}

// renderKubeconfig parses raw once and points its current context's cluster
// and credentials at server, under one name: the parsed result, for merging
// and for asking the API, and its rendering, for printing or writing. A TLS
// server name raw carries is kept. pkg/kubeconfig's errors never quote the
// content, which holds credentials.
func renderKubeconfig(raw []byte, server, name string) (*kubeconfig.Kubeconfig, []byte, error) {
	k, err := kubeconfig.Parse(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("not a valid kubeconfig: %w", err)
	}
	k, err = k.Rewrite(kubeconfig.Endpoint{URL: server, TLSServerName: k.TLSServerName})
	if err != nil {
		return nil, nil, err
	}
	data, err := k.MarshalAs(name)
	if err != nil {
		return nil, nil, err
	}
	return k, data, nil
}

// writeKubeconfig writes data to path with mode 0600, atomically: a reader sees
// the old file or the new one, and the credentials are never world-readable,
// not even for a moment. It returns the absolute path.
func writeKubeconfig(path string, data []byte) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", &Error{Code: ExitError, Msg: "resolving --output-kubeconfig " + path, Err: err}
	}
	fail := func(err error) (string, error) {
		return "", &Error{Code: ExitError, Msg: "writing the kubeconfig to " + abs, Err: err,
			Hint: "pick a writable path with --output-kubeconfig; the cluster itself is fine"}
	}
	if info, err := os.Stat(abs); err == nil && info.IsDir() {
		return fail(errors.New("it is a directory"))
	}
	tmp, err := os.CreateTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".tmp-*")
	if err != nil {
		return fail(err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fail(err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), abs); err != nil {
		return fail(err)
	}
	return abs, nil
}

// printUsage tells the user how to use the kubeconfig just written.
func printUsage(o Options, path string, rc *readyCluster) {
	fmt.Fprintf(o.Out, "kubeconfig written to %s (server %s)\n", path, rc.access.server)
	if rc.access.note != "" {
		fmt.Fprintf(o.Out, "note: %s\n", rc.access.note)
	}
	fmt.Fprintf(o.Out, "use it with:\n  export KUBECONFIG=%s\n  kubectl get nodes\n", path)
}
