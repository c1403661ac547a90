package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
)

// The envtest suite runs the reconciler against a real kube-apiserver and etcd
// built from source (make tools). It is started once for the package.
var (
	restConfig *rest.Config
	scheme     *runtime.Scheme
	k8s        client.Client
	nsCounter  atomic.Int64
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	env, err := testenv.StartEnvtest(filepath.Join("..", "..", "..", "charts", "k3k", "crds"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	restConfig, scheme, k8s = env.Config, env.Scheme, env.Client
	return m.Run()
}

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("test-%d-%d", time.Now().Unix()%100000, nsCounter.Add(1))}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// writeCounter counts every write a client sends to the API server.
type writeCounter struct{ n atomic.Int64 }

func (w *writeCounter) count() int64 { return w.n.Load() }

// countingClient returns a client straight to the API server (no cache, so a
// reconcile sees exactly what is stored) that counts every create, update,
// patch and delete of objects and of their status.
func countingClient(t *testing.T, w *writeCounter) client.Client {
	t.Helper()
	c, err := client.NewWithWatch(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("creating client: %v", err)
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w.n.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w.n.Add(1)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			w.n.Add(1)
			return c.Patch(ctx, obj, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			w.n.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			w.n.Add(1)
			return c.Apply(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			w.n.Add(1)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			w.n.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
}

// testConfig is the controller configuration the tests reconcile with.
var testConfig = Config{
	ServerImage:           "rancher/k3s",
	DefaultVersion:        "v1.34.3-k3s1",
	DatastoreImage:        "k3k-io/k3k-datastore:test",
	AgentImage:            "k3k-io/k3k-kubelet:test",
	AgentClusterRole:      "k3k-agent",
	BackupExecClusterRole: "k3k-backup-exec",
	PullPolicy:            corev1.PullIfNotPresent,
	DefaultPersistence:    v1beta1.DynamicPersistence,
	DefaultDatastore:      v1beta1.SQLiteDatastore,
}

// newReconciler returns a reconciler whose writes are counted. It reads
// straight from the API server (no cache), so what it sees is what is there.
func newReconciler(t *testing.T) (*Reconciler, *writeCounter) {
	t.Helper()
	w := &writeCounter{}
	return &Reconciler{
		Client:             countingClient(t, w),
		APIReader:          k8s,
		Config:             testConfig,
		ValidateKubeconfig: kubeconfig.Validate,
		LookupHost:         testLookup,
	}, w
}

// testHosts are the external datastore names the tests resolve to addresses
// of their own (documentation ranges).
var testHosts = map[string][]netip.Addr{
	"spec-db.example":   {netip.MustParseAddr("192.0.2.10")},
	"secret-db.example": {netip.MustParseAddr("192.0.2.20"), netip.MustParseAddr("2001:db8::20")},
}

// testLookup resolves names where no DNS answers: the names of testHosts to
// theirs, a name under .invalid (RFC 6761) to nothing, any other to
// 192.0.2.1.
func testLookup(_ context.Context, host string) ([]netip.Addr, error) {
	if strings.HasSuffix(strings.TrimSuffix(host, "."), ".invalid") {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	if a, ok := testHosts[host]; ok {
		return a, nil
	}
	return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
}

// reconcileOnce runs one reconcile of the named Cluster and fails the test on error.
func reconcileOnce(t *testing.T, r *Reconciler, c *v1beta1.Cluster) ctrl.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}
