package kubeletapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
)

// ServingCertificate obtains a kubelet serving certificate for nodeName from
// the virtual cluster: it sends a CSR for signer kubernetes.io/kubelet-serving
// naming the node and its addresses, approves it (the agent's credentials are
// the cluster admin's) and waits until the signer issues it, or ctx ends.
func ServingCertificate(ctx context.Context, client kubernetes.Interface, nodeName string, ips []net.IP) (*tls.Certificate, error) {
	keyPEM, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, fmt.Errorf("generating serving key: %w", err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parsing serving key: %w", err)
	}
	csrPEM, err := certutil.MakeCSR(key, &pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}, []string{nodeName}, ips)
	if err != nil {
		return nil, fmt.Errorf("making serving CSR: %w", err)
	}
	name, uid, err := csr.RequestCertificateWithContext(ctx, client, csrPEM, "", certificatesv1.KubeletServingSignerName, nil,
		[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}, key)
	if err != nil {
		return nil, fmt.Errorf("requesting serving certificate: %w", err)
	}
	req, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading serving CSR: %w", err)
	}
	if !approved(req) {
		req.Status.Conditions = append(req.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
			Reason: "K3kAgentServingCertificate", Message: "approved by the k3k agent for its own node",
			LastUpdateTime: metav1.NewTime(time.Now()),
		})
		if _, err := client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, req, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("approving serving CSR: %w", err)
		}
	}
	certPEM, err := csr.WaitForCertificate(ctx, client, name, uid)
	if err != nil {
		return nil, fmt.Errorf("waiting for serving certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("issued serving certificate: %w", err)
	}
	// Leaf is filled in by X509KeyPair since Go 1.23; RenewAt reads it.
	return &pair, nil
}

func approved(req *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range req.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// RenewAt is when a serving certificate should be replaced: at 80% of its
// lifetime, as kubelet's certificate manager does by default (it picks a
// random point between 70% and 90%), leaving a fifth of the lifetime for
// retries should the virtual cluster be down then.
func RenewAt(cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(life * 8 / 10)
}
