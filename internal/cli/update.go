package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// updateFlags are the settings of `cluster update`; only flags the user set
// change anything.
type updateFlags struct {
	servers       int32
	version       string
	addTLSSANs    []string
	removeTLSSANs []string
	addArgs       []string
	removeArgs    []string
	storageSize   string
	wait          bool
	timeout       time.Duration
}

func newUpdateCommand(o Options, g *globalFlags) *cobra.Command {
	f := &updateFlags{}
	cmd := &cobra.Command{
		Use:   "update NAME",
		Short: "Change a virtual cluster's servers, k3s version, TLS SANs, server arguments or volume size",
		Long: `Change a virtual cluster: only the flags given change anything. The change is
shown, then sent as a patch that fails if the cluster changed in between, and (with
--wait, the default) k3kcli waits until the controller has acted on it
(status.observedGeneration) and the cluster is ready again.

Volumes only grow (the storage class must allow expansion). The number of servers
follows the datastore: sqlite runs 1; etcd 1, 3, 5 or 7, one member at a time.
Server arguments are added at the end of spec.serverArgs and removed by their exact
text; the API server refuses the ones k3k sets itself (--token, --tls-san, ...).
A change restarts the server pods, one at a time.`,
		Example: `  k3kcli cluster update ha -n tenants --servers 5
  k3kcli cluster update dev --version v1.34.3-k3s1
  k3kcli cluster update dev --add-tls-san dev.example.com --storage-size 20Gi
  k3kcli cluster update dev --add-server-arg=--kube-apiserver-arg=v=4 --remove-server-arg=--kube-apiserver-arg=v=2`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.timeout <= 0 {
				return usageErr("e.g. --timeout 10m", "--timeout must be positive, got %s", f.timeout)
			}
			s, err := g.connect()
			if err != nil {
				return err
			}
			return runUpdate(cmd.Context(), o, s, f, cmd, args[0])
		},
	}
	fl := cmd.Flags()
	fl.Int32Var(&f.servers, "servers", 0, "number of k3s servers: 1 for sqlite; 1, 3, 5 or 7 for etcd")
	fl.StringVar(&f.version, "version", "", "k3s version (image tag), e.g. v1.34.3-k3s1")
	fl.StringSliceVar(&f.addTLSSANs, "add-tls-san", nil, "name or address to add to the API certificate (repeatable)")
	fl.StringSliceVar(&f.removeTLSSANs, "remove-tls-san", nil, "name or address to remove from the API certificate (repeatable)")
	// Arrays, not slices: a k3s argument may hold commas (--disable=traefik,servicelb).
	fl.StringArrayVar(&f.addArgs, "add-server-arg", nil, "k3s server argument to add, e.g. --add-server-arg=--kube-apiserver-arg=v=4 (repeatable)")
	fl.StringArrayVar(&f.removeArgs, "remove-server-arg", nil, "k3s server argument to remove, as spec.serverArgs has it (repeatable)")
	fl.StringVar(&f.storageSize, "storage-size", "", "new size of each server volume, e.g. 20Gi (grow only)")
	fl.BoolVar(&f.wait, "wait", true, "wait until the controller applied the change and the cluster is ready")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Minute, "how long --wait waits")
	return cmd
}

// defaultStorageSize is the size the controller gives a volume when
// spec.persistence.storageRequestSize is empty (docs/chart.md).
const defaultStorageSize = "2Gi"

// change is one field an update sets, for showing it.
type change struct {
	field    string
	from, to string
}

