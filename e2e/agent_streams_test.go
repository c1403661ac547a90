//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/utils/ptr"
)

// toolboxImage is the host cluster's busybox image (hack/hostcluster): sh,
// cat and nslookup for the client side of the agent tests.
const toolboxImage = "hostcluster.local/toolbox:v1"

// execIn runs command in a container of a virtual pod through the virtual
// API, as kubectl exec does (the virtual apiserver → the agent's kubelet API
// → the host API → the host kubelet), feeding stdin when it is not empty.
func execIn(ctx context.Context, rc *rest.Config, ns, pod, container, stdin string, command ...string) (string, string, error) {
	req := &corev1.PodExecOptions{Container: container, Command: command, Stdin: stdin != "", Stdout: true, Stderr: true}
	u, err := url.Parse(rc.Host)
	if err != nil {
		return "", "", err
	}
	u.Path = "/api/v1/namespaces/" + ns + "/pods/" + pod + "/exec"
	q, err := scheme.ParameterCodec.EncodeParameters(req, corev1.SchemeGroupVersion)
	if err != nil {
		return "", "", err
	}
	u.RawQuery = q.Encode()
	exec, err := remotecommand.NewSPDYExecutor(rc, http.MethodPost, u)
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	opts := remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}
	if stdin != "" {
		opts.Stdin = strings.NewReader(stdin)
	}
	err = exec.StreamWithContext(ctx, opts)
	return stdout.String(), stderr.String(), err
}

// portForwardGet forwards a local port to port of a virtual pod, as kubectl
// port-forward does, and GETs path through it.
func portForwardGet(ctx context.Context, rc *rest.Config, ns, pod string, port int, path string) (string, error) {
	transport, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(rc.Host)
	if err != nil {
		return "", err
	}
	u.Path = "/api/v1/namespaces/" + ns + "/pods/" + pod + "/portforward"
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	var errOut bytes.Buffer
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, &errOut)
	if err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return "", fmt.Errorf("port-forward: %v %s", err, errOut.String())
	case <-ctx.Done():
		return "", ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil {
		return "", err
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[0].Local)) + path)
	if err != nil {
		return "", fmt.Errorf("through the forwarded port: %v %s", err, errOut.String())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return string(body), nil
}

// clientDeployment runs the toolbox in the virtual cluster, idle, as the
// client side of exec and DNS checks.
func clientDeployment(ns string) *appsv1.Deployment {
	labels := map[string]string{"app": "client"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(1)),
					Containers: []corev1.Container{{
						Name: "sh", Image: toolboxImage, ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", "echo client up; exec sleep 3600"},
					}},
				},
			},
		},
	}
}

