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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/k3k-io/k3k/internal/testenv"
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

// connectProcess is a `k3kcli cluster connect` running in the background.
type connectProcess struct {
	cmd    *exec.Cmd
	out    lockedBuffer
	exited chan error
	done   bool
}

// startConnect starts k3kcli with args and env added to the test's
// environment; it is killed at the end of the test if still running, and its
// output logged.
func startConnect(t *testing.T, env []string, args ...string) *connectProcess {
	t.Helper()
	p := &connectProcess{cmd: exec.Command(cfg.k3kcli, args...), exited: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if !p.done {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		t.Logf("k3kcli %s output:\n%s", strings.Join(args, " "), p.out.String())
	})
	return p
}

// waitForwarding waits until connect says it forwards (it has handed out the
// kubeconfig by then).
func (p *connectProcess) waitForwarding(t *testing.T) {
	t.Helper()
	eventually(t, time.Minute, "connect to hand out its kubeconfig and forward", func(context.Context) (bool, error) {
		return strings.Contains(p.out.String(), "press Ctrl-C to stop"), nil
	})
}

// interrupt sends Ctrl-C and expects connect to end with exit 0.
func (p *connectProcess) interrupt(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	p.done = true
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("connect ended with %v after Ctrl-C, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Error("connect did not stop on Ctrl-C")
	}
}

// connectClient is a client with short timeouts for the forwarded API at
// rc, which must be on 127.0.0.1 (and on port, when not 0).
func connectClient(t *testing.T, rc *rest.Config, port int) kubernetes.Interface {
	t.Helper()
	u, err := url.Parse(rc.Host)
	if err != nil || u.Hostname() != "127.0.0.1" || (port != 0 && u.Port() != strconv.Itoa(port)) {
		t.Fatalf("connect's kubeconfig points at %s, want 127.0.0.1 (port %d; 0: any)", rc.Host, port)
	}
	rc.Timeout = 5 * time.Second
	rc.Dial = (&net.Dialer{Timeout: 2 * time.Second}).DialContext
	return kubernetes.NewForConfigOrDie(rc)
}

// TestConnectReachesAnUnexposedCluster creates a cluster that is not exposed
// (its kubeconfig names the in-cluster Service, which this machine cannot
// use), reaches it with `k3kcli cluster connect` through the host API server's
// port-forwarding, then deletes the server pod: connect forwards to the new
// pod on the same local port, so the kubeconfig it wrote keeps working. A
// second connect with --local-port and --merge puts a context on that port
// into the kubeconfig $KUBECONFIG names (a copy of the host's), the context
// works, and `cluster delete` takes it out again.
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
	p := startConnect(t, nil, "--kubeconfig", cfg.hostKubeconfig, "cluster", "connect", v.name, "-n", v.namespace,
		"--output-kubeconfig", v.kubeconfig)
	p.waitForwarding(t)
	v.client = connectClient(t, restConfig(t, v.kubeconfig), 0)

	// The certificate is checked (no insecure flag): k3s serves 127.0.0.1.
	serving(t, v.client, time.Minute)
	w := workload{namespace: "through-connect"}
	w.create(t, v.client)
	w.check(t, v.client)

	deleteServerPod(t, v)
	w.check(t, v.client)
	if !strings.Contains(p.out.String(), "again") {
		t.Errorf("connect did not report forwarding to the new pod:\n%s", p.out.String())
	}
	p.interrupt(t)

	// --local-port and --merge, with the host kubeconfig found through
	// $KUBECONFIG as a user has it.
	hostConfig, err := os.ReadFile(cfg.hostKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(merged, hostConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"KUBECONFIG=" + merged}
	ctxName := "k3k-" + v.namespace + "-" + v.name
	p = startConnect(t, env, "cluster", "connect", v.name, "-n", v.namespace, "--local-port", strconv.Itoa(port), "--merge")
	p.waitForwarding(t)
	server := "https://127.0.0.1:" + strconv.Itoa(port)
	if want := "context " + ctxName + " merged into " + merged + " (server " + server + ")"; !strings.Contains(p.out.String(), want) {
		t.Errorf("connect does not say %q", want)
	}
	kc, err := clientcmd.LoadFromFile(merged)
	if err != nil {
		t.Fatal(err)
	}
	if kc.Contexts[ctxName] == nil || kc.CurrentContext == ctxName {
		t.Fatalf("merged kubeconfig: context %s %v, current context %q (--merge without --switch-context keeps the current one)",
			ctxName, kc.Contexts[ctxName], kc.CurrentContext)
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*kc, ctxName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		t.Fatalf("the merged context: %v", err)
	}
	c := connectClient(t, rc, port)
	serving(t, c, time.Minute)
	w.check(t, c)
	p.interrupt(t)

	out = k3kcliEnv(t, env, "cluster", "delete", v.name, "-n", v.namespace)
	if want := "removed context " + ctxName + " from " + merged; !strings.Contains(out, want) {
		t.Errorf("delete does not say %q", want)
	}
	if kc, err = clientcmd.LoadFromFile(merged); err != nil {
		t.Fatal(err)
	}
	if kc.Contexts[ctxName] != nil || kc.Clusters[ctxName] != nil || kc.AuthInfos[ctxName] != nil {
		t.Errorf("cluster delete left the merged context, cluster or user %s in %s", ctxName, merged)
	}
	if kc.Contexts[kc.CurrentContext] == nil {
		t.Errorf("cluster delete broke the host context %q", kc.CurrentContext)
	}
}

// k3kcliEnv runs k3kcli with env added to the test's environment and no
// --kubeconfig, as a user runs it, and returns its combined output.
func k3kcliEnv(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.k3kcli, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("%s k3kcli %s:\n%s", strings.Join(env, " "), strings.Join(args, " "), out.String())
	if err != nil {
		t.Fatalf("k3kcli %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}
