package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/testenv"
)

// The CLI runs against a real kube-apiserver and etcd built from source (make
// tools) with the generated CRD installed, started once for the package. No
// controller runs: tests play its part by writing status and Secrets.
var (
	k8s            client.Client
	kubeconfigPath string
	apiServerURL   string
	nsCounter      atomic.Int64
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	env, err := testenv.StartEnvtest(filepath.Join("..", "..", "charts", "k3k", "crds"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	k8s = env.Client
	data, err := env.AdminKubeconfig("cli-admin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "k3kcli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfigPath = filepath.Join(dir, "host-kubeconfig.yaml")
	if err := os.WriteFile(kubeconfigPath, data, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	apiServerURL = env.Config.Host
	return m.Run()
}

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	return createNamespace(t, fmt.Sprintf("cli-%d-%d", time.Now().Unix()%100000, nsCounter.Add(1)))
}

func createNamespace(t *testing.T, name string) string {
	t.Helper()
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// result is what one k3kcli run produced.
type result struct {
	code        int
	out, errOut string
}

// cliOptions are fast Options writing to buffers; now is the clock.
func cliOptions(out, errOut io.Writer, now func() time.Time) Options {
	return Options{Out: out, Err: errOut, Now: now, PollInterval: 50 * time.Millisecond, Heartbeat: time.Hour, ReachWait: 200 * time.Millisecond}
}

// k3kcli runs the CLI against the test API server with the given arguments.
func k3kcli(t *testing.T, args ...string) result {
	t.Helper()
	return k3kcliWith(t, time.Now, args...)
}

func k3kcliWith(t *testing.T, now func() time.Time, args ...string) result {
	t.Helper()
	return k3kcliTo(t, now, &syncBuffer{}, args...)
}

// k3kcliTo runs the CLI with its progress (stderr) going to errOut, which a
// test may read while the CLI runs.
func k3kcliTo(t *testing.T, now func() time.Time, errOut *syncBuffer, args ...string) result {
	t.Helper()
	var out bytes.Buffer
	full := append([]string{"--kubeconfig", kubeconfigPath}, args...)
	code := Run(context.Background(), cliOptions(&out, errOut, now), full)
	r := result{code: code, out: out.String(), errOut: errOut.String()}
	t.Logf("k3kcli %s -> exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.out, r.errOut)
	return r
}

// syncBuffer is a bytes.Buffer that one goroutine may write while another reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// getCluster reads a Cluster straight from the API server.
func getCluster(t *testing.T, ns, name string) *v1beta1.Cluster {
	t.Helper()
	c := &v1beta1.Cluster{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		t.Fatalf("getting cluster %s/%s: %v", ns, name, err)
	}
	return c
}

// eventually polls cond until it returns nil, for up to a minute. It is for
// waiting on the CLI running in another goroutine, never for timing.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	if err := testenv.Poll(60*time.Second, 50*time.Millisecond, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
