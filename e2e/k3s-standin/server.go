package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// stopGrace is how long children get to exit after SIGTERM before SIGKILL.
const stopGrace = 20 * time.Second

// Run prepares the data dir (CAs, token, certificates), starts kube-apiserver,
// writes the admin kubeconfig once the API is ready, then runs the
// controller-manager and scheduler. It returns nil after ctx ends and every child
// has stopped, and an error as soon as any child exits on its own.
func Run(ctx context.Context, cfg Config) error {
	bins, err := findBinaries()
	if err != nil {
		return err
	}
	serverDir := filepath.Join(cfg.DataDir, "server")
	certs := tlsDir(filepath.Join(serverDir, "tls"))
	if err := os.MkdirAll(string(certs), 0o700); err != nil {
		return err
	}
	serverCA, err := certs.loadOrCreateCA("server-ca", "k3s-server-ca")
	if err != nil {
		return fmt.Errorf("server CA: %w", err)
	}
	clientCA, err := certs.loadOrCreateCA("client-ca", "k3s-client-ca")
	if err != nil {
		return fmt.Errorf("client CA: %w", err)
	}
	if err := certs.loadOrCreateKey("service.key"); err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	// With several servers, use the first server's CAs and key (bootstrap.go).
	if err := shareBootstrap(ctx, cfg, certs); err != nil {
		return err
	}
	if serverCA, err = certs.loadOrCreateCA("server-ca", "k3s-server-ca"); err != nil {
		return fmt.Errorf("server CA: %w", err)
	}
	if clientCA, err = certs.loadOrCreateCA("client-ca", "k3s-client-ca"); err != nil {
		return fmt.Errorf("client CA: %w", err)
	}
	if err := ensureToken(serverDir, cfg.TokenFile, serverCA.CertPEM); err != nil {
		return err
	}
	clients := map[string]*certKey{}
	for _, c := range []struct{ file, cn, org string }{
		{"client-admin", "system:admin", "system:masters"},
		{"client-controller", "system:kube-controller-manager", ""},
		{"client-scheduler", "system:kube-scheduler", ""},
		{"client-kube-apiserver", "system:kube-apiserver", "system:masters"},
	} {
		var orgs []string
		if c.org != "" {
			orgs = []string{c.org}
		}
		ck, err := certs.loadOrIssueClient(c.file, clientCA, c.cn, orgs...)
		if err != nil {
			return fmt.Errorf("client certificate %s: %w", c.file, err)
		}
		clients[c.file] = ck
	}
	podIP := podAddress()
	dnsNames, ips := servingNames(cfg, podIP)
	if _, err := certs.issueServing("serving-kube-apiserver", serverCA, dnsNames, ips); err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}

	local := fmt.Sprintf("https://127.0.0.1:%d", cfg.HTTPSListenPort)
	credDir := filepath.Join(serverDir, "cred")
	for file, ck := range map[string]*certKey{
		"admin.kubeconfig":      clients["client-admin"],
		"controller.kubeconfig": clients["client-controller"],
		"scheduler.kubeconfig":  clients["client-scheduler"],
	} {
		if err := writeFileAtomic(filepath.Join(credDir, file), kubeconfig(local, serverCA.CertPEM, ck), 0o600); err != nil {
			return err
		}
	}

	sup := newSupervisor()
	defer sup.stop()
	if err := sup.start("kube-apiserver", bins["kube-apiserver"], apiserverArgs(cfg, certs, podIP)); err != nil {
		return err
	}
	if err := sup.waitReady(ctx, local, serverCA, clients["client-admin"]); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return sup.stop()
	}
	fmt.Fprintf(os.Stderr, "k3s stand-in: kube-apiserver ready on %s\n", local)
	if cfg.WriteKubeconfig != "" {
		data := kubeconfig(local, serverCA.CertPEM, clients["client-admin"])
		if err := writeFileAtomic(cfg.WriteKubeconfig, data, cfg.WriteKubeconfigMode); err != nil {
			return fmt.Errorf("write-kubeconfig: %w", err)
		}
		fmt.Fprintf(os.Stderr, "k3s stand-in: wrote kubeconfig %s\n", cfg.WriteKubeconfig)
	}
	cred := func(f string) string { return filepath.Join(credDir, f) }
	if err := sup.start("kube-controller-manager", bins["kube-controller-manager"], controllerArgs(cfg, certs, cred("controller.kubeconfig"))); err != nil {
		return err
	}
	if err := sup.start("kube-scheduler", bins["kube-scheduler"], schedulerArgs(cred("scheduler.kubeconfig"))); err != nil {
		return err
	}

	select {
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "k3s stand-in: stopping")
		return sup.stop()
	case ex := <-sup.exited:
		return fmt.Errorf("%s exited: %v", ex.name, ex.err)
	}
}

