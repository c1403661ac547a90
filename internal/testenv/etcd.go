package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
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

	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	stopOnce sync.Once
}

// StartEtcd starts the etcd binary from ToolsDir and waits until /health answers.
// It trades durability for speed (--unsafe-no-fsync): it is for tests of what sits
// on top of etcd, not of etcd itself.
func StartEtcd(ctx context.Context, cfg EtcdConfig) (*Etcd, error) {
	bin, err := Binary("etcd")
	if err != nil {
		return nil, err
	}
	clientPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
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
	logPath := filepath.Join(cfg.Dir, "etcd.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	e := &Etcd{URL: client, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		e.waitErr = cmd.Wait()
		logFile.Close()
		close(e.done)
	}()
	if err := e.waitReady(ctx); err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("%w (log: %s)", err, logPath)
	}
	return e, nil
}

// Stop ends the process (SIGTERM, then SIGKILL after ten seconds) and waits for it.
func (e *Etcd) Stop() error {
	e.stopOnce.Do(func() {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			_ = e.cmd.Process.Kill()
			<-e.done
		}
	})
	return nil
}

func (e *Etcd) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last error
	for {
		select {
		case <-e.done:
			return fmt.Errorf("etcd exited before it was ready: %v", e.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("etcd not ready: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = fmt.Errorf("/health: %s", resp.Status)
	}
}
