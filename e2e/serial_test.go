//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The serial scenarios: each disturbs something every virtual cluster of the
// host needs (the node, the controller), so none calls t.Parallel and Go runs
// them one after another, in the order of this file, before any parallel
// scenario starts. They share one three-server etcd cluster (serialEtcd),
// made by the first: its three members take about two and a half minutes to
// come up, time in which nothing else runs.

// serialEtcd is the serial scenarios' etcd cluster. Each leaves it as it
// found it but the last, which scales it to one server; it is deleted after a
// run in which every scenario passed (deleteShared).
var serialEtcd struct {
	v       *vcluster
	members map[string]string // pod name → member ID, when it was made
	w       workload
}

// serialEtcdCluster returns the serial scenarios' etcd cluster, making it on
// first use: three etcd servers, three healthy members, a workload written.
func serialEtcdCluster(t *testing.T) (*vcluster, client.Client, map[string]string, workload) {
	t.Helper()
	crc := clusterClient(t)
	if serialEtcd.v == nil {
		start := time.Now()
		v, out, err := newCluster("serial", "--servers", "3", "--datastore", "etcd", "--timeout", "15m")
		t.Logf("k3kcli cluster create serial (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
		if err != nil {
			t.Fatalf("the serial scenarios' etcd cluster: %v", err)
		}
		serialEtcd.v = v
		serialEtcd.members = waitMembers(t, crc, v, 3, 10*time.Minute)
		serialEtcd.w = workload{namespace: "serial-data"}
		serialEtcd.w.create(t, v.client)
	}
	v := serialEtcd.v
	t.Cleanup(func() {
		if t.Failed() {
			dumpPod(t, v)
		}
	})
	return v, crc, serialEtcd.members, serialEtcd.w
}

// TestNodeRestart restarts the host's only node as a power cut does (every
// container killed at once, the node's network state gone, its disk kept)
// while a SQLite cluster and a three-server etcd cluster take writes, each
// with a Deployment running in it. Every server pod comes back on a new IP;
// the test asks that both virtual APIs serve again, that the etcd cluster has
// the same three members, that each Deployment's pod is Ready again, and that
// every write the API acknowledged, before or after the cut, is there. It
// logs, per cluster, the time from the cut until the API served and until the
// workload was Ready, and the writes acknowledged before and after.
func TestNodeRestart(t *testing.T) {
	if len(cfg.nodeRestart) == 0 {
		t.Skip("E2E_NODE_RESTART is not set: this host cluster's node cannot be restarted by the suite")
	}
	// The SQLite cluster starts beside the etcd one: both mostly wait.
	var (
		sqlite *vcluster
		out    string
		err    error
		made   = make(chan struct{})
	)
	start := time.Now()
	go func() {
		defer close(made)
		sqlite, out, err = newCluster("reboot")
	}()
	etcdV, crc, members, w := serialEtcdCluster(t)
	<-made
	t.Logf("k3kcli cluster create reboot (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("creating cluster reboot: %v", err)
	}
	deleteWhenPassed(t, sqlite)

	clusters := []*vcluster{sqlite, etcdV}
	const ns = "restart"
	writers := map[*vcluster]*ackedWriter{}
	for _, v := range clusters {
		createVirtualNamespace(t, v, ns)
		createClientDeployment(t, v, ns)
		waitClientHostPod(t, v, ns)
		writers[v] = startWriter(v.client, ns)
	}
	serverIPs := map[string]string{}
	for _, v := range clusters {
		for name, ip := range serverPodIPs(t, v) {
			serverIPs[name] = ip
		}
	}
	// Writes land for a few seconds before the cut.
	time.Sleep(5 * time.Second)

	cut := time.Now()
	restart := exec.Command(cfg.nodeRestart[0], cfg.nodeRestart[1:]...)
	restartOut, err := restart.CombinedOutput()
	t.Logf("%s (%s):\n%s", strings.Join(cfg.nodeRestart, " "), time.Since(cut).Round(time.Millisecond), restartOut)
	if err != nil {
		t.Fatalf("restarting the node: %v", err)
	}

	// Both clusters heal at once; each one's times count from the cut.
	type healed struct {
		serving, workload time.Duration
		err               error
	}
	results := make([]healed, len(clusters))
	var wg sync.WaitGroup
	for i, v := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			if r.err = until(8*time.Minute, func(ctx context.Context) bool {
				_, err := v.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
				return err == nil
			}); r.err != nil {
				r.err = fmt.Errorf("virtual API serving: %w", r.err)
				return
			}
			r.serving = time.Since(cut)
			if r.err = until(8*time.Minute, func(ctx context.Context) bool {
				return readyAfter(ctx, v.client, ns, "app=client", cut)
			}); r.err != nil {
				r.err = fmt.Errorf("Deployment client Ready again: %w", r.err)
				return
			}
			r.workload = time.Since(cut)
		}()
	}
	wg.Wait()
	for i, v := range clusters {
		if results[i].err != nil {
			t.Errorf("cluster %s after the node restart: %v", v.name, results[i].err)
			continue
		}
		t.Logf("cluster %s: virtual API serving %s after the cut, Deployment client Ready %s after it",
			v.name, results[i].serving.Round(time.Millisecond), results[i].workload.Round(time.Millisecond))
	}
	if t.Failed() {
		return
	}

	after := waitMembers(t, crc, etcdV, 3, 5*time.Minute)
	for name, id := range members {
		if after[name] != id {
			t.Errorf("etcd member %s was %s before the node restart and is %s after", name, id, after[name])
		}
	}
	moved := 0
	for _, v := range clusters {
		for name, ip := range serverPodIPs(t, v) {
			if ip != serverIPs[name] {
				moved++
			}
			t.Logf("server pod %s: %s → %s", name, serverIPs[name], ip)
		}
	}
	if moved == 0 {
		t.Errorf("no server pod changed its IP: the restart did not happen as it should")
	}

	// A few writes after healing, then every acknowledged one must be there.
	time.Sleep(3 * time.Second)
	for _, v := range clusters {
		before, later, failed := writers[v].stop(cut)
		t.Logf("cluster %s: %d writes acknowledged before the cut, %d after it, %d not acknowledged", v.name, before, later, failed)
		if later == 0 {
			t.Errorf("cluster %s: no write was acknowledged after the node restart", v.name)
		}
		writers[v].check(t, v.client)
	}
	w.check(t, etcdV.client)
}

