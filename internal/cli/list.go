package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

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
		Example: `  k3kcli cluster list
  k3kcli cluster list -A
  k3kcli cluster list -n tenants -o yaml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch f.output {
			case "", "table", "json", "yaml":
			default:
				return usageErr("use -o table, -o json or -o yaml", "--output %q is not an output format", f.output)
			}
			s, err := g.connect()
			if err != nil {
				return err
			}
			list := &v1beta1.ClusterList{}
			var opts []client.ListOption
			where := "all namespaces"
			if !f.allNamespaces {
				opts = append(opts, client.InNamespace(s.namespace))
				where = "namespace " + s.namespace
			}
			if err := s.client.List(cmd.Context(), list, opts...); err != nil {
				return apiErr(err, "listing clusters in "+where)
			}
			sortClusters(list.Items)
			switch f.output {
			case "json", "yaml":
				return printList(o.Out, list, f.output)
			}
			if len(list.Items) == 0 {
				fmt.Fprintf(o.Err, "no clusters found in %s\n", where)
				return nil
			}
			return printTable(o.Out, list.Items, o.Now())
		},
	}
	cmd.Flags().BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "list clusters in every namespace")
	cmd.Flags().StringVarP(&f.output, "output", "o", "table", "output format: table, json or yaml")
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

// printTable writes the columns people look at: where the cluster is, how it
// runs, and whether it is up.
func printTable(w io.Writer, items []v1beta1.Cluster, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tNAMESPACE\tMODE\tSERVERS\tDATASTORE\tPHASE\tAGE")
	for _, c := range items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n",
			c.Name, c.Namespace, orDash(string(c.Spec.Mode)), c.Status.ReadyServers, c.Spec.Servers,
			datastoreOf(&c), orDash(string(c.Status.Phase)), age(c.CreationTimestamp.Time, now))
	}
	return tw.Flush()
}

// datastoreOf is the datastore in effect when the controller reported it, else
// the one asked for, else "default" (the controller's, not known here).
func datastoreOf(c *v1beta1.Cluster) string {
	switch {
	case c.Status.Datastore != nil && c.Status.Datastore.Type != "":
		return string(c.Status.Datastore.Type)
	case c.Spec.Datastore.Type != "":
		return string(c.Spec.Datastore.Type)
	}
	return "default"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func age(created, now time.Time) string {
	if created.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(created))
}

// printList writes the list as kubectl would: a ClusterList with types set and
// without managed fields.
func printList(w io.Writer, list *v1beta1.ClusterList, format string) error {
	out := list.DeepCopy()
	out.APIVersion, out.Kind = v1beta1.GroupVersion.String(), "ClusterList"
	for i := range out.Items {
		out.Items[i].APIVersion, out.Items[i].Kind = v1beta1.GroupVersion.String(), "Cluster"
		out.Items[i].ManagedFields = nil
	}
	var data []byte
	var err error
	if format == "json" {
		data, err = json.MarshalIndent(out, "", "    ")
		data = append(data, '\n')
	} else {
		data, err = yaml.Marshal(out)
	}
	if err != nil {
		return fmt.Errorf("encoding the cluster list: %w", err)
	}
	_, err = w.Write(data)
	return err
}
