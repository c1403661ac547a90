package publisher_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/publisher"
)

// The tests run against real components shared by the package: the host
// kube-apiserver on an etcd process plays the host cluster the publisher writes
// Secrets to; the virtual kube-apiserver on our SQLite datastore (kine, in this
// process) plays k3s, whose admin kubeconfig is published.
var (
	host    *testenv.APIServer
	virtual *testenv.APIServer
	// virtualCA signs the virtual apiserver's serving and client certificates, as
	// k3s's CA does (k3s uses separate server and client CAs; one is enough here).
	virtualCA *testenv.CertKey
	hostAdmin *kubernetes.Clientset
)

const (
	// serviceHost is what the published kubeconfig names; the test's dialer maps
	// it to the virtual apiserver, as cluster DNS and the Service would.
	serviceHost = "k3k-demo-service.tenants.svc"
	serviceURL  = "https://" + serviceHost + ":443"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "k3k-publisher-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "starting %s: %v\n", what, err)
		return 1
	}
	sub := func(name string) string {
		d := filepath.Join(dir, name)
		_ = os.MkdirAll(d, 0o755)
		return d
	}

	// The host cluster's storage is etcd, as on a real host; the virtual
	// cluster's is our SQLite datastore, as in a server pod.
	etcd, err := testenv.StartEtcd(ctx, testenv.EtcdConfig{Dir: sub("etcd")})
	if err != nil {
		return fail("etcd", err)
	}
	defer etcd.Stop()
	store, err := sqlite.Open(ctx, sqlite.Config{DataDir: sub("virtual-datastore"), ListenAddress: "127.0.0.1:0"})
	if err != nil {
		return fail("sqlite datastore", err)
	}
	defer store.Close(context.Background())
	if err := store.Ready(ctx); err != nil {
		return fail("sqlite datastore", err)
	}

	// Both apiservers start at once: on a busy machine their start-up dominates.
	var (
		wg                 sync.WaitGroup
		hostErr, virtErr   error
		virtualDir         = sub("virtual")
		virtualServingCert string
	)
	if virtualCA, err = testenv.NewCA("k3s-ca"); err != nil {
		return fail("virtual CA", err)
	}
	// k3s serves a certificate naming every --tls-san; the controller lists the
	// Service's name there. testenv's own serving certificate does not name it, so
	// the flags that follow its own replace it.
	if virtualServingCert, err = writeServingCert(virtualDir); err != nil {
		return fail("virtual serving certificate", err)
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		host, hostErr = testenv.StartAPIServer(ctx, testenv.APIServerConfig{
			EtcdServers: []string{etcd.URL}, Dir: sub("host"),
		})
	}()
	go func() {
		defer wg.Done()
		virtual, virtErr = testenv.StartAPIServer(ctx, testenv.APIServerConfig{
			EtcdServers: []string{store.Endpoint()}, Dir: virtualDir, CA: virtualCA,
			ExtraArgs: []string{
				"--tls-cert-file=" + virtualServingCert + ".crt",
				"--tls-private-key-file=" + virtualServingCert + ".key",
			},
		})
	}()
	wg.Wait()
	if host != nil {
		defer host.Stop()
	}
	if virtual != nil {
		defer virtual.Stop()
	}
	if hostErr != nil {
		return fail("host kube-apiserver", hostErr)
	}
	if virtErr != nil {
		return fail("virtual kube-apiserver", virtErr)
	}
	if hostAdmin, err = kubernetes.NewForConfig(host.RESTConfig()); err != nil {
		return fail("host client", err)
	}
	return m.Run()
}

func writeServingCert(dir string) (string, error) {
	serving, err := virtualCA.Issue(testenv.CertSpec{
		CommonName: "k3s", Server: true,
		DNSNames: []string{"localhost", "kubernetes", serviceHost},
		IPs:      []net.IP{net.ParseIP("127.0.0.1")},
	})
	if err != nil {
		return "", err
	}
	base := filepath.Join(dir, "tls-san")
	if err := os.WriteFile(base+".crt", serving.Cert, 0o600); err != nil {
		return "", err
	}
	return base, os.WriteFile(base+".key", serving.Key, 0o600)
}

