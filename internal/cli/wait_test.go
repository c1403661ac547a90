package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/layout"
)

// TestCreateReturnsOnlyOnceTheAPIAnswers: the controller reports the cluster
// Ready, but its address (here a load balancer) still routes to an API that
// answers /readyz 503, as while the Service's endpoints catch up. create keeps
// waiting, saying why, and returns once /readyz answers ok to the credentials
// it writes, never before.
func TestCreateReturnsOnlyOnceTheAPIAnswers(t *testing.T) {
	ns := newNamespace(t)
	kc, err := testenv.NewAdminKubeconfig("https://127.0.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	serving, err := kc.CA.Issue(testenv.CertSpec{CommonName: "k3s", Server: true, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(serving.Cert, serving.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(kc.CA.Cert)
	var ready atomic.Bool
	var asked, withCert atomic.Int64
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		asked.Add(1)
		if len(r.TLS.PeerCertificates) > 0 {
			withCert.Add(1)
		}
		if !ready.Load() {
			http.Error(w, "[-]etcd failed: reason withheld\nreadyz check failed", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	api.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	api.StartTLS()
	defer api.Close()
	_, portStr, _ := net.SplitHostPort(api.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	done := make(chan result, 1)
	go func() {
		done <- k3kcli(t, "cluster", "create", "lb", "-n", ns, "--expose", "loadbalancer", "--timeout", "2m",
			"--output-kubeconfig", t.TempDir()+"/lb.yaml")
	}()
	ctx := context.Background()
	var c *v1beta1.Cluster
	eventually(t, "the CLI creates the cluster", func() error {
		c = &v1beta1.Cluster{}
		return k8s.Get(ctx, keyOf(ns, "lb"), c)
	})
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: layout.NamesFor(c).Service, Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "x"},
			Ports: []corev1.ServicePort{{Name: "https", Port: int32(port)}}},
	}
	if err := k8s.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.0.0.1"}}
	if err := k8s.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: layout.NamesFor(c).Kubeconfig, Namespace: ns},
		Data:       map[string][]byte{layout.SecretKeyKubeconfig: kc.Data},
	}); err != nil {
		t.Fatal(err)
	}
	c = getCluster(t, ns, "lb")
	setStatus(t, c, v1beta1.PhaseReady, metav1.Condition{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonReady})

	// Ready on the host, not yet answering at its address: create waits, well
	// past its ReachWait, because the API did answer (503).
	eventually(t, "create to ask the API a few times", func() error {
		if n := asked.Load(); n < 3 {
			return fmt.Errorf("asked %d times", n)
		}
		return nil
	})
	time.Sleep(3 * cliOptions(nil, nil, time.Now).ReachWait)
	select {
	case r := <-done:
		t.Fatalf("create returned (exit %d) while the API answered 503", r.code)
	default:
	}
	ready.Store(true)
	r := <-done
	if r.code != ExitOK {
		t.Fatalf("exit code %d, stderr: %s", r.code, r.errOut)
	}
	if !strings.Contains(r.errOut, "is not ready yet (/readyz: 503)") {
		t.Errorf("progress does not say why create waits:\n%s", r.errOut)
	}
	if strings.Contains(r.errOut, "warning:") {
		t.Errorf("create warned although the API answered:\n%s", r.errOut)
	}
	if withCert.Load() != asked.Load() {
		t.Errorf("%d of %d /readyz requests carried the published client certificate", withCert.Load(), asked.Load())
	}
}
