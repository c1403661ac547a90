//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// lockedBuffer collects a background process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestConnectReachesAnUnexposedCluster creates a cluster that is not exposed
// (its kubeconfig names the in-cluster Service, which this machine cannot
// use), reaches it with `k3kcli cluster connect` through the host API server's
// port-forwarding, then deletes the server pod: connect forwards to the new
// pod on the same local port, so the kubeconfig it wrote keeps working.
func TestConnectReachesAnUnexposedCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := &vcluster{name: "connect", namespace: "e2e-connect"}
	if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v.namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpPod(t, v)
			return
		}
		_ = host.CoreV1().Namespaces().Delete(context.Background(), v.namespace, metav1.DeleteOptions{})
	})
	svcKubeconfig := filepath.Join(cfg.workDir, "connect-svc.kubeconfig")
	out := k3kcli(t, "cluster", "create", v.name, "-n", v.namespace, "--timeout", "5m", "--output-kubeconfig", svcKubeconfig)
	if !strings.Contains(out, "k3kcli cluster connect "+v.name+" -n "+v.namespace) {
		t.Errorf("create does not say how to connect to a cluster that is not exposed:\n%s", out)
	}

	v.kubeconfig = filepath.Join(cfg.workDir, "connect-local.kubeconfig")
	var stderr lockedBuffer
	cmd := exec.Command(cfg.k3kcli, "--kubeconfig", cfg.hostKubeconfig, "cluster", "connect", v.name, "-n", v.namespace,
		"--output-kubeconfig", v.kubeconfig)
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		t.Logf("k3kcli cluster connect output:\n%s", stderr.String())
	}()
	eventually(t, time.Minute, "connect to write its kubeconfig and forward", func(context.Context) (bool, error) {
		_, err := os.Stat(v.kubeconfig)
		return err == nil && strings.Contains(stderr.String(), "press Ctrl-C to stop"), nil
	})
	rc := restConfig(t, v.kubeconfig)
	u, err := url.Parse(rc.Host)
	if err != nil || u.Hostname() != "127.0.0.1" {
		t.Fatalf("connect's kubeconfig points at %s, want 127.0.0.1", rc.Host)
	}
	rc.Timeout = 5 * time.Second
	rc.Dial = (&net.Dialer{Timeout: 2 * time.Second}).DialContext
	v.client = kubernetes.NewForConfigOrDie(rc)

	// The certificate is checked (no insecure flag): k3s serves 127.0.0.1.
	serving(t, v.client, time.Minute)
	w := workload{namespace: "through-connect"}
	w.create(t, v.client)
	w.check(t, v.client)

	deleteServerPod(t, v)
	w.check(t, v.client)
	if !strings.Contains(stderr.String(), "again") {
		t.Errorf("connect did not report forwarding to the new pod:\n%s", stderr.String())
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	stopped = true
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("connect ended with %v after Ctrl-C, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Error("connect did not stop on Ctrl-C")
	}
}
