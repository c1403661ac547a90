package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/controller/cluster"
)

// readyCluster is a cluster that is ready, with its kubeconfig for the user.
type readyCluster struct {
	cluster    *v1beta1.Cluster
	kubeconfig []byte
	access     access
}

// waitReady polls the cluster until it is Ready and its kubeconfig can be
// rendered for the user, printing the phase and the reasons of conditions that
// are not yet true whenever they change, with the elapsed time.
func waitReady(ctx context.Context, o Options, s *session, c *v1beta1.Cluster, timeout time.Duration) (*readyCluster, error) {
	start := o.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key := client.ObjectKeyFromObject(c)
	var last string
	lastPrinted := start
	for {
		cur := &v1beta1.Cluster{}
		if err := s.client.Get(ctx, key, cur); err != nil {
			if ctx.Err() != nil {
				return nil, timeoutErr(c, timeout, last)
			}
			return nil, apiErr(err, fmt.Sprintf("waiting for cluster %s/%s", c.Namespace, c.Name))
		}
		state := progress(cur)
		now := o.Now()
		if state != last || now.Sub(lastPrinted) >= o.Heartbeat {
			fmt.Fprintf(o.Err, "[%6s] %s\n", now.Sub(start).Round(time.Second), state)
			last, lastPrinted = state, now
		}
		switch cur.Status.Phase {
		case v1beta1.PhaseFailed:
			return nil, &Error{
				Code: ExitClusterFailed,
				Msg:  fmt.Sprintf("cluster %s/%s failed: %s", c.Namespace, c.Name, failureMessage(cur)),
				Hint: fmt.Sprintf("kubectl describe clusters.k3k.io %s -n %s shows every condition; delete it with: k3kcli cluster delete %s -n %s", c.Name, c.Namespace, c.Name, c.Namespace),
			}
		case v1beta1.PhaseReady:
			rc, err := fetchKubeconfig(ctx, s, cur, "")
			if err == nil {
				return rc, nil
			}
			if !errors.Is(err, errNotYet) {
				return nil, err
			}
			if state := state + " (" + err.Error() + ")"; state != last {
				fmt.Fprintf(o.Err, "[%6s] %s\n", now.Sub(start).Round(time.Second), state)
				last, lastPrinted = state, now
			}
		}
		select {
		case <-ctx.Done():
			return nil, timeoutErr(c, timeout, last)
		case <-time.After(o.PollInterval):
		}
	}
}

// progress is one line saying where the cluster is: its phase, then the type
// and reason of every condition that is not yet true.
func progress(c *v1beta1.Cluster) string {
	phase := string(c.Status.Phase)
	if phase == "" {
		phase = "Pending (waiting for the k3k controller)"
	}
	var pending []string
	for _, cond := range c.Status.Conditions {
		if cond.Status != metav1.ConditionTrue && cond.Type != cluster.ConditionReady {
			pending = append(pending, cond.Type+"="+cond.Reason)
		}
	}
	slices.Sort(pending)
	if len(pending) == 0 {
		return phase
	}
	return phase + ": " + strings.Join(pending, ", ")
}

// failureMessage is why a Failed cluster failed: the Ready condition's message.
func failureMessage(c *v1beta1.Cluster) string {
	for _, cond := range c.Status.Conditions {
		if cond.Type == cluster.ConditionReady && cond.Message != "" {
			return cond.Message
		}
	}
	return "the controller reported phase Failed without a reason"
}

func timeoutErr(c *v1beta1.Cluster, timeout time.Duration, last string) error {
	msg := fmt.Sprintf("cluster %s/%s not ready after %s", c.Namespace, c.Name, timeout)
	if last != "" {
		msg += "; last seen: " + last
	}
	return &Error{
		Code: ExitTimeout,
		Msg:  msg,
		Hint: fmt.Sprintf("it keeps starting in the background: check it with k3kcli cluster list -n %s, fetch its kubeconfig later with k3kcli kubeconfig get %s -n %s, or raise --timeout", c.Namespace, c.Name, c.Namespace),
	}
}
