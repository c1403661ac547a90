//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// k3s's log lines around its bootstrap lock (pkg/cluster/storage.go).
const (
	lockTaken   = "Bootstrap key locked for initial create"
	lockWaiting = "Bootstrap key is locked - waiting"
	lockTimeout = "Bootstrap key lock timed out"
	// lockCleared is what our sqlite sidecar logs when it removes a stale lock
	// on its first start in a pod (cmd/datastore/bootstraplock.go).
	lockCleared = "removed the k3s bootstrap lock"
	// certsSetAside is what it logs when it set aside certificates k3s died
	// writing (cmd/datastore/unfinishedtls.go).
	certsSetAside = "set aside the certificates of a k3s that died writing them"
)

// TestBootstrapLockAfterDeletionDuringFirstStart: a new SQLite cluster's k3s
// dies holding its bootstrap lock on its very first start (before it stored
// its CAs, so before it was ever ready) and its server pod is deleted; the
// replacement pod's recovery is timed against normal restarts (a deleted pod
// that had been Ready).
//
// k3s holds the lock for about a second (from "Bootstrap key locked for
// initial create" to "Saving cluster bootstrap data"), less than a pod
// deletion takes to reach the process, so the test runs the first k3s in
// steps of 20ms from the node and SIGKILLs it right after it logged the lock
// (as an OOM kill or a crash would end it), then deletes the pod. A round
// where k3s had stored its data all the same is counted apart.
//
// Without help, the replacement's k3s finds the empty lock and waits ~25s
// ("Bootstrap key is locked - waiting"); the sidecar now removes it on its
// first start in the new pod. The test asserts that every replacement
// recovered and that none waited for the lock; it reports the timings and
// asserts nothing on them. With E2E_BOOTSTRAP_COMPARE=1 (a measurement, not
// run in CI: two more cluster starts and three restarts, asserting nothing)
// it also times the killed k3s restarting in place (no deletion), where the
// sidecar keeps running and cannot tell a dead holder from a live one, so
// k3s's own 25s remain (docs/architecture.md), and normal restarts.
func TestBootstrapLockAfterDeletionDuringFirstStart(t *testing.T) {
	t.Parallel()
	// Two hits: the assertions are per round (every replacement recovers,
	// none waits for the lock); more rounds only sharpened the reported
	// timings, at a cluster's first start each. Run in steps (see
	// firstStartDeath), k3s is killed holding the lock in every try seen so
	// far; a third try is there for one that, under load, is not.
	const wantHits, maxAttempts, inPlaceRounds = 2, 3, 2
	var hit, missed, inPlace []time.Duration
	var last *vcluster
	keep := func(v *vcluster) {
		if last != nil {
			dropCluster(t, last)
		}
		last = v
	}
	for attempt := 0; attempt < maxAttempts && len(hit) < wantHits; attempt++ {
		// The second try also leaves a certificate half-written, as a
		// kill during its write does (seen in CI, 2026-12-05).
		v, d, leftLock := firstStartDeath(t, fmt.Sprintf("boot-%d", attempt), true, attempt == 1)
		if leftLock {
			hit = append(hit, d)
		} else {
			missed = append(missed, d)
		}
		keep(v)
	}
	if len(hit) == 0 {
		t.Fatalf("in %d attempts no kill left a bootstrap lock behind (k3s stored its data before it died): the scenario was not reproduced", maxAttempts)
	}
	var normal []time.Duration
	if cfg.compare {
		for round := range inPlaceRounds {
			v, d, leftLock := firstStartDeath(t, fmt.Sprintf("inplace-%d", round), false, false)
			if leftLock {
				inPlace = append(inPlace, d)
			}
			keep(v)
		}
		for range cfg.rounds {
			normal = append(normal, deleteServerPod(t, last).podReady)
		}
	}
	dropCluster(t, last)

	t.Logf("RESULT k3s killed holding the lock on its first start, pod deleted: %d rounds, replacement Ready after %s", len(hit), summary(hit))
	if len(missed) > 0 {
		t.Logf("RESULT killed on its first start, no lock left (k3s had stored its data): %d rounds, replacement Ready after %s", len(missed), summary(missed))
	}
	if len(inPlace) > 0 {
		t.Logf("RESULT k3s killed holding the lock on its first start, restarted in place (k3s's own lock timeout): %d rounds, Ready after %s", len(inPlace), summary(inPlace))
	}
	if len(normal) > 0 {
		t.Logf("RESULT normal restart (pod that had been Ready deleted): %d rounds, replacement Ready after %s", len(normal), summary(normal))
	}
}

