package testenv

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CertKey is a PEM certificate with its PEM private key.
type CertKey struct {
	Cert []byte
	Key  []byte

	cert   *x509.Certificate
	signer crypto.Signer
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

// NewCA makes a self-signed certificate authority.
func NewCA(name string) (*CertKey, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	return issue(tmpl, nil, time.Now().Add(24*time.Hour))
}

// Issue signs a new certificate for spec with the CA.
func (ca *CertKey) Issue(spec CertSpec) (*CertKey, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		DNSNames:    spec.DNSNames,
		IPAddresses: spec.IPs,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if spec.Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	notAfter := spec.NotAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	return issue(tmpl, ca, notAfter)
}

func issue(tmpl *x509.Certificate, parent *CertKey, notAfter time.Time) (*CertKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("generating serial: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = notAfter
	parentCert, signer := tmpl, crypto.Signer(key)
	if parent != nil {
		parentCert, signer = parent.cert, parent.signer
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("signing certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &CertKey{
		Cert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:    pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		cert:   cert,
		signer: key,
	}, nil
}
