package kubeconfig_test

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
)

const k3sServer = "https://127.0.0.1:6443"

// credentials is what k3s would hold: a server CA, and an admin client certificate
// signed by a separate client CA, as k3s does.
type credentials struct {
	serverCA, clientCA *testenv.CertKey
	admin              *testenv.CertKey
}

func newCredentials(t *testing.T) credentials {
	t.Helper()
	serverCA, err := testenv.NewCA("k3s-server-ca")
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := testenv.NewCA("k3s-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	return credentials{serverCA: serverCA, clientCA: clientCA, admin: issue(t, clientCA, testenv.CertSpec{
		CommonName: "system:admin", Organization: []string{"system:masters"},
	})}
}

func issue(t *testing.T, ca *testenv.CertKey, spec testenv.CertSpec) *testenv.CertKey {
	t.Helper()
	ck, err := ca.Issue(spec)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

func k3sKubeconfig(t *testing.T, ca []byte, client *testenv.CertKey) []byte {
	t.Helper()
	data, err := testenv.K3sKubeconfig(k3sServer, ca, client)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestValidate(t *testing.T) {
	now := time.Now()
	c := newCredentials(t)
	valid := k3sKubeconfig(t, c.serverCA.Cert, c.admin)
	other := issue(t, c.clientCA, testenv.CertSpec{CommonName: "other"})
	expired := issue(t, c.clientCA, testenv.CertSpec{CommonName: "expired", NotAfter: now.Add(-time.Minute)})
	serving := issue(t, c.clientCA, testenv.CertSpec{CommonName: "serving", Server: true})
	withChain := &testenv.CertKey{Cert: append(bytes.Clone(c.admin.Cert), c.clientCA.Cert...), Key: c.admin.Key}
	mismatched := &testenv.CertKey{Cert: c.admin.Cert, Key: other.Key}

	tests := []struct {
		name string
		data []byte
		now  time.Time
		want error
	}{
		{"a kubeconfig as k3s writes it is valid", valid, now, nil},
		{"a client certificate followed by its chain is valid", k3sKubeconfig(t, c.serverCA.Cert, withChain), now, nil},
		{"a CA bundle with one expired certificate is valid", k3sKubeconfig(t, append(bytes.Clone(c.serverCA.Cert), expiredCA(t)...), c.admin), now, nil},
		{"no content means waiting", nil, now, kubeconfig.ErrEmpty},
		{"whitespace means waiting", []byte(" \n\t\n"), now, kubeconfig.ErrEmpty},
		{"garbage is malformed", []byte("\x00\x01garbage{{{: ]"), now, kubeconfig.ErrMalformed},
		{"YAML that is not a kubeconfig is malformed", []byte("hello: world\n"), now, kubeconfig.ErrMalformed},
		{"a file cut in half is malformed", valid[:len(valid)/2], now, kubeconfig.ErrMalformed},
		{"a file cut inside the key is malformed", valid[:len(valid)-40], now, kubeconfig.ErrMalformed},
		{"an expired client certificate is refused", k3sKubeconfig(t, c.serverCA.Cert, expired), now, kubeconfig.ErrExpired},
		{"a client certificate not yet valid is refused", valid, now.Add(-48 * time.Hour), kubeconfig.ErrExpired},
		{"an expired CA is refused", valid, now.Add(48 * time.Hour), kubeconfig.ErrExpired},
		{"a key of another certificate is refused", k3sKubeconfig(t, c.serverCA.Cert, mismatched), now, kubeconfig.ErrKeyMismatch},
		{"a serving certificate is not a client certificate", k3sKubeconfig(t, c.serverCA.Cert, serving), now, kubeconfig.ErrMalformed},
		{"a CA that is not PEM is malformed", k3sKubeconfig(t, []byte("not a certificate"), c.admin), now, kubeconfig.ErrMalformed},
		{"a CA holding a key is malformed", k3sKubeconfig(t, c.serverCA.Key, c.admin), now, kubeconfig.ErrMalformed},
		{"a key that is not PEM is malformed", k3sKubeconfig(t, c.serverCA.Cert, &testenv.CertKey{Cert: c.admin.Cert, Key: []byte("nope")}), now, kubeconfig.ErrMalformed},
		{"a corrupted certificate is malformed", k3sKubeconfig(t, c.serverCA.Cert, &testenv.CertKey{Cert: corrupt(c.admin.Cert), Key: c.admin.Key}), now, kubeconfig.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := kubeconfig.Validate(tt.data, tt.now)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Validate() = %v, want %v", err, tt.want)
			}
			if err != nil {
				assertNoSecrets(t, err.Error(), c.admin, other, expired, c.serverCA, c.clientCA)
			}
		})
	}
}

