package cli

import (
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// flagValues are the fixed values of enum flags, offered by shell completion.
var flagValues = map[string][]string{
	"datastore":        {string(v1beta1.SQLiteDatastore), string(v1beta1.EtcdDatastore)},
	"persistence-type": {string(v1beta1.DynamicPersistence), string(v1beta1.EphemeralPersistence)},
	"expose":           {"nodeport", "loadbalancer", "ingress:"},
	"output":           {"wide", "name", "json", "yaml", "jsonpath="},
}

// addCompletions makes the shell completion cobra generates
// (k3kcli completion bash|zsh|fish|powershell) offer cluster names for NAME,
// the host's namespaces for -n, and the values of enum flags. Lookups that
// fail (no host, no rights) offer nothing rather than an error.
func addCompletions(root *cobra.Command, g *globalFlags) {
	_ = root.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
		s, err := g.connect()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list := &corev1.NamespaceList{}
		if err := s.client.List(cmd.Context(), list); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, prefix) {
				out = append(out, ns.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		for name, values := range flagValues {
			if cmd.LocalFlags().Lookup(name) != nil {
				vals := values
				_ = cmd.RegisterFlagCompletionFunc(name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
					return vals, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
				})
			}
		}
		// Commands that take an existing cluster's NAME complete it; create
		// names a new one.
		if strings.HasSuffix(cmd.Use, " NAME") && cmd.Name() != "create" {
			cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return clusterNames(cmd, g, prefix), cobra.ShellCompDirectiveNoFileComp
			}
		}
		for _, c := range cmd.Commands() {
			walk(c)
		}
	}
	walk(root)
}

func clusterNames(cmd *cobra.Command, g *globalFlags, prefix string) []string {
	s, err := g.connect()
	if err != nil {
		return nil
	}
	list := &v1beta1.ClusterList{}
	if err := s.client.List(cmd.Context(), list, client.InNamespace(s.namespace)); err != nil {
		return nil
	}
	var out []string
	for _, c := range list.Items {
		if strings.HasPrefix(c.Name, prefix) {
			out = append(out, c.Name)
		}
	}
	return out
}
