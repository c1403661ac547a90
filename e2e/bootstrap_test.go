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
)

// TestBootstrapLockAfterDeletionDuringFirstStart: a new SQLite cluster's k3s
// dies holding its bootstrap lock on its very first start (before it stored
// its CAs, so before it was ever ready) and its server pod is deleted; the
// replacement pod's recovery is timed against normal restarts (a deleted pod
// that had been Ready).
//
// k3s holds the lock for about a second (from "Bootstrap key locked for
// initial create" to "Saving cluster bootstrap data"), less than a pod
// deletion takes to reach the process, so the test SIGKILLs the k3s process
// from the node the moment it logs the lock (as an OOM kill or a crash would
// end it), then deletes the pod. A round where k3s had stored its data
// all the same is counted apart.
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
	// timings, at a cluster's first start each. Up to 10 tries (see
	// firstStartDeath) make a run that reproduces nothing rare.
	const wantHits, maxAttempts, inPlaceRounds = 2, 10, 2
	var hit, missed, inPlace []time.Duration
	var last *vcluster
	keep := func(v *vcluster) {
		if last != nil {
			dropCluster(t, last)
		}
		last = v
	}
	for attempt := 0; attempt < maxAttempts && len(hit) < wantHits; attempt++ {
		v, d, leftLock := firstStartDeath(t, fmt.Sprintf("boot-%d", attempt), true)
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
			v, d, leftLock := firstStartDeath(t, fmt.Sprintf("inplace-%d", round), false)
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
func firstStartDeath(t *testing.T, name string, deletePod bool) (*vcluster, time.Duration, bool) {
	t.Helper()
	ctx := context.Background()
	ns := "e2e-" + name
	if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	v := &vcluster{name: name, namespace: ns, kubeconfig: cfg.workDir + "/" + name + ".kubeconfig"}
	k3kcli(t, "cluster", "create", name, "-n", ns, "--expose", "nodeport", "--wait=false")

	// Follow the first k3s container's log; act on the line.
	var old *corev1.Pod
	eventually(t, 5*time.Minute, "the first k3s container of "+v.pod()+" running", func(ctx context.Context) (bool, error) {
		p, err := serverPod(ctx, v)
		if err != nil || p == nil {
			return false, err
		}
		cs := containerStatus(p, "k3s")
		old = p
		return cs != nil && cs.State.Running != nil, nil
	})
	if cs := containerStatus(old, "k3s"); cs.RestartCount != 0 {
		t.Fatalf("the k3s container restarted (%d) before its first start was observed", cs.RestartCount)
	}
	// k3s holds the lock for about a second, so the kill is done from the
	// node: the log file the kubelet writes (its default --pod-logs-dir) is
	// read as it grows and the process is killed directly, without the API
	// server's log stream or a containerd client in between. Through those,
	// in CI on a loaded host, all 8 kills of a run came too late. Even from
	// the node, under CI's full load, a kill comes in time in about one try
	// of three (0 of 6 in one run; 2 of 6 in the next, with the first k3s
	// held to a tenth of a CPU, a difference too small to keep that hack
	// for): hence up to 10 tries for 2 hits.
	_, id, _ := strings.Cut(containerStatus(old, "k3s").ContainerID, "://")
	pids := containerPIDs(t, string(old.UID), id)
	if len(pids) == 0 {
		t.Fatalf("no process found for the k3s container %s of %s", id, old.Name)
	}
	logFile := filepath.Join("/var/log/pods", fmt.Sprintf("%s_%s_%s", ns, old.Name, old.UID), "k3s", "0.log")
	seen, err := awaitLine(logFile, lockTaken, 3*time.Minute)
	start := time.Now()
	if seen {
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Logf("killing k3s (pid %d): %v", pid, err)
			}
		}
	}
	if !seen {
		t.Fatalf("k3s of %s never logged %q on its first start (%s): %v", old.Name, lockTaken, logFile, err)
	}

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
	waited := strings.Contains(k3sLog, lockWaiting) || strings.Contains(k3sLog, lockTimeout)
	if deletePod && waited {
		t.Errorf("%s: the replacement pod's k3s waited for a stale bootstrap lock", name)
	}
	left := cleared || waited
	how := "restarted in place"
	if deletePod {
		how = "pod deleted"
	}
	t.Logf("%s: k3s killed after %q, %s; Ready after %s; lock left behind: %v (removed by the sidecar: %v, waited for by k3s: %v)",
		name, lockTaken, how, took.Round(100*time.Millisecond), left, cleared, waited)
	return v, took, left
}

// awaitLine reads the file from its start as it grows, every 5 ms, until a
// line contains want (true) or the timeout passes (false, with the reason).
func awaitLine(path, want string, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	var f *os.File
	for {
		var err error
		if f, err = os.Open(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return false, err
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var partial string
	for time.Now().Before(deadline) {
		chunk, err := r.ReadString('\n')
		partial += chunk
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if strings.Contains(partial, want) {
			return true, nil
		}
		partial = ""
	}
	return false, fmt.Errorf("not seen within %s", timeout)
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
