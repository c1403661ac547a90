package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is an upstream binary running as a child of the test, its output
// appended to a log file. APIServer and Etcd are thin wrappers around one.
type process struct {
	name     string
	cmd      *exec.Cmd
	done     chan struct{} // closed once the process has been waited for
	waitErr  error         // what Wait returned; read only after done is closed
	stopOnce sync.Once
}

// readiness says how to tell that a started process serves: check is polled
// every interval until it returns nil, for at most timeout.
type readiness struct {
	check    func(context.Context) error
	interval time.Duration
	timeout  time.Duration
}

// startProcess runs bin with args, its output appended to logPath, and waits until
// ready says it serves. A process that exits or does not get ready in time is
// stopped, and the error names the log to read.
func startProcess(ctx context.Context, name, bin string, args []string, logPath string, ready readiness) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A test binary that dies without cleaning up must not leave servers behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	if err := p.waitReady(ctx, ready); err != nil {
		p.stop()
		return nil, fmt.Errorf("%w (log: %s)", err, logPath)
	}
	return p, nil
}

// stop ends the process (SIGTERM, then SIGKILL after ten seconds) and waits for it.
// It is safe to call more than once.
func (p *process) stop() {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) waitReady(ctx context.Context, ready readiness) error {
	ctx, cancel := context.WithTimeout(ctx, ready.timeout)
	defer cancel()
	var last error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready: %v", p.name, p.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %v)", p.name, ctx.Err(), last)
		case <-time.After(ready.interval):
		}
		if last = ready.check(ctx); last == nil {
			return nil
		}
	}
}
