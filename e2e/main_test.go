//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/k3k-io/k3k/internal/testenv"
)

// The suite is configured from the environment (hack/e2e.sh sets it):
//
//	KUBECONFIG          the host cluster (required)
//	E2E_K3KCLI          a built k3kcli; default: built from ./cmd/k3kcli into a temp dir
//	E2E_NODE_IP         the address node ports are reached on; default: the node's InternalIP
//	E2E_HOST_SERVER     the host API server URL k3kcli is given; default https://NODE_IP:6443,
//	                    so `--expose nodeport` puts the node's address into the virtual
//	                    cluster's TLS SANs and kubeconfig
//	E2E_CTR             command prefix for containerd's ctr, used to kill single containers;
//	                    default "$K3K_TOOLS_DIR/ctr --address /tmp/k3k-hostcluster/run/containerd/containerd.sock"
//	E2E_NODE_RESTART    command that restarts the host's node as a power cut does and returns
//	                    once it is booted again (hack/e2e.sh: "hostcluster.sh restart 10");
//	                    unset, TestNodeRestart is skipped (a cluster the suite cannot restart)
//	E2E_KILL_NODE       command that, given a node's name, cuts that node's power and
//	                    network for good (hack/e2e.sh: "hostcluster.sh kill-node"); the
//	                    node-loss scenario (nodeloss_test.go) needs it and three Ready
//	                    nodes, and is skipped without it
//	E2E_RECOVERY_ROUNDS how many times the server pod is deleted and timed (default 3;
//	                    more for a measurement)
//	E2E_BOOTSTRAP_COMPARE=1 TestBootstrapLockAfterDeletionDuringFirstStart also times
//	                    what it asserts nothing on, for a measurement: k3s killed holding
//	                    its lock and restarted in place, and normal restarts
type config struct {
	hostKubeconfig string // a copy of KUBECONFIG whose server is E2E_HOST_SERVER
	k3kcli         string
	nodeIP         string
	ctr            []string
	nodeRestart    []string // E2E_NODE_RESTART
	nodeKill       []string // E2E_KILL_NODE
	rounds         int
	compare        bool // E2E_BOOTSTRAP_COMPARE
	workDir        string
}

var (
	cfg  config
	host kubernetes.Interface
)