// testStreamsAndDNS checks kubectl logs, exec (with stdin), port-forward and
// the virtual Service names on the agent's pods: web serves /healthz on
// 8080 behind Service web (port 80), client is the toolbox.
func testStreamsAndDNS(t *testing.T, v *vcluster, ns, web, client string, hostSvc *corev1.Service) {
	// Without virtualClient's short timeouts, which would cut the streams.
	rc := restConfig(t, v.kubeconfig)
	api, err := host.CoreV1().Services(v.namespace).Get(context.Background(), v.service(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiIP := api.Spec.ClusterIP
	t.Run("kubectl logs reaches the host pod", func(t *testing.T) {
		eventually(t, time.Minute, "the client's log", func(ctx context.Context) (bool, error) {
			b, err := v.client.CoreV1().Pods(ns).GetLogs(client, &corev1.PodLogOptions{Container: "sh"}).DoRaw(ctx)
			if err != nil {
				return false, err
			}
			return strings.Contains(string(b), "client up"), nil
		})
	})
	t.Run("kubectl exec runs in the host pod, with stdin and exit status", func(t *testing.T) {
		var out, errOut string
		eventually(t, time.Minute, "exec cat", func(ctx context.Context) (bool, error) {
			var err error
			out, errOut, err = execIn(ctx, rc, ns, client, "sh", "hello from the virtual cluster\n", "cat")
			return err == nil, err
		})
		if out != "hello from the virtual cluster\n" {
			t.Errorf("cat echoed %q (stderr %q)", out, errOut)
		}
		// client-go reports an error stream that ended empty, the status
		// never delivered, as success: the same nil as exit 0 (upstream
		// kubernetes/kubectl#1726). Seen once under CI's load (2026-12-07,
		// the cat above had worked). A nil is tried again, and said; a wrong
		// code, another error, or the status lost every time fails.
		for attempt := 1; ; attempt++ {
			_, _, err := execIn(context.Background(), rc, ns, client, "sh", "", "sh", "-c", "exit 3")
			var exit utilexec.CodeExitError
			if err == nil && attempt < 3 {
				t.Logf("exit 3, attempt %d: no status came back (an empty error stream); trying again", attempt)
				continue
			}
			if !errors.As(err, &exit) || exit.Code != 3 {
				t.Errorf("exit 3 came back as %v (attempt %d)", err, attempt)
			}
			break
		}
	})
	t.Run("kubectl port-forward reaches the pod's port", func(t *testing.T) {
		var body string
		eventually(t, time.Minute, "port-forward to web:8080", func(ctx context.Context) (bool, error) {
			var err error
			body, err = portForwardGet(ctx, rc, ns, web, 8080, "/healthz")
			return err == nil, err
		})
		t.Logf("GET /healthz through port-forward: %q", strings.TrimSpace(body))
	})
	t.Run("pods resolve virtual Service names through the agent's DNS", func(t *testing.T) {
		// busybox nslookup applies the search path only to names without a
		// dot, asks every search domain and exits 1 when any of them is
		// NXDOMAIN (web.svc.cluster.local is), so the answer is read from its
		// output; an exec that fails otherwise is retried. (Its wget cannot
		// resolve names at all: the static binary's getaddrinfo crashes.)
		for _, name := range []string{"web", "web." + ns + ".svc.cluster.local"} {
			want := "Address: " + hostSvc.Spec.ClusterIP
			eventually(t, time.Minute, "nslookup "+name, func(ctx context.Context) (bool, error) {
				o, e, err := execIn(ctx, rc, ns, client, "sh", "", "nslookup", name)
				var exit utilexec.CodeExitError
				if (err != nil && !errors.As(err, &exit)) || !strings.Contains(o, want) {
					return false, fmt.Errorf("nslookup: %v: %q %q", err, o, e)
				}
				return true, nil
			})
			t.Logf("nslookup %s → %s", name, hostSvc.Spec.ClusterIP)
		}
		// The reverse of the ClusterIP (one address on both sides) is the
		// virtual Service's name, answered by the agent.
		want := "web." + ns + ".svc.cluster.local"
		eventually(t, time.Minute, "nslookup "+hostSvc.Spec.ClusterIP, func(ctx context.Context) (bool, error) {
			o, e, err := execIn(ctx, rc, ns, client, "sh", "", "nslookup", hostSvc.Spec.ClusterIP)
			if err != nil || !strings.Contains(o, want) {
				return false, fmt.Errorf("nslookup %s: %v: %q %q, want %s", hostSvc.Spec.ClusterIP, err, o, e, want)
			}
			return true, nil
		})
		// The virtual API by its in-cluster name: the cluster's API Service.
		eventually(t, time.Minute, "nslookup kubernetes.default.svc.cluster.local.", func(ctx context.Context) (bool, error) {
			o, e, err := execIn(ctx, rc, ns, client, "sh", "", "nslookup", "kubernetes.default.svc.cluster.local.")
			if err != nil || !strings.Contains(o, "Address: "+apiIP) {
				return false, fmt.Errorf("nslookup: %v: %q %q, want %s", err, o, e, apiIP)
			}
			return true, nil
		})
	})
	t.Run("a pod connects to the ClusterIP the virtual API shows", func(t *testing.T) {
		// A new Cluster takes the host's Service network, so the address
		// the virtual API server allocated is the host copy's too: a client
		// that reads it from the Service (kubectl get svc, a config file)
		// reaches the workload, not only one that resolves the name.
		vs, err := v.client.CoreV1().Services(ns).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if vs.Spec.ClusterIP != hostSvc.Spec.ClusterIP {
			t.Fatalf("virtual ClusterIP %s, host copy's %s: want one address", vs.Spec.ClusterIP, hostSvc.Spec.ClusterIP)
		}
		// nc, not busybox's static wget, which crashes in getaddrinfo.
		get := fmt.Sprintf(`printf 'GET /healthz HTTP/1.0\r\n\r\n' | nc -w 5 %s 80`, vs.Spec.ClusterIP)
		var o string
		eventually(t, time.Minute, "GET /healthz from "+vs.Spec.ClusterIP+":80", func(ctx context.Context) (bool, error) {
			var e string
			var err error
			o, e, err = execIn(ctx, rc, ns, client, "sh", "", "sh", "-c", get)
			if err != nil || !strings.HasPrefix(o, "HTTP/1.") || !strings.Contains(o, " 200 ") {
				return false, fmt.Errorf("%s: %v: %q %q", get, err, o, e)
			}
			return true, nil
		})
		t.Logf("GET /healthz from pod %s at %s:80: %q", client, vs.Spec.ClusterIP, strings.SplitN(o, "\r\n", 2)[0])
	})
	t.Run("a pod connects to a NodePort Service at the node's address", func(t *testing.T) {
		// The agent serves the node port at its own address, the virtual
		// node's InternalIP, as kube-proxy does on a node; no host node
		// opens it.
		np := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web-np", Namespace: ns},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}
		if err := retry(func(ctx context.Context) error {
			var err error
			np, err = v.client.CoreV1().Services(ns).Create(ctx, np, metav1.CreateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		nodes, err := v.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil || len(nodes.Items) != 1 {
			t.Fatalf("virtual nodes: %v (%v)", nodes, err)
		}
		var nodeIP string
		for _, a := range nodes.Items[0].Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				nodeIP = a.Address
			}
		}
		get := fmt.Sprintf(`printf 'GET /healthz HTTP/1.0\r\n\r\n' | nc -w 5 %s %d`, nodeIP, np.Spec.Ports[0].NodePort)
		eventually(t, time.Minute, "GET /healthz from the node port", func(ctx context.Context) (bool, error) {
			o, e, err := execIn(ctx, rc, ns, client, "sh", "", "sh", "-c", get)
			if err != nil || !strings.Contains(o, " 200 ") {
				return false, fmt.Errorf("%s: %v: %q %q", get, err, o, e)
			}
			return true, nil
		})
		t.Logf("GET /healthz at node %s:%d: 200", nodeIP, np.Spec.Ports[0].NodePort)
	})
	t.Run("the agent guard keeps kubectl exec off the server pod", func(t *testing.T) {
		// The agent's own host identity may not exec into the server pod even
		// though its Role allows pods/exec: impersonate it on the host.
		hc := restConfig(t, cfg.hostKubeconfig)
		hc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + v.namespace + ":k3k-" + v.name + "-kubelet",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + v.namespace, "system:authenticated"}}
		_, _, err := execIn(context.Background(), hc, v.namespace, v.pod(), "k3s", "", "cat", "/proc/self/status")
		if err == nil || !strings.Contains(err.Error(), "of objects it named") {
			t.Errorf("exec into %s as the agent: %v, want the guard's refusal", v.pod(), err)
		}
	})
}
