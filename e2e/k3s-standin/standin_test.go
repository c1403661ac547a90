package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The tests below run the stand-in as a real process, on a real etcd, with the
// upstream binaries from the tools directory (hack/build-tools.sh fills it). A
// missing binary fails the test with the command that builds it.

func toolsDir() string {
	for _, env := range []string{"K3K_TOOLS_DIR", "KUBEBUILDER_ASSETS"} {
		if d := os.Getenv(env); d != "" {
			return d
		}
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "k3k", "tools")
}

func needTools(t *testing.T) string {
	t.Helper()
	dir := toolsDir()
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("%s not in %s: run `hack/build-tools.sh %s etcd kube-apiserver kube-controller-manager kube-scheduler` (or set K3K_TOOLS_DIR)", b, dir, dir)
		}
	}
	return dir
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startEtcd(t *testing.T, tools string) string {
	t.Helper()
	dir := t.TempDir()
	client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(tools, "etcd"), "--name=standin-test", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=standin-test="+peer, "--unsafe-no-fsync", "--log-level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return client
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd not healthy (log %s)", log.Name())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func buildStandIn(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "k3s")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	return bin
}

type standIn struct {
	cmd    *exec.Cmd
	output *bytes.Buffer
	done   chan struct{}
	err    error
}

func (s *standIn) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *standIn) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(limit):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Fatalf("stand-in did not exit within %s\n%s", limit, s.output)
		return nil
	}
}