func apiserverArgs(cfg Config, certs tlsDir, podIP net.IP) []string {
	args := []string{
		"--etcd-servers=" + cfg.DatastoreEndpoint,
		"--bind-address=0.0.0.0",
		"--secure-port=" + strconv.Itoa(cfg.HTTPSListenPort),
		"--advertise-address=" + podIP.String(),
		"--tls-cert-file=" + certs.path("serving-kube-apiserver.crt"),
		"--tls-private-key-file=" + certs.path("serving-kube-apiserver.key"),
		"--client-ca-file=" + certs.path("client-ca.crt"),
		"--service-account-key-file=" + certs.path("service.key"),
		"--service-account-signing-key-file=" + certs.path("service.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--api-audiences=https://kubernetes.default.svc.cluster.local,k3s",
		"--service-cluster-ip-range=" + cfg.ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--anonymous-auth=false",
		"--allow-privileged=true",
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate=" + certs.path("client-kube-apiserver.crt"),
		"--kubelet-client-key=" + certs.path("client-kube-apiserver.key"),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--profiling=false",
		// Without this, SIGTERM stops the listener but leaves every open watch
		// stream running, and the HTTP server's graceful Shutdown waits for them
		// until --request-timeout (60s): any client that stays up, such as a
		// shared-mode agent in another pod, holds the apiserver past stopGrace.
		// With it, watches are ended as soon as the server stops accepting
		// requests (clients re-list elsewhere), and the wait for them to drain
		// is bounded by this grace.
		"--shutdown-watch-termination-grace-period=5s",
	}
	if cfg.DatastoreCAFile != "" {
		args = append(args, "--etcd-cafile="+cfg.DatastoreCAFile)
	}
	if cfg.DatastoreCertFile != "" {
		args = append(args, "--etcd-certfile="+cfg.DatastoreCertFile)
	}
	if cfg.DatastoreKeyFile != "" {
		args = append(args, "--etcd-keyfile="+cfg.DatastoreKeyFile)
	}
	return args
}

func controllerArgs(cfg Config, certs tlsDir, kubeconfig string) []string {
	signer := func(kind, ca string) []string {
		return []string{
			"--cluster-signing-" + kind + "-cert-file=" + certs.path(ca+".crt"),
			"--cluster-signing-" + kind + "-key-file=" + certs.path(ca+".key"),
		}
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--service-account-private-key-file=" + certs.path("service.key"),
		"--root-ca-file=" + certs.path("server-ca.crt"),
		"--use-service-account-credentials=true",
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + cfg.ClusterCIDR,
		"--service-cluster-ip-range=" + cfg.ServiceCIDR,
		"--controllers=*,tokencleaner,-service,-route,-cloud-node-lifecycle",
		"--configure-cloud-routes=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + envPort("K3S_STANDIN_KCM_PORT", 10257),
		"--profiling=false",
	}
	args = append(args, signer("kube-apiserver-client", "client-ca")...)
	args = append(args, signer("kubelet-client", "client-ca")...)
	args = append(args, signer("kubelet-serving", "server-ca")...)
	return append(args, signer("legacy-unknown", "server-ca")...)
}

func schedulerArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + envPort("K3S_STANDIN_SCHEDULER_PORT", 10259),
		"--profiling=false",
	}
}

// envPort lets the process-level tests move the controller-manager's and
// scheduler's loopback ports off their defaults, which a host cluster on the
// same machine may hold; 0 turns their HTTPS off. In a pod the defaults are
// always free.
func envPort(env string, def int) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return strconv.Itoa(def)
}

