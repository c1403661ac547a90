package pki_test

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/k3k-io/k3k/pkg/pki"
)

func TestIssuedMemberCertificateVerifiesForItsDNSNameAndBothUsages(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("etcd-ca", now, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pki.Issue(ca, pki.MemberSpec("m0", "m0.k3k-c-server-headless.ns.svc"), now)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	block, _ := pem.Decode(m.CertPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "m0.k3k-c-server-headless.ns.svc", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("usage %v: %v", usage, err)
		}
	}
	if len(cert.IPAddresses) != 0 {
		t.Errorf("member certificate carries IPs %v; identities must be names", cert.IPAddresses)
	}
}

func TestNeedsRenewal(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("ca", now, 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("other", now, 0)
	if err != nil {
		t.Fatal(err)
	}
	dns := []string{"m0.svc"}
	good, err := pki.Issue(ca, pki.MemberSpec("m0", dns...), now)
	if err != nil {
		t.Fatal(err)
	}
	short, err := pki.Issue(ca, pki.CertSpec{CommonName: "m0", DNSNames: dns, Server: true, Validity: 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := pki.Issue(other, pki.MemberSpec("m0", dns...), now)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		pair       pki.KeyPair
		dns        []string
		want       bool
		reasonPart string
	}{
		{"a valid certificate with the same names is kept", good, dns, false, ""},
		{"a certificate expiring within the window is renewed", short, dns, true, "expires"},
		{"a certificate for other names is renewed", good, []string{"m0.svc", "m0.other"}, true, "dns names"},
		{"a certificate from another ca is renewed", foreign, dns, true, "not valid"},
		{"garbage is renewed", pki.KeyPair{CertPEM: []byte("junk")}, dns, true, "unreadable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := pki.NeedsRenewal(ca, c.pair, c.dns, now, pki.DefaultRenewBefore)
			if got.Renew != c.want || !strings.Contains(got.Reason, c.reasonPart) {
				t.Errorf("got %+v, want renew=%v with reason containing %q", got, c.want, c.reasonPart)
			}
		})
	}
}

func TestIssueRefusesANonCA(t *testing.T) {
	now := time.Now()
	ca, _ := pki.NewCA("ca", now, 0)
	leaf, _ := pki.Issue(ca, pki.MemberSpec("m0", "m0.svc"), now)
	if _, err := pki.Issue(leaf, pki.MemberSpec("m1", "m1.svc"), now); err == nil {
		t.Fatal("issuing with a leaf certificate succeeded")
	}
}

func TestIssueWritesWhatTheSpecAsksFor(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("ca", now, 0)
	if err != nil {
		t.Fatal(err)
	}
	loopback := net.ParseIP("127.0.0.1")
	cases := []struct {
		name     string
		spec     pki.CertSpec
		usages   []x509.ExtKeyUsage
		ips      []net.IP
		org      []string
		notAfter time.Time
	}{
		{
			name:     "a client-only certificate carries only client usage and its organization",
			spec:     pki.CertSpec{CommonName: "admin", Organization: []string{"system:masters"}, Client: true},
			usages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			org:      []string{"system:masters"},
			notAfter: now.Add(pki.DefaultCertValidity),
		},
		{
			name:     "a server-only certificate carries only server usage and its IPs",
			spec:     pki.CertSpec{CommonName: "apiserver", DNSNames: []string{"localhost"}, IPs: []net.IP{loopback}, Server: true},
			usages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			ips:      []net.IP{loopback},
			notAfter: now.Add(pki.DefaultCertValidity),
		},
		{
			name:     "a member certificate carries both usages and no IP",
			spec:     pki.MemberSpec("m0", "m0.svc"),
			usages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			notAfter: now.Add(pki.DefaultCertValidity),
		},
		{
			name:     "a negative validity issues a certificate that has already expired",
			spec:     pki.CertSpec{CommonName: "old", Client: true, Validity: -time.Minute},
			usages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			notAfter: now.Add(-time.Minute),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pair, err := pki.Issue(ca, c.spec, now)
			if err != nil {
				t.Fatal(err)
			}
			block, _ := pem.Decode(pair.CertPEM)
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cert.ExtKeyUsage, c.usages) {
				t.Errorf("ext key usages %v, want %v", cert.ExtKeyUsage, c.usages)
			}
			if !slices.EqualFunc(cert.IPAddresses, c.ips, net.IP.Equal) {
				t.Errorf("IPs %v, want %v", cert.IPAddresses, c.ips)
			}
			if !slices.Equal(cert.Subject.Organization, c.org) {
				t.Errorf("organization %v, want %v", cert.Subject.Organization, c.org)
			}
			// x509 keeps whole seconds.
			if d := cert.NotAfter.Sub(c.notAfter); d < -time.Second || d > time.Second {
				t.Errorf("not after %s, want %s", cert.NotAfter, c.notAfter)
			}
		})
	}
}