// firstStartDeath creates cluster name without waiting and SIGKILLs its k3s
// as soon as k3s logs that it took the bootstrap lock; with deletePod it also
// deletes the pod, else the kubelet restarts k3s in place. It waits until the
// server pod (the replacement, or the same pod) is Ready and the API serves,
// and returns the cluster, the time from the kill to the readiness, and
// whether the kill left the lock behind (the sidecar removed it, or the next
// k3s waited for it).
func firstStartDeath(t *testing.T, name string, deletePod, halfWritten bool) (*vcluster, time.Duration, bool) {
	t.Helper()
	ctx := context.Background()
	ns := "e2e-" + name
	if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	v := &vcluster{name: name, namespace: ns, kubeconfig: cfg.workDir + "/" + name + ".kubeconfig"}
	returned := false
	defer func() {
		if !returned { // a t.Fatal: the caller never sees this cluster to dump it
			dumpPod(t, v)
		}
	}()
	k3kcli(t, "cluster", "create", name, "-n", ns, "--expose", "nodeport", "--wait=false")

	// k3s holds the lock for about a second (from taking it to storing its
	// data), and a kill that follows the log line in real time comes too late
	// on a loaded host: through the API server's log stream all 8 kills of a
	// CI run did, and even reading the kubelet's log file on the node and
	// killing the process directly, about two tries in three did (up to 10
	// tries were needed for 2 hits, ten cluster starts in CI's busiest
	// minutes). So the first k3s is stopped (SIGSTOP) the moment its process
	// appears in the pod's cgroup on the node, then run in steps: let run for
	// 20ms, stopped again, its log file (the kubelet's, on the node) read
	// each time it stands still, until the line is there. It is then killed
	// where it stands, a step at most past taking the lock. Stopping a process
	// is invisible to it but for time.
	var old *corev1.Pod
	eventually(t, 5*time.Minute, "the server pod "+v.pod(), func(ctx context.Context) (bool, error) {
		p, err := serverPod(ctx, v)
		old = p
		return p != nil, err
	})
	pid, id, err := stopProcessAtStart(string(old.UID), "k3s", 5*time.Minute)
	if err != nil {
		t.Fatalf("the first k3s of %s: %v", old.Name, err)
	}
	pids := []int{pid}
	logDir := filepath.Join("/var/log/pods", fmt.Sprintf("%s_%s_%s", ns, old.Name, old.UID), "k3s")
	if logs, _ := os.ReadDir(logDir); len(logs) > 1 {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		t.Fatalf("the k3s container of %s started more than once before it was caught (%d logs in %s)", old.Name, len(logs), logDir)
	}
	steps, err := stepUntilLine(pids, filepath.Join(logDir, "0.log"), lockTaken, 3*time.Minute)
	if err != nil {
		t.Fatalf("k3s of %s (container %s) on its first start: %v", old.Name, id, err)
	}
	start := time.Now()
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Logf("killing k3s (pid %d): %v", pid, err)
		}
	}
	t.Logf("%s: k3s logged %q after %d steps of 20ms; killed", name, lockTaken, steps)
	corrupted := halfWritten && halfWriteServerCA(t, v, old, filepath.Join(logDir, "0.log"))

	var fresh *corev1.Pod
	if deletePod {
		if err := host.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting the server pod: %v", err)
		}
		fresh = waitPodReplaced(t, v, old, 5*time.Minute)
	} else {
		eventually(t, 5*time.Minute, "k3s of "+old.Name+" restarted in place and Ready", func(ctx context.Context) (bool, error) {
			p, err := serverPod(ctx, v)
			if err != nil || p == nil || p.UID != old.UID {
				return false, fmt.Errorf("pod %v replaced or gone (err %v)", old.Name, err)
			}
			cs := containerStatus(p, "k3s")
			fresh = p
			return cs != nil && cs.RestartCount > 0 && podReady(p), nil
		})
	}
	took := time.Since(start)
	// The pod is Ready when its API serves; its publisher fills the Secret a
	// moment later.
	eventually(t, 2*time.Minute, "the kubeconfig published", func(ctx context.Context) (bool, error) {
		s, err := host.CoreV1().Secrets(ns).Get(ctx, v.kubeconfigSecret(), metav1.GetOptions{})
		return err == nil && len(s.Data["kubeconfig.yaml"]) > 0, err
	})
	k3kcli(t, "kubeconfig", "get", name, "-n", ns, "--output-kubeconfig", v.kubeconfig)
	v.client = virtualClient(t, v.kubeconfig)
	serving(t, v.client, 3*time.Minute)

	k3sLog := podLog(t, fresh, "k3s")
	dsLog := podLog(t, fresh, "datastore")
	cleared := strings.Contains(dsLog, lockCleared)
	certsAside := strings.Contains(dsLog, certsSetAside)
	waited := strings.Contains(k3sLog, lockWaiting) || strings.Contains(k3sLog, lockTimeout)
	if deletePod && waited {
		t.Errorf("%s: the replacement pod's k3s waited for a stale bootstrap lock", name)
	}
	if corrupted && !certsAside {
		t.Errorf("%s: the replacement pod's sidecar did not say it set aside the half-written certificates", name)
	}
	left := cleared || waited
	how := "restarted in place"
	if deletePod {
		how = "pod deleted"
	}
	t.Logf("%s: k3s killed after %q, %s; Ready after %s; lock left behind: %v (removed by the sidecar: %v, waited for by k3s: %v); certificates left half-written and set aside by the sidecar: %v",
		name, lockTaken, how, took.Round(100*time.Millisecond), left, cleared, waited, certsAside)
	returned = true
	return v, took, left
}