func TestMain(m *testing.M) {
	// controller-runtime's clients log through its global logger; without one
	// set, the first client prints a stack trace about it into the test output.
	ctrllog.SetLogger(logr.Discard())
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "k3k-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	cfg.workDir = dir

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	raw, err := rules.Load()
	if err != nil {
		return 0, fmt.Errorf("loading the host kubeconfig: %w", err)
	}
	restCfg, err := clientcmd.NewDefaultClientConfig(*raw, nil).ClientConfig()
	if err != nil {
		return 0, fmt.Errorf("host kubeconfig: %w", err)
	}
	// Every scenario shares this client, four at a time, most of them
	// polling: at client-go's default of 5 requests a second their polls
	// wait behind each other's.
	restCfg.QPS, restCfg.Burst = 50, 100
	host, err = kubernetes.NewForConfig(restCfg)
	if err != nil {
		return 0, err
	}

	cfg.nodeIP = os.Getenv("E2E_NODE_IP")
	if cfg.nodeIP == "" {
		nodes, err := host.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return 0, fmt.Errorf("listing host nodes: %w", err)
		}
		for _, n := range nodes.Items {
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP && cfg.nodeIP == "" {
					cfg.nodeIP = a.Address
				}
			}
		}
		if cfg.nodeIP == "" {
			return 0, fmt.Errorf("no node has an InternalIP; set E2E_NODE_IP")
		}
	}

	// k3kcli names the virtual cluster's node-port address after the host API
	// server; point it at the node so that address is reachable from here.
	hostServer := os.Getenv("E2E_HOST_SERVER")
	if hostServer == "" {
		hostServer = "https://" + net.JoinHostPort(cfg.nodeIP, "6443")
	}
	ctxName := raw.CurrentContext
	if c := raw.Contexts[ctxName]; c != nil && raw.Clusters[c.Cluster] != nil {
		raw.Clusters[c.Cluster].Server = hostServer
	}
	cfg.hostKubeconfig = filepath.Join(dir, "host.kubeconfig")
	if err := clientcmd.WriteToFile(*raw, cfg.hostKubeconfig); err != nil {
		return 0, err
	}

	cfg.k3kcli = os.Getenv("E2E_K3KCLI")
	if cfg.k3kcli == "" {
		cfg.k3kcli = filepath.Join(dir, "k3kcli")
		build := exec.Command("go", "build", "-o", cfg.k3kcli, "../cmd/k3kcli")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("building k3kcli: %v\n%s", err, out)
		}
	}

	ctr := os.Getenv("E2E_CTR")
	if ctr == "" {
		// The host cluster's own ctr (k3s's, the node's containerd release).
		ctr = filepath.Join(testenv.ToolsDir(), "ctr") + " --address /tmp/k3k-hostcluster/run/containerd/containerd.sock"
	}
	cfg.ctr = strings.Fields(ctr)
	cfg.nodeRestart = strings.Fields(os.Getenv("E2E_NODE_RESTART"))
	cfg.nodeKill = strings.Fields(os.Getenv("E2E_KILL_NODE"))
	cfg.rounds = 3
	if r := os.Getenv("E2E_RECOVERY_ROUNDS"); r != "" {
		if _, err := fmt.Sscan(r, &cfg.rounds); err != nil || cfg.rounds < 1 {
			return 0, fmt.Errorf("E2E_RECOVERY_ROUNDS=%q is not a positive number", r)
		}
	}
	cfg.compare = os.Getenv("E2E_BOOTSTRAP_COMPARE") == "1"
	code := m.Run()
	deleteShared(code)
	return code, nil
}

// vcluster is one virtual cluster under test.
type vcluster struct {
	name, namespace string
	kubeconfig      string // the file k3kcli wrote
	client          kubernetes.Interface
}

func (v *vcluster) pod() string              { return "k3k-" + v.name + "-server-0" }
func (v *vcluster) kubeconfigSecret() string { return "k3k-" + v.name + "-kubeconfig" }
func (v *vcluster) tokenSecret() string      { return "k3k-" + v.name + "-token" }
func (v *vcluster) service() string          { return "k3k-" + v.name + "-service" }

// k3kcli runs the CLI against the host cluster and returns its combined output.
func k3kcli(t *testing.T, args ...string) string {
	t.Helper()
	return k3kcliWithin(t, 6*time.Minute, args...)
}

