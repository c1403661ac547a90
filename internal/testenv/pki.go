package testenv

import (
	"net"
	"time"

	"github.com/k3k-io/k3k/pkg/pki"
)

// CertKey is a PEM certificate with its PEM private key.
type CertKey struct {
	Cert []byte
	Key  []byte
}

// CertSpec says what a certificate issued by a CA is for.
type CertSpec struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Server       bool // serving certificate; otherwise a client certificate
	// NotAfter defaults to one day from now; tests of expiry set it in the past.
	NotAfter time.Time
}

// validity is how long test certificates and CAs last unless told otherwise.
const validity = 24 * time.Hour

// NewCA makes a self-signed certificate authority, valid for a day.
func NewCA(name string) (*CertKey, error) {
	pair, err := pki.NewCA(name, time.Now(), validity)
	if err != nil {
		return nil, err
	}
	return &CertKey{Cert: pair.CertPEM, Key: pair.KeyPEM}, nil
}

// Issue signs a new certificate for spec with the CA. It is pkg/pki's Issue, the
// code that issues the controller's certificates, with a test's defaults.
func (ca *CertKey) Issue(spec CertSpec) (*CertKey, error) {
	now := time.Now()
	d := validity
	if !spec.NotAfter.IsZero() {
		d = spec.NotAfter.Sub(now) // negative for a certificate that has expired
	}
	pair, err := pki.Issue(pki.KeyPair{CertPEM: ca.Cert, KeyPEM: ca.Key}, pki.CertSpec{
		CommonName:   spec.CommonName,
		Organization: spec.Organization,
		DNSNames:     spec.DNSNames,
		IPs:          spec.IPs,
		Server:       spec.Server,
		Client:       !spec.Server,
		Validity:     d,
	}, now)
	if err != nil {
		return nil, err
	}
	return &CertKey{Cert: pair.CertPEM, Key: pair.KeyPEM}, nil
}