func TestValidateNeverPanicsOnTruncation(t *testing.T) {
	c := newCredentials(t)
	valid := k3sKubeconfig(t, c.serverCA.Cert, c.admin)
	for n := range len(valid) - 1 {
		err := kubeconfig.Validate(valid[:n], time.Now())
		if err == nil {
			// Cutting only trailing whitespace leaves the same document.
			if len(bytes.TrimSpace(valid[:n])) != len(bytes.TrimSpace(valid)) {
				t.Fatalf("a file cut at %d of %d bytes was accepted", n, len(valid))
			}
			continue
		}
		assertNoSecrets(t, err.Error(), c.admin, c.serverCA)
	}
}

func TestRewrite(t *testing.T) {
	c := newCredentials(t)
	in := k3sKubeconfig(t, c.serverCA.Cert, c.admin)
	to := kubeconfig.Endpoint{URL: layout.Endpoint(&v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "tenants"}})}

	out, err := kubeconfig.Rewrite(in, to)
	if err != nil {
		t.Fatal(err)
	}
	if err := kubeconfig.Validate(out, time.Now()); err != nil {
		t.Fatalf("rewritten kubeconfig is not valid: %v", err)
	}
	got, err := kubeconfig.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Server != "https://k3k-demo-service.tenants.svc:443" || got.TLSServerName != "" {
		t.Errorf("server = %q, tls-server-name = %q", got.Server, got.TLSServerName)
	}
	if !bytes.Equal(got.CAData, c.serverCA.Cert) || !bytes.Equal(got.CertData, c.admin.Cert) || !bytes.Equal(got.KeyData, c.admin.Key) {
		t.Error("credentials changed in rewriting")
	}
	if strings.Contains(string(out), "127.0.0.1") || strings.Contains(string(out), "tls-server-name") {
		t.Errorf("rewritten kubeconfig keeps the pod-local address or names a TLS server:\n%s", out)
	}
	// kubectl and client-go read it as they read any kubeconfig.
	rc, err := clientcmd.RESTConfigFromKubeConfig(out)
	if err != nil {
		t.Fatalf("client-go cannot load the output: %v", err)
	}
	if rc.Host != to.URL {
		t.Errorf("client-go sees host %q", rc.Host)
	}

	for i := range 3 {
		again, err := kubeconfig.Rewrite(in, to)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("rewrite %d of the same input differs", i+2)
		}
	}
	twice, err := kubeconfig.Rewrite(out, to)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(twice, out) {
		t.Errorf("rewriting the output changes it:\n%s\nvs\n%s", out, twice)
	}
	// The Secret must change when the credentials do.
	rotated, err := kubeconfig.Rewrite(k3sKubeconfig(t, c.serverCA.Cert, issue(t, c.clientCA, testenv.CertSpec{CommonName: "system:admin"})), to)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(rotated, out) {
		t.Error("a new client certificate gives the same output")
	}
}