// halfWriteServerCA leaves k3s's server-ca.crt on the volume of the killed
// k3s's pod as a kill in the middle of writing it does: its first half (an
// empty file when k3s had not written it yet). Every later start of k3s stops
// on that file ("data does not contain any valid RSA or ECDSA certificates")
// unless the sidecar sets the directory aside. It does so only when k3s had
// not begun to store its bootstrap data (the log at logFile does not say it
// did): once stored, the certificates are the datastore's, and repairing
// files on disk is not the sidecar's business. It reports whether it did.
func halfWriteServerCA(t *testing.T, v *vcluster, p *corev1.Pod, logFile string) bool {
	t.Helper()
	if log, err := os.ReadFile(logFile); err != nil {
		t.Fatalf("reading the killed k3s's log: %v", err)
	} else if strings.Contains(string(log), "Saving cluster bootstrap data") {
		t.Logf("%s: k3s had begun storing its bootstrap data: no certificate half-written", v.name)
		return false
	}
	path := filepath.Join(volumeDir(t, v, p), "k3s", "server", "tls", "server-ca.crt")
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)/2], 0o600); err != nil {
		t.Fatalf("half-writing %s: %v", path, err)
	}
	t.Logf("%s: %s left half-written (%d of %d bytes)", v.name, path, len(data)/2, len(data))
	return true
}

// stepUntilLine runs the stopped-or-running processes pids in steps of 20ms
// (SIGCONT, wait, SIGSTOP) and reads path, the log file they write through
// their container, whenever they stand still, until a line contains want. It
// returns with them stopped and the number of steps taken; on an error (the
// timeout, a process gone) it lets them run again.
func stepUntilLine(pids []int, path, want string, timeout time.Duration) (steps int, err error) {
	const step = 20 * time.Millisecond
	signal := func(sig syscall.Signal) error {
		for _, pid := range pids {
			if err := syscall.Kill(pid, sig); err != nil {
				return fmt.Errorf("signal %v to pid %d: %w", sig, pid, err)
			}
		}
		return nil
	}
	defer func() {
		if err != nil {
			_ = signal(syscall.SIGCONT)
		}
	}()
	log := &logReader{path: path, want: want}
	defer log.close()
	deadline := time.Now().Add(timeout)
	for ; time.Now().Before(deadline); steps++ {
		if err := signal(syscall.SIGSTOP); err != nil {
			return steps, err
		}
		// What they wrote before they stopped reaches the file through the
		// container's log copier a moment later: read until it stops growing.
		for {
			time.Sleep(10 * time.Millisecond)
			grew, found := log.read()
			if found {
				return steps, nil
			}
			if !grew {
				break
			}
		}
		if err := signal(syscall.SIGCONT); err != nil {
			return steps, err
		}
		time.Sleep(step)
	}
	return steps, fmt.Errorf("no line %q in %s within %s (%d steps)", want, path, timeout, steps)
}

// logReader reads a growing file line by line, from its start.
type logReader struct {
	path, want string
	f          *os.File
	r          *bufio.Reader
	partial    string
}

func (l *logReader) close() {
	if l.f != nil {
		_ = l.f.Close()
	}
}

// read reads what was added to the file since the last call, and reports
// whether anything was and whether a whole line containing want was seen. A
// file not there yet counts as empty.
func (l *logReader) read() (grew, found bool) {
	if l.f == nil {
		f, err := os.Open(l.path)
		if err != nil {
			return false, false
		}
		l.f, l.r = f, bufio.NewReader(f)
	}
	for {
		chunk, err := l.r.ReadString('\n')
		grew = grew || chunk != ""
		l.partial += chunk
		if err != nil {
			return grew, false
		}
		if strings.Contains(l.partial, l.want) {
			return true, true
		}
		l.partial = ""
	}
}

// podLog is the whole log of one container of p.
func podLog(t *testing.T, p *corev1.Pod, container string) string {
	t.Helper()
	data, err := host.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the %s log of %s: %v", container, p.Name, err)
	}
	return string(data)
}

// dropCluster deletes a cluster's namespace unless the test failed (then it
// stays for a look, E2E_KEEP=1).
func dropCluster(t *testing.T, v *vcluster) {
	t.Helper()
	if t.Failed() {
		dumpPod(t, v)
		return
	}
	if err := host.CoreV1().Namespaces().Delete(context.Background(), v.namespace, metav1.DeleteOptions{}); err != nil {
		t.Logf("deleting namespace %s: %v", v.namespace, err)
	}
}
