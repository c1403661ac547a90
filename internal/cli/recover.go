package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

func newRecoverCommand(o Options, g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "recover NAME",
		Short: "Rebuild an etcd virtual cluster that lost quorum from its most advanced surviving member",
		Long: `Ask the k3k controller to rebuild an etcd virtual cluster that has lost quorum
(a majority of its members are gone and cannot come back, e.g. their volumes
were lost). The controller picks the surviving member with the most advanced
log, restarts it as a cluster of one from its own data (etcd's
--force-new-cluster), then adds the other servers back as new members, which
copy the data from it. Every write that survivor held is kept; writes only the
lost members held are gone.

The controller acts only while quorum is lost: asked for a cluster with quorum,
or with no member answering, it refuses. Either way it reports in the Cluster's
EtcdRecovery condition and in Events, and records the request as handled.`,
		Example: `  k3kcli cluster recover ha -n tenants`,
		Args:    oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.connect()
			if err != nil {
				return err
			}
			return runRecover(cmd.Context(), o, s, args[0])
		},
	}
}

func runRecover(ctx context.Context, o Options, s *session, name string) error {
	key := types.NamespacedName{Namespace: s.namespace, Name: name}
	c := &v1beta1.Cluster{}
	if err := s.client.Get(ctx, key, c); err != nil {
		return apiErr(err, fmt.Sprintf("getting cluster %s/%s", key.Namespace, key.Name))
	}
	if !usesEtcd(c) {
		return usageErr("recover applies to clusters with datastore.type etcd", "cluster %s/%s does not run etcd members: there is no quorum to recover", key.Namespace, key.Name)
	}
	request := time.Now().UTC().Format(time.RFC3339Nano)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1beta1.AnnotationEtcdRecover: request}}})
	if err != nil {
		return err
	}
	if err := s.client.Patch(ctx, c, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return apiErr(err, fmt.Sprintf("requesting the recovery of cluster %s/%s", key.Namespace, key.Name))
	}
	fmt.Fprintf(o.Out, "recovery of cluster %s/%s requested (%s); the controller reports it in the EtcdRecovery condition and in Events\n", key.Namespace, key.Name, request)
	return nil
}

func usesEtcd(c *v1beta1.Cluster) bool {
	if c.Spec.Datastore.Type != "" {
		return c.Spec.Datastore.Type == v1beta1.EtcdDatastore
	}
	return c.Status.Datastore != nil && c.Status.Datastore.Type == v1beta1.EtcdDatastore
}