// k3kcliWithin is k3kcli for a command that may take longer than the usual
// six minutes (a migration that grows the cluster member by member).
func k3kcliWithin(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	start := time.Now()
	out, err := runK3kcli(timeout, args...)
	t.Logf("k3kcli %s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("k3kcli %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// runK3kcli runs the CLI against the host cluster and returns its combined
// output.
func runK3kcli(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.k3kcli, append([]string{"--kubeconfig", cfg.hostKubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// createCluster makes a namespace and a virtual cluster in it exposed on a node
// port, and returns a client built from the kubeconfig k3kcli wrote.
func createCluster(t *testing.T, name string, flags ...string) *vcluster {
	t.Helper()
	start := time.Now()
	v, out, err := newCluster(name, flags...)
	t.Logf("k3kcli cluster create %s (%s):\n%s", name, time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("creating cluster %s: %v", name, err)
	}
	t.Logf("cluster %s/%s ready after %s", v.namespace, name, time.Since(start).Round(time.Millisecond))
	deleteWhenPassed(t, v)
	return v
}

// deleteWhenPassed deletes the cluster's namespace when t ends, if it passed;
// if it failed, it logs the server pod and keeps the namespace to look at
// (E2E_KEEP=1).
func deleteWhenPassed(t *testing.T, v *vcluster) {
	t.Cleanup(func() {
		if t.Failed() {
			dumpPod(t, v)
			return
		}
		// Deleting the namespace deletes the Cluster and, through owner
		// references, all it made: an existing cluster (E2E_CLUSTER=existing)
		// can run the suite again.
		if err := host.CoreV1().Namespaces().Delete(context.Background(), v.namespace, metav1.DeleteOptions{}); err != nil {
			t.Logf("deleting namespace %s: %v", v.namespace, err)
		}
	})
}

// newCluster makes namespace e2e-NAME and, with k3kcli, a virtual cluster
// NAME in it exposed on a node port; it returns the cluster with a client
// from the kubeconfig k3kcli wrote, and k3kcli's output.
func newCluster(name string, flags ...string) (*vcluster, string, error) {
	ctx := context.Background()
	ns := "e2e-" + name
	if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, "", fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	v := &vcluster{name: name, namespace: ns, kubeconfig: filepath.Join(cfg.workDir, name+".kubeconfig")}
	args := append([]string{"cluster", "create", name, "-n", ns, "--expose", "nodeport",
		"--timeout", "5m", "--output-kubeconfig", v.kubeconfig}, flags...)
	out, err := runK3kcli(6*time.Minute, args...)
	if err != nil {
		return nil, out, fmt.Errorf("k3kcli cluster create: %w", err)
	}
	if v.client, err = newVirtualClient(v.kubeconfig); err != nil {
		return nil, out, err
	}
	return v, out, nil
}

// shared is the suite's one virtual cluster for scenarios that only need a
// healthy cluster and change nothing another can see: each works in virtual
// namespaces of its own and never restarts, pauses or reconfigures it. It is
// made by the first scenario that asks (the others wait), and deleted after
// the run unless a scenario failed (then it stays for the dump).
var shared struct {
	once sync.Once
	v    *vcluster
	out  string
	err  error
}

// sharedCluster returns the shared cluster, making it on first use.
func sharedCluster(t *testing.T) *vcluster {
	t.Helper()
	shared.once.Do(func() {
		start := time.Now()
		shared.v, shared.out, shared.err = newCluster("common")
		t.Logf("the shared cluster made by this scenario in %s:\n%s", time.Since(start).Round(time.Millisecond), shared.out)
	})
	if shared.err != nil {
		t.Fatalf("the shared cluster: %v\n%s", shared.err, shared.out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpPod(t, shared.v)
		}
	})
	return shared.v
}

// deleteShared deletes the namespaces of the clusters scenarios share (the
// shared cluster, the serial scenarios' etcd cluster) after a run in which
// every scenario passed.
func deleteShared(code int) {
	if code != 0 {
		return
	}
	for _, v := range []*vcluster{shared.v, serialEtcd.v} {
		if v == nil {
			continue
		}
		if err := host.CoreV1().Namespaces().Delete(context.Background(), v.namespace, metav1.DeleteOptions{}); err != nil {
			fmt.Fprintf(os.Stderr, "deleting the namespace %s of a cluster scenarios shared: %v\n", v.namespace, err)
		}
	}
}

// restConfig loads the kubeconfig at path.
func restConfig(t *testing.T, path string) *rest.Config {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	return rc
}

// virtualClient is a client of a virtual cluster with short timeouts, so a
// request to a server that is gone fails fast instead of hanging.
func virtualClient(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	c, err := newVirtualClient(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newVirtualClient(path string) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	u, err := url.Parse(rc.Host)
	if err != nil || !strings.HasPrefix(u.Host, cfg.nodeIP+":") {
		return nil, fmt.Errorf("the kubeconfig points at %s, not at the node %s", rc.Host, cfg.nodeIP)
	}
	rc.Timeout = 3 * time.Second
	rc.Dial = (&net.Dialer{Timeout: 2 * time.Second}).DialContext
	rc.QPS, rc.Burst = 50, 100
	return kubernetes.NewForConfig(rc)
}

// eventually polls cond every 250ms until it returns true or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := waitFor(timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// waitFor is eventually for code that cannot end the test: a goroutine of
// it (t.Fatal must be called from the test's own).
func waitFor(timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			// A call that ends at the deadline may have been cut short by
			// it (a List cancelled, a rate limiter refusing a wait past
			// it): that says nothing about the condition, the error
			// before it does.
			if deadline, _ := ctx.Deadline(); time.Until(deadline) > time.Second || last == nil {
				last = err
			}
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("%s: not within %s (last error: %v)", what, timeout, last)
	}
	return nil
}

// transient reports whether err says nothing about the virtual cluster's
// state: no answer at all (refused, reset, timed out) or a server that answered
// it cannot serve right now. A k3s container restarting in place makes requests
// fail like this for some seconds: real k3s exits when its embedded
// controller-manager fails, and so does the stand-in when one of its children
// exits.
func transient(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}

// retryTransient is how long a single request of a step may keep failing
// transiently: long enough for a k3s container restart with the kubelet's
// back-off, short enough that a server that never comes back fails the step.
const retryTransient = 3 * time.Minute

// retry calls f until it returns nil or an error that is not transient, for at
// most retryTransient, and returns its last error. Steps that are not about a
// disruption read and write through it, so an unrelated restart of the k3s
// container cannot fail them, while a wrong answer (NotFound, other content)
// still does at once.
func retry(f func(ctx context.Context) error) error {
	var last error
	_ = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, retryTransient, true, func(ctx context.Context) (bool, error) {
		last = f(ctx)
		return last == nil || !transient(last), nil
	})
	return last
}

// serving waits until the virtual API answers a list of namespaces.
func serving(t *testing.T, c kubernetes.Interface, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "virtual API serving", func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
}

// serverPod returns the server pod, or nil when it does not exist.
func serverPod(ctx context.Context, v *vcluster) (*corev1.Pod, error) {
	p, err := host.CoreV1().Pods(v.namespace).Get(ctx, v.pod(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return p, err
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func secretData(t *testing.T, v *vcluster, name string) map[string][]byte {
	t.Helper()
	s, err := host.CoreV1().Secrets(v.namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading Secret %s: %v", name, err)
	}
	return s.Data
}

// containerStatus finds a container (or native sidecar) of the pod by name.
func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// killContainer sends SIGKILL to one container through containerd, the way an
// OOM kill or a crash would end it; the kubelet restarts it in place.
func killContainer(t *testing.T, p *corev1.Pod, name string) {
	t.Helper()
	signalContainer(t, p, name, "SIGKILL")
}

// dumpPod logs the server pod's state and its containers' last log lines, to
// explain a failure.
func dumpPod(t *testing.T, v *vcluster) {
	p, err := serverPod(context.Background(), v)
	if err != nil || p == nil {
		t.Logf("server pod: %v (missing: %v)", err, p == nil)
		return
	}
	t.Logf("server pod %s: phase %s, IP %s, ready %v", p.Name, p.Status.Phase, p.Status.PodIP, podReady(p))
	for _, c := range []string{"datastore", "k3s", "kubeconfig-publisher"} {
		if cs := containerStatus(p, c); cs != nil {
			t.Logf("  %s: ready %v restarts %d state %+v", c, cs.Ready, cs.RestartCount, cs.State)
		}
		tail := int64(15)
		logs, err := host.CoreV1().Pods(v.namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c, TailLines: &tail}).DoRaw(context.Background())
		t.Logf("  %s logs (err %v):\n%s", c, err, logs)
		if cs := containerStatus(p, c); cs != nil && cs.RestartCount > 0 {
			logs, err := host.CoreV1().Pods(v.namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c, TailLines: &tail, Previous: true}).DoRaw(context.Background())
			t.Logf("  %s logs before its last restart (err %v):\n%s", c, err, logs)
		}
	}
	dumpEvents(t, v.namespace)
}

// dumpEvents logs the newest host events of namespace ns: what the scheduler,
// the kubelet, the StatefulSet controller and the k3k controller said.
func dumpEvents(t *testing.T, ns string) {
	list, err := host.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("events of %s: %v", ns, err)
		return
	}
	evs := list.Items
	// Events written through events/v1 carry EventTime only.
	at := func(e *corev1.Event) time.Time {
		if e.LastTimestamp.IsZero() {
			return e.EventTime.Time
		}
		return e.LastTimestamp.Time
	}
	sort.Slice(evs, func(i, j int) bool { return at(&evs[i]).Before(at(&evs[j])) })
	if len(evs) > 25 {
		evs = evs[len(evs)-25:]
	}
	t.Logf("the last %d events of %s:", len(evs), ns)
	for i := range evs {
		e := &evs[i]
		t.Logf("  %s %s %s %s/%s (x%d): %s", at(e).Format(time.TimeOnly), e.Type, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Count, e.Message)
	}
}

// getPod reads a host pod of the virtual cluster's namespace.
func getPod(t *testing.T, v *vcluster, name string) *corev1.Pod {
	t.Helper()
	p, err := host.CoreV1().Pods(v.namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitPodReplaced waits for a ready pod of old's name with another UID. On
// timeout it says what it saw last: the old pod still terminating, or the new
// one and where its containers were.
func waitPodReplaced(t *testing.T, v *vcluster, old *corev1.Pod, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var fresh *corev1.Pod
	eventually(t, timeout, "a new ready "+old.Name, func(ctx context.Context) (bool, error) {
		p, err := host.CoreV1().Pods(v.namespace).Get(ctx, old.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return false, errors.New("no pod (the old one is gone, no new one yet)")
		case err != nil:
			return false, err // the last error is reported on timeout
		case p.UID == old.UID:
			return false, fmt.Errorf("still the old pod (deleting since %v)", p.DeletionTimestamp)
		case !podReady(p):
			return false, fmt.Errorf("new pod not ready: %s", podState(p))
		}
		fresh = p
		return true, nil
	})
	return fresh
}

// podState is a one-line account of p: its phase and each container's state
// and restarts.
func podState(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s", p.Status.Phase)
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			state := "waiting"
			switch {
			case cs.State.Running != nil:
				state = "running"
			case cs.State.Terminated != nil:
				state = fmt.Sprintf("terminated (%s, exit %d)", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
			case cs.State.Waiting != nil:
				state = fmt.Sprintf("waiting (%s)", cs.State.Waiting.Reason)
			}
			fmt.Fprintf(&b, "; %s %s, ready %v, %d restarts", cs.Name, state, cs.Ready, cs.RestartCount)
		}
	}
	return b.String()
}

// createVirtualPod creates p in the virtual cluster v, in p's namespace, once
// that namespace's default ServiceAccount exists (the API server refuses pods
// before it does). Transient failures are retried; a pod already there from an
// earlier try counts as created.
func createVirtualPod(t *testing.T, v *vcluster, p *corev1.Pod) {
	t.Helper()
	eventually(t, time.Minute, "ServiceAccount default in virtual namespace "+p.Namespace, func(ctx context.Context) (bool, error) {
		_, err := v.client.CoreV1().ServiceAccounts(p.Namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.CoreV1().Pods(p.Namespace).Create(ctx, p.DeepCopy(), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatalf("creating virtual pod %s/%s: %v", p.Namespace, p.Name, err)
	}
}

// inNamespace sets p's namespace and returns p.
func inNamespace(p *corev1.Pod, ns string) *corev1.Pod {
	p.Namespace = ns
	return p
}

// waitAgentNode waits for the agent's node (k3k-<name>-kubelet) to be Ready in
// v and returns it.
func waitAgentNode(t *testing.T, v *vcluster) *corev1.Node {
	t.Helper()
	name := "k3k-" + v.name + "-kubelet"
	var node *corev1.Node
	eventually(t, 5*time.Minute, "node "+name+" Ready in the virtual cluster", func(ctx context.Context) (bool, error) {
		n, err := v.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = n
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	return node
}
