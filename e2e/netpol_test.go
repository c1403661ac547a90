//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// TestNetworkPolicy puts two virtual clusters in two host namespaces and
// probes, from a pod of cluster A, what the NetworkPolicies of issue 15 allow
// and deny; then it turns the policies off and runs the same probes, which
// must now get through: so the denials are the policies' doing, enforced by
// the host cluster's enforcer (hack/tools/netpol), and not a network that
// never worked.
func TestNetworkPolicy(t *testing.T) {
	t.Parallel()
	a := createCluster(t, "npa")
	b := createCluster(t, "npb")
	const ns = "net"
	for _, v := range []*vcluster{a, b} {
		waitAgentNode(t, v)
		if err := retry(func(ctx context.Context) error {
			_, err := v.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"k3k-" + v.name + "-workloads", "k3k-" + v.name + "-server", "k3k-" + v.name + "-agent"} {
			if _, err := host.NetworkingV1().NetworkPolicies(v.namespace).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
				t.Fatalf("NetworkPolicy %s/%s: %v", v.namespace, name, err)
			}
		}
	}

	// B: a web server another tenant must not reach.
	createVirtualPod(t, b, inNamespace(httpdPod("target"), ns))
	// A: a web server behind a Service, and the client the probes run in.
	createVirtualPod(t, a, inNamespace(httpdPod("web"), ns))
	createVirtualPod(t, a, inNamespace(idlePod("client"), ns))
	if err := retry(func(ctx context.Context) error {
		_, err := a.client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	target := waitVirtualPodRunning(t, b, ns, "app=target", 5*time.Minute)
	waitVirtualPodRunning(t, a, ns, "app=web", 5*time.Minute)
	clientPod := waitVirtualPodRunning(t, a, ns, "app=client", 5*time.Minute)
	var webSvc *corev1.Service
	eventually(t, 3*time.Minute, "the host copy of Service net/web", func(ctx context.Context) (bool, error) {
		s, ok := findHostCopy(ctx, a, "services", ns, "web")
		if ok {
			webSvc = s.(*corev1.Service)
		}
		return ok, nil
	})
	api, err := host.CoreV1().Services(a.namespace).Get(context.Background(), a.service(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	server := getPod(t, a, a.pod())
	t.Logf("probing from %s/%s (IP %s): B's pod %s, A's Service %s, A's API %s, A's server pod %s",
		ns, clientPod.Name, clientPod.Status.PodIP, target.Status.PodIP, webSvc.Spec.ClusterIP, api.Spec.ClusterIP, server.Status.PodIP)

	rc := restConfig(t, a.kubeconfig)
	p := prober{rc: rc, ns: ns, pod: clientPod.Name}
	denied := []probe{
		{"another tenant's pod", target.Status.PodIP, 8080, "/"},
		{"its server's datastore health port", server.Status.PodIP, 2381, "/readyz"},
		{"its server's datastore metrics port", server.Status.PodIP, 2382, "/metrics"},
		{"its server's publisher health port", server.Status.PodIP, 2383, "/healthz"},
	}
	allowed := []probe{
		{"its own Service", webSvc.Spec.ClusterIP, 80, "/"},
		// Plain HTTP to the TLS port: the API server answers 400, which
		// proves the connection was made.
		{"its own API server", api.Spec.ClusterIP, 443, "/"},
	}

	t.Run("with the policies, a pod reaches no other tenant and no server health or metrics port", func(t *testing.T) {
		// First, so the allowances below are checked while the enforcer
		// is known to be filtering this pod.
		p.expectAll(t, denied, false)
	})

	t.Run("with the policies, a pod reaches its own Service, API server and DNS", func(t *testing.T) {
		p.expectAll(t, allowed, true)
		eventually(t, time.Minute, "nslookup web through the agent's DNS", func(ctx context.Context) (bool, error) {
			o, e, _ := execIn(ctx, rc, ns, clientPod.Name, "sh", "", "nslookup", "web."+ns+".svc.cluster.local")
			if !strings.Contains(o, "Address: "+webSvc.Spec.ClusterIP) {
				return false, fmt.Errorf("nslookup: %q %q", o, e)
			}
			return true, nil
		})
	})
	t.Run("without the policies the same probes get through: the enforcer is what refused them", func(t *testing.T) {
		crc := clusterClient(t)
		for _, v := range []*vcluster{a, b} {
			setNetworkPolicy(t, crc, v, false)
		}
		for _, v := range []*vcluster{a, b} {
			eventually(t, time.Minute, "the NetworkPolicies of "+v.name+" removed", func(ctx context.Context) (bool, error) {
				list, err := host.NetworkingV1().NetworkPolicies(v.namespace).List(ctx, metav1.ListOptions{})
				return err == nil && len(list.Items) == 0, err
			})
		}
		p.expectAll(t, denied, true)
		// And back on: the first denial holds again.
		for _, v := range []*vcluster{a, b} {
			setNetworkPolicy(t, crc, v, true)
		}
		// What the node reaches now (logged for diagnosis; the node's own
		// traffic is not subject to policy).
		for _, addr := range []string{net.JoinHostPort(server.Status.PodIP, "6443"), strings.TrimPrefix(rc.Host, "https://")} {
			conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err == nil {
				conn.Close()
			}
			t.Logf("from the node, with the policies back: dial %s: %v", addr, err)
		}
		p.expect(t, denied[0], false)
		p.expect(t, allowed[0], true)
	})
}

// setNetworkPolicy sets spec.networkPolicy.enabled of v's Cluster.
func setNetworkPolicy(t *testing.T, crc client.Client, v *vcluster, on bool) {
	t.Helper()
	c := &v1beta1.Cluster{}
	if err := crc.Get(context.Background(), types.NamespacedName{Namespace: v.namespace, Name: v.name}, c); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.NetworkPolicy = &v1beta1.NetworkPolicyConfig{Enabled: ptr.To(on)}
	if err := crc.Patch(context.Background(), c, patch); err != nil {
		t.Fatalf("setting spec.networkPolicy.enabled=%v on %s: %v", on, v.name, err)
	}
	if on {
		eventually(t, time.Minute, "the NetworkPolicies of "+v.name+" back", func(ctx context.Context) (bool, error) {
			list, err := host.NetworkingV1().NetworkPolicies(v.namespace).List(ctx, metav1.ListOptions{})
			return err == nil && len(list.Items) == 3, err
		})
	}
}

// probe is one connection attempt from the client pod.
type probe struct {
	what string
	ip   string
	port int
	path string
}

type prober struct {
	rc      *rest.Config
	ns, pod string
}

// outcome is what one probe found.
type outcome int

const (
	// unknown: the probe did not run (the exec failed); try again.
	unknown outcome = iota
	// reached: a connection was made.
	reached
	// blocked: the connection was refused, timed out or had no route. The
	// enforcer rejects (ICMP port unreachable: "refused") where it denies.
	blocked
)

// probe sends an HTTP/1.0 request with busybox nc from the client pod (its
// wget segfaults, in the static binary's service lookup). Reached means nc
// connected (it exits 0, or the server answered); blocked means nc could not
// connect (the enforcer rejects: "refused", or drops: "timed out"); anything
// else is unknown and tried again. nc's exit code and messages are printed on
// stdout rather than taken from the exec: once in a cold CI run the exec
// came back without an error while nc had said "Connection refused", and the
// probe read that as reached. An output without the exit line (an exec that
// did not run, or was cut) is unknown.
func (p prober) probe(ctx context.Context, pr probe) (outcome, string) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	script := fmt.Sprintf(`printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' | nc -w 3 %s %d 2>&1; echo "%s$?"`, pr.path, pr.ip, pr.ip, pr.port, ncExit)
	o, e, err := execIn(ctx, p.rc, p.ns, p.pod, "sh", "", "sh", "-c", script)
	out, code, ok := cutExitLine(o)
	detail := fmt.Sprintf("nc %s:%d: exit %q (exec: %v): %q %q", pr.ip, pr.port, code, err, firstLine(out), strings.TrimSpace(e))
	if !ok {
		return unknown, detail
	}
	// nc exits 0 only once it connected and the server closed the
	// connection (a TLS server may close on plain HTTP without a word).
	if code == "0" || strings.Contains(out, "HTTP/1.") {
		return reached, detail
	}
	for _, no := range []string{"refused", "timed out", "unreachable", "No route"} {
		if strings.Contains(out, no) {
			return blocked, detail
		}
	}
	return unknown, detail
}

// ncExit starts the line the probe's script ends with: nc's exit code.
const ncExit = "nc-exit="

// cutExitLine splits the probe's output into what nc printed and its exit
// code; ok is false when the exit line is missing.
func cutExitLine(o string) (out, code string, ok bool) {
	i := strings.LastIndex(o, ncExit)
	if i < 0 {
		return o, "", false
	}
	return o[:i], strings.TrimSpace(o[i+len(ncExit):]), true
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// expect waits up to a minute for pr to be reached (want true) or blocked
// (want false), then requires the same outcome three more times: a new pod
// is not filtered until the enforcer has seen it.
func (p prober) expect(t *testing.T, pr probe, want bool) {
	t.Helper()
	p.expectAll(t, []probe{pr}, want)
}

// expectAll is expect for every probe of prs at once: a blocked probe waits
// out nc's 3 s timeout four times, so one after the other they add up to
// minutes of a suite that runs on a CI budget.
func (p prober) expectAll(t *testing.T, prs []probe, want bool) {
	t.Helper()
	errs := make([]error, len(prs))
	var wg sync.WaitGroup
	for i, pr := range prs {
		wg.Go(func() { errs[i] = p.hold(pr, want) })
	}
	wg.Wait()
	failed := false
	for i, err := range errs {
		if err != nil {
			t.Error(err)
			failed = true
			continue
		}
		t.Logf("%s%s (%s:%d): holds", verb(want), prs[i].what, prs[i].ip, prs[i].port)
	}
	if failed {
		t.FailNow()
	}
}

// hold is one probe of expect.
func (p prober) hold(pr probe, want bool) error {
	wantOutcome := reached
	if !want {
		wantOutcome = blocked
	}
	err := waitFor(time.Minute, verb(want)+pr.what, func(ctx context.Context) (bool, error) {
		got, detail := p.probe(ctx, pr)
		if got != wantOutcome {
			return false, errors.New(detail)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for i, tries := 0, 0; i < 3; tries++ {
		got, detail := p.probe(context.Background(), pr)
		if got == unknown {
			if tries > 20 {
				return fmt.Errorf("probing %s keeps failing to run: %s", pr.what, detail)
			}
			continue
		}
		if got != wantOutcome {
			return fmt.Errorf("%s%s (%s:%d) did not hold: %s", verb(want), pr.what, pr.ip, pr.port, detail)
		}
		i++
	}
	return nil
}

func verb(want bool) string {
	if want {
		return "reaching "
	}
	return "being refused "
}

// httpdPod serves a page on 8080 with busybox httpd.
func httpdPod(app string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: app, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name: "httpd", Image: toolboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "mkdir -p /www && echo hello > /www/index.html && exec httpd -f -p 8080 -h /www"},
				Ports:   []corev1.ContainerPort{{ContainerPort: 8080}},
			}},
		},
	}
}

// idlePod is the toolbox, idle, for exec.
func idlePod(app string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: app, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name: "sh", Image: toolboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "exec sleep 3600"},
			}},
		},
	}
}

// createVirtualPod creates pod in namespace ns of v, once the namespace's
// default ServiceAccount exists (the virtual API refuses pods before).