// TestDrainEvictsOneEtcdMemberAtATime evicts the serial cluster's server
// pods as `kubectl drain` does (the Eviction API, which honours
// PodDisruptionBudgets): the first eviction is allowed, the second, while the
// first member is not back, is refused because of the Cluster's budget
// (quorum: two of three); writes are acknowledged while the member is away
// (the other two keep quorum), it comes back as the same member, and every
// acknowledged write is there.
func TestDrainEvictsOneEtcdMemberAtATime(t *testing.T) {
	v, crc, members, w := serialEtcdCluster(t)
	ctx := context.Background()
	pdbName := "k3k-" + v.name + "-server"
	eventually(t, 2*time.Minute, "the server pods' disruption budget allowing one eviction", func(ctx context.Context) (bool, error) {
		pdb, err := host.PolicyV1().PodDisruptionBudgets(v.namespace).Get(ctx, pdbName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.DisruptionsAllowed == 1, nil
	})
	const ns = "drain"
	createVirtualNamespace(t, v, ns)
	writer := startWriter(v.client, ns)

	first, second := "k3k-"+v.name+"-server-1", "k3k-"+v.name+"-server-2"
	old := getPod(t, v, first)
	evicted := time.Now()
	if err := evict(ctx, v.namespace, first); err != nil {
		t.Fatalf("evicting %s, the first of three: %v", first, err)
	}
	err := evict(ctx, v.namespace, second)
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "disruption budget") {
		t.Fatalf("evicting %s while %s is away: %v, want a refusal because of the disruption budget", second, first, err)
	}
	t.Logf("second eviction refused: %v", err)

	waitPodReplaced(t, v, old, 5*time.Minute)
	back := time.Now()
	after := waitMembers(t, crc, v, 3, 5*time.Minute)
	for name, id := range members {
		if after[name] != id {
			t.Errorf("etcd member %s was %s before the eviction and is %s after", name, id, after[name])
		}
	}
	serving(t, v.client, time.Minute)
	time.Sleep(2 * time.Second)
	before, later, failed := writer.stop(time.Now())
	away := writer.ackedBetween(evicted, back)
	t.Logf("%d writes acknowledged while %s was away (%s), %d in all, %d not acknowledged",
		away, first, back.Sub(evicted).Round(time.Millisecond), before+later, failed)
	if away == 0 {
		t.Errorf("no write was acknowledged while one member of three was away")
	}
	writer.check(t, v.client)
	w.check(t, v.client)
}

// evict asks the host API to evict pod ns/name, as kubectl drain does.
func evict(ctx context.Context, ns, name string) error {
	return host.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
}

