package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
)

// readyCluster is a cluster that is ready, with its kubeconfig for the user.
type readyCluster struct {
	cluster *v1beta1.Cluster
	// kubeconfig is creds rendered under context, as printed or written.
	kubeconfig []byte
	// creds is the kubeconfig parsed, pointing at access.server; merging and
	// the reachability check use it instead of parsing kubeconfig again.
	creds *kubeconfig.Kubeconfig
	// context names the cluster, user and context in kubeconfig.
	context string
	access  access
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
	reach := &reachability{}
	warnings := &clusterWarnings{}
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
		warnings.print(ctx, o, s, cur, now.Sub(start))
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
				err = reach.check(ctx, o, rc)
			}
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
		interval := o.PollInterval
		if reach.tried {
			// The cluster is Ready and only its address lags: look again soon.
			interval = min(interval, 250*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return nil, timeoutErr(c, timeout, last)
		case <-time.After(interval):
		}
	}
}

// reachability checks, once a cluster is Ready, that its API answers /readyz
// through the very kubeconfig k3kcli is about to hand the user. The server pods
// are Ready only when their API serves, but the Service's endpoints, the nodes'
// forwarding rules or an ingress follow a moment later; a kubeconfig returned
// in between would fail the user's first request.
type reachability struct {
	tried bool
	// silentSince is when the address last started answering nothing at all.
	silentSince time.Time
}

// check returns nil when the API answers /readyz ok at rc's address, or when
// that address is only reachable inside the host cluster, or when nothing at
// all has answered there for o.ReachWait (then it warns and lets the user have
// the kubeconfig: the cluster is ready, this machine just cannot reach it). It
// returns a notYet error while the address answers "not ready", or while it has
// been silent for less than o.ReachWait.
func (r *reachability) check(ctx context.Context, o Options, rc *readyCluster) error {
	if rc.access.inClusterOnly {
		return nil
	}
	r.tried = true
	answered, err := apiReady(ctx, rc.creds)
	switch {
	case err == nil:
		return nil
	case answered:
		r.silentSince = time.Time{}
		return notYet(err.Error())
	case r.silentSince.IsZero():
		r.silentSince = o.Now()
	case o.Now().Sub(r.silentSince) >= o.ReachWait:
		fmt.Fprintf(o.Err, "warning: the cluster is ready, but nothing answers at %s from here (%v); check that this machine can reach it\n", rc.access.server, err)
		return nil
	}
	return notYet(err.Error())
}

// apiReady asks GET /readyz with the server and credentials of k. answered is
// true when the server sent an HTTP response, whatever it said. The error never
// holds credentials.
func apiReady(ctx context.Context, k *kubeconfig.Kubeconfig) (answered bool, err error) {
	cfg := k.RESTConfig()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return false, errors.New("the kubeconfig's credentials do not load")
	}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/readyz", nil)
	if err != nil {
		return false, fmt.Errorf("the API at %s: %w", cfg.Host, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		var u *url.Error
		if errors.As(err, &u) {
			err = u.Err
		}
		return false, fmt.Errorf("the API at %s does not answer: %w", cfg.Host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "ok" {
		return true, nil
	}
	return true, fmt.Errorf("the API at %s is not ready yet (/readyz: %d)", cfg.Host, resp.StatusCode)
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
		if cond.Status != metav1.ConditionTrue && cond.Type != v1beta1.ConditionReady {
			p := cond.Type + "=" + cond.Reason
			if v1beta1.IsBlockingReason(cond.Reason) {
				// The controller names what holds the server up.
				p += " (" + cond.Message + ")"
			}
			pending = append(pending, p)
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
		if cond.Type == v1beta1.ConditionReady && cond.Message != "" {
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

// followCluster reads c every PollInterval and prints the line state makes
// of it whenever that line changes, until done says the cluster got where
// the command waits for, or fails. When ctx ends it returns onTimeout's
// error, given the last line printed.
func followCluster(ctx context.Context, o Options, s *session, c *v1beta1.Cluster, start time.Time,
	state func(*v1beta1.Cluster) string, done func(*v1beta1.Cluster) (bool, error), onTimeout func(last string) error) (*v1beta1.Cluster, error) {
	var last string
	for {
		cur := &v1beta1.Cluster{}
		if err := s.client.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
			if ctx.Err() != nil {
				return nil, onTimeout(last)
			}
			return nil, apiErr(err, fmt.Sprintf("waiting for cluster %s/%s", c.Namespace, c.Name))
		}
		if line := state(cur); line != last {
			fmt.Fprintf(o.Err, "[%6s] %s\n", o.Now().Sub(start).Round(time.Second), line)
			last = line
		}
		if ok, err := done(cur); err != nil || ok {
			return cur, err
		}
		select {
		case <-ctx.Done():
			return nil, onTimeout(last)
		case <-time.After(o.PollInterval):
		}
	}
}
