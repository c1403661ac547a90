//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"strings"
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

// TestBootstrapLockAfterDeletionDuringFirstStart deletes the server pod of a
// new SQLite cluster the moment its k3s has taken the bootstrap lock on its
// very first start (before it stored its CAs, so before it was ever ready),
// and times the recovery of the replacement pod; then times normal restarts
// (a deleted pod that had been ready) for comparison. A lock left behind used
// to cost the next start ~25s of "Bootstrap key is locked - waiting"; the
// sidecar now removes it on its first start in the new pod. The test asserts
// that every cluster recovered and that no replacement k3s waited for a stale
// lock, and reports both timings; it makes no assertion on them.
func TestBootstrapLockAfterDeletionDuringFirstStart(t *testing.T) {
	const wantHits, maxAttempts = 5, 10
	var hit, missed []time.Duration
	var last *vcluster
	for attempt := 0; attempt < maxAttempts && len(hit) < wantHits; attempt++ {
		v, d, leftLock := firstStartDeletion(t, fmt.Sprintf("boot-%d", attempt))
		if leftLock {
			hit = append(hit, d)
		} else {
			missed = append(missed, d)
		}
		if last != nil {
			dropCluster(t, last)
		}
		last = v
	}
	if len(hit) == 0 {
		t.Fatalf("in %d attempts no deletion left a bootstrap lock behind (k3s stored its data before the pod was gone): the scenario was not reproduced", maxAttempts)
	}

	var normal []time.Duration
	for range cfg.rounds {
		normal = append(normal, deleteServerPod(t, last).podReady)
	}
	dropCluster(t, last)

	t.Logf("RESULT deleted during first start with a lock left behind: %d rounds, replacement Ready after %s", len(hit), summary(hit))
	if len(missed) > 0 {
		t.Logf("RESULT deleted during first start, no lock left (k3s had stored its data): %d rounds, %s", len(missed), summary(missed))
	}
	t.Logf("RESULT normal restart (pod that had been Ready deleted): %d rounds, replacement Ready after %s", len(normal), summary(normal))
}

// firstStartDeletion creates cluster name without waiting, deletes its server
// pod as soon as k3s logs that it took the bootstrap lock, and waits for the
// replacement to be Ready and its API to serve. It returns the cluster, the
// time from the deletion to the replacement's readiness, and whether the
// deletion left the lock behind (the new pod's sidecar removed it).
func firstStartDeletion(t *testing.T, name string) (*vcluster, time.Duration, bool) {
	t.Helper()
	ctx := context.Background()
	ns := "e2e-" + name
	if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	v := &vcluster{name: name, namespace: ns, kubeconfig: cfg.workDir + "/" + name + ".kubeconfig"}
	k3kcli(t, "cluster", "create", name, "-n", ns, "--expose", "nodeport", "--wait=false")

	// Follow the first k3s container's log and delete the pod on the line.
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
	streamCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	stream, err := host.CoreV1().Pods(ns).GetLogs(old.Name, &corev1.PodLogOptions{Container: "k3s", Follow: true}).Stream(streamCtx)
	if err != nil {
		cancel()
		t.Fatalf("following the k3s log: %v", err)
	}
	sc := bufio.NewScanner(stream)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), lockTaken) {
			seen = true
			break
		}
	}
	start := time.Now()
	if err := host.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the server pod: %v", err)
	}
	stream.Close()
	cancel()
	if !seen {
		t.Fatalf("k3s of %s never logged %q on its first start", old.Name, lockTaken)
	}

	fresh := waitPodReplaced(t, v, old, 5*time.Minute)
	took := time.Since(start)
	k3kcli(t, "kubeconfig", "get", name, "-n", ns, "--output-kubeconfig", v.kubeconfig)
	v.client = virtualClient(t, v.kubeconfig)
	serving(t, v.client, 3*time.Minute)

	k3sLog := podLog(t, fresh, "k3s")
	dsLog := podLog(t, fresh, "datastore")
	cleared := strings.Contains(dsLog, lockCleared)
	waited := strings.Contains(k3sLog, lockWaiting) || strings.Contains(k3sLog, lockTimeout)
	if waited {
		t.Errorf("%s: the replacement k3s waited for a stale bootstrap lock", name)
	}
	left := cleared || waited
	t.Logf("%s: deleted %s after %q; replacement Ready after %s; lock left behind: %v (removed by the sidecar: %v, waited for by k3s: %v)",
		name, old.Name, lockTaken, took.Round(100*time.Millisecond), left, cleared, waited)
	return v, took, left
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