// findBinaries locates the upstream binaries: $K3S_STANDIN_BIN_DIR, else the
// directory of this executable (the image's layout), else $PATH.
func findBinaries() (map[string]string, error) {
	dirs := []string{}
	if d := os.Getenv("K3S_STANDIN_BIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	out := map[string]string{}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		for _, d := range dirs {
			p := filepath.Join(d, name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				out[name] = p
				break
			}
		}
		if out[name] == "" {
			p, err := exec.LookPath(name)
			if err != nil {
				return nil, fmt.Errorf("%s not found next to the stand-in, in $K3S_STANDIN_BIN_DIR or in $PATH", name)
			}
			out[name] = p
		}
	}
	return out, nil
}

// podAddress is the address the apiserver advertises: $POD_IP when the pod spec
// passes it, else the first global IPv4 address of an interface that is up.
func podAddress() net.IP {
	if ip := net.ParseIP(os.Getenv("POD_IP")); ip != nil {
		return ip
	}
	ifaces, _ := net.Interfaces()
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.To4()
			}
		}
	}
	return net.ParseIP("127.0.0.1")
}

// servingNames are the apiserver certificate's SANs: every tls-san, the loopback
// and in-cluster names, the kubernetes Service address and the pod address.
func servingNames(cfg Config, podIP net.IP) ([]string, []net.IP) {
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if h, err := os.Hostname(); err == nil && h != "" {
		dns = append(dns, h)
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), cfg.FirstServiceIP(), podIP}
	for _, san := range cfg.TLSSANs {
		if ip := net.ParseIP(san); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, san)
		}
	}
	slices.Sort(dns)
	dns = slices.Compact(dns)
	var uniq []net.IP
	for _, ip := range ips {
		if ip != nil && !slices.ContainsFunc(uniq, ip.Equal) {
			uniq = append(uniq, ip)
		}
	}
	return dns, uniq
}

// kubeconfig renders a kubeconfig with everything embedded, shaped like k3s's.
func kubeconfig(server string, caPEM []byte, client *certKey) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: %s
    server: %s
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {}
users:
- name: default
  user:
    client-certificate-data: %s
    client-key-data: %s
`, b64(caPEM), server, b64(client.CertPEM), b64(client.KeyPEM))
}

type exit struct {
	name string
	err  error
}

// supervisor runs the child processes and reports the first one that exits.
type supervisor struct {
	children map[string]*exec.Cmd
	done     map[string]chan struct{}
	exited   chan exit
}

func newSupervisor() *supervisor {
	return &supervisor{children: map[string]*exec.Cmd{}, done: map[string]chan struct{}{}, exited: make(chan exit, 8)}
}

func (s *supervisor) start(name, bin string, args []string) error {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// Children die with us even when we are killed with SIGKILL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	fmt.Fprintf(os.Stderr, "k3s stand-in: started %s (pid %d)\n", name, cmd.Process.Pid)
	done := make(chan struct{})
	s.children[name], s.done[name] = cmd, done
	go func() {
		err := cmd.Wait()
		close(done)
		if err == nil {
			err = errors.New("exit status 0")
		}
		s.exited <- exit{name, err}
	}()
	return nil
}

// stop sends SIGTERM to every running child, waits stopGrace, then kills the
// rest, saying which, so a slow shutdown shows in the pod log.
func (s *supervisor) stop() error {
	for name, cmd := range s.children {
		select {
		case <-s.done[name]:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	// A context rather than time.After: the deadline must stay expired for
	// every child still running, not fire once for the first of them.
	graceCtx, cancel := context.WithTimeout(context.Background(), stopGrace)
	defer cancel()
	for name, cmd := range s.children {
		select {
		case <-s.done[name]:
		case <-graceCtx.Done():
			fmt.Fprintf(os.Stderr, "k3s stand-in: %s still running %s after SIGTERM; killing it\n", name, stopGrace)
			_ = cmd.Process.Kill()
			<-s.done[name]
		}
	}
	s.children = map[string]*exec.Cmd{}
	return nil
}

// waitReady polls /readyz as the admin until it answers 200, a child exits, or ctx ends.
func (s *supervisor) waitReady(ctx context.Context, url string, ca, admin *certKey) error {
	pair, err := tls.X509KeyPair(admin.CertPEM, admin.KeyPEM)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}},
	}
	for {
		if resp, err := client.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil // Run sees ctx and stops
		case ex := <-s.exited:
			return fmt.Errorf("%s exited before it was ready: %v", ex.name, ex.err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
