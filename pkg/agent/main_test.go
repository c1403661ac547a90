package agent_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/controller/cluster"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/agent"
	"github.com/k3k-io/k3k/pkg/agent/node"
	"github.com/k3k-io/k3k/pkg/agent/translate"
	"github.com/k3k-io/k3k/pkg/agentbootstrap"
	"github.com/k3k-io/k3k/pkg/layout"
)

// The suite runs two real kube-apiservers on one etcd (each under its own
// prefix): the host cluster, and the virtual cluster the agent registers in.
// The agent runs in this process, as the real binary wires it: host
// credentials are the agent ServiceAccount's (the controller's Role, through
// impersonation), virtual credentials come from a kubeconfig in a directory
// updated the way kubelet updates a Secret volume. The agent reaches the
// virtual apiserver through a TCP proxy, the stand-in for the cluster's
// Service: it keeps one address while the apiserver behind it is replaced.
var (
	etcd        *testenv.Etcd
	hostAPI     *testenv.APIServer
	virtualAPI  *testenv.APIServer
	virtualCA   *testenv.CertKey
	hostAdmin   *kubernetes.Clientset
	virtAdmin   *kubernetes.Clientset
	proxy       *tcpProxy
	credentials *testenv.SecretVolume
	theAgent    *agent.Agent
	tr          *translate.Translator
	workDir     string
	// hostWrites and virtualWrites record every write the agent sends, except
	// the node's own heartbeat (Node and Lease).
	hostWrites, virtualWrites writeLog
)

// virtualAPIService is where the agent points the pods' in-cluster clients,
// as cmd/kubelet reads it from the cluster's API Service.
var virtualAPIService = translate.APIServer{Host: "k3k-c1-service.tenant.svc", Port: 443, IP: "10.0.0.99"}

const (
	hostNamespace = "tenant"
	clusterName   = "c1"
	nodeName      = "k3k-c1-kubelet"
	// allowedClass is the storage class the Cluster allows besides the
	// host's default (spec.storageClasses).
	allowedClass = "fast"
	// virtualIngressClass is the ingress class the Cluster maps to the host's
	// hostIngressClass (spec.ingresses.classes).
	virtualIngressClass = "public"
	hostIngressClass    = "nginx"
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		return 1
	}
	var err error
	if workDir, err = os.MkdirTemp("", "k3k-agent-test-"); err != nil {
		return fail("temp dir", err)
	}
	defer os.RemoveAll(workDir)

	startCtx, startCancel := context.WithTimeout(ctx, 3*time.Minute)
	defer startCancel()
	if etcd, err = testenv.StartEtcd(startCtx, testenv.EtcdConfig{Dir: sub("etcd")}); err != nil {
		return fail("starting etcd", err)
	}
	defer etcd.Stop()
	if virtualCA, err = testenv.NewCA("k3s-ca"); err != nil {
		return fail("virtual CA", err)
	}
	var wg sync.WaitGroup
	var hostErr, virtErr error
	wg.Go(func() {
		hostAPI, hostErr = testenv.StartAPIServer(startCtx, testenv.APIServerConfig{
			EtcdServers: []string{etcd.URL}, Dir: sub("host"), ExtraArgs: []string{"--etcd-prefix=/host"},
		})
	})
	wg.Go(func() { virtualAPI, virtErr = startVirtual(startCtx, "virtual-1") })
	wg.Wait()
	if hostAPI != nil {
		defer hostAPI.Stop()
	}
	defer func() {
		if virtualAPI != nil {
			virtualAPI.Stop()
		}
	}()
	if hostErr != nil {
		return fail("starting host kube-apiserver", hostErr)
	}
	if virtErr != nil {
		return fail("starting virtual kube-apiserver", virtErr)
	}
	hostAdmin = kubernetes.NewForConfigOrDie(hostAPI.RESTConfig())
	virtAdmin = kubernetes.NewForConfigOrDie(virtualAPI.RESTConfig())
	if proxy, err = newTCPProxy(virtualAPI.URL); err != nil {
		return fail("proxy", err)
	}
	defer proxy.Close()

	// The host side as the controller sets it up: namespace, the agent's
	// ServiceAccount, its ClusterRole (the chart's) and RoleBinding.
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: hostNamespace, UID: "cluster-uid"}}
	if _, err := hostAdmin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hostNamespace}}, metav1.CreateOptions{}); err != nil {
		return fail("host namespace", err)
	}
	if _, err := hostAdmin.CoreV1().ServiceAccounts(hostNamespace).Create(ctx, cluster.DesiredAgentServiceAccount(c), metav1.CreateOptions{}); err != nil {
		return fail("service account", err)
	}
	if _, err := hostAdmin.RbacV1().ClusterRoles().Create(ctx, cluster.DesiredAgentClusterRole("k3k-agent"), metav1.CreateOptions{}); err != nil {
		return fail("cluster role", err)
	}
	if _, err := hostAdmin.RbacV1().RoleBindings(hostNamespace).Create(ctx, cluster.DesiredAgentRoleBinding(c, "k3k-agent"), metav1.CreateOptions{}); err != nil {
		return fail("role binding", err)
	}
	// How the agent under test translates (pull policies left as written).
	tcfg := translate.Config{
		ClusterName: clusterName, HostNamespace: hostNamespace, NodeName: nodeName, APIServer: virtualAPIService,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "k3k.io/v1beta1", Kind: "Cluster", Name: clusterName, UID: c.UID}},
		StorageClasses:  []string{allowedClass},
		// The host class allows expansion (expandableClass makes it so), as
		// the controller would tell the agent.
		ExpandableStorageClasses: []string{allowedClass},
		IngressClasses:           map[string]string{virtualIngressClass: hostIngressClass},
		PriorityClasses:          map[string]string{"critical": "tenant-critical"},
		IngressHosts:             []string{"shop.example.com", "*.shop.example.com"},
		// The agent binary's flag defaults.
		DefaultRequests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		DefaultLimits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	// The chart's agent guard holds the agent to its own objects and to the
	// defaults tcfg applies; every test of this suite runs under it, so a
	// write the guard would refuse fails the suite.
	policy, binding := cluster.DesiredAgentGuard("k3k-agent-guard", cluster.PodDefaultsOf(tcfg).CEL())
	if _, err := hostAdmin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		return fail("agent guard", err)
	}
	if _, err := hostAdmin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fail("agent guard binding", err)
	}
	agentHost := hostAPI.RESTConfig()
	agentHost.Wrap(hostWrites.wrap)
	agentHost.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + hostNamespace + ":" + layout.AgentName(c.Name),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + hostNamespace, "system:authenticated"},
	}

	credentials = &testenv.SecretVolume{Dir: sub("credentials")}
	kc, err := testenv.K3sKubeconfig(proxy.URL(), virtualCA.Cert, virtualAPI.Admin)
	if err != nil {
		return fail("kubeconfig", err)
	}
	if err := credentials.Write(map[string][]byte{layout.SecretKeyKubeconfig: kc}); err != nil {
		return fail("credentials", err)
	}

	if err := waitForGuard(startCtx, kubernetes.NewForConfigOrDie(agentHost)); err != nil {
		return fail("agent guard", err)
	}

	cfg := agent.Config{
		Translate:            tcfg,
		SyncIngresses:        true,
		StorageClassCopies:   true,
		Node:                 node.Config{InternalIP: "127.0.0.1", LeaseDuration: 8 * time.Second, StatusInterval: 20 * time.Second},
		Host:                 kubernetes.NewForConfigOrDie(agentHost),
		HostConfig:           agentHost,
		Resync:               3 * time.Second,
		WrapVirtualTransport: virtualWrites.wrap,
	}
	if tr, err = translate.New(cfg.Translate); err != nil {
		return fail("translator", err)
	}
	if theAgent, err = agent.New(cfg); err != nil {
		return fail("agent", err)
	}
	loader, err := agentbootstrap.New(agentbootstrap.Config{Dir: credentials.Dir, OnChange: theAgent.SetCredentials})
	if err != nil {
		return fail("loader", err)
	}
	agentCtx := logr.NewContext(ctx, agentLogger())
	first, err := loader.Wait(startCtx)
	if err != nil {
		return fail("loading credentials", err)
	}
	var agentWG sync.WaitGroup
	defer agentWG.Wait()
	defer cancel()
	agentWG.Go(func() { _ = loader.Run(agentCtx) })
	agentWG.Go(func() { _ = theAgent.Run(agentCtx, first) })
	return m.Run()
}

