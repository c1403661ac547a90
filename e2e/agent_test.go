//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestSharedAgent: the shared-mode agent (cmd/kubelet) runs a Deployment of the
// virtual cluster as host pods. The workload is the datastore image's own HTTP
// health endpoint (an image the host already has): it must reach Running,
// serve through the virtual Service's host copy, answer kubectl logs, exec and
// port-forward, be found by its virtual Service name from another pod, keep
// running while the server pod is deleted, and status updates must resume
// afterwards.
func TestSharedAgent(t *testing.T) {
	t.Parallel()
	image := os.Getenv("E2E_WORKLOAD_IMAGE")
	if image == "" {
		image = "k3k-io/k3k-datastore:dev"
	}
	v := createCluster(t, "shared")
	waitAgentNode(t, v)

	const ns = "shop"
	labels := map[string]string{"app": "web"}
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "web", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"/usr/local/bin/datastore", "sqlite", "--data-dir=/data",
							"--listen-address=127.0.0.1:2379", "--health-address=:8080", "--metrics-address=127.0.0.1:0"},
						Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 2},
						VolumeMounts:   []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	virtualPod := waitVirtualPodReady(t, v, ns, "", 5*time.Minute)
	t.Logf("virtual pod %s Running and Ready on %s after %s, IP %s", virtualPod.Name, virtualPod.Spec.NodeName, time.Since(start).Round(time.Second), virtualPod.Status.PodIP)
	hostPod := hostCopy(t, v, "pods", ns, virtualPod.Name).(*corev1.Pod)
	if hostPod.Status.PodIP != virtualPod.Status.PodIP || hostPod.Status.Phase != corev1.PodRunning {
		t.Fatalf("host pod %s: phase %s IP %s; virtual pod IP %s", hostPod.Name, hostPod.Status.Phase, hostPod.Status.PodIP, virtualPod.Status.PodIP)
	}

	var hostSvc *corev1.Service
	eventually(t, 3*time.Minute, "the host copy of Service web with the pod as its endpoint", func(ctx context.Context) (bool, error) {
		s, err := lookupHostCopy(ctx, v, "services", ns, "web")
		switch {
		case err != nil:
			return false, err
		case s == nil:
			return false, fmt.Errorf("no host copy of Service shop/web yet")
		}
		hostSvc = s.(*corev1.Service)
		if err := httpOK(hostSvc.Spec.ClusterIP, 80); err != nil {
			// Whether the pod answers directly tells the host's Service
			// routing apart from the pod and its NetworkPolicy.
			return false, fmt.Errorf("host Service %s at %s: %w (the pod itself, %s:8080: %v)", hostSvc.Name, hostSvc.Spec.ClusterIP, err, hostPod.Status.PodIP, httpOK(hostPod.Status.PodIP, 8080))
		}
		return true, nil
	})
	t.Logf("virtual Service shop/web serves through host Service %s (%s:80)", hostSvc.Name, hostSvc.Spec.ClusterIP)
	testHostEvents(t, v, ns, virtualPod, hostPod)

	if err := retry(func(ctx context.Context) error {
		_, err := v.client.AppsV1().Deployments(ns).Create(ctx, clientDeployment(ns), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	client := waitVirtualPodRunning(t, v, ns, "app=client", 5*time.Minute)
	testStreamsAndDNS(t, v, ns, virtualPod.Name, client.Name, hostSvc)

	t.Run("the workload keeps running while the server pod is deleted, and status updates resume", func(t *testing.T) {
		deleteServerPod(t, v)
		after := getPod(t, v, hostPod.Name)
		if after.UID != hostPod.UID || restarts(after) != restarts(hostPod) {
			t.Fatalf("host pod %s was replaced or restarted while the server pod was away", hostPod.Name)
		}
		if err := httpOK(hostSvc.Spec.ClusterIP, 80); err != nil {
			t.Fatalf("the workload stopped serving: %v", err)
		}
		// A change made after the outage goes through: scale to 2.
		if err := retry(func(ctx context.Context) error {
			d, err := v.client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Replicas = ptr.To(int32(2))
			_, err = v.client.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		second := waitVirtualPodReady(t, v, ns, virtualPod.Name, 5*time.Minute)
		t.Logf("second replica %s Ready after the server came back", second.Name)
	})
}

// waitVirtualPodRunning waits for a Running pod matching selector in the
// virtual cluster.
func waitVirtualPodRunning(t *testing.T, v *vcluster, ns, selector string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	eventually(t, timeout, "a Running virtual pod "+selector, func(ctx context.Context) (bool, error) {
		pods, err := v.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			if pods.Items[i].Status.Phase == corev1.PodRunning {
				found = &pods.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// waitVirtualPodReady waits for a Running, Ready pod of Deployment web other
// than skip in the virtual cluster.
func waitVirtualPodReady(t *testing.T, v *vcluster, ns, skip string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	eventually(t, timeout, "a Running, Ready virtual pod of web", func(ctx context.Context) (bool, error) {
		pods, err := v.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Name != skip && p.Status.Phase == corev1.PodRunning && podReady(p) {
				found = p
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// hostCopy returns the agent's host copy of a virtual object, failing the test
// when there is none.
func hostCopy(t *testing.T, v *vcluster, resource, ns, name string) any {
	t.Helper()
	obj, ok := findHostCopy(context.Background(), v, resource, ns, name)
	if !ok {
		t.Fatalf("no host copy of %s %s/%s", resource, ns, name)
	}
	return obj
}

// findHostCopy is lookupHostCopy for callers that only ask whether there is one.
func findHostCopy(ctx context.Context, v *vcluster, resource, ns, name string) (any, bool) {
	obj, err := lookupHostCopy(ctx, v, resource, ns, name)
	return obj, err == nil && obj != nil
}

// lookupHostCopy returns the agent's host copy of a virtual pod or Service,
// nil when there is none, and the host's error when it could not look.
func lookupHostCopy(ctx context.Context, v *vcluster, resource, ns, name string) (any, error) {
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=k3k-kubelet,k3k.io/cluster=" + v.name + ",k3k.io/virtual-namespace=" + ns}
	var copies []metav1.Object
	switch resource {
	case "pods":
		list, err := host.CoreV1().Pods(v.namespace).List(ctx, sel)
		if err != nil {
			return nil, fmt.Errorf("listing host pods: %w", err)
		}
		for i := range list.Items {
			copies = append(copies, &list.Items[i])
		}
	case "services":
		list, err := host.CoreV1().Services(v.namespace).List(ctx, sel)
		if err != nil {
			return nil, fmt.Errorf("listing host Services: %w", err)
		}
		for i := range list.Items {
			copies = append(copies, &list.Items[i])
		}
	}
	for _, c := range copies {
		if c.GetAnnotations()["k3k.io/virtual-name"] == name {
			return c, nil
		}
	}
	return nil, nil
}

// httpOK GETs /healthz on ip:port from this machine, through kube-proxy.
func httpOK(ip string, port int) error {
	resp, err := probeClient(3 * time.Second).Get("http://" + net.JoinHostPort(ip, strconv.Itoa(port)) + "/healthz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return nil
}

// probeClient is an HTTP client for probes that wait for a route to appear:
// every request opens a new connection. A reused one would keep the route of
// the first try. On this machine a Service address kube-proxy has no rule for
// yet leaves by the default route, and the sandbox's gateway answers any HTTP
// request with 404 and keeps the connection open; with keep-alive every later
// probe went down that connection to the gateway, 404 after 404, long after
// kube-proxy had added the rule (TestSharedAgent failed so, 2 runs of 6).
func probeClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}
