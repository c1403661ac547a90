package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

type pauseFlags struct {
	wait    bool
	timeout time.Duration
}

func newPauseCommand(o Options, g *globalFlags) *cobra.Command {
	return pauseCommand(o, g, true, "pause NAME", "Stop a virtual cluster's pods, keeping its data",
		`Set spec.paused: the controller scales the servers and the agent to zero and keeps
the volumes, Secrets and Services; the phase becomes Paused. With --wait (default)
k3kcli waits until no server or agent pod runs. Refused for clusters with the etcd
datastore or ephemeral persistence (their data would not survive).`,
		"  k3kcli cluster pause dev -n tenants")
}

func newResumeCommand(o Options, g *globalFlags) *cobra.Command {
	return pauseCommand(o, g, false, "resume NAME", "Start a paused virtual cluster again on its data",
		`Clear spec.paused: the controller starts the same servers on the same volumes and
the agent. With --wait (default) k3kcli waits until the cluster is Ready.`,
		"  k3kcli cluster resume dev -n tenants")
}

func pauseCommand(o Options, g *globalFlags, pause bool, use, short, long, example string) *cobra.Command {
	f := &pauseFlags{}
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long, Example: example,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.timeout <= 0 {
				return usageErr("e.g. --timeout 5m", "--timeout must be positive, got %s", f.timeout)
			}
			s, err := g.connect()
			if err != nil {
				return err
			}
			return runPause(cmd.Context(), o, s, f, args[0], pause)
		},
	}
	cmd.Flags().BoolVar(&f.wait, "wait", true, "wait until the controller has stopped (or started) the cluster")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Minute, "how long --wait waits")
	return cmd
}

func runPause(ctx context.Context, o Options, s *session, f *pauseFlags, name string, pause bool) error {
	c, err := s.getCluster(ctx, name)
	if err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
	verb := map[bool]string{true: "paused", false: "resumed"}[pause]
	if pause {
		ds := c.Spec.Datastore.Type
		if c.Status.Datastore != nil && c.Status.Datastore.Type != "" {
			ds = c.Status.Datastore.Type
		}
		switch {
		case ds == v1beta1.EtcdDatastore:
			return usageErr("stop it by deleting it with --keep-data instead, and create it again later", "cluster %s/%s runs etcd, which pause does not support yet", key.Namespace, key.Name)
		case ephemeral(c):
			return usageErr("an ephemeral cluster's data lives in its pods", "cluster %s/%s uses ephemeral persistence: pausing it would lose its data", key.Namespace, key.Name)
		}
	}
	if c.Spec.Paused != pause {
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"paused":%t}}`, pause)))
		if err := s.client.Patch(ctx, c, patch); err != nil {
			return apiErr(err, fmt.Sprintf("setting spec.paused: %t on cluster %s/%s", pause, key.Namespace, key.Name))
		}
		fmt.Fprintf(o.Out, "cluster %s/%s: spec.paused set to %t\n", key.Namespace, key.Name, pause)
	}
	if !f.wait {
		return nil
	}
	start := o.Now()
	if pause {
		err = waitPaused(ctx, o, s, c, f.timeout)
	} else {
		err = waitApplied(ctx, o, s, c, f.timeout)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "cluster %s/%s %s after %s\n", key.Namespace, key.Name, verb, o.Now().Sub(start).Round(time.Second))
	return nil
}

// waitPaused waits until the controller reports the Paused condition True
// for the generation that set spec.paused.
func waitPaused(ctx context.Context, o Options, s *session, c *v1beta1.Cluster, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	seen := func(cur *v1beta1.Cluster) *metav1.Condition {
		if cur.Status.ObservedGeneration < c.Generation {
			return nil
		}
		return meta.FindStatusCondition(cur.Status.Conditions, v1beta1.ConditionPaused)
	}
	state := func(cur *v1beta1.Cluster) string {
		if cond := seen(cur); cond != nil {
			return string(cur.Status.Phase) + ": Paused=" + cond.Reason + " (" + cond.Message + ")"
		}
		return "waiting for the controller to see spec.paused"
	}
	done := func(cur *v1beta1.Cluster) (bool, error) {
		cond := seen(cur)
		if cond == nil {
			return false, nil
		}
		if cond.Reason == v1beta1.ReasonPauseUnsupported {
			return false, &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s/%s was not paused: %s", c.Namespace, c.Name, cond.Message),
				Hint: fmt.Sprintf("clear it with k3kcli cluster resume %s -n %s", c.Name, c.Namespace)}
		}
		return cond.Status == metav1.ConditionTrue, nil
	}
	_, err := followCluster(ctx, o, s, c, o.Now(), state, done, func(last string) error { return timeoutErr(c, timeout, last) })
	return err
}