// TestEtcdRecoveryScaleDownWhileTheControllerIsDown is issue 16's scenario
// b: the controller is stopped, server pods 1 and 2 are deleted, servers: 1,
// the controller is started → no pod stuck Terminating past 2 minutes, the
// API back, every object written before there (defect 2).
func TestEtcdRecoveryScaleDownWhileTheControllerIsDown(t *testing.T) {
	v, crc, before, w := serialEtcdCluster(t)

	// Whatever fails below, the controller runs again before the other
	// scenarios resume: they all need it.
	t.Cleanup(func() { restoreController(t) })
	scaleController(t, 0)
	var olds []*corev1.Pod
	for _, name := range []string{"k3k-" + v.name + "-server-1", "k3k-" + v.name + "-server-2"} {
		p := getPod(t, v, name)
		olds = append(olds, p)
		if err := host.CoreV1().Pods(v.namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setServers(t, crc, v, 1)
	scaleController(t, 1)
	start := time.Now()
	eventually(t, 2*time.Minute, "the deleted server pods to be gone (not stuck Terminating)", func(ctx context.Context) (bool, error) {
		for _, old := range olds {
			p, err := host.CoreV1().Pods(v.namespace).Get(ctx, old.Name, metav1.GetOptions{})
			if err == nil && p.UID == old.UID {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("scenario b: the deleted pods went %s after the controller started", time.Since(start).Round(time.Second))
	after := waitMembers(t, crc, v, 1, 10*time.Minute)
	serving(t, v.client, 5*time.Minute)
	t.Logf("scenario b: healthy with one member after %s; members %v → %v", time.Since(start).Round(time.Second), before, after)
	server0 := "k3k-" + v.name + "-server-0"
	if after[server0] != before[server0] {
		t.Fatalf("server-0 changed from %s to %s", before[server0], after[server0])
	}
	w.check(t, v.client)
}

// until polls cond every half second for at most timeout; it returns an
// error when cond never held. For goroutines, which must not end the test.
func until(timeout time.Duration, cond func(ctx context.Context) bool) error {
	return wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true,
		func(ctx context.Context) (bool, error) { return cond(ctx), nil })
}

// readyAfter reports whether a pod matching selector in the virtual
// namespace ns is Running and turned Ready at or after since (a condition's
// time has whole seconds).
func readyAfter(ctx context.Context, c kubernetes.Interface, ns, selector string, since time.Time) bool {
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return false
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && !cond.LastTransitionTime.Time.Before(since.Truncate(time.Second)) {
				return true
			}
		}
	}
	return false
}

// serverPodIPs returns the IP of each server pod of v, by pod name.
func serverPodIPs(t *testing.T, v *vcluster) map[string]string {
	t.Helper()
	pods, err := host.CoreV1().Pods(v.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "k3k.io/cluster=" + v.name + ",k3k.io/component=server"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatalf("no server pod of %s", v.name)
	}
	ips := map[string]string{}
	for _, p := range pods.Items {
		ips[p.Name] = p.Status.PodIP
	}
	return ips
}

// ackedWriter creates ConfigMaps w-1, w-2, … in a virtual namespace, one every
// 100 ms, until stopped, and keeps when each create was acknowledged (the API
// answered it with the object). A create that failed or got no answer may or
// may not have landed, so only acknowledged ones must survive; a failed
// number is not tried again.
type ackedWriter struct {
	c    kubernetes.Interface
	ns   string
	done chan struct{}
	quit chan struct{}

	mu     sync.Mutex
	acked  map[string]time.Time // name → when the answer came
	failed int
}

func startWriter(c kubernetes.Interface, ns string) *ackedWriter {
	w := &ackedWriter{c: c, ns: ns, done: make(chan struct{}), quit: make(chan struct{}), acked: map[string]time.Time{}}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
			name := fmt.Sprintf("w-%d", n)
			_, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": fmt.Sprint(n)},
			}, metav1.CreateOptions{})
			w.mu.Lock()
			if err == nil {
				w.acked[name] = time.Now()
			} else {
				w.failed++
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// stop ends the writes and counts the acknowledged ones before and after cut,
// and the ones that were not.
func (w *ackedWriter) stop(cut time.Time) (before, after, failed int) {
	close(w.quit)
	<-w.done
	for _, at := range w.acked {
		if at.Before(cut) {
			before++
		} else {
			after++
		}
	}
	return before, after, w.failed
}

// ackedBetween counts the writes acknowledged from a until b (after stop).
func (w *ackedWriter) ackedBetween(a, b time.Time) int {
	n := 0
	for _, at := range w.acked {
		if !at.Before(a) && at.Before(b) {
			n++
		}
	}
	return n
}

// check fails the test for every acknowledged write that is missing or holds
// other content.
func (w *ackedWriter) check(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	var list *corev1.ConfigMapList
	if err := retry(func(ctx context.Context) (err error) {
		list, err = c.CoreV1().ConfigMaps(w.ns).List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		t.Fatalf("listing the written ConfigMaps: %v", err)
	}
	have := map[string]string{}
	for _, cm := range list.Items {
		have[cm.Name] = cm.Data["n"]
	}
	lost := 0
	for name := range w.acked {
		if n, ok := have[name]; !ok || "w-"+n != name {
			lost++
			if lost <= 10 {
				t.Errorf("acknowledged write %s/%s: missing or changed (holds n=%q)", w.ns, name, n)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged writes lost", lost, len(w.acked))
	}
}