// tenant is one virtual cluster's share of the host: its namespace, the two
// Secrets the controller pre-creates, and the publisher's ServiceAccount with the
// Role that allows only those two Secrets.
type tenant struct {
	namespace, cluster string
	kubeconfigSecret   string
	tokenSecret        string
	token              string // the value in the token Secret and the server's file
	restricted         *kubernetes.Clientset
	restrictedConfig   *rest.Config
	writes             *requestLog
	kubeconfigPath     string
	tokenPath          string
}

var tenantSeq struct {
	sync.Mutex
	n int
}

func newTenant(t *testing.T) *tenant {
	t.Helper()
	ctx := t.Context()
	tenantSeq.Lock()
	tenantSeq.n++
	n := tenantSeq.n
	tenantSeq.Unlock()
	tn := &tenant{
		namespace: fmt.Sprintf("tenant-%d", n),
		cluster:   "demo",
		token:     fmt.Sprintf("token-of-tenant-%d-%d", n, time.Now().UnixNano()),
	}
	tn.kubeconfigSecret = layout.NamesFor(&v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: tn.cluster}}).Kubeconfig
	tn.tokenSecret = "k3k-" + tn.cluster + "-token"
	must(t, create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tn.namespace}}))
	must(t, tn.precreate(ctx, tn.kubeconfigSecret, nil))
	must(t, tn.precreate(ctx, tn.tokenSecret, map[string][]byte{layout.SecretKeyToken: []byte(tn.token)}))
	// Neighbours the publisher must not be able to touch.
	must(t, tn.precreate(ctx, "k3k-other-kubeconfig", map[string][]byte{layout.SecretKeyKubeconfig: []byte("other")}))

	sa := "k3k-" + tn.cluster + "-server"
	must(t, create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: tn.namespace}}))
	must(t, create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "k3k-" + tn.cluster + "-publisher", Namespace: tn.namespace},
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"secrets"},
			ResourceNames: []string{tn.kubeconfigSecret, tn.tokenSecret},
			Verbs:         []string{"get", "update", "patch"},
		}},
	}))
	must(t, create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "k3k-" + tn.cluster + "-publisher", Namespace: tn.namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "k3k-" + tn.cluster + "-publisher"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: tn.namespace}},
	}))
	// The pod's projected ServiceAccount token, obtained the way kubelet does.
	tr, err := hostAdmin.CoreV1().ServiceAccounts(tn.namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
	}, metav1.CreateOptions{})
	must(t, err)
	tn.writes = &requestLog{}
	tn.restrictedConfig = &rest.Config{
		Host:            host.URL,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: host.CA.Cert},
		WrapTransport:   tn.writes.wrap,
		// Tests sync far more often than the 30s default; client-side throttling
		// would only slow them down.
		QPS: 1000, Burst: 1000,
	}
	tn.restricted, err = kubernetes.NewForConfig(tn.restrictedConfig)
	must(t, err)

	// The server pod's volumes: the emptyDir k3s writes its kubeconfig into, and the
	// data dir holding its token file.
	dir := t.TempDir()
	tn.kubeconfigPath = filepath.Join(dir, "kubeconfig", "kubeconfig.yaml")
	tn.tokenPath = filepath.Join(dir, "k3s", "server", "token")
	must(t, os.MkdirAll(filepath.Dir(tn.kubeconfigPath), 0o755))
	must(t, os.MkdirAll(filepath.Dir(tn.tokenPath), 0o700))
	must(t, os.WriteFile(tn.tokenPath, []byte("K1095ab2e8c9a3d3e1f0c7b4a6d5e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f::server:"+tn.token+"\n"), 0o600))
	return tn
}

