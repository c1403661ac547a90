package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/k3k-io/k3k/internal/testenv"
)

// binary is the datastore command built once for the process tests, the way it
// ships: CGO_ENABLED=0, so SQLite is modernc's pure Go build.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "datastore-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "datastore")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the datastore binary: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a datastore process under test.
type proc struct {
	cmd                 *exec.Cmd
	endpoint, healthURL string
	done                chan struct{}
	mu                  sync.Mutex
	log                 bytes.Buffer
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

type lockedWriter struct{ p *proc }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.log.Write(b)
}

// startProc runs `datastore sqlite` on dir and waits until /readyz says ok.
func startProc(t *testing.T, dir string) *proc {
	t.Helper()
	return startProcWith(t, dir)
}

// startProcWith is startProc with extra flags.
func startProcWith(t *testing.T, dir string, extra ...string) *proc {
	t.Helper()
	p := launch(t, dir, freeAddr(t), freeAddr(t), extra...)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-p.done:
			t.Fatalf("datastore exited before it was ready: %v\n%s", p.cmd.ProcessState, p.output())
		default:
		}
		// Ready, and its start logged: /readyz answers from before the
		// "ready to serve" line, and the output reaches p through a pipe, so
		// a test reading what the start said (a lock removed, certificates
		// set aside) waits for the line that comes after all of it.
		if code, _ := get(p.healthURL + "/readyz"); code == http.StatusOK && strings.Contains(p.output(), "datastore ready to serve") {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("datastore not ready after 60s:\n%s", p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func launch(t *testing.T, dir, listen, health string, extra ...string) *proc {
	t.Helper()
	p := spawn(t, health, append([]string{"sqlite", "--data-dir", dir, "--listen-address", listen, "--health-address", health}, extra...)...)
	p.endpoint = "http://" + listen
	return p
}

// spawn starts the datastore binary with args, its health server on health,
// killed with the test (and with the test process); its output is logged when
// the test failed.
func spawn(t *testing.T, health string, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{}), healthURL: "http://" + health}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{p}, lockedWriter{p}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", binary, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("datastore output:\n%s", p.output())
		}
	})
	return p
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	<-p.done
}

// stop sends SIGTERM and returns the exit code.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("datastore did not stop within 60s of SIGTERM:\n%s", p.output())
	}
	return p.cmd.ProcessState.ExitCode()
}

func get(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return testenv.FreeAddr(t, "127.0.0.1")
}

// runToExit runs the binary to completion and returns its exit code and output.
func runToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("datastore %s did not exit: %s", strings.Join(args, " "), out)
	}
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return code, string(out)
}

func lastLine(s string) string {
	var last string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			last = sc.Text()
		}
	}
	return last
}
