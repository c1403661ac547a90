package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

type deleteFlags struct {
	keepData       bool
	ignoreNotFound bool
	timeout        time.Duration
}

func newDeleteCommand(o Options, g *globalFlags) *cobra.Command {
	f := &deleteFlags{}
	cmd := &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Delete a virtual cluster",
		Long: `Delete a virtual cluster and everything k3k made for it. With --keep-data the
server volumes stay: a cluster created later with the same name and namespace
starts from the same data.`,
		Example: `  k3kcli cluster delete dev
  k3kcli cluster delete dev -n tenants --keep-data`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.timeout <= 0 {
				return usageErr("e.g. --timeout 2m", "--timeout must be positive, got %s", f.timeout)
			}
			s, err := g.connect()
			if err != nil {
				return err
			}
			return runDelete(cmd.Context(), o, s, f, args[0])
		},
	}
	cmd.Flags().BoolVar(&f.keepData, "keep-data", false, "keep the server volumes (sets spec.persistence.whenDeleted: Retain first)")
	cmd.Flags().BoolVar(&f.ignoreNotFound, "ignore-not-found", false, "succeed when the cluster does not exist")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 2*time.Minute, "how long --keep-data waits for the controller to retain the volumes")
	return cmd
}

func runDelete(ctx context.Context, o Options, s *session, f *deleteFlags, name string) error {
	key := types.NamespacedName{Namespace: s.namespace, Name: name}
	c := &v1beta1.Cluster{}
	if err := s.client.Get(ctx, key, c); err != nil {
		if apierrors.IsNotFound(err) && f.ignoreNotFound {
			fmt.Fprintf(o.Out, "cluster %s/%s does not exist\n", key.Namespace, key.Name)
			return nil
		}
		return apiErr(err, fmt.Sprintf("getting cluster %s/%s", key.Namespace, key.Name))
	}
	retained := c.Spec.Persistence.WhenDeleted == v1beta1.RetainVolumes
	if f.keepData {
		if ephemeral(c) {
			return usageErr("delete without --keep-data", "cluster %s/%s uses ephemeral persistence: it has no volumes to keep", key.Namespace, key.Name)
		}
		if err := retainVolumes(ctx, o, s, c, f.timeout); err != nil {
			return err
		}
		retained = true
	}
	if err := s.client.Delete(ctx, c, client.Preconditions{UID: &c.UID}); err != nil {
		if apierrors.IsNotFound(err) && f.ignoreNotFound {
			return nil
		}
		return apiErr(err, fmt.Sprintf("deleting cluster %s/%s", key.Namespace, key.Name))
	}
	removeContext(o, s, c)
	switch {
	case retained && !ephemeral(c):
		fmt.Fprintf(o.Out, "cluster %s/%s deleted; its volumes are kept: create a cluster named %s in %s to use them again, or delete the PersistentVolumeClaims labelled %s=%s\n",
			key.Namespace, key.Name, key.Name, key.Namespace, v1beta1.LabelCluster, key.Name)
	default:
		fmt.Fprintf(o.Out, "cluster %s/%s deleted with its data\n", key.Namespace, key.Name)
	}
	return nil
}

func ephemeral(c *v1beta1.Cluster) bool {
	return c.Spec.Persistence.Type == v1beta1.EphemeralPersistence || c.Status.PersistenceType == v1beta1.EphemeralPersistence
}

// retainVolumes sets whenDeleted: Retain and waits until it is in force: the
// StatefulSet's claim retention policy says Retain and no server claim is
// owned by the StatefulSet any more. Deleting the Cluster before that would
// let the garbage collector take the volumes with it.
func retainVolumes(ctx context.Context, o Options, s *session, c *v1beta1.Cluster, timeout time.Duration) error {
	if c.Spec.Persistence.WhenDeleted != v1beta1.RetainVolumes {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"persistence":{"whenDeleted":"Retain"}}}`))
		if err := s.client.Patch(ctx, c, patch); err != nil {
			return apiErr(err, fmt.Sprintf("setting spec.persistence.whenDeleted: Retain on cluster %s/%s", c.Namespace, c.Name))
		}
		fmt.Fprintf(o.Err, "set spec.persistence.whenDeleted: Retain; waiting for the controller to retain the volumes\n")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		pending, err := volumesNotRetained(ctx, s, c)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if err == nil && pending == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return &Error{Code: ExitTimeout,
				Msg:  fmt.Sprintf("cluster %s/%s not deleted: its volumes are not retained after %s (%s)", c.Namespace, c.Name, timeout, pending),
				Hint: "the k3k controller applies whenDeleted to the StatefulSet; check that it runs, then retry"}
		case <-time.After(o.PollInterval):
		}
	}
}

// volumesNotRetained says what still stands between the cluster and its
// volumes surviving its deletion; "" when nothing does.
func volumesNotRetained(ctx context.Context, s *session, c *v1beta1.Cluster) (string, error) {
	names := layout.NamesFor(c)
	sts := &appsv1.StatefulSet{}
	err := s.client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: names.StatefulSet}, sts)
	switch {
	case apierrors.IsNotFound(err):
		// No servers yet, so no claims the StatefulSet could take along.
	case err != nil:
		return "", apiErr(err, fmt.Sprintf("getting StatefulSet %s/%s", c.Namespace, names.StatefulSet))
	default:
		p := sts.Spec.PersistentVolumeClaimRetentionPolicy
		if p == nil || p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
			return "StatefulSet " + names.StatefulSet + " still deletes its volumes", nil
		}
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := s.client.List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels{v1beta1.LabelCluster: c.Name}); err != nil {
		return "", apiErr(err, "listing the server volumes of cluster "+c.Namespace+"/"+c.Name)
	}
	for _, pvc := range claims.Items {
		for _, ref := range pvc.OwnerReferences {
			if ref.Kind == "StatefulSet" && ref.Name == names.StatefulSet {
				return "PersistentVolumeClaim " + pvc.Name + " is still owned by the StatefulSet", nil
			}
		}
	}
	return "", nil
}
