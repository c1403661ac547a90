package kubeconfig

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"time"
)

// Validate parses data and checks that a client could use it at now: the server is
// an https URL, the CA bundle parses and has a certificate valid at now, the client
// key belongs to the client certificate, and that certificate is valid at now and
// usable for client authentication.
//
// It does not check that the client certificate chains to CAData: k3s signs client
// certificates with a client CA that differs from the server CA it embeds.
//
// The error wraps ErrEmpty, ErrMalformed, ErrExpired or ErrKeyMismatch and never
// contains key material.
func Validate(data []byte, now time.Time) error {
	_, err := ParseValid(data, now)
	return err
}

// ParseValid is Parse followed by Validate, for a caller that uses the parsed
// kubeconfig after checking it: the bytes are parsed once. Its error is
// Validate's.
func ParseValid(data []byte, now time.Time) (*Kubeconfig, error) {
	k, err := Parse(data)
	if err != nil {
		return nil, err
	}
	if err := k.Validate(now); err != nil {
		return nil, err
	}
	return k, nil
}

// Validate checks k as the function Validate does, without parsing.
func (k *Kubeconfig) Validate(now time.Time) error {
	if err := validateServer(k.Server); err != nil {
		return err
	}
	if err := validateCA(k.CAData, now); err != nil {
		return err
	}
	return validateClient(k.CertData, k.KeyData, now)
}

func validateServer(server string) error {
	u, err := url.Parse(server)
	if err != nil {
		return fmt.Errorf("%w: server is not a URL", ErrMalformed)
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%w: server %q is not an https URL", ErrMalformed, u.Redacted())
	}
	return nil
}

func validateCA(data []byte, now time.Time) error {
	certs, err := parseCertificates(data)
	if err != nil {
		return fmt.Errorf("%w: certificate-authority-data: %s", ErrMalformed, err)
	}
	// A bundle may hold an old CA next to its successor during rotation; one
	// certificate valid now is enough for verification to succeed.
	for _, c := range certs {
		if within(c, now) {
			return nil
		}
	}
	return fmt.Errorf("%w: no certificate in certificate-authority-data is valid at %s (%s)",
		ErrExpired, now.UTC().Format(time.RFC3339), validity(certs[0]))
}

func validateClient(certPEM, keyPEM []byte, now time.Time) error {
	certs, err := parseCertificates(certPEM)
	if err != nil {
		return fmt.Errorf("%w: client-certificate-data: %s", ErrMalformed, err)
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return fmt.Errorf("%w: client-key-data: %s", ErrMalformed, err)
	}
	leaf := certs[0]
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(leaf.PublicKey) {
		return ErrKeyMismatch
	}
	if !within(leaf, now) {
		return fmt.Errorf("%w: client certificate %q is not valid at %s (%s)",
			ErrExpired, leaf.Subject.CommonName, now.UTC().Format(time.RFC3339), validity(leaf))
	}
	if !clientAuth(leaf) {
		return fmt.Errorf("%w: client certificate %q is not for client authentication", ErrMalformed, leaf.Subject.CommonName)
	}
	return nil
}

// ClientNotAfter is when k's client certificate (the first in its bundle)
// expires; zero when it does not parse. Publishers of one cluster compare it
// to decide whose kubeconfig lasts longer.
func (k *Kubeconfig) ClientNotAfter() time.Time {
	certs, err := parseCertificates(k.CertData)
	if err != nil {
		return time.Time{}
	}
	return certs[0].NotAfter
}

// parseCertificates returns every certificate in a PEM bundle. Its error is a short
// phrase without input, for the callers to wrap.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			// crypto/x509 reports structure ("malformed certificate"), not bytes.
			return nil, fmt.Errorf("certificate does not parse: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return certs, nil
}

// parsePrivateKey reads the first private key PEM block in the forms k3s and
// openssl write (PKCS#8, PKCS#1 RSA, SEC 1 EC). Its error is a short phrase without
// input.
func parsePrivateKey(data []byte) (crypto.Signer, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("no PEM private key")
		}
		var key any
		var err error
		switch block.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		default:
			continue // e.g. "EC PARAMETERS" before the key, as openssl writes it
		}
		if err != nil {
			return nil, fmt.Errorf("%s does not parse", block.Type)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s is not a signing key", block.Type)
		}
		return signer, nil
	}
}

func within(c *x509.Certificate, now time.Time) bool {
	return !now.Before(c.NotBefore) && !now.After(c.NotAfter)
}

func validity(c *x509.Certificate) string {
	return fmt.Sprintf("valid from %s to %s", c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
}

func clientAuth(c *x509.Certificate) bool {
	if len(c.ExtKeyUsage) == 0 {
		return true
	}
	for _, u := range c.ExtKeyUsage {
		if u == x509.ExtKeyUsageClientAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}
