package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// mergeFlags are --merge and --switch-context, shared by the commands that
// produce a kubeconfig (create, kubeconfig get, connect).
type mergeFlags struct {
	merge         bool
	switchContext bool
}

func (m *mergeFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&m.merge, "merge", false, "merge the kubeconfig into the host kubeconfig (--kubeconfig, else the first file of $KUBECONFIG, else ~/.kube/config) instead of writing a file of its own")
	cmd.Flags().BoolVar(&m.switchContext, "switch-context", false, "with --merge (implied), also make the cluster's context the current one")
}

// wanted reports whether the kubeconfig goes into the host kubeconfig.
func (m *mergeFlags) wanted() bool { return m.merge || m.switchContext }

// pathOptions is how clientcmd finds the kubeconfig files k3kcli reads and
// writes, the same way it finds the host cluster: --kubeconfig, else each file
// of $KUBECONFIG, else ~/.kube/config. clientcmd.ModifyConfig writes through
// it: an entry goes back to the file it came from, a new one to the first
// file, each file under its lock.
func (g *globalFlags) pathOptions() *clientcmd.PathOptions {
	po := clientcmd.NewDefaultPathOptions()
	po.LoadingRules.ExplicitPath = g.kubeconfig
	return po
}

// mergeKubeconfig adds the current context of in, and the cluster and user it
// names (one of each, named alike, as kubeconfig.APIConfig makes them), to the
// kubeconfig files of po, replacing entries of the same name. With
// switchContext the context becomes the current one. It returns the context's
// name and the file that holds it.
func mergeKubeconfig(po *clientcmd.PathOptions, in *clientcmdapi.Config, switchContext bool) (name, file string, err error) {
	if in.Contexts[in.CurrentContext] == nil {
		return "", "", &Error{Code: ExitError, Msg: "merging the kubeconfig", Err: fmt.Errorf("the cluster's kubeconfig has no current context")}
	}
	name = in.CurrentContext
	cfg, err := po.GetStartingConfig()
	if err != nil {
		return "", "", configErr(err)
	}
	file = fileHolding(po, name)
	kc := in.Contexts[name]
	cfg.Clusters[kc.Cluster] = in.Clusters[kc.Cluster]
	cfg.AuthInfos[kc.AuthInfo] = in.AuthInfos[kc.AuthInfo]
	cfg.Contexts[name] = kc
	if switchContext {
		cfg.CurrentContext = name
	}
	if err := clientcmd.ModifyConfig(po, *cfg, false); err != nil {
		return "", "", &Error{Code: ExitError, Msg: "merging the kubeconfig into " + file, Err: err,
			Hint: "check that the file is writable, or write a file of its own with --output-kubeconfig"}
	}
	return name, file, nil
}

// removeKubeconfigContext removes the context name, and the cluster and user
// of that same name it refers to, from the kubeconfig files of po: what
// mergeKubeconfig added. It writes nothing when there is no such context and
// returns the file it was removed from, "" when there was none.
func removeKubeconfigContext(po *clientcmd.PathOptions, name string) (string, error) {
	cfg, err := po.GetStartingConfig()
	if err != nil {
		return "", configErr(err)
	}
	kc := cfg.Contexts[name]
	if kc == nil {
		return "", nil
	}
	file := fileHolding(po, name)
	delete(cfg.Contexts, name)
	// Only entries named after the context are ours; a context someone
	// pointed at other entries keeps them.
	if kc.Cluster == name {
		delete(cfg.Clusters, name)
	}
	if kc.AuthInfo == name {
		delete(cfg.AuthInfos, name)
	}
	if cfg.CurrentContext == name {
		cfg.CurrentContext = ""
	}
	if err := clientcmd.ModifyConfig(po, *cfg, false); err != nil {
		return "", &Error{Code: ExitError, Msg: "removing context " + name + " from " + file, Err: err}
	}
	return file, nil
}

// fileHolding is the kubeconfig file of po's chain that holds context name, or
// the file a new context goes to.
func fileHolding(po *clientcmd.PathOptions, name string) string {
	if !po.IsExplicitFile() {
		for _, f := range po.GetEnvVarFiles() {
			if cfg, err := clientcmd.LoadFromFile(f); err == nil && cfg.Contexts[name] != nil {
				return f
			}
		}
	}
	return po.GetDefaultFilename()
}

// removeContext takes the deleted cluster's context out of the host
// kubeconfig, where --merge put it. The cluster is gone either way: a
// kubeconfig that cannot be edited is a warning, not a failure.
func removeContext(o Options, s *session, c *v1beta1.Cluster) {
	name := contextName(c)
	file, err := removeKubeconfigContext(s.paths, name)
	switch {
	case err != nil:
		fmt.Fprintf(o.Err, "warning: %s\n", strings.TrimPrefix(FormatError(err), "error: "))
	case file != "":
		fmt.Fprintf(o.Out, "removed context %s from %s\n", name, file)
	}
}