func TestRewriteRefuses(t *testing.T) {
	c := newCredentials(t)
	valid := k3sKubeconfig(t, c.serverCA.Cert, c.admin)
	tests := []struct {
		name string
		data []byte
		to   string
	}{
		{"an http endpoint", valid, "http://k3k-demo-service.tenants.svc:443"},
		{"an endpoint without host", valid, "https://"},
		{"an empty input", nil, "https://k3k-demo-service.tenants.svc:443"},
		{"a garbage input", []byte("::::"), "https://k3k-demo-service.tenants.svc:443"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out, err := kubeconfig.Rewrite(tt.data, kubeconfig.Endpoint{URL: tt.to}); err == nil {
				t.Fatalf("Rewrite() = %q, want an error", out)
			}
		})
	}
}

// TestTLSServerName proves the reason for Endpoint.TLSServerName against a real TLS
// server whose certificate names only the Service: reached by IP, verification
// fails unless the kubeconfig names the server to verify.
func TestTLSServerName(t *testing.T) {
	c := newCredentials(t)
	const service = "k3k-demo-service.tenants.svc"
	serving := issue(t, c.serverCA, testenv.CertSpec{CommonName: "k3s", Server: true, DNSNames: []string{service}})
	pair, err := tls.X509KeyPair(serving.Cert, serving.Key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	in := k3sKubeconfig(t, c.serverCA.Cert, c.admin)
	get := func(to kubeconfig.Endpoint) error {
		out, err := kubeconfig.Rewrite(in, to)
		if err != nil {
			return err
		}
		k, err := kubeconfig.Parse(out)
		if err != nil {
			return err
		}
		client, err := rest.HTTPClientFor(k.RESTConfig())
		if err != nil {
			return err
		}
		resp, err := client.Get(k.Server)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	byIP := "https://127.0.0.1:" + port
	if err := get(kubeconfig.Endpoint{URL: byIP}); err == nil {
		t.Error("an address not among the certificate's names was accepted without tls-server-name")
	}
	if err := get(kubeconfig.Endpoint{URL: byIP, TLSServerName: service}); err != nil {
		t.Errorf("with tls-server-name: %v", err)
	}
}

func TestKubeconfigStringRedacts(t *testing.T) {
	c := newCredentials(t)
	k, err := kubeconfig.Parse(k3sKubeconfig(t, c.serverCA.Cert, c.admin))
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecrets(t, fmt.Sprintf("%v %+v %#v %s %v", k, k, k, *k, *k), c.admin)
}

// assertNoSecrets fails when s holds any PEM, or any sizeable piece of the keys or
// certificates, raw or base64-encoded as a kubeconfig embeds them.
func assertNoSecrets(t *testing.T, s string, cks ...*testenv.CertKey) {
	t.Helper()
	if strings.Contains(s, "-----BEGIN") {
		t.Fatalf("message holds PEM: %s", s)
	}
	for _, ck := range cks {
		for _, material := range [][]byte{ck.Key, ck.Cert} {
			for _, form := range []string{string(material), base64.StdEncoding.EncodeToString(material)} {
				for i := 0; i+24 <= len(form); i += 12 {
					if piece := form[i : i+24]; strings.Contains(s, piece) {
						t.Fatalf("message holds key or certificate material %q: %s", piece, s)
					}
				}
			}
		}
	}
}

func expiredCA(t *testing.T) []byte {
	t.Helper()
	// testenv makes CAs valid for a day; a certificate issued by a fresh CA with a
	// past NotAfter stands in for the retired half of a rotation bundle.
	ca, err := testenv.NewCA("old")
	if err != nil {
		t.Fatal(err)
	}
	return issue(t, ca, testenv.CertSpec{CommonName: "old-ca", NotAfter: time.Now().Add(-time.Hour)}).Cert
}

func corrupt(pemData []byte) []byte {
	out := bytes.Clone(pemData)
	// Flip characters in the middle of the base64 body: still PEM, no longer DER.
	for i := len(out) / 3; i < len(out)/3+8; i++ {
		if out[i] == 'A' {
			out[i] = 'B'
		} else if out[i] != '\n' {
			out[i] = 'A'
		}
	}
	return out
}