// waitForGuard waits until the host apiserver enforces the agent guard (it
// loads policies asynchronously): a ConfigMap name the agent would never
// derive is refused.
func waitForGuard(ctx context.Context, asAgent kubernetes.Interface) error {
	for {
		_, err := asAgent.CoreV1().ConfigMaps(hostNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "guard-probe"}}, metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), "of objects it named") {
			return nil
		}
		if err == nil {
			_ = hostAdmin.CoreV1().ConfigMaps(hostNamespace).Delete(ctx, "guard-probe", metav1.DeleteOptions{})
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the guard never took effect; last answer: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startVirtual starts the virtual cluster's apiserver on its etcd prefix,
// always with the same CA, as k3s keeps its CA on its data volume.
func startVirtual(ctx context.Context, dir string) (*testenv.APIServer, error) {
	return testenv.StartAPIServer(ctx, testenv.APIServerConfig{
		EtcdServers: []string{etcd.URL}, Dir: sub(dir), CA: virtualCA, ExtraArgs: []string{"--etcd-prefix=/virtual"},
	})
}

func sub(name string) string {
	d := filepath.Join(workDir, name)
	_ = os.MkdirAll(d, 0o755)
	return d
}

// agentLogger writes the agent's log to a file the failing test prints, or to
// stderr with -v.
func agentLogger() logr.Logger {
	var w io.Writer = io.Discard
	if f, err := os.Create(filepath.Join(workDir, "agent.log")); err == nil {
		w = f
	}
	if testing.Verbose() {
		w = io.MultiWriter(w, os.Stderr)
	}
	var mu sync.Mutex
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%s agent %s\n", time.Now().Format("15:04:05.000"), args)
	}, funcr.Options{})
}

// tcpProxy forwards connections to a target it can change; changing it cuts
// the connections in flight, as a server going away does.
type tcpProxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]bool
}

func newTCPProxy(targetURL string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &tcpProxy{ln: ln, conns: map[net.Conn]bool{}}
	p.SetTarget(targetURL)
	go p.serve()
	return p, nil
}

func (p *tcpProxy) URL() string { return "https://" + p.ln.Addr().String() }

// SetTarget points the proxy at https://host:port, or nowhere with "".
func (p *tcpProxy) SetTarget(url string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = ""
	if url != "" {
		p.target = url[len("https://"):]
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *tcpProxy) Close() { p.ln.Close(); p.SetTarget("") }

func (p *tcpProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		if target == "" {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}

// writeLog records the writes going through a transport.
type writeLog struct {
	mu     sync.Mutex
	writes []string
}

func (l *writeLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet && !strings.Contains(req.URL.Path, "/leases/") && !strings.Contains(req.URL.Path, "/nodes/") {
			l.mu.Lock()
			l.writes = append(l.writes, req.Method+" "+req.URL.Path)
			l.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// since returns the writes recorded after the first n.
func (l *writeLog) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.writes[n:]...)
}

func (l *writeLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.writes)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
