package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// connectAddress is where connect listens: loopback only, so the forwarded
// API is not offered to the network this machine is on. The k3s serving
// certificate is valid for it.
const connectAddress = "127.0.0.1"

type connectFlags struct {
	localPort int
	output    string
	mergeFlags
}

func newConnectCommand(o Options, g *globalFlags) *cobra.Command {
	f := &connectFlags{}
	cmd := &cobra.Command{
		Use:   "connect NAME",
		Short: "Reach a virtual cluster's API from this machine through the host API server",
		Long: `Forward a local port to a ready server pod of the virtual cluster through the host
API server (the port-forwarding kubectl port-forward uses), and hand out a kubeconfig
whose server is that local port: printed, written with --output-kubeconfig, or merged
into the host kubeconfig with --merge. It works for clusters that are not exposed
(spec.expose unset), whose own address is reachable inside the host cluster only.

It keeps forwarding until interrupted (Ctrl-C). When the server pod goes away it
forwards to another ready one, on the same local port. Use --local-port to keep
the address stable between runs (a merged context keeps working after a restart);
by default a free port is picked.`,
		Example: `  k3kcli cluster connect dev -n tenants --merge --switch-context
  k3kcli cluster connect dev --local-port 6443 --output-kubeconfig dev.yaml`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.localPort < 0 || f.localPort > 65535 {
				return usageErr("e.g. --local-port 6443, or 0 for a free one", "--local-port %d is not a port", f.localPort)
			}
			if f.output != "" && f.wanted() {
				return usageErr("choose one", "--output-kubeconfig and --merge both say where the kubeconfig goes")
			}
			s, err := g.connect()
			if err != nil {
				return err
			}
			return runConnect(cmd.Context(), o, s, f, args[0])
		},
	}
	cmd.Flags().IntVar(&f.localPort, "local-port", 0, "local port to listen on (127.0.0.1); 0 picks a free one")
	cmd.Flags().StringVar(&f.output, "output-kubeconfig", "", "write the kubeconfig to this file (mode 0600) instead of printing it")
	f.add(cmd)
	return cmd
}

func runConnect(ctx context.Context, o Options, s *session, f *connectFlags, name string) error {
	c, err := s.getCluster(ctx, name)
	if err != nil {
		return err
	}
	pod, err := readyServerPod(ctx, s, c)
	if err != nil {
		return err
	}
	if pod == nil {
		return &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s/%s has no ready server pod to connect to (phase %q)", c.Namespace, c.Name, c.Status.Phase),
			Hint: fmt.Sprintf("wait until it is ready: k3kcli cluster list -n %s", c.Namespace)}
	}
	fw, err := newForwarder(s)
	if err != nil {
		return err
	}
	// The first forward picks the port; the kubeconfig names it, so every
	// later forward (after a server pod went away) listens on the same one.
	first, err := fw.start(ctx, c.Namespace, pod.Name, f.localPort)
	if err != nil {
		return &Error{Code: ExitError, Msg: fmt.Sprintf("forwarding to server pod %s/%s", c.Namespace, pod.Name), Err: err,
			Hint: "your host credentials need create on pods/portforward; a busy --local-port needs another value"}
	}
	port := first.port
	server := "https://" + net.JoinHostPort(connectAddress, strconv.Itoa(port))
	rc, err := fetchKubeconfig(ctx, s, c, server)
	if errors.Is(err, errNotYet) {
		first.stop()
		return &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s/%s has no usable kubeconfig yet", c.Namespace, c.Name), Err: err,
			Hint: fmt.Sprintf("wait until it is ready: k3kcli cluster list -n %s", c.Namespace)}
	}
	if err != nil {
		first.stop()
		return err
	}
	if _, err := apiReady(ctx, rc.creds); err != nil {
		fmt.Fprintf(o.Err, "warning: %v\n", err)
	}
	if err := handOut(o, s.paths, &f.mergeFlags, f.output, rc); err != nil {
		first.stop()
		return err
	}
	fmt.Fprintf(o.Err, "forwarding %s to %s/%s port %d through the host API server; press Ctrl-C to stop\n", server, c.Namespace, pod.Name, layout.APIPort)

	cur := first
	for {
		err := watchForward(ctx, o, s, pod, cur)
		if ctx.Err() != nil {
			fmt.Fprintf(o.Err, "stopped forwarding %s\n", server)
			return nil
		}
		fmt.Fprintf(o.Err, "stopped forwarding to %s/%s (%v); waiting for a ready server pod\n", c.Namespace, pod.Name, err)
		for {
			select {
			case <-ctx.Done():
				fmt.Fprintf(o.Err, "stopped forwarding %s\n", server)
				return nil
			case <-time.After(o.PollInterval):
			}
			next, err := readyServerPod(ctx, s, c)
			if err != nil || next == nil {
				continue
			}
			if cur, err = fw.start(ctx, c.Namespace, next.Name, port); err != nil {
				fmt.Fprintf(o.Err, "forwarding to %s/%s: %v\n", c.Namespace, next.Name, err)
				continue
			}
			pod = next
			fmt.Fprintf(o.Err, "forwarding %s to %s/%s again\n", server, c.Namespace, pod.Name)
			break
		}
	}
}

