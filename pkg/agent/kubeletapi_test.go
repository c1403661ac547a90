package agent_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/agent/kubeletapi"
)

// TestAgentServesContainerLogs runs the agent's kubelet API as the virtual
// apiserver would reach it. The test plays k3s's controller-manager signing
// kubelet serving certificates with the cluster CA (envtest runs none).
func TestAgentServesContainerLogs(t *testing.T) {
	c := ctx(t)
	ln := serveKubeletAPI(t, time.Hour)

	const ns = "logs"
	virtualNamespace(t, ns)
	createVirtual(t, boundPod(ns, "app"))
	waitHostPod(t, ns, "app")

	// A user of the virtual cluster without nodes/proxy, and the apiserver's
	// own kubelet client identity, which has it.
	if _, err := virtAdmin.RbacV1().ClusterRoleBindings().Create(c, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "apiserver-kubelet"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "kube-apiserver-kubelet-client"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiserverCert := issueClient(t, virtualCA, "kube-apiserver-kubelet-client")
	nobodyCert := issueClient(t, virtualCA, "nobody")
	strangerCA, err := testenv.NewCA("stranger")
	if err != nil {
		t.Fatal(err)
	}
	strangerCert := issueClient(t, strangerCA, "kube-apiserver-kubelet-client")

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(virtualCA.Cert)
	get := func(cert *tls.Certificate, path string) (int, string, error) {
		tc := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 20 * time.Second}
		resp, err := client.Get("https://" + ln.Addr().String() + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}

	post := func(cert *tls.Certificate, path string) (int, string) {
		tc := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 20 * time.Second}
		resp, err := client.Post("https://"+ln.Addr().String()+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// The server is up once the virtual cluster issued its certificate; the
	// client verifies it against the cluster CA, as the apiserver does.
	logsPath := "/containerLogs/" + ns + "/app/main?tailLines=10"
	var code int
	var body string
	eventually(t, "kubelet API serving with a certificate from the cluster CA", func() (err error) {
		code, body, err = get(apiserverCert, logsPath)
		return err
	})

	// The request reached the host API for the right host pod. envtest has no
	// host kubelet, so an unscheduled host pod has an empty log; a container
	// the pod does not have is refused by the host, and the agent reports it
	// under the virtual pod's name.
	if code != http.StatusOK {
		t.Errorf("logs of an existing container: %d %q", code, body)
	}
	code, body, _ = get(apiserverCert, "/containerLogs/"+ns+"/app/nosuch")
	if code != http.StatusBadRequest || !strings.Contains(body, "container nosuch is not valid for pod app") || strings.Contains(body, hostPodName(ns, "app")) {
		t.Errorf("logs of a container the pod does not have: %d %q", code, body)
	}
	if code, body, _ := get(apiserverCert, "/containerLogs/"+ns+"/missing/main"); code != http.StatusNotFound {
		t.Errorf("logs of a pod that does not exist: %d %q", code, body)
	}

	// exec is forwarded to the host API's pods/exec of the host pod, with the
	// agent's host credentials and under the agent guard. The host pod has no
	// node in envtest, so the host answers that, about the virtual pod's name.
	// (The stream itself is proven on a real node by the e2e suite.)
	code, body = post(apiserverCert, "/exec/"+ns+"/app/main?command=date&output=1")
	if code != http.StatusBadRequest || !strings.Contains(body, `pod app does not have a host assigned`) {
		t.Errorf("exec: %d %q, want the host's 400 about pod app", code, body)
	}
	code, body = post(apiserverCert, "/portForward/"+ns+"/app?port=8080")
	if code != http.StatusBadRequest || !strings.Contains(body, `pod app does not have a host assigned`) {
		t.Errorf("port-forward: %d %q, want the host's 400 about pod app", code, body)
	}
	if code, body := post(nobodyCert, "/exec/"+ns+"/app/main?command=date&output=1"); code != http.StatusForbidden {
		t.Errorf("exec by a user without nodes/proxy: %d %q", code, body)
	}

	// A host pod that only has the name derived for a virtual pod (made by
	// someone else, without the agent's labels and annotations) does not
	// answer for it: the agent leaves it alone and the kubelet API refuses,
	// naming the virtual pod only.
	squatter, err := hostAdmin.CoreV1().Pods(hostNamespace).Create(c, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: hostPodName(ns, "squat"), Namespace: hostNamespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createVirtual(t, boundPod(ns, "squat"))
	for _, path := range []string{"/exec/" + ns + "/squat/main?command=date&output=1", "/portForward/" + ns + "/squat?port=8080"} {
		if code, body := post(apiserverCert, path); code != http.StatusNotFound || !strings.Contains(body, ns+"/squat") || strings.Contains(body, squatter.Name) {
			t.Errorf("%s to a host pod that is not the agent's copy: %d %q, want 404 about %s/squat", path, code, body, ns)
		}
	}
	if code, body, _ := get(apiserverCert, "/containerLogs/"+ns+"/squat/main"); code != http.StatusNotFound || strings.Contains(body, squatter.Name) {
		t.Errorf("logs of a host pod that is not the agent's copy: %d %q, want 404", code, body)
	}
	if err := virtAdmin.CoreV1().Pods(ns).Delete(c, "squat", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Error(err)
	}
	if err := hostAdmin.CoreV1().Pods(hostNamespace).Delete(c, squatter.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Error(err)
	}

	cases := []struct {
		name string
		cert *tls.Certificate
		path string
		want int
	}{
		{"no client certificate", nil, logsPath, http.StatusUnauthorized},
		{"a certificate from another CA", strangerCert, logsPath, http.StatusUnauthorized},
		{"a user without nodes/proxy", nobodyCert, logsPath, http.StatusForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := get(tc.cert, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Errorf("status %d (%q), want %d", code, body, tc.want)
			}
		})
	}
}

// serveKubeletAPI runs the suite agent's kubelet API on a fresh loopback port
// until the test ends, with a signer issuing its serving certificates for
// lifetime, and returns the listener.
func serveKubeletAPI(t *testing.T, lifetime time.Duration) net.Listener {
	t.Helper()
	c := ctx(t)
	signCtx, stopSigning := context.WithCancel(c)
	go signServingCSRs(signCtx, lifetime)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stopServing := context.WithCancel(c)
	served := make(chan error, 1)
	go func() { served <- theAgent.ServeKubeletAPI(serveCtx, ln) }()
	t.Cleanup(func() {
		stopServing()
		stopSigning()
		if err := <-served; err != nil {
			t.Errorf("kubelet API: %v", err)
		}
	})
	return ln
}

func issueClient(t *testing.T, ca *testenv.CertKey, name string) *tls.Certificate {
	t.Helper()
	ck, err := ca.Issue(testenv.CertSpec{CommonName: name})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(ck.Cert, ck.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

// signServingCSRs issues every approved kubelet-serving CSR with the virtual
// cluster's CA, valid for lifetime from now, until ctx ends.
func signServingCSRs(ctx context.Context, lifetime time.Duration) {
	caCerts, err1 := certutil.ParseCertsPEM(virtualCA.Cert)
	caKey, err2 := keyutil.ParsePrivateKeyPEM(virtualCA.Key)
	if err := errors.Join(err1, err2); err != nil {
		panic(err)
	}
	for ctx.Err() == nil {
		list, err := virtAdmin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range list.Items {
				req := &list.Items[i]
				if req.Spec.SignerName != certificatesv1.KubeletServingSignerName || len(req.Status.Certificate) > 0 || !isApproved(req) {
					continue
				}
				if certPEM, err := signCSR(req.Spec.Request, caCerts[0], caKey, lifetime); err == nil {
					req.Status.Certificate = certPEM
					_, _ = virtAdmin.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, req, metav1.UpdateOptions{})
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func isApproved(req *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range req.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func signCSR(csrPEM []byte, ca *x509.Certificate, key any, lifetime time.Duration) ([]byte, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: csr.Subject, DNSNames: csr.DNSNames, IPAddresses: csr.IPAddresses,
		NotBefore: time.Now(), NotAfter: time.Now().Add(lifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, csr.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// TestAgentRenewsItsServingCertificate: with certificates the cluster issues
// for 10 seconds, the kubelet API serves a new one from 80% of the lifetime on,
// without a restart, and requests keep working.
func TestAgentRenewsItsServingCertificate(t *testing.T) {
	ln := serveKubeletAPI(t, 10*time.Second)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(virtualCA.Cert)
	// servedCert handshakes with the kubelet API, verifying against the
	// cluster CA, and returns the certificate it served.
	servedCert := func() (*x509.Certificate, error) {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	var first *x509.Certificate
	eventually(t, "kubelet API serving", func() (err error) {
		first, err = servedCert()
		return err
	})
	var renewed *x509.Certificate
	eventually(t, "a renewed serving certificate", func() error {
		cert, err := servedCert()
		if err != nil {
			return err
		}
		if cert.SerialNumber.Cmp(first.SerialNumber) == 0 {
			return fmt.Errorf("still serial %s (valid until %s)", first.SerialNumber, first.NotAfter.Format(time.RFC3339))
		}
		renewed = cert
		return nil
	})
	// The new certificate was asked for no earlier than RenewAt of the first
	// (the signer dates it when it signs); when exactly RenewAt falls is
	// kubeletapi's unit test.
	if at := kubeletapi.RenewAt(first); renewed.NotBefore.Before(at.Truncate(time.Second)) {
		t.Errorf("renewed certificate dated %s, before the first one's renewal time %s", renewed.NotBefore, at)
	}
}
