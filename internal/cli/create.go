package cli

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// createFlags are the settings of `cluster create`.
type createFlags struct {
	servers         int32
	persistenceType string
	storageClass    string
	storageSize     string
	datastore       string
	version         string
	tlsSANs         []string
	expose          string
	ingressClass    string
	serverArgs      []string
	wait            bool
	timeout         time.Duration
	output          string
	restoreFrom     string
	createNamespace bool
	mergeFlags
}

// versionPattern is the CRD's rule for spec.version, checked here so the user
// gets the answer before anything is sent.
var versionPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.+-]*$`)

func newCreateCommand(o Options, g *globalFlags) *cobra.Command {
	f := &createFlags{}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a virtual cluster, wait until it is ready and write its kubeconfig",
		Long: `Create a virtual cluster. Fields left unset take the defaults the k3k controller
was installed with (Helm values persistence.type, datastore.type, the k3s version).

With --wait (the default) it shows progress until the cluster is ready, then writes
its kubeconfig, with the server address rewritten to how the cluster is exposed, to
--output-kubeconfig (default NAME-kubeconfig.yaml) with mode 0600.`,
		Example: `  k3kcli cluster create dev
  k3kcli cluster create ha -n tenants --servers 3 --datastore etcd --storage-size 10Gi
  k3kcli cluster create web --expose nodeport:30443 --tls-san web.example.com
  k3kcli cluster create ci --persistence-type ephemeral --wait=false`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCreate(cmd.Context(), o, g, f, cmd, args[0])
		},
	}
	fl := cmd.Flags()
	fl.Int32Var(&f.servers, "servers", 1, "number of k3s servers: 1 for sqlite; 1, 3, 5 or 7 for etcd")
	fl.StringVar(&f.persistenceType, "persistence-type", "", "dynamic (a volume per server) or ephemeral (data lost with the pod); default: the controller's")
	fl.StringVar(&f.storageClass, "storage-class", "", "storage class of the server volumes; default: the controller's, then the host's default")
	fl.StringVar(&f.storageSize, "storage-size", "", "size of each server volume, e.g. 10Gi (default 2Gi)")
	fl.StringVar(&f.datastore, "datastore", "", "sqlite (1 server) or etcd (HA); default: the controller's")
	fl.StringVar(&f.version, "version", "", "k3s version (image tag), e.g. v1.34.3-k3s1; default: the controller's")
	fl.StringSliceVar(&f.tlsSANs, "tls-san", nil, "extra name or address the API certificate is valid for (repeatable)")
	fl.StringVar(&f.expose, "expose", "", "how the API is reached from outside the host: nodeport[:PORT], loadbalancer[:PORT] or ingress:HOST")
	fl.StringVar(&f.ingressClass, "ingress-class", "", "ingress class for --expose ingress:HOST")
	fl.StringArrayVar(&f.serverArgs, "server-args", nil, "extra k3s server argument, e.g. --server-args=--kube-apiserver-arg=v=2 (repeatable)")
	fl.BoolVar(&f.wait, "wait", true, "wait until the cluster is ready and write its kubeconfig")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Minute, "how long --wait waits")
	fl.StringVar(&f.output, "output-kubeconfig", "", "where to write the kubeconfig (default NAME-kubeconfig.yaml)")
	fl.StringVar(&f.restoreFrom, "restore-from", "", "snapshot file (k3kcli cluster snapshot) whose objects the new cluster starts with; see docs/backup.md")
	fl.BoolVar(&f.createNamespace, "create-namespace", false, "create the namespace (-n) if it does not exist")
	f.add(cmd)
	return cmd
}

func runCreate(ctx context.Context, o Options, g *globalFlags, f *createFlags, cmd *cobra.Command, name string) error {
	if f.timeout <= 0 {
		return usageErr("e.g. --timeout 10m", "--timeout must be positive, got %s", f.timeout)
	}
	if f.output != "" && f.wanted() {
		return usageErr("choose one", "--output-kubeconfig and --merge both say where the kubeconfig goes")
	}
	if f.wanted() && !f.wait {
		return usageErr("drop --wait=false, or merge later with k3kcli kubeconfig get NAME --merge", "--merge needs --wait: the kubeconfig exists once the cluster is ready")
	}
	if !cmd.Flags().Changed("servers") {
		f.servers = 0 // let the CRD default apply
	}
	s, err := g.connect()
	if err != nil {
		return err
	}
	c, err := desiredCluster(name, s.namespace, f, hostOf(s.hostServer))
	if err != nil {
		return err
	}
	var restore *pendingRestore
	if f.restoreFrom != "" {
		if restore, err = openRestore(ctx, s, f.restoreFrom, c); err != nil {
			return err
		}
		defer restore.cleanup()
	}
	if f.createNamespace {
		if err := s.ensureNamespace(ctx, o); err != nil {
			return err
		}
	}
	if err := s.client.Create(ctx, c); err != nil {
		if apierrors.IsNotFound(err) {
			if missing, _ := s.namespaceMissing(ctx); missing {
				return missingNamespaceErr(c)
			}
		}
		return apiErr(err, fmt.Sprintf("creating cluster %s/%s", c.Namespace, c.Name))
	}
	fmt.Fprintf(o.Out, "cluster %s/%s created\n", c.Namespace, c.Name)
	if restore != nil {
		rc, err := g.restConfig()
		if err != nil {
			return err
		}
		if err := restore.run(ctx, o, s, rc, c, f.timeout); err != nil {
			return err
		}
	}
	if !f.wait {
		fmt.Fprintf(o.Out, "follow it with: k3kcli cluster list -n %s\nthen fetch its kubeconfig with: k3kcli kubeconfig get %s -n %s\n", c.Namespace, c.Name, c.Namespace)
		return nil
	}
	start := o.Now()
	ready, err := waitReady(ctx, o, s, c, f.timeout)
	if err != nil {
		return err
	}
	if f.wanted() {
		fmt.Fprintf(o.Out, "cluster %s/%s is ready after %s\n", c.Namespace, c.Name, o.Now().Sub(start).Round(time.Second))
		return handOut(o, s.paths, &f.mergeFlags, "", ready)
	}
	path := f.output
	if path == "" {
		path = c.Name + "-kubeconfig.yaml"
	}
	abs, err := writeKubeconfig(path, ready.kubeconfig)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "cluster %s/%s is ready after %s\n", c.Namespace, c.Name, o.Now().Sub(start).Round(time.Second))
	printUsage(o, abs, ready)
	return nil
}

// desiredCluster builds the Cluster the flags ask for, rejecting values the API
// server would reject so the user gets the reason before anything is created.
// hostName is the host API server's name: --expose nodeport adds it to the TLS
// SANs, because the kubeconfig will reach the node port on that name.
func desiredCluster(name, namespace string, f *createFlags, hostName string) (*v1beta1.Cluster, error) {
	c := &v1beta1.Cluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "Cluster"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}
	spec := &c.Spec
	spec.Servers = f.servers

	switch ds := v1beta1.DatastoreType(f.datastore); ds {
	case "", v1beta1.SQLiteDatastore, v1beta1.EtcdDatastore:
		spec.Datastore.Type = ds
	default:
		return nil, usageErr("use sqlite or etcd", "--datastore %q is not a datastore type", f.datastore)
	}
	switch {
	case f.servers < 0 || f.servers > 7:
		return nil, usageErr("use 1 for sqlite; 1, 3, 5 or 7 for etcd", "--servers %d is out of range", f.servers)
	case f.servers > 1 && spec.Datastore.Type != v1beta1.EtcdDatastore:
		return nil, usageErr("add --datastore etcd for more than one server", "--servers %d needs the etcd datastore: sqlite runs exactly 1 server", f.servers)
	case f.servers > 1 && f.servers%2 == 0:
		return nil, usageErr("use 3, 5 or 7 servers", "--servers %d: etcd needs an odd number of servers to keep quorum", f.servers)
	}

	switch p := v1beta1.PersistenceType(f.persistenceType); p {
	case "", v1beta1.DynamicPersistence, v1beta1.EphemeralPersistence:
		spec.Persistence.Type = p
	default:
		return nil, usageErr("use dynamic or ephemeral", "--persistence-type %q is not a persistence type", f.persistenceType)
	}
	if spec.Persistence.Type == v1beta1.EphemeralPersistence && (f.storageClass != "" || f.storageSize != "") {
		return nil, usageErr("drop them, or use --persistence-type dynamic", "--storage-class and --storage-size need volumes, but --persistence-type ephemeral has none")
	}
	if f.storageClass != "" {
		spec.Persistence.StorageClassName = ptr.To(f.storageClass)
	}
	if f.storageSize != "" {
		q, err := resource.ParseQuantity(f.storageSize)
		if err != nil || q.Sign() <= 0 {
			return nil, usageErr("use a size such as 10Gi", "--storage-size %q is not a positive quantity", f.storageSize)
		}
		spec.Persistence.StorageRequestSize = f.storageSize
	}
	if f.version != "" && (!versionPattern.MatchString(f.version) || len(f.version) > 128) {
		return nil, usageErr("use a k3s image tag such as v1.34.3-k3s1", "--version %q is not an image tag", f.version)
	}
	spec.Version = f.version

	for _, san := range f.tlsSANs {
		if san = strings.TrimSpace(san); san == "" {
			return nil, usageErr("e.g. --tls-san k3k.example.com", "--tls-san must not be empty")
		}
		spec.TLSSANs = appendUnique(spec.TLSSANs, san)
	}
	spec.ServerArgs = f.serverArgs

	expose, err := parseExpose(f.expose, f.ingressClass)
	if err != nil {
		return nil, err
	}
	spec.Expose = expose
	if expose != nil && expose.NodePort != nil && hostName != "" {
		spec.TLSSANs = appendUnique(spec.TLSSANs, hostName)
	}
	return c, nil
}

// parseExpose reads --expose: nodeport[:PORT], loadbalancer[:PORT] or ingress:HOST.
func parseExpose(v, ingressClass string) (*v1beta1.ExposeConfig, error) {
	const hint = "use nodeport, nodeport:30443, loadbalancer, loadbalancer:6443 or ingress:k3k.example.com"
	kind, arg, hasArg := strings.Cut(v, ":")
	if ingressClass != "" && kind != "ingress" {
		return nil, usageErr("add --expose ingress:HOST", "--ingress-class needs --expose ingress:HOST")
	}
	port := func(lo, hi int) (*int32, error) {
		if !hasArg {
			return nil, nil
		}
		p, err := strconv.Atoi(arg)
		if err != nil || p < lo || p > hi {
			return nil, usageErr(hint, "--expose %s: port %q must be a number from %d to %d", kind, arg, lo, hi)
		}
		return ptr.To(int32(p)), nil
	}
	switch strings.ToLower(kind) {
	case "":
		return nil, nil
	case "nodeport":
		p, err := port(30000, 32767)
		if err != nil {
			return nil, err
		}
		return &v1beta1.ExposeConfig{NodePort: &v1beta1.NodePortConfig{ServerPort: p}}, nil
	case "loadbalancer":
		p, err := port(1, 65535)
		if err != nil {
			return nil, err
		}
		return &v1beta1.ExposeConfig{LoadBalancer: &v1beta1.LoadBalancerConfig{ServerPort: p}}, nil
	case "ingress":
		if !hasArg || arg == "" {
			return nil, usageErr(hint, "--expose ingress needs a host name: ingress:HOST")
		}
		in := &v1beta1.IngressConfig{Host: arg}
		if ingressClass != "" {
			in.IngressClassName = ptr.To(ingressClass)
		}
		return &v1beta1.ExposeConfig{Ingress: in}, nil
	}
	return nil, usageErr(hint, "--expose %q is not a way to expose a cluster", v)
}

func appendUnique(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// hostOf is the host name or address of an API server URL, "" if it has none.
func hostOf(server string) string {
	u, err := url.Parse(server)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
