package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ControllerManager is a running kube-controller-manager process.
type ControllerManager struct {
	// LogPath is where the process's output goes; tests print it on failure.
	LogPath string

	proc *process
}

// StartCSRSigner starts kube-controller-manager against api with only its
// certificate signing controller, signing client certificates
// (kubernetes.io/kube-apiserver-client) with api's CA, which api trusts for
// clients: what a k3s server does with its client CA. dir holds the
// kubeconfig, the CA files and the log; it must outlive the process.
// extraArgs are appended last, as "--flag=value" (e.g. a
// --cluster-signing-duration that caps every certificate).
func StartCSRSigner(ctx context.Context, api *APIServer, dir string, extraArgs ...string) (*ControllerManager, error) {
	bin, err := Binary("kube-controller-manager")
	if err != nil {
		return nil, err
	}
	kubeconfig, err := api.Kubeconfig()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"kcm.kubeconfig": kubeconfig, "signer.crt": api.CA.Cert, "signer.key": api.CA.Key}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	args := []string{
		"--kubeconfig=" + p("kcm.kubeconfig"),
		"--controllers=csrsigning",
		"--cluster-signing-kube-apiserver-client-cert-file=" + p("signer.crt"),
		"--cluster-signing-kube-apiserver-client-key-file=" + p("signer.key"),
		"--leader-elect=false",
		"--secure-port=0",
		"--v=2",
	}
	args = append(args, extraArgs...)
	m := &ControllerManager{LogPath: p("kube-controller-manager.log")}
	// Ready once the signing controller runs: its log says so (it serves no
	// port here to ask).
	m.proc, err = startProcess(ctx, "kube-controller-manager", bin, args, m.LogPath, readiness{
		check: func(context.Context) error {
			log, err := os.ReadFile(m.LogPath)
			if err != nil {
				return err
			}
			if !strings.Contains(string(log), "Started controller") {
				return fmt.Errorf("no controller started yet")
			}
			return nil
		},
		interval: 200 * time.Millisecond,
		timeout:  60 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Stop ends the process (SIGTERM, then SIGKILL after ten seconds) and waits for it.
func (m *ControllerManager) Stop() error {
	m.proc.stop()
	return nil
}
