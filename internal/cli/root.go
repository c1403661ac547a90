package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// Options are what the commands need from their surroundings. Tests set the
// streams and the clock; main uses Defaults.
type Options struct {
	Out, Err io.Writer
	// In is where a command reads a confirmation; nil answers no.
	In io.Reader
	// Now is the clock used for ages and elapsed times.
	Now func() time.Time
	// PollInterval is how often waiting commands look at the cluster again.
	PollInterval time.Duration
	// Heartbeat is how long a wait stays silent while nothing changes before it
	// says that it is still waiting.
	Heartbeat time.Duration
	// ReachWait is how long a wait keeps trying an exposed cluster's address
	// when nothing answers there at all, once the cluster is Ready: long enough
	// for the Service's endpoints to reach the nodes, short enough that an
	// address this machine cannot reach does not hold the user until --timeout.
	ReachWait time.Duration
}

// Defaults are the Options of the real command.
func Defaults() Options {
	return Options{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Now: time.Now, PollInterval: 2 * time.Second, Heartbeat: 30 * time.Second, ReachWait: 30 * time.Second}
}

// globalFlags are the host-cluster connection flags every command shares.
type globalFlags struct {
	kubeconfig string
	context    string
	namespace  string
	debug      bool
	// debugOut is where --debug logs; set by NewRootCommand.
	debugOut io.Writer
}

// session is a connection to the host cluster.
type session struct {
	client client.Client
	// namespace is -n, else the kubeconfig context's namespace, else "default".
	namespace string
	// hostServer is the host API server URL of the kubeconfig; a NodePort
	// cluster is reached on the same host.
	hostServer string
	// restConfig is the host connection, for requests the client above does
	// not make (port-forwarding).
	restConfig *rest.Config
	// paths are the kubeconfig files the host connection was loaded from,
	// where --merge adds contexts and delete removes them.
	paths *clientcmd.PathOptions
}

// connect loads the kubeconfig the way kubectl does (--kubeconfig, then
// $KUBECONFIG, then ~/.kube/config) and makes a client for the host cluster.
func (g *globalFlags) connect() (*session, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: g.context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, configErr(err)
	}
	if g.debug {
		withDebug(cfg, g.debugOut)
		fmt.Fprintf(g.debugOut, "debug: host API server %s, namespace %q (empty: the context's)\n", cfg.Host, g.namespace)
	}
	ns := g.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, configErr(err)
		}
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, apiErr(err, "connecting to the host cluster")
	}
	return &session{client: c, namespace: ns, hostServer: cfg.Host, restConfig: cfg, paths: g.pathOptions()}, nil
}

// NewRootCommand is k3kcli with every subcommand.
func NewRootCommand(o Options) *cobra.Command {
	g := &globalFlags{debugOut: o.Err}
	root := &cobra.Command{
		Use:   "k3kcli",
		Short: "Create and manage k3k virtual clusters",
		Long: `k3kcli creates, lists, changes, pauses and deletes k3k virtual clusters (k3s
servers running in pods of a host cluster), connects to them and fetches their
kubeconfigs.

It talks to the host cluster like kubectl: --kubeconfig, then $KUBECONFIG, then
~/.kube/config; -n picks the namespace.

Exit codes: 0 ok, 1 error, 2 bad usage (nothing changed), 3 timed out waiting,
4 the cluster failed.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Without subcommand, show help rather than doing nothing.
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetOut(o.Out)
	root.SetErr(o.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageErr("run with --help to see the flags", "%s", err.Error())
	})
	pf := root.PersistentFlags()
	pf.StringVar(&g.kubeconfig, "kubeconfig", "", "path to the host cluster's kubeconfig")
	pf.StringVar(&g.context, "context", "", "kubeconfig context to use")
	pf.StringVarP(&g.namespace, "namespace", "n", "", "namespace of the virtual cluster (default: the context's, else default)")
	pf.BoolVar(&g.debug, "debug", false, "log every request to the host API server (method, URL, status, time; no credentials) on stderr")

	cluster := &cobra.Command{
		Use:   "cluster",
		Short: "Create, list, connect to, update, pause and delete virtual clusters",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cluster.AddCommand(newCreateCommand(o, g), newListCommand(o, g), newDeleteCommand(o, g), newRecoverCommand(o, g), newSnapshotCommand(o, g), newRestoreCommand(o, g), newMigrateCommand(o, g))
	cluster.AddCommand(newConnectCommand(o, g), newUpdateCommand(o, g), newPauseCommand(o, g), newResumeCommand(o, g))
	kubeconfig := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Fetch a virtual cluster's kubeconfig",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	kubeconfig.AddCommand(newKubeconfigGetCommand(o, g))
	kubeconfig.AddCommand(newKubeconfigGenerateCommand(o, g))
	root.AddCommand(cluster, kubeconfig, newPolicyCommand(o, g), newVersionCommand(o, g))
	addCompletions(root, g)
	return root
}

// Run executes k3kcli with args and returns the process exit code, printing
// any error as one line on o.Err.
func Run(ctx context.Context, o Options, args []string) int {
	root := NewRootCommand(o)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		if isCobraUsage(err) {
			err = usageErr("run with --help to see the commands and flags", "%s", err.Error())
		}
		_, _ = io.WriteString(o.Err, FormatError(err)+"\n")
	}
	return ExitCode(err)
}
