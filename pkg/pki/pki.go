// Package pki issues the certificates of an etcd cluster the controller owns: one
// CA per virtual cluster, member certificates that name the member's DNS names (never
// an IP, so a member keeps its certificate when its pod moves), and client
// certificates for k3s and the controller. It is pure: it reads the clock it is given
// and touches no files, so the controller decides where the PEM ends up (a Secret).
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Default validities. The CA outlives many member certificates so that rotating a
// member never requires every other member to trust a new CA at the same moment.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
	// DefaultRenewBefore is how long before expiry NeedsRenewal says yes: long
	// enough that a controller that is down for a while still renews in time.
	DefaultRenewBefore = 30 * 24 * time.Hour
)

// KeyPair is a PEM certificate and its PEM private key, the shape a Secret holds.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// CertSpec says what a certificate issued by the CA is for.
type CertSpec struct {
	// CommonName identifies the holder, e.g. the member (pod) name.
	CommonName string
	// Organization is the subject's organization; Kubernetes reads it as the
	// groups of a client certificate.
	Organization []string
	// DNSNames are the names the holder serves under; for a member, its pod DNS
	// name under the headless Service (and the short forms it is dialled by).
	DNSNames []string
	// IPs are the addresses the holder serves under. Members never get one (see
	// MemberSpec); it is for servers on a fixed address, such as a test's loopback.
	IPs []net.IP
	// Server and Client select the extended key usages. An etcd member needs both:
	// it serves peers and clients and dials its peers with the same certificate.
	Server, Client bool
	// Validity defaults to DefaultCertValidity; capped at the CA's expiry. A
	// negative Validity issues a certificate that has already expired, which is
	// what tests of expiry need.
	Validity time.Duration
}

// NewCA creates a self-signed CA valid from now for validity (DefaultCAValidity if 0).
func NewCA(commonName string, now time.Time, validity time.Duration) (KeyPair, error) {
	if validity == 0 {
		validity = DefaultCAValidity
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(validity),
	}
	return sign(tmpl, nil, nil)
}

// Issue signs a certificate for spec with ca, valid from now.
func Issue(ca KeyPair, spec CertSpec, now time.Time) (KeyPair, error) {
	caCert, caKey, err := parsePair(ca)
	if err != nil {
		return KeyPair{}, fmt.Errorf("reading ca: %w", err)
	}
	if !caCert.IsCA {
		return KeyPair{}, errors.New("reading ca: certificate is not a CA")
	}
	if !spec.Server && !spec.Client {
		return KeyPair{}, fmt.Errorf("issuing %q: neither server nor client usage requested", spec.CommonName)
	}
	validity := spec.Validity
	if validity == 0 {
		validity = DefaultCertValidity
	}
	notAfter := now.Add(validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: spec.CommonName, Organization: slices.Clone(spec.Organization)},
		DNSNames:    slices.Clone(spec.DNSNames),
		IPAddresses: slices.Clone(spec.IPs),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		NotBefore:   now.Add(-5 * time.Minute),
		NotAfter:    notAfter,
	}
	if spec.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	return sign(tmpl, caCert, caKey)
}

// MemberSpec is the CertSpec of an etcd member: serving and dialling, under its DNS
// names. Keeping this in one place means the controller and the tests issue the same
// shape of certificate.
func MemberSpec(name string, dnsNames ...string) CertSpec {
	return CertSpec{CommonName: name, DNSNames: dnsNames, Server: true, Client: true}
}

// Renewal is NeedsRenewal's answer: whether to issue again, and why.
type Renewal struct {
	Renew  bool
	Reason string
}

// NeedsRenewal says whether the certificate in pair must be issued again: when it
// does not parse, is not signed by ca, expires within renewBefore, or does not carry
// exactly wantDNS. It is what keeps a controller from re-issuing on every reconcile:
// an unchanged, valid certificate is kept.
func NeedsRenewal(ca, pair KeyPair, wantDNS []string, now time.Time, renewBefore time.Duration) Renewal {
	cert, _, err := parsePair(pair)
	if err != nil {
		return Renewal{true, "certificate unreadable: " + err.Error()}
	}
	caCert, _, err := parsePair(ca)
	if err != nil {
		return Renewal{true, "ca unreadable: " + err.Error()}
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return Renewal{true, "not valid under the current ca: " + err.Error()}
	}
	if now.Add(renewBefore).After(cert.NotAfter) {
		return Renewal{true, fmt.Sprintf("expires at %s", cert.NotAfter.UTC().Format(time.RFC3339))}
	}
	have := slices.Sorted(slices.Values(cert.DNSNames))
	want := slices.Sorted(slices.Values(wantDNS))
	if !slices.Equal(have, want) {
		return Renewal{true, fmt.Sprintf("dns names %v, want %v", have, want)}
	}
	return Renewal{}
}

func sign(tmpl, parent *x509.Certificate, parentKey crypto.Signer) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("generating key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return KeyPair{}, fmt.Errorf("generating serial: %w", err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return KeyPair{}, fmt.Errorf("signing certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("encoding key: %w", err)
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func parsePair(p KeyPair) (*x509.Certificate, crypto.Signer, error) {
	block, _ := pem.Decode(p.CertPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing certificate: %w", err)
	}
	if len(p.KeyPEM) == 0 {
		return cert, nil, nil
	}
	kb, _ := pem.Decode(p.KeyPEM)
	if kb == nil {
		return nil, nil, errors.New("no PEM key")
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, errors.New("parsing key: not an EC private key")
	}
	return cert, key, nil
}
