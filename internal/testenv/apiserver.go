package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// APIServerConfig says how to start a kube-apiserver.
type APIServerConfig struct {
	// EtcdServers are the storage endpoints, e.g. "http://127.0.0.1:2379".
	EtcdServers []string
	// Dir holds certificates and the log; it must exist and outlive the process.
	Dir string
	// ExtraArgs are appended last, as "--flag=value".
	ExtraArgs []string
	// CA signs the serving and admin certificates; one is made when nil. Reusing a
	// CA lets a restarted apiserver accept the clients of the previous one.
	CA *CertKey
}

// APIServer is a running kube-apiserver process.
type APIServer struct {
	// URL is https://127.0.0.1:PORT.
	URL string
	// CA is the authority its serving and client certificates chain to.
	CA *CertKey
	// Admin is a client certificate in group system:masters.
	Admin *CertKey
	// LogPath is where the process's output goes; tests print it on failure.
	LogPath string

	proc *process
}

// StartAPIServer starts kube-apiserver and waits until /readyz answers ok.
func StartAPIServer(ctx context.Context, cfg APIServerConfig) (*APIServer, error) {
	bin, err := Binary("kube-apiserver")
	if err != nil {
		return nil, err
	}
	ca := cfg.CA
	if ca == nil {
		if ca, err = NewCA("testenv-ca"); err != nil {
			return nil, err
		}
	}
	serving, err := ca.Issue(CertSpec{
		CommonName: "kube-apiserver", Server: true,
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPs:      []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
	})
	if err != nil {
		return nil, err
	}
	admin, err := ca.Issue(CertSpec{CommonName: "admin", Organization: []string{"system:masters"}})
	if err != nil {
		return nil, err
	}
	saKey, err := NewCA("service-accounts") // only its key pair is used
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"ca.crt": ca.Cert, "serving.crt": serving.Cert, "serving.key": serving.Key,
		"sa.key": saKey.Key, "sa.pub": saKey.Cert,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(cfg.Dir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	port, err := FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	p := func(name string) string { return filepath.Join(cfg.Dir, name) }
	args := []string{
		"--etcd-servers=" + strings.Join(cfg.EtcdServers, ","),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		// k3s's Kubernetes (hack/k3s.sh) writes its loopback client
		// certificate there; its default, /var/run/kubernetes, need not exist.
		"--cert-dir=" + cfg.Dir,
		"--tls-cert-file=" + p("serving.crt"),
		"--tls-private-key-file=" + p("serving.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--service-account-key-file=" + p("sa.pub"),
		"--service-account-signing-key-file=" + p("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		"--disable-admission-plugins=ServiceAccount",
		"--v=1",
	}
	args = append(args, cfg.ExtraArgs...)

	s := &APIServer{
		URL: fmt.Sprintf("https://127.0.0.1:%d", port), CA: ca, Admin: admin,
		LogPath: p("kube-apiserver.log"),
	}
	client, err := kubernetes.NewForConfig(s.RESTConfig())
	if err != nil {
		return nil, err
	}
	s.proc, err = startProcess(ctx, "kube-apiserver", bin, args, s.LogPath, readiness{
		check: func(ctx context.Context) error {
			body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err == nil && !bytes.Equal(bytes.TrimSpace(body), []byte("ok")) {
				return fmt.Errorf("/readyz: %q", body)
			}
			return err
		},
		interval: 200 * time.Millisecond,
		timeout:  90 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// RESTConfig is an admin client configuration for the apiserver.
func (s *APIServer) RESTConfig() *rest.Config {
	return &rest.Config{
		Host: s.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: s.CA.Cert, CertData: s.Admin.Cert, KeyData: s.Admin.Key,
		},
		QPS: 1000, Burst: 2000,
	}
}

// Kubeconfig renders an admin kubeconfig for the apiserver.
func (s *APIServer) Kubeconfig() ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: s.URL, CertificateAuthorityData: s.CA.Cert}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: s.Admin.Cert, ClientKeyData: s.Admin.Key}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin"}
	cfg.CurrentContext = "testenv"
	return clientcmd.Write(*cfg)
}

// Stop ends the process (SIGTERM, then SIGKILL after ten seconds) and waits for it.
func (s *APIServer) Stop() error {
	s.proc.stop()
	return nil
}

// Exited reports whether the process has ended.
func (s *APIServer) Exited() bool { return s.proc.exited() }