// watchForward returns when the forward to pod ends, or when pod is no
// longer the ready pod it was (deleted, replaced under the same name, not
// ready): then it stops the forward itself, so the next connection goes to a
// pod that serves instead of failing first.
func watchForward(ctx context.Context, o Options, s *session, pod *corev1.Pod, cur *forward) error {
	for {
		select {
		case err := <-cur.done:
			cur.cancel()
			return err
		case <-ctx.Done():
			cur.stop()
			return ctx.Err()
		case <-time.After(o.PollInterval):
		}
		live := &corev1.Pod{}
		err := s.client.Get(ctx, client.ObjectKeyFromObject(pod), live)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			continue // the host API may be briefly away; the forward may still work
		case live.UID == pod.UID && pickReadyPod([]corev1.Pod{*live}) != nil:
			continue
		}
		cur.stop()
		return errors.New("the pod was deleted, replaced or is not ready")
	}
}

// handOut gives the user a kubeconfig: merged into the host kubeconfig,
// written to output, or printed on Out.
func handOut(o Options, paths *clientcmd.PathOptions, m *mergeFlags, output string, rc *readyCluster) error {
	switch {
	case m.wanted():
		name, file, err := mergeKubeconfig(paths, rc.creds.APIConfig(rc.context), m.switchContext)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "context %s merged into %s (server %s)\n", name, file, rc.access.server)
		if rc.access.note != "" {
			fmt.Fprintf(o.Out, "note: %s\n", rc.access.note)
		}
		if m.switchContext {
			fmt.Fprintf(o.Out, "current context is now %s: kubectl get nodes\n", name)
		} else {
			fmt.Fprintf(o.Out, "use it with: kubectl --context %s get nodes\n", name)
		}
		return nil
	case output != "":
		abs, err := writeKubeconfig(output, rc.kubeconfig)
		if err != nil {
			return err
		}
		printUsage(o, abs, rc)
		return nil
	}
	_, err := o.Out.Write(rc.kubeconfig)
	return err
}

// readyServerPod is a ready server pod of c, the lowest ordinal first; nil
// when none is ready.
func readyServerPod(ctx context.Context, s *session, c *v1beta1.Cluster) (*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := s.client.List(ctx, pods, client.InNamespace(c.Namespace),
		client.MatchingLabels{v1beta1.LabelCluster: c.Name, v1beta1.LabelComponent: v1beta1.ComponentServer}); err != nil {
		return nil, apiErr(err, "listing the server pods of cluster "+c.Namespace+"/"+c.Name)
	}
	return pickReadyPod(pods.Items), nil
}

// pickReadyPod chooses the ready, running pod that is not being deleted with
// the smallest name; nil when there is none.
func pickReadyPod(pods []corev1.Pod) *corev1.Pod {
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && (best == nil || p.Name < best.Name) {
				best = p
			}
		}
	}
	return best
}

// forwarder opens port-forwards to pods through the host API server, the
// way kubectl port-forward does: WebSockets first, SPDY where the server
// does not upgrade to them.
type forwarder struct {
	s   *session
	api kubernetes.Interface
}

func newForwarder(s *session) (*forwarder, error) {
	api, err := kubernetes.NewForConfig(s.restConfig)
	if err != nil {
		return nil, apiErr(err, "connecting to the host cluster")
	}
	return &forwarder{s: s, api: api}, nil
}

// forward is one running port-forward.
type forward struct {
	port   int
	done   chan error
	cancel context.CancelFunc
}

func (f *forward) stop() {
	f.cancel()
	<-f.done
}

// start forwards connectAddress:localPort (0: a free port) to the pod's API
// port and returns once it listens.
func (fw *forwarder) start(ctx context.Context, namespace, pod string, localPort int) (*forward, error) {
	u := fw.api.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(fw.s.restConfig)
	if err != nil {
		return nil, err
	}
	spdyDialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	ws, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, fw.s.restConfig)
	if err != nil {
		return nil, err
	}
	dialer := portforward.NewFallbackDialerForStreaming(ws, spdyDialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	fctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	ports := []string{fmt.Sprintf("%d:%d", localPort, layout.APIPort)}
	pf, err := portforward.NewOnAddressesForStreamingWithContext(fctx, dialer, []string{connectAddress}, ports, ready, io.Discard, io.Discard)
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		if err == nil {
			err = errors.New("the forward ended before it listened")
		}
		return nil, err
	}
	got, err := pf.GetPorts()
	if err != nil || len(got) == 0 {
		cancel()
		<-done
		return nil, fmt.Errorf("reading the forwarded port: %v", err)
	}
	return &forward{port: int(got[0].Local), done: done, cancel: cancel}, nil
}
