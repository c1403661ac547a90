package publisher_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/publisher"
)

// startingAPI is an API server's /readyz as k3s's apiserver answers it while it
// starts: TLS with the cluster's serving certificate, client certificates from
// the cluster's CA required (k3s refuses anonymous requests), 500 with the
// failing checks listed until ready, then 200 "ok". The real kube-apiserver
// cannot be held in that state on demand; this server speaks the same protocol.
type startingAPI struct {
	srv      *httptest.Server
	ready    atomic.Bool
	requests atomic.Int64
	// clients counts requests that presented a client certificate.
	clients atomic.Int64
}

func newStartingAPI(t *testing.T) *startingAPI {
	t.Helper()
	serving, err := virtualCA.Issue(testenv.CertSpec{CommonName: "k3s", Server: true, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	must(t, err)
	pair, err := tls.X509KeyPair(serving.Cert, serving.Key)
	must(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(virtualCA.Cert)
	a := &startingAPI{}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.requests.Add(1)
		if len(r.TLS.PeerCertificates) > 0 {
			a.clients.Add(1)
		}
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if !a.ready.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "[+]ping ok\n[+]etcd ok\n[-]poststarthook/start-apiextensions-controllers failed: reason withheld\n"+
				"[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n")
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	a.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)
	return a
}

// kubeconfig is what k3s writes for this server.
func (a *startingAPI) kubeconfig(t *testing.T) []byte {
	t.Helper()
	client, err := virtualCA.Issue(testenv.CertSpec{CommonName: "system:admin", Organization: []string{"system:masters"}})
	must(t, err)
	data, err := testenv.K3sKubeconfig(a.srv.URL, virtualCA.Cert, client)
	must(t, err)
	return data
}

// probe asks the publisher's readiness endpoint, as the kubelet would.
func probe(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/readyz", nil))
	return rec.Code, rec.Body.String()
}

// TestNothingPublishedBeforeTheAPIServes: k3s writes its kubeconfig while its
// API server still fails /readyz. The publisher leaves the Secret empty and the
// readiness endpoint answers 503 naming the failing checks, until the API
// answers ok; then both follow at once.
func TestNothingPublishedBeforeTheAPIServes(t *testing.T) {
	ctx := t.Context()
	tn := newTenant(t)
	api := newStartingAPI(t)
	data := api.kubeconfig(t)
	must(t, os.WriteFile(tn.kubeconfigPath, data, 0o600))
	p := tn.publisher(t, nil)
	ready := p.ReadyHandler()

	res, err := p.Sync(ctx)
	if err != nil || res.State != publisher.StateAPINotReady || res.Published {
		t.Fatalf("Sync() while the API starts = %+v, %v; want state %s", res, err, publisher.StateAPINotReady)
	}
	for _, want := range []string{api.srv.URL, "500", "poststarthook/start-apiextensions-controllers", "poststarthook/rbac/bootstrap-roles"} {
		if !strings.Contains(res.Reason, want) {
			t.Errorf("reason %q does not mention %q", res.Reason, want)
		}
	}
	if n := tn.writes.count(tn.kubeconfigSecret); n != 0 {
		t.Fatalf("the kubeconfig Secret was written %d times for a server that does not serve", n)
	}
	if got := tn.secret(t, tn.kubeconfigSecret).Data[layout.SecretKeyKubeconfig]; len(got) != 0 {
		t.Fatal("the kubeconfig Secret holds a kubeconfig for a server that does not serve")
	}
	if code, body := probe(t, ready); code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready") {
		t.Errorf("readiness while the API starts: %d %q", code, body)
	}
	key, err := kubeconfig.Parse(data)
	must(t, err)
	assertNoKeyMaterial(t, res.Reason, key.KeyData)

	api.ready.Store(true)
	if code, body := probe(t, ready); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("readiness once the API serves: %d %q", code, body)
	}
	res, err = p.Sync(ctx)
	if err != nil || res.State != publisher.StatePublished || !res.Published {
		t.Fatalf("Sync() once the API serves = %+v, %v", res, err)
	}
	want, err := kubeconfig.Rewrite(data, kubeconfig.Endpoint{URL: serviceURL})
	must(t, err)
	if got := tn.secret(t, tn.kubeconfigSecret).Data[layout.SecretKeyKubeconfig]; !bytes.Equal(got, want) {
		t.Fatal("the Secret does not hold the rewritten kubeconfig")
	}
	if api.requests.Load() == 0 || api.clients.Load() != api.requests.Load() {
		t.Errorf("%d /readyz requests, %d with the kubeconfig's client certificate; every one must carry it",
			api.requests.Load(), api.clients.Load())
	}

	// The API stops serving (its datastore is gone): the pod leaves the Service.
	api.ready.Store(false)
	if code, _ := probe(t, ready); code != http.StatusServiceUnavailable {
		t.Errorf("readiness after the API stopped serving: %d", code)
	}
}