// precreate makes a Secret as the controller does, empty unless data is given.
func (tn *tenant) precreate(ctx context.Context, name string, data map[string][]byte) error {
	return create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tn.namespace, Labels: map[string]string{"k3k.io/cluster": tn.cluster}},
		Data:       data,
	})
}

// publisher builds a publisher that uses only the tenant's restricted rights.
func (tn *tenant) publisher(t *testing.T, mod func(*publisher.Config)) *publisher.Publisher {
	t.Helper()
	cfg := publisher.Config{
		KubeconfigPath:  tn.kubeconfigPath,
		Endpoint:        kubeconfig.Endpoint{URL: serviceURL},
		Secrets:         tn.restricted.CoreV1().Secrets(tn.namespace),
		SecretName:      tn.kubeconfigSecret,
		TokenPath:       tn.tokenPath,
		TokenSecretName: tn.tokenSecret,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := publisher.New(cfg)
	must(t, err)
	return p
}

func (tn *tenant) secret(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	s, err := hostAdmin.CoreV1().Secrets(tn.namespace).Get(t.Context(), name, metav1.GetOptions{})
	must(t, err)
	return s
}

// writeKubeconfig writes, as k3s does (truncate and write in place), an admin
// kubeconfig for the virtual apiserver with a new client certificate for user.
func (tn *tenant) writeKubeconfig(t *testing.T, user string) []byte {
	t.Helper()
	data := k3sKubeconfig(t, testenv.CertSpec{CommonName: user, Organization: []string{"system:masters"}})
	must(t, os.WriteFile(tn.kubeconfigPath, data, 0o600))
	return data
}

func k3sKubeconfig(t *testing.T, spec testenv.CertSpec) []byte {
	t.Helper()
	client, err := virtualCA.Issue(spec)
	must(t, err)
	data, err := testenv.K3sKubeconfig(virtual.URL, virtualCA.Cert, client)
	must(t, err)
	return data
}

// virtualClient connects to the virtual apiserver with published credentials,
// resolving the Service's name as the host cluster's DNS would.
func virtualClient(t *testing.T, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	target := strings.TrimPrefix(virtual.URL, "https://")
	var d net.Dialer
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == serviceHost+":443" {
			addr = target
		}
		return d.DialContext(ctx, network, addr)
	}
	cfg.Timeout = 10 * time.Second
	cfg.QPS, cfg.Burst = 1000, 1000 // the test agent requests in a tight loop
	c, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	return c
}

// whoami asks the virtual apiserver who the client is.
func whoami(ctx context.Context, c kubernetes.Interface) (string, error) {
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return r.Status.UserInfo.Username, nil
}

// requestLog records every request other than a read, by method and path, to count
// the publisher's writes as the apiserver sees them.
type requestLog struct {
	mu   sync.Mutex
	reqs []string
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			l.mu.Lock()
			l.reqs = append(l.reqs, req.Method+" "+req.URL.Path)
			l.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// count returns how many writes named secret (any secret when empty).
func (l *requestLog) count(secret string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if secret == "" || strings.HasSuffix(r, "/secrets/"+secret) {
			n++
		}
	}
	return n
}

func (l *requestLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reqs...)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func create(ctx context.Context, obj any) error {
	var err error
	opts := metav1.CreateOptions{}
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = hostAdmin.CoreV1().Namespaces().Create(ctx, o, opts)
	case *corev1.Secret:
		_, err = hostAdmin.CoreV1().Secrets(o.Namespace).Create(ctx, o, opts)
	case *corev1.ServiceAccount:
		_, err = hostAdmin.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.Role:
		_, err = hostAdmin.RbacV1().Roles(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.RoleBinding:
		_, err = hostAdmin.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, opts)
	default:
		return fmt.Errorf("create: unsupported %T", obj)
	}
	return err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }
