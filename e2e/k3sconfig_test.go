//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestK3sConfig checks what the generated k3s configuration does to a real
// k3s server (docs/architecture.md, "The server pod"): k3s links its
// kubeconfig into /etc/rancher/k3s without error, deploys no CoreDNS, runs no
// cloud controller, runs k3s without its PID-1 reaper, and the agent's Node
// keeps the addresses the agent reports (its pod IP, which the API server
// dials for logs and exec).
func TestK3sConfig(t *testing.T) {
	t.Parallel()
	v := sharedCluster(t)
	node := "k3k-" + v.name + "-kubelet"
	n := waitAgentNode(t, v)

	t.Run("k3s writes its kubeconfig link and starts no cloud controller", func(t *testing.T) {
		p, err := serverPod(context.Background(), v)
		if err != nil || p == nil {
			t.Fatalf("server pod: %v", err)
		}
		raw, err := host.CoreV1().Pods(v.namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "k3s"}).DoRaw(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		logs := string(raw)
		if !strings.Contains(logs, "Wrote kubeconfig") {
			t.Fatalf("the k3s log does not show the kubeconfig written; is this real k3s? (%d bytes of log)", len(raw))
		}
		for _, bad := range []string{"Failed to write kubeconfig symlink", "Running cloud-controller-manager", "address annotations not yet set"} {
			if i := strings.Index(logs, bad); i >= 0 {
				line := logs[strings.LastIndex(logs[:i], "\n")+1:]
				if j := strings.Index(line, "\n"); j >= 0 {
					line = line[:j]
				}
				t.Errorf("k3s logged %q: %s", bad, line)
			}
		}
	})

	// docs/security.md, "One PID namespace per server pod".
	t.Run("k3s is not its container's PID 1 and keeps no k3s init reaper", func(t *testing.T) {
		pids := serverContainerPIDs(t, v, "k3s")
		for _, pid := range pids {
			t.Logf("k3s container: pid %d (%d in the pod), %s", pid, nsPID(t, pid), cmdline(pid))
		}
		if len(pids) != 1 {
			t.Fatalf("the k3s container runs %d processes, want 1 (k3s server, no reaper)", len(pids))
		}
		if n := nsPID(t, pids[0]); n == 1 {
			t.Errorf("k3s is PID 1 of its namespace: it forks a reaper")
		}
		ns := pidNamespace(t, pids[0])
		for _, ctr := range []string{"datastore", "kubeconfig-publisher"} {
			if other := pidNamespace(t, serverContainerPIDs(t, v, ctr)[0]); other != ns {
				t.Errorf("%s is in PID namespace %s, k3s in %s: the pod does not share one", ctr, other, ns)
			}
		}
	})

	t.Run("k3s deploys no CoreDNS: the agent answers DNS", func(t *testing.T) {
		if err := retry(func(ctx context.Context) error {
			_, err := v.client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
			return err
		}); err != nil {
			t.Fatalf("kube-system: %v", err)
		}
		// The deploy controller applies k3s's manifests shortly after start;
		// give it that time before concluding CoreDNS is not coming.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			for _, check := range []struct {
				what string
				get  func(ctx context.Context) error
			}{
				{"Deployment kube-system/coredns", func(ctx context.Context) error {
					_, err := v.client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
					return err
				}},
				{"Service kube-system/kube-dns", func(ctx context.Context) error {
					_, err := v.client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
					return err
				}},
			} {
				err := retry(check.get)
				if err == nil {
					t.Fatalf("%s exists: k3s deployed CoreDNS", check.what)
				}
				if !apierrors.IsNotFound(err) {
					t.Fatalf("%s: %v", check.what, err)
				}
			}
			time.Sleep(5 * time.Second)
		}
	})

	// That the API server reaches the agent at this address for logs, exec
	// and port-forward is TestSharedAgent's.
	t.Run("the agent's Node has the agent pod's address", func(t *testing.T) {
		agents, err := host.CoreV1().Pods(v.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "k3k.io/cluster=" + v.name + ",k3k.io/component=agent"})
		if err != nil {
			t.Fatal(err)
		}
		var agentIP string
		for _, p := range agents.Items {
			if p.Status.Phase == corev1.PodRunning {
				agentIP = p.Status.PodIP
			}
		}
		if agentIP == "" {
			t.Fatalf("no running agent pod among %d", len(agents.Items))
		}
		got := map[corev1.NodeAddressType]string{}
		for _, a := range n.Status.Addresses {
			got[a.Type] = a.Address
		}
		if got[corev1.NodeInternalIP] != agentIP || got[corev1.NodeHostName] != node || len(n.Status.Addresses) != 2 {
			t.Fatalf("node addresses %+v, want InternalIP %s and Hostname %s only", n.Status.Addresses, agentIP, node)
		}
	})
}