// TestReadinessAgainstARealAPIServer asks the real kube-apiserver: ready with
// the admin credentials k3s writes; not ready with a certificate the server's
// CA did not sign (the apiserver answers 401), nor with nothing listening.
func TestReadinessAgainstARealAPIServer(t *testing.T) {
	ctx := t.Context()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := "https://" + closed.Listener.Addr().String()
	closed.Close()
	strangerCA, err := testenv.NewCA("stranger")
	must(t, err)
	stranger, err := strangerCA.Issue(testenv.CertSpec{CommonName: "system:admin", Organization: []string{"system:masters"}})
	must(t, err)
	strangerKubeconfig, err := testenv.K3sKubeconfig(virtual.URL, virtualCA.Cert, stranger)
	must(t, err)
	admin, err := virtualCA.Issue(testenv.CertSpec{CommonName: "system:admin", Organization: []string{"system:masters"}})
	must(t, err)
	nobody, err := testenv.K3sKubeconfig(closedURL, virtualCA.Cert, admin)
	must(t, err)

	tests := []struct {
		name  string
		data  []byte
		ready bool
		why   string
	}{
		{"the admin kubeconfig k3s writes", k3sKubeconfig(t, testenv.CertSpec{CommonName: "system:admin", Organization: []string{"system:masters"}}), true, ""},
		{"a client certificate the cluster's CA did not sign", strangerKubeconfig, false, "401"},
		{"nothing listening on the server's port", nobody, false, "does not answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTenant(t)
			must(t, os.WriteFile(tn.kubeconfigPath, tt.data, 0o600))
			p := tn.publisher(t, nil)
			code, body := probe(t, p.ReadyHandler())
			res, err := p.Sync(ctx)
			must(t, err)
			if tt.ready {
				if code != http.StatusOK || res.State != publisher.StatePublished {
					t.Fatalf("readiness %d %q, Sync() = %+v; want ready and published", code, body, res)
				}
				return
			}
			if code != http.StatusServiceUnavailable || !strings.Contains(body, tt.why) {
				t.Errorf("readiness %d %q; want 503 about %q", code, body, tt.why)
			}
			if res.State != publisher.StateAPINotReady || !strings.Contains(res.Reason, tt.why) {
				t.Errorf("Sync() = %+v; want %s about %q", res, publisher.StateAPINotReady, tt.why)
			}
			if n := tn.writes.count(tn.kubeconfigSecret); n != 0 {
				t.Errorf("the kubeconfig Secret was written %d times", n)
			}
		})
	}
}

// TestRunPublishesWhenTheAPIStartsServing: nothing changes on disk when k3s's
// API starts serving, so the loop must ask again soon by itself rather than
// wait for its resync (an hour here).
func TestRunPublishesWhenTheAPIStartsServing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	tn := newTenant(t)
	api := newStartingAPI(t)
	data := api.kubeconfig(t)
	p := tn.publisher(t, func(c *publisher.Config) { c.Resync, c.APIPoll = time.Hour, 20*time.Millisecond })
	runPublisher(t, ctx, p, tn)
	must(t, os.WriteFile(tn.kubeconfigPath, data, 0o600))
	waitFor(t, "the publisher to wait for the API", func() bool { return p.Status().State == publisher.StateAPINotReady })
	asked := api.requests.Load()
	waitFor(t, "the publisher to ask again by itself", func() bool { return api.requests.Load() > asked+2 })
	if n := tn.writes.count(tn.kubeconfigSecret); n != 0 {
		t.Fatalf("the kubeconfig Secret was written %d times before the API served", n)
	}
	api.ready.Store(true)
	waitFor(t, "the Secret to be published", func() bool {
		return len(tn.secret(t, tn.kubeconfigSecret).Data[layout.SecretKeyKubeconfig]) > 0
	})
	if n := tn.writes.count(tn.kubeconfigSecret); n != 1 {
		t.Errorf("the kubeconfig Secret was written %d times, want 1", n)
	}
}