func runUpdate(ctx context.Context, o Options, s *session, f *updateFlags, cmd *cobra.Command, name string) error {
	key := types.NamespacedName{Namespace: s.namespace, Name: name}
	cur, err := s.getCluster(ctx, name)
	if err != nil {
		return err
	}
	want, changes, err := updatedCluster(cur, f, cmd.Flags().Changed("servers"))
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		fmt.Fprintf(o.Out, "cluster %s/%s: nothing to change\n", key.Namespace, key.Name)
		return nil
	}
	fmt.Fprintf(o.Out, "cluster %s/%s:\n", key.Namespace, key.Name)
	for _, c := range changes {
		fmt.Fprintf(o.Out, "  %s: %s -> %s\n", c.field, c.from, c.to)
	}
	// The optimistic lock makes the patch fail rather than undo a change
	// someone made since the Get.
	patch := client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{})
	if err := s.client.Patch(ctx, want, patch); err != nil {
		return apiErr(err, fmt.Sprintf("updating cluster %s/%s", key.Namespace, key.Name))
	}
	fmt.Fprintf(o.Out, "cluster %s/%s updated (generation %d)\n", key.Namespace, key.Name, want.Generation)
	if !f.wait {
		return nil
	}
	start := o.Now()
	if err := waitApplied(ctx, o, s, want, f.timeout); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "cluster %s/%s is ready with the change after %s\n", key.Namespace, key.Name, o.Now().Sub(start).Round(time.Second))
	return nil
}

// updatedCluster applies the flags the user set to a copy of cur, refusing
// what the controller or the API server would refuse, and lists the changes.
func updatedCluster(cur *v1beta1.Cluster, f *updateFlags, serversSet bool) (*v1beta1.Cluster, []change, error) {
	want := cur.DeepCopy()
	var changes []change
	if serversSet {
		etcd := cur.Spec.Datastore.Type == v1beta1.EtcdDatastore || (cur.Spec.Datastore.Type == "" && cur.Status.Datastore != nil && cur.Status.Datastore.Type == v1beta1.EtcdDatastore)
		switch {
		case f.servers < 1 || f.servers > 7:
			return nil, nil, usageErr("use 1 for sqlite; 1, 3, 5 or 7 for etcd", "--servers %d is out of range", f.servers)
		case f.servers > 1 && !etcd:
			return nil, nil, usageErr("the datastore is chosen at creation; create an etcd cluster for more than one server",
				"--servers %d: cluster %s/%s runs sqlite, which runs exactly 1 server", f.servers, cur.Namespace, cur.Name)
		case f.servers%2 == 0:
			return nil, nil, usageErr("use 1, 3, 5 or 7 servers", "--servers %d: etcd needs an odd number of servers to keep quorum", f.servers)
		}
		if f.servers != cur.Spec.Servers {
			changes = append(changes, change{"spec.servers", fmt.Sprint(cur.Spec.Servers), fmt.Sprint(f.servers)})
			want.Spec.Servers = f.servers
		}
	}
	if f.version != "" {
		if !versionPattern.MatchString(f.version) || len(f.version) > 128 {
			return nil, nil, usageErr("use a k3s image tag such as v1.34.3-k3s1", "--version %q is not an image tag", f.version)
		}
		if f.version != cur.Spec.Version {
			changes = append(changes, change{"spec.version", orDefault(cur.Spec.Version), f.version})
			want.Spec.Version = f.version
		}
	}
	sans := slices.Clone(cur.Spec.TLSSANs)
	for _, san := range f.removeTLSSANs {
		san = strings.TrimSpace(san)
		if !slices.Contains(sans, san) {
			return nil, nil, usageErr("k3kcli cluster list -o yaml shows spec.tlsSANs", "--remove-tls-san %q: the cluster has no such TLS SAN", san)
		}
		sans = slices.DeleteFunc(sans, func(s string) bool { return s == san })
	}
	for _, san := range f.addTLSSANs {
		if san = strings.TrimSpace(san); san == "" {
			return nil, nil, usageErr("e.g. --add-tls-san k3k.example.com", "--add-tls-san must not be empty")
		}
		sans = appendUnique(sans, san)
	}
	if !slices.Equal(sans, cur.Spec.TLSSANs) {
		changes = append(changes, change{"spec.tlsSANs", "[" + strings.Join(cur.Spec.TLSSANs, ", ") + "]", "[" + strings.Join(sans, ", ") + "]"})
		want.Spec.TLSSANs = sans
	}
	args := slices.Clone(cur.Spec.ServerArgs)
	for _, a := range f.removeArgs {
		if !slices.Contains(args, a) {
			return nil, nil, usageErr("k3kcli cluster list -o yaml shows spec.serverArgs", "--remove-server-arg %q: the cluster has no such server argument", a)
		}
		args = slices.DeleteFunc(args, func(s string) bool { return s == a })
	}
	for _, a := range f.addArgs {
		if strings.TrimSpace(a) == "" {
			return nil, nil, usageErr("e.g. --add-server-arg=--kube-apiserver-arg=v=4", "--add-server-arg must not be empty")
		}
		args = appendUnique(args, a)
	}
	// The API server checks the arguments (the CRD's rules), so that create,
	// update and kubectl are held to the same list.
	if !slices.Equal(args, cur.Spec.ServerArgs) {
		changes = append(changes, change{"spec.serverArgs", quotedList(cur.Spec.ServerArgs), quotedList(args)})
		want.Spec.ServerArgs = args
	}
	if f.storageSize != "" {
		if ephemeral(cur) {
			return nil, nil, usageErr("drop --storage-size", "cluster %s/%s uses ephemeral persistence: it has no volumes to grow", cur.Namespace, cur.Name)
		}
		q, err := resource.ParseQuantity(f.storageSize)
		if err != nil || q.Sign() <= 0 {
			return nil, nil, usageErr("use a size such as 20Gi", "--storage-size %q is not a positive quantity", f.storageSize)
		}
		old := cur.Spec.Persistence.StorageRequestSize
		oldQ := resource.MustParse(defaultStorageSize)
		if old != "" {
			if p, err := resource.ParseQuantity(old); err == nil {
				oldQ = p
			}
		}
		switch q.Cmp(oldQ) {
		case -1:
			return nil, nil, usageErr("volumes only grow", "--storage-size %s is smaller than the current %s", f.storageSize, oldQ.String())
		case 1:
			changes = append(changes, change{"spec.persistence.storageRequestSize", oldQ.String(), f.storageSize})
			want.Spec.Persistence.StorageRequestSize = f.storageSize
		}
	}
	return want, changes, nil
}

