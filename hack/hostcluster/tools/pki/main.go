// Command pki writes the certificates and kubeconfigs of a single-node host
// cluster into one directory: a CA, the apiserver's serving and kubelet-client
// certificates, the service-account key pair, and a kubeconfig (certificates
// embedded) for each client: admin, controller-manager, scheduler, kubelet and
// kube-proxy. With -extra-nodes it also writes kubelet-NAME.kubeconfig for each
// further node, pointing at -remote-server (those nodes run in network
// namespaces of their own, where 127.0.0.1 is not the apiserver). Everything
// is regenerated on each run; a host cluster's PKI lives exactly as long as
// its etcd data.
package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

type keyPair struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("pki: ")
	dir := flag.String("dir", "", "output directory (required)")
	node := flag.String("node", "", "node name (required)")
	nodeIP := flag.String("node-ip", "", "node IP address (required)")
	serviceIP := flag.String("service-ip", "10.96.0.1", "first address of the service range (the kubernetes Service)")
	server := flag.String("server", "https://127.0.0.1:6443", "apiserver URL written into kubeconfigs")
	extraNodes := flag.String("extra-nodes", "", "comma-separated names of further nodes, each getting kubelet-NAME.kubeconfig")
	remoteServer := flag.String("remote-server", "", "apiserver URL written into the further nodes' kubeconfigs (required with -extra-nodes)")
	flag.Parse()
	var extra []string
	if *extraNodes != "" {
		extra = strings.Split(*extraNodes, ",")
	}
	if *dir == "" || *node == "" || net.ParseIP(*nodeIP) == nil || net.ParseIP(*serviceIP) == nil || (len(extra) > 0 && *remoteServer == "") {
		flag.Usage()
		os.Exit(2)
	}
	ca, err := run(*dir, *node, net.ParseIP(*nodeIP), net.ParseIP(*serviceIP), *server)
	if err != nil {
		log.Fatal(err)
	}
	if err := extraKubelets(*dir, ca, extra, *remoteServer); err != nil {
		log.Fatal(err)
	}
}

// extraKubelets writes kubelet-NAME.kubeconfig for each further node, signed
// by ca, with the identity the NodeRestriction admission plugin expects of
// that node's kubelet.
func extraKubelets(dir string, ca *keyPair, nodes []string, server string) error {
	for _, n := range nodes {
		kp, err := client(ca, "system:node:"+n, "system:nodes")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "kubelet-"+n+".kubeconfig"), kubeconfig(server, ca.certPEM, kp), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// run writes the CA and everything of node 1 and the control plane; it
// returns the CA for the further nodes' identities.
func run(dir, node string, nodeIP, serviceIP net.IP, server string) (*keyPair, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := newKeyPair(&x509.Certificate{
		Subject: pkix.Name{CommonName: "k3k-hostcluster-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
	}, nil)
	if err != nil {
		return nil, err
	}
	write := func(name string, data []byte) error {
		return os.WriteFile(filepath.Join(dir, name), data, 0o600)
	}
	if err := write("ca.crt", ca.certPEM); err != nil {
		return nil, err
	}
	if err := write("ca.key", ca.keyPEM); err != nil {
		return nil, err
	}

	serving, err := newKeyPair(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", node, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), nodeIP, serviceIP},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca)
	if err != nil {
		return nil, err
	}
	if err := write("apiserver.crt", serving.certPEM); err != nil {
		return nil, err
	}
	if err := write("apiserver.key", serving.keyPEM); err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saPriv, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	if err := write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saPriv})); err != nil {
		return nil, err
	}
	if err := write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub})); err != nil {
		return nil, err
	}

	kubeletClient, err := client(ca, "kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return nil, err
	}
	if err := write("apiserver-kubelet-client.crt", kubeletClient.certPEM); err != nil {
		return nil, err
	}
	if err := write("apiserver-kubelet-client.key", kubeletClient.keyPEM); err != nil {
		return nil, err
	}

	clients := []struct{ file, cn, org string }{
		{"admin", "admin", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
		{"kubelet", "system:node:" + node, "system:nodes"},
		{"kube-proxy", "system:kube-proxy", ""},
	}
	for _, c := range clients {
		kp, err := client(ca, c.cn, c.org)
		if err != nil {
			return nil, err
		}
		if err := write(c.file+".kubeconfig", kubeconfig(server, ca.certPEM, kp)); err != nil {
			return nil, err
		}
	}
	return ca, nil
}

func client(ca *keyPair, cn, org string) (*keyPair, error) {
	subject := pkix.Name{CommonName: cn}
	if org != "" {
		subject.Organization = []string{org}
	}
	return newKeyPair(&x509.Certificate{Subject: subject, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca)
}

// newKeyPair signs tmpl with parent, or self-signs it when parent is nil.
func newKeyPair(tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().AddDate(1, 0, 0)
	if !tmpl.IsCA {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	}
	signerCert, signer := tmpl, crypto.Signer(key)
	if parent != nil {
		signerCert, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("signing %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func kubeconfig(server string, caPEM []byte, kp *keyPair) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: hostcluster
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: hostcluster
  context: {cluster: hostcluster, user: %s}
current-context: hostcluster
`, server, b64(caPEM), kp.cert.Subject.CommonName, b64(kp.certPEM), b64(kp.keyPEM), kp.cert.Subject.CommonName)
}
