package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

type listFlags struct {
	allNamespaces bool
	output        string
}

func newListCommand(o Options, g *globalFlags) *cobra.Command {
	f := &listFlags{}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List virtual clusters",
		Long: `List virtual clusters. The table's columns are the Cluster CRD's printer
columns, as kubectl get clusters.k3k.io shows them (-o wide adds the ones of
priority 1); -o json, yaml, name and jsonpath=TEMPLATE print the objects.`,
		Example: `  k3kcli cluster list
  k3kcli cluster list -A -o wide
  k3kcli cluster list -n tenants -o yaml
  k3kcli cluster list -o jsonpath='{.items[*].metadata.name}'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := objectPrinter(f.output)
			if err != nil {
				return err
			}
			s, err := g.connect()
			if err != nil {
				return err
			}
			where, path := "all namespaces", "/k3k.io/v1beta1/clusters"
			var opts []client.ListOption
			if !f.allNamespaces {
				opts = append(opts, client.InNamespace(s.namespace))
				where, path = "namespace "+s.namespace, "/k3k.io/v1beta1/namespaces/"+s.namespace+"/clusters"
			}
			if p != nil {
				list := &v1beta1.ClusterList{}
				if err := s.client.List(cmd.Context(), list, opts...); err != nil {
					return apiErr(err, "listing clusters in "+where)
				}
				sortClusters(list.Items)
				return printClusters(o.Out, list, p)
			}
			cfg := rest.CopyConfig(s.restConfig)
			cfg.APIPath = "/apis"
			table, err := clusterTable(cmd.Context(), cfg, path)
			if err != nil {
				// The status error of a refused request is in the typed
				// client's answer: ask again through it for the hint.
				list := &v1beta1.ClusterList{}
				if lerr := s.client.List(cmd.Context(), list, opts...); lerr != nil {
					return apiErr(lerr, "listing clusters in "+where)
				}
				return apiErr(err, "listing clusters in "+where)
			}
			if len(table.Rows) == 0 {
				fmt.Fprintf(o.Err, "no clusters found in %s\n", where)
				return nil
			}
			return printTable(o.Out, table, f.output == "wide", f.allNamespaces, o.Now())
		},
	}
	cmd.Flags().BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "list clusters in every namespace")
	cmd.Flags().StringVarP(&f.output, "output", "o", "", "output format: "+outputFormats+"; default a table")
	return cmd
}

func sortClusters(items []v1beta1.Cluster) {
	slices.SortFunc(items, func(a, b v1beta1.Cluster) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}
