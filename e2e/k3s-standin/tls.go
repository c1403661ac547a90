package main

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
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certKey is a certificate with its private key, both parsed and as PEM.
type certKey struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// tlsDir lays out <data-dir>/server/tls the way k3s does (same file names).
type tlsDir string

func (d tlsDir) path(name string) string { return filepath.Join(string(d), name) }

// caValidity and leafValidity follow k3s: ten-year CAs, one-year leaf certificates.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// renewBefore is how close to expiry a kept client certificate is renewed.
	renewBefore = 90 * 24 * time.Hour
)

// loadOrCreateCA returns the CA stored as NAME.crt/NAME.key, creating it on first
// start. An existing CA is never replaced: every kubeconfig and token hash depends on it.
func (d tlsDir) loadOrCreateCA(name, commonName string) (*certKey, error) {
	ck, err := d.load(name)
	if err == nil {
		if !ck.Cert.IsCA {
			return nil, fmt.Errorf("%s is not a CA certificate", d.path(name+".crt"))
		}
		return ck, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	ck, err = sign(&x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", commonName, time.Now().Unix())},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
	}, nil, caValidity)
	if err != nil {
		return nil, err
	}
	return ck, d.store(name, ck)
}

// loadOrIssueClient keeps a client certificate across restarts while it chains to
// ca and is not close to expiry, so the admin kubeconfig stays the same.
func (d tlsDir) loadOrIssueClient(name string, ca *certKey, commonName string, orgs ...string) (*certKey, error) {
	if ck, err := d.load(name); err == nil {
		if ck.Cert.CheckSignatureFrom(ca.Cert) == nil && time.Until(ck.Cert.NotAfter) > renewBefore &&
			ck.Cert.Subject.CommonName == commonName {
			return ck, nil
		}
	}
	ck, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName, Organization: orgs},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, leafValidity)
	if err != nil {
		return nil, err
	}
	return ck, d.store(name, ck)
}

// issueServing writes a fresh serving certificate: its names (tls-san, the pod IP)
// may differ from one start to the next.
func (d tlsDir) issueServing(name string, ca *certKey, dnsNames []string, ips []net.IP) (*certKey, error) {
	ck, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, leafValidity)
	if err != nil {
		return nil, err
	}
	return ck, d.store(name, ck)
}

// loadOrCreateKey returns the service-account signing key, created once.
func (d tlsDir) loadOrCreateKey(name string) error {
	if _, err := os.Stat(d.path(name)); err == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writeFileAtomic(d.path(name), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func (d tlsDir) load(name string) (*certKey, error) {
	certPEM, err := os.ReadFile(d.path(name + ".crt"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(d.path(name + ".key"))
	if err != nil {
		return nil, fmt.Errorf("%s exists but its key does not: %w", d.path(name+".crt"), err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%s: not PEM", d.path(name))
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", d.path(name+".crt"), err)
	}
	key, err := parseKey(kb)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", d.path(name+".key"), err)
	}
	return &certKey{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

func parseKey(b *pem.Block) (crypto.Signer, error) {
	switch b.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(b.Bytes)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("unsupported key type")
	}
	return s, nil
}

func (d tlsDir) store(name string, ck *certKey) error {
	if err := writeFileAtomic(d.path(name+".key"), ck.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(d.path(name+".crt"), ck.CertPEM, 0o644)
}

// sign issues tmpl signed by parent, or self-signed when parent is nil.
func sign(tmpl *x509.Certificate, parent *certKey, validity time.Duration) (*certKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour).UTC()
	tmpl.NotAfter = time.Now().Add(validity).UTC()
	issuer, signer := tmpl, crypto.Signer(key)
	if parent != nil {
		issuer, signer = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
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
	return &certKey{
		Cert: cert, Key: key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// writeFileAtomic replaces path with data so that a reader never sees a partial file.
func writeFileAtomic(path string, data []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
