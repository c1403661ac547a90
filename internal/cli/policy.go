package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/resourcelist"
)

// k3kcli policy: VirtualClusterPolicies (docs/policy.md) and the namespace
// labels that bind them.

func newPolicyCommand(o Options, g *globalFlags) *cobra.Command {
	policy := &cobra.Command{
		Use:   "policy",
		Short: "Create, bind, list, describe and delete VirtualClusterPolicies",
		Long: `A VirtualClusterPolicy bounds every Cluster of the namespaces bound to it
(label policy.k3k.io/policy-name): the host API refuses a Cluster that breaks
it, and a Cluster made before it is held to the stricter of the two
(docs/policy.md). Policies are cluster-scoped: -n does not apply to them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	policy.AddCommand(newPolicyCreateCommand(o, g), newPolicyBindCommand(o, g, true), newPolicyBindCommand(o, g, false),
		newPolicyListCommand(o, g), newPolicyDescribeCommand(o, g), newPolicyDeleteCommand(o, g))
	return policy
}

type policyFlags struct {
	mode, podSecurityLevel, quota, maxLimits string
	datastores, storageClasses, bind         []string
	maxServers                               int32
	maxGrace                                 int64
}

func newPolicyCreateCommand(o Options, g *globalFlags) *cobra.Command {
	f := &policyFlags{}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a VirtualClusterPolicy, and bind namespaces to it",
		Long: `Create a VirtualClusterPolicy. Every bound left out bounds nothing. --bind
labels the namespaces with it (as policy bind does).`,
		Example: `  k3kcli policy create team-standard --datastores sqlite,etcd --max-servers 3 \
    --pod-security-level baseline --quota requests.cpu=4,pods=50 --max-limits memory=2Gi \
    --max-termination-grace-period-seconds 60 --bind team-a --bind team-b`,
		Args: onePolicyName,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := f.policy(args[0], cmd.Flags().Changed)
			if err != nil {
				return err
			}
			s, err := g.connect()
			if err != nil {
				return err
			}
			// The namespaces first: a refused --bind creates nothing.
			namespaces, err := namespacesToBind(cmd.Context(), s, p.Name, f.bind, false)
			if err != nil {
				return err
			}
			if err := s.client.Create(cmd.Context(), p); err != nil {
				return apiErr(err, "creating VirtualClusterPolicy "+p.Name)
			}
			fmt.Fprintf(o.Out, "VirtualClusterPolicy %s created\n", p.Name)
			return bindNamespaces(cmd.Context(), o, s, p.Name, namespaces)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.mode, "mode", "", "the only mode a Cluster may have (shared)")
	fl.StringSliceVar(&f.datastores, "datastores", nil, "the datastore types a Cluster may have (sqlite, etcd, external); Clusters must then name theirs")
	fl.Int32Var(&f.maxServers, "max-servers", 0, "the most servers a Cluster may ask for (1 to 7)")
	fl.StringVar(&f.podSecurityLevel, "pod-security-level", "", "the loosest Pod Security level a Cluster may have (privileged, baseline, restricted)")
	fl.StringVar(&f.quota, "quota", "", "ResourceQuota bounds, name=quantity,... (e.g. requests.cpu=4,pods=50)")
	fl.StringVar(&f.maxLimits, "max-limits", "", "the largest container, name=quantity,... (e.g. memory=2Gi,cpu=2)")
	fl.StringSliceVar(&f.storageClasses, "storage-classes", nil, "the host storage classes a Cluster may name")
	fl.Int64Var(&f.maxGrace, "max-termination-grace-period-seconds", 0, "the longest grace period a Cluster may allow its pods (1 to 3600)")
	fl.StringSliceVar(&f.bind, "bind", nil, "a namespace to bind to the policy (repeatable)")
	return cmd
}

// policy is the VirtualClusterPolicy the flags say, or a usage error;
// changed says whether a flag was given (0 is a bad value, not "no bound").
func (f *policyFlags) policy(name string, changed func(string) bool) (*v1beta1.VirtualClusterPolicy, error) {
	p := &v1beta1.VirtualClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	s := &p.Spec
	switch f.mode {
	case "", string(v1beta1.SharedMode):
		s.AllowedMode = v1beta1.ClusterMode(f.mode)
	default:
		return nil, usageErr("use shared", "--mode %q is not a mode k3k runs", f.mode)
	}
	for _, d := range f.datastores {
		switch t := v1beta1.DatastoreType(d); t {
		case v1beta1.SQLiteDatastore, v1beta1.EtcdDatastore, v1beta1.ExternalDatastore:
			s.AllowedDatastores = append(s.AllowedDatastores, t)
		default:
			return nil, usageErr("use sqlite, etcd or external", "--datastores: %q is not a datastore type", d)
		}
	}
	if changed("max-servers") {
		if f.maxServers < 1 || f.maxServers > 7 {
			return nil, usageErr("use 1 to 7", "--max-servers %d is out of range", f.maxServers)
		}
		s.MaxServers = &f.maxServers
	}
	switch l := v1beta1.PodSecurityLevel(f.podSecurityLevel); l {
	case "", v1beta1.PodSecurityPrivileged, v1beta1.PodSecurityBaseline, v1beta1.PodSecurityRestricted:
		s.PodSecurityLevel = l
	default:
		return nil, usageErr("use privileged, baseline or restricted", "--pod-security-level %q is not a Pod Security level", f.podSecurityLevel)
	}
	quota, err := resourcelist.Parse(f.quota)
	if err != nil {
		return nil, usageErr("e.g. --quota requests.cpu=4,pods=50", "--quota: %v", err)
	}
	if len(quota) > 0 {
		s.Quota = &v1beta1.QuotaConfig{Hard: quota}
	}
	limits, err := resourcelist.Parse(f.maxLimits)
	if err != nil {
		return nil, usageErr("e.g. --max-limits memory=2Gi,cpu=2", "--max-limits: %v", err)
	}
	if len(limits) > 0 {
		s.MaxLimits = limits
	}
	s.StorageClasses = f.storageClasses
	if changed("max-termination-grace-period-seconds") {
		if f.maxGrace < 1 || f.maxGrace > 3600 {
			return nil, usageErr("use 1 to 3600", "--max-termination-grace-period-seconds %d is out of range", f.maxGrace)
		}
		s.MaxTerminationGracePeriodSeconds = &f.maxGrace
	}
	return p, nil
}

func onePolicyName(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageErr("usage: "+cmd.UseLine(), "expected one policy NAME, got %d arguments", len(args))
	}
	if msgs := validation.IsDNS1123Subdomain(args[0]); len(msgs) > 0 {
		return usageErr("use lower-case letters, digits, '-' and '.'", "invalid policy name %q: %s", args[0], strings.Join(msgs, "; "))
	}
	return nil
}

func newPolicyBindCommand(o Options, g *globalFlags, bind bool) *cobra.Command {
	overwrite := false
	cmd := &cobra.Command{
		Use:   "bind NAME NAMESPACE...",
		Short: "Bind namespaces to a VirtualClusterPolicy (their label policy.k3k.io/policy-name)",
		Long: `Bind namespaces to a VirtualClusterPolicy: every Cluster in them is held to it
from now on. A namespace bound to another policy stays so unless --overwrite.`,
		Example: `  k3kcli policy bind team-standard team-a team-b`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageErr("usage: "+cmd.UseLine(), "expected a policy NAME and at least one NAMESPACE")
			}
			return onePolicyName(cmd, args[:1])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.connect()
			if err != nil {
				return err
			}
			if _, err := getPolicy(cmd.Context(), s, args[0]); err != nil {
				return err
			}
			namespaces, err := namespacesToBind(cmd.Context(), s, args[0], args[1:], overwrite)
			if err != nil {
				return err
			}
			return bindNamespaces(cmd.Context(), o, s, args[0], namespaces)
		},
	}
	if !bind {
		cmd.Use = "unbind NAMESPACE..."
		cmd.Short = "Unbind namespaces from their VirtualClusterPolicy"
		cmd.Long = `Remove the label policy.k3k.io/policy-name of the namespaces: their Clusters
get their own choices back.`
		cmd.Example = `  k3kcli policy unbind team-a`
		cmd.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("usage: "+cmd.UseLine(), "expected at least one NAMESPACE")
			}
			return nil
		}
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			s, err := g.connect()
			if err != nil {
				return err
			}
			namespaces, err := namespacesToBind(cmd.Context(), s, "", args, true)
			if err != nil {
				return err
			}
			return bindNamespaces(cmd.Context(), o, s, "", namespaces)
		}
		return cmd
	}
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "bind namespaces bound to another policy too")
	return cmd
}

func getPolicy(ctx context.Context, s *session, name string) (*v1beta1.VirtualClusterPolicy, error) {
	p := &v1beta1.VirtualClusterPolicy{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: name}, p); err != nil {
		return nil, apiErr(err, "getting VirtualClusterPolicy "+name)
	}
	return p, nil
}

// namespacesToBind reads the namespaces and, before anything changes,
// refuses one bound to another policy unless overwrite (policy "" unbinds,
// which refuses nothing).
func namespacesToBind(ctx context.Context, s *session, policy string, names []string, overwrite bool) ([]*corev1.Namespace, error) {
	out := make([]*corev1.Namespace, 0, len(names))
	for _, name := range names {
		ns := &corev1.Namespace{}
		if err := s.client.Get(ctx, types.NamespacedName{Name: name}, ns); err != nil {
			return nil, apiErr(err, "getting namespace "+name)
		}
		if cur := ns.Labels[v1beta1.LabelPolicyName]; cur != "" && cur != policy && policy != "" && !overwrite {
			return nil, &Error{Code: ExitError, Msg: fmt.Sprintf("namespace %s is bound to VirtualClusterPolicy %s; nothing changed", name, cur),
				Hint: "add --overwrite to bind it to " + policy + " instead, or unbind it first (k3kcli policy unbind " + name + ")"}
		}
		out = append(out, ns)
	}
	return out, nil
}

// bindNamespaces sets (policy "": removes) the policy label of each
// namespace namespacesToBind read.
func bindNamespaces(ctx context.Context, o Options, s *session, policy string, namespaces []*corev1.Namespace) error {
	for _, ns := range namespaces {
		if ns.Labels[v1beta1.LabelPolicyName] == policy {
			fmt.Fprintf(o.Out, "namespace %s: already %s\n", ns.Name, boundTo(policy))
			continue
		}
		patch := client.MergeFrom(ns.DeepCopy())
		if policy == "" {
			delete(ns.Labels, v1beta1.LabelPolicyName)
		} else {
			if ns.Labels == nil {
				ns.Labels = map[string]string{}
			}
			ns.Labels[v1beta1.LabelPolicyName] = policy
		}
		if err := s.client.Patch(ctx, ns, patch); err != nil {
			return apiErr(err, "labelling namespace "+ns.Name)
		}
		fmt.Fprintf(o.Out, "namespace %s: %s\n", ns.Name, boundTo(policy))
	}
	return nil
}

func boundTo(policy string) string {
	if policy == "" {
		return "bound to no policy"
	}
	return "bound to VirtualClusterPolicy " + policy
}

func newPolicyListCommand(o Options, g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List VirtualClusterPolicies and the namespaces bound to them",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := g.connect()
			if err != nil {
				return err
			}
			list := &v1beta1.VirtualClusterPolicyList{}
			if err := s.client.List(cmd.Context(), list); err != nil {
				return apiErr(err, "listing VirtualClusterPolicies")
			}
			if len(list.Items) == 0 {
				fmt.Fprintln(o.Err, "no VirtualClusterPolicies found")
				return nil
			}
			bound, err := boundNamespaces(cmd.Context(), s)
			if err != nil {
				return err
			}
			sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
			w := tabwriter.NewWriter(o.Out, 0, 0, 3, ' ', 0)
			fmt.Fprintln(w, "NAME\tNAMESPACES\tAGE")
			for _, p := range list.Items {
				fmt.Fprintf(w, "%s\t%s\t%s\n", p.Name, orNone(bound[p.Name]), duration.HumanDuration(o.Now().Sub(p.CreationTimestamp.Time)))
			}
			return w.Flush()
		},
	}
}

// boundNamespaces maps each policy name to the namespaces bound to it, sorted.
func boundNamespaces(ctx context.Context, s *session) (map[string][]string, error) {
	list := &corev1.NamespaceList{}
	if err := s.client.List(ctx, list, client.HasLabels{v1beta1.LabelPolicyName}); err != nil {
		return nil, apiErr(err, "listing namespaces")
	}
	out := map[string][]string{}
	for _, ns := range list.Items {
		p := ns.Labels[v1beta1.LabelPolicyName]
		out[p] = append(out[p], ns.Name)
	}
	for _, l := range out {
		slices.Sort(l)
	}
	return out, nil
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "<none>"
	}
	return strings.Join(l, ",")
}

func newPolicyDescribeCommand(o Options, g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a VirtualClusterPolicy, its namespaces, and what it does to their Clusters",
		Args:  onePolicyName,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.connect()
			if err != nil {
				return err
			}
			p, err := getPolicy(cmd.Context(), s, args[0])
			if err != nil {
				return err
			}
			bound, err := boundNamespaces(cmd.Context(), s)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(o.Out, 0, 0, 2, ' ', 0)
			describePolicy(w, p)
			fmt.Fprintf(w, "Namespaces:\t%s\n", orNone(bound[p.Name]))
			for _, ns := range bound[p.Name] {
				list := &v1beta1.ClusterList{}
				if err := s.client.List(cmd.Context(), list, client.InNamespace(ns)); err != nil {
					return apiErr(err, "listing clusters in namespace "+ns)
				}
				sortClusters(list.Items)
				for _, c := range list.Items {
					what := "not reconciled with the policy yet"
					if cond := meta.FindStatusCondition(c.Status.Conditions, v1beta1.ConditionPolicy); cond != nil {
						what = fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
					}
					fmt.Fprintf(w, "  Cluster %s/%s:\t%s\n", ns, c.Name, what)
				}
			}
			return w.Flush()
		},
	}
}

// describePolicy prints the bounds p sets.
func describePolicy(w io.Writer, p *v1beta1.VirtualClusterPolicy) {
	s := p.Spec
	fmt.Fprintf(w, "Name:\t%s\n", p.Name)
	line := func(what, v string) {
		if v != "" {
			fmt.Fprintf(w, "%s:\t%s\n", what, v)
		}
	}
	line("Allowed mode", string(s.AllowedMode))
	var ds []string
	for _, d := range s.AllowedDatastores {
		ds = append(ds, string(d))
	}
	line("Allowed datastores", strings.Join(ds, ", "))
	if s.MaxServers != nil {
		line("Max servers", fmt.Sprint(*s.MaxServers))
	}
	line("Pod Security level", string(s.PodSecurityLevel))
	if s.Quota != nil {
		line("Quota", resourcePairs(s.Quota.Hard))
	}
	line("Max container limits", resourcePairs(s.MaxLimits))
	line("Storage classes", strings.Join(s.StorageClasses, ", "))
	if s.MaxTerminationGracePeriodSeconds != nil {
		line("Max grace period", fmt.Sprintf("%ds", *s.MaxTerminationGracePeriodSeconds))
	}
}

func resourcePairs(l corev1.ResourceList) string {
	var out []string
	for k, v := range l {
		out = append(out, string(k)+"="+v.String())
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func newPolicyDeleteCommand(o Options, g *globalFlags) *cobra.Command {
	unbind := false
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a VirtualClusterPolicy",
		Long: `Delete a VirtualClusterPolicy. While namespaces are bound to it, it is kept
(deleting it would loosen their Clusters silently: a binding to a policy that
does not exist holds nothing) unless --unbind, which unbinds them first.`,
		Args: onePolicyName,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.connect()
			if err != nil {
				return err
			}
			bound, err := boundNamespaces(cmd.Context(), s)
			if err != nil {
				return err
			}
			if ns := bound[args[0]]; len(ns) > 0 {
				if !unbind {
					return &Error{Code: ExitError, Msg: fmt.Sprintf("VirtualClusterPolicy %s binds namespaces %s", args[0], strings.Join(ns, ", ")),
						Hint: "unbind them first (k3kcli policy unbind), or add --unbind"}
				}
				namespaces, err := namespacesToBind(cmd.Context(), s, "", ns, true)
				if err != nil {
					return err
				}
				if err := bindNamespaces(cmd.Context(), o, s, "", namespaces); err != nil {
					return err
				}
			}
			p := &v1beta1.VirtualClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: args[0]}}
			if err := s.client.Delete(cmd.Context(), p); err != nil {
				return apiErr(err, "deleting VirtualClusterPolicy "+args[0])
			}
			fmt.Fprintf(o.Out, "VirtualClusterPolicy %s deleted\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&unbind, "unbind", false, "unbind the namespaces bound to it first")
	return cmd
}