func start(t *testing.T, bin string, env []string, args ...string) *standIn {
	t.Helper()
	s := &standIn{output: &bytes.Buffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Env = append(os.Environ(), env...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = pw, pw
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	copied := make(chan struct{})
	go func() { _, _ = s.output.ReadFrom(pr); close(copied) }()
	go func() { s.err = s.cmd.Wait(); <-copied; close(s.done) }()
	t.Cleanup(func() {
		if !s.exited() {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(30 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.done
			}
		}
	})
	return s
}

// waitKubeconfig waits for the stand-in to write its kubeconfig.
func waitKubeconfig(t *testing.T, s *standIn, path string) []byte {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return b
		}
		if s.exited() {
			t.Fatalf("stand-in exited before writing the kubeconfig: %v\n%s", s.err, s.output)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no kubeconfig at %s after 3 minutes", path)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

type kubeconfigFile struct {
	Clusters []struct {
		Cluster struct {
			Server string `yaml:"server"`
			CA     string `yaml:"certificate-authority-data"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Users []struct {
		User struct {
			Cert string `yaml:"client-certificate-data"`
			Key  string `yaml:"client-key-data"`
		} `yaml:"user"`
	} `yaml:"users"`
}

// kubeconfigClient parses data and returns the server URL, the CA PEM and an
// HTTP/2-capable transport carrying its credentials, as client-go would build.
func kubeconfigClient(t *testing.T, data []byte) (server string, caPEM []byte, transport *http.Transport) {
	t.Helper()
	var kc kubeconfigFile
	if err := yaml.Unmarshal(data, &kc); err != nil || len(kc.Clusters) != 1 || len(kc.Users) != 1 {
		t.Fatalf("kubeconfig does not parse as one cluster and one user: %v\n%s", err, data)
	}
	dec := func(s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	caPEM = dec(kc.Clusters[0].Cluster.CA)
	pair, err := tls.X509KeyPair(dec(kc.Users[0].User.Cert), dec(kc.Users[0].User.Key))
	if err != nil {
		t.Fatalf("client credentials: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("kubeconfig CA does not parse")
	}
	transport = &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}},
		ForceAttemptHTTP2: true,
	}
	return kc.Clusters[0].Cluster.Server, caPEM, transport
}

// useKubeconfig parses data and GETs path with its credentials, returning the CA
// PEM, the status code and the serving certificate.
func useKubeconfig(t *testing.T, data []byte, path string) (caPEM []byte, status int, serving *x509.Certificate) {
	t.Helper()
	server, caPEM, transport := kubeconfigClient(t, data)
	client := &http.Client{Timeout: 10 * time.Second, Transport: transport}
	resp, err := client.Get(server + path)
	if err != nil {
		t.Fatalf("GET %s with the kubeconfig: %v", path, err)
	}
	resp.Body.Close()
	return caPEM, resp.StatusCode, resp.TLS.PeerCertificates[0]
}

// childPID finds the child process of parent named comm, waiting up to ten seconds.
func childPID(t *testing.T, parent int, comm string) int {
	t.Helper()
	for range 40 {
		if pid := findChild(parent, comm); pid != 0 {
			return pid
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("no child %s of %d", comm, parent)
	return 0
}

func findChild(parent int, comm string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …
		open, close := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || close < 0 || string(stat[open+1:close]) != comm {
			continue
		}
		fields := strings.Fields(string(stat[close+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(parent) {
			return pid
		}
	}
	return 0
}

func TestStandInServesKeepsItsCAAndTokenAndRefusesAnotherToken(t *testing.T) {
	tools := needTools(t)
	bin := buildStandIn(t)
	datastore := startEtcd(t, tools)

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("first-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(dir, "kubeconfig", "kubeconfig.yaml")
	if err := os.MkdirAll(filepath.Dir(kubeconfigPath), 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "k3s")
	port := freePort(t)
	config := fmt.Sprintf(`datastore-endpoint: %s
disable-agent: true
write-kubeconfig: %s
write-kubeconfig-mode: "0600"
tls-san: [k3k-test-service.ns.svc, 10.43.99.99]
token-file: %s
data-dir: %s
cluster-cidr: 10.42.0.0/16
service-cidr: 10.43.0.0/16
cluster-dns: 10.43.0.10
disable: [servicelb, traefik, metrics-server, local-storage]
egress-selector-mode: disabled
https-listen-port: 6443
`, datastore, kubeconfigPath, tokenFile, dataDir)
	configPath, env := standinConfig(t, dir, tools, config)
	// The port from the file is overridden on the command line, as the controller may do.
	args := []string{"server", "--config", configPath, "--https-listen-port=" + strconv.Itoa(port)}

	// First start: a new CA, a stored token, a working kubeconfig.
	s := start(t, bin, env, args...)
	kc1 := waitKubeconfig(t, s, kubeconfigPath)
	if st, err := os.Stat(kubeconfigPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig mode = %v (%v), want 0600", st.Mode().Perm(), err)
	}
	ca1, status, serving := useKubeconfig(t, kc1, "/api/v1/namespaces/kube-system")
	if status != http.StatusOK {
		t.Fatalf("GET kube-system with the kubeconfig: status %d", status)
	}
	if !strings.Contains(string(kc1), fmt.Sprintf("server: https://127.0.0.1:%d", port)) {
		t.Errorf("kubeconfig server is not https://127.0.0.1:%d:\n%s", port, kc1)
	}
	for _, name := range []string{"k3k-test-service.ns.svc", "localhost", "kubernetes.default.svc"} {
		if serving.VerifyHostname(name) != nil {
			t.Errorf("serving certificate lacks DNS name %s (has %v)", name, serving.DNSNames)
		}
	}
	for _, ip := range []string{"10.43.99.99", "127.0.0.1", "10.43.0.1", podAddress().String()} {
		if serving.VerifyHostname(ip) != nil {
			t.Errorf("serving certificate lacks IP %s (has %v)", ip, serving.IPAddresses)
		}
	}
	sum := sha256.Sum256(ca1)
	wantToken := "K10" + hex.EncodeToString(sum[:]) + "::server:first-secret\n"
	token1, err := os.ReadFile(filepath.Join(dataDir, "server", "token"))
	if err != nil || string(token1) != wantToken {
		t.Fatalf("stored token = %q (%v), want %q", token1, err, wantToken)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.wait(t, 40*time.Second); err != nil {
		t.Fatalf("stand-in did not exit cleanly on SIGTERM: %v\n%s", err, s.output)
	}

	// Restart: same CA and token, a kubeconfig written again that still works.
	if err := os.Remove(kubeconfigPath); err != nil {
		t.Fatal(err)
	}
	s = start(t, bin, env, args...)
	kc2 := waitKubeconfig(t, s, kubeconfigPath)
	ca2, status, _ := useKubeconfig(t, kc2, "/api/v1/namespaces/kube-system")
	if status != http.StatusOK {
		t.Fatalf("after restart: status %d", status)
	}
	if !bytes.Equal(ca1, ca2) {
		t.Fatal("the kubeconfig's CA changed across a restart")
	}
	if token2, _ := os.ReadFile(filepath.Join(dataDir, "server", "token")); !bytes.Equal(token1, token2) {
		t.Fatal("the stored token changed across a restart")
	}

	// A child that dies takes the stand-in down with a non-zero exit.
	if err := syscall.Kill(childPID(t, s.cmd.Process.Pid, "kube-scheduler"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := s.wait(t, 40*time.Second); err == nil {
		t.Fatalf("stand-in exited 0 after kube-scheduler was killed\n%s", s.output)
	}
	if !strings.Contains(s.output.String(), "kube-scheduler exited") {
		t.Errorf("output does not say which child died:\n%s", tail(s.output.String()))
	}

	// Another token: refused, like k3s, without printing either token.
	if err := os.WriteFile(tokenFile, []byte("second-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = start(t, bin, env, args...)
	if err := s.wait(t, 30*time.Second); err == nil {
		t.Fatal("stand-in started with a different token")
	}
	out := s.output.String()
	if !strings.Contains(out, "does not match the token this server was created with") {
		t.Errorf("refusal does not explain itself:\n%s", tail(out))
	}
	if strings.Contains(out, "second-secret") || strings.Contains(out, "first-secret") {
		t.Errorf("output leaks a token:\n%s", tail(out))
	}
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// A client that stays connected through the server's shutdown, as a shared-mode
// agent in another pod does, must not hold kube-apiserver until the stand-in's
// stop grace runs out: the apiserver ends the client's watch and exits by itself.
func TestStandInStopsWhileAClientKeepsAWatchOpen(t *testing.T) {
	tools := needTools(t)
	bin := buildStandIn(t)
	datastore := startEtcd(t, tools)

	dir := t.TempDir()
	kubeconfigPath := filepath.Join(dir, "kubeconfig.yaml")
	config := fmt.Sprintf(`datastore-endpoint: %s
disable-agent: true
write-kubeconfig: %s
data-dir: %s
https-listen-port: %d
`, datastore, kubeconfigPath, filepath.Join(dir, "k3s"), freePort(t))
	configPath, env := standinConfig(t, dir, tools, config)
	s := start(t, bin, env, "server", "--config", configPath)
	server, _, transport := kubeconfigClient(t, waitKubeconfig(t, s, kubeconfigPath))
	defer transport.CloseIdleConnections()

	// A watch over HTTP/2, like an informer's; no client timeout, so only the
	// server or a lost connection ends it.
	resp, err := (&http.Client{Transport: transport}).Get(server + "/api/v1/configmaps?watch=true")
	if err != nil {
		t.Fatalf("starting a watch: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("watch answered %s over %s, want 200 over HTTP/2", resp.Status, resp.Proto)
	}
	watchEnded := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		watchEnded <- err
	}()

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.wait(t, stopGrace+20*time.Second); err != nil {
		t.Fatalf("stand-in did not exit cleanly on SIGTERM: %v\n%s", err, tail(s.output.String()))
	}
	if strings.Contains(s.output.String(), "after SIGTERM; killing it") {
		t.Errorf("a child had to be killed after the stop grace:\n%s", tail(s.output.String()))
	}
	// nil is a watch the server ended; an error is a connection that died with the process.
	if err := <-watchEnded; err != nil {
		t.Errorf("the watch was cut by the process dying (%v), not ended by the apiserver", err)
	}
}

// standinConfig writes config as the stand-in's config file in dir and
// returns its path and the environment that points the stand-in at the
// upstream binaries in tools. The controller-manager and scheduler serve no
// port (0): nothing here probes them, and a port picked as free can be taken
// by another process's connection before a restarted stand-in binds it again,
// which made the controller-manager exit 1 in one CI run.
func standinConfig(t *testing.T, dir, tools, config string) (string, []string) {
	t.Helper()
	configPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return configPath, []string{
		"K3S_STANDIN_BIN_DIR=" + tools,
		"K3S_STANDIN_KCM_PORT=0",
		"K3S_STANDIN_SCHEDULER_PORT=0",
	}
}