// quotedList shows arguments quoted, since one may hold a comma or a space.
func quotedList(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func orDefault(v string) string {
	if v == "" {
		return "(the controller's default)"
	}
	return v
}

// waitApplied waits until the controller reports on generation c.Generation
// or later and the cluster is Ready, printing progress as create does.
func waitApplied(ctx context.Context, o Options, s *session, c *v1beta1.Cluster, timeout time.Duration) error {
	start := o.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	lastPrinted := start
	warnings := &clusterWarnings{}
	for {
		cur := &v1beta1.Cluster{}
		if err := s.client.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
			if ctx.Err() != nil {
				return timeoutErr(c, timeout, last)
			}
			return apiErr(err, fmt.Sprintf("waiting for cluster %s/%s", c.Namespace, c.Name))
		}
		state := progress(cur)
		applied := cur.Status.ObservedGeneration >= c.Generation
		if !applied {
			state = "waiting for the controller to see generation " + fmt.Sprint(c.Generation)
		}
		now := o.Now()
		warnings.print(ctx, o, s, cur, now.Sub(start))
		if state != last || now.Sub(lastPrinted) >= o.Heartbeat {
			fmt.Fprintf(o.Err, "[%6s] %s\n", now.Sub(start).Round(time.Second), state)
			last, lastPrinted = state, now
		}
		if applied {
			switch cur.Status.Phase {
			case v1beta1.PhaseFailed:
				return &Error{Code: ExitClusterFailed,
					Msg:  fmt.Sprintf("cluster %s/%s failed: %s", c.Namespace, c.Name, failureMessage(cur)),
					Hint: fmt.Sprintf("kubectl describe clusters.k3k.io %s -n %s shows every condition; undo the change with k3kcli cluster update", c.Name, c.Namespace)}
			case v1beta1.PhaseReady:
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return timeoutErr(c, timeout, last)
		case <-time.After(o.PollInterval):
		}
	}
}
