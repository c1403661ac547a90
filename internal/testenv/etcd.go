package testenv

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"
)

// EtcdConfig says how to start an etcd process.
type EtcdConfig struct {
	// Dir holds the data directory and the log; it must exist and outlive the process.
	Dir string
}

// Etcd is a running single-member etcd process. Several kube-apiservers can share
// one by giving each its own --etcd-prefix.
type Etcd struct {
	// URL is the client endpoint, http://127.0.0.1:PORT.
	URL string
	// LogPath is where the process's output goes; tests print it on failure.
	LogPath string

	proc *process
}

// StartEtcd starts the etcd binary from ToolsDir and waits until /health answers.
// It trades durability for speed (--unsafe-no-fsync): it is for tests of what sits
// on top of etcd, not of etcd itself.
func StartEtcd(ctx context.Context, cfg EtcdConfig) (*Etcd, error) {
	bin, err := Binary("etcd")
	if err != nil {
		return nil, err
	}
	clientPort, err := FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	peerPort, err := FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	args := []string{
		"--name=testenv",
		"--data-dir=" + filepath.Join(cfg.Dir, "etcd-data"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=testenv=" + peer,
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
	e := &Etcd{URL: client, LogPath: filepath.Join(cfg.Dir, "etcd.log")}
	e.proc, err = startProcess(ctx, "etcd", bin, args, e.LogPath, readiness{
		check:    e.healthy,
		interval: 100 * time.Millisecond,
		timeout:  60 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Stop ends the process (SIGTERM, then SIGKILL after ten seconds) and waits for it.
func (e *Etcd) Stop() error {
	e.proc.stop()
	return nil
}

// healthy asks etcd's /health endpoint once.
func (e *Etcd) healthy(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/health: %s", resp.Status)
	}
	return nil
}
