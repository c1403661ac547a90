//go:build e2e && footprint

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// The footprint benchmark (make bench-footprint, docs/footprint.md): the
// private memory of every container of one shared-mode sqlite virtual
// cluster, idle and with FOOTPRINT_PODS pods. It is not part of `make e2e`
// (build tag footprint): it asserts nothing about memory, it prints a table.
//
//	FOOTPRINT_PODS      pods of the load Deployment (default 100; 0 measures idle only)
//	FOOTPRINT_IDLE      how long after Ready (agent Node Ready) the idle measure waits (default 60s)
//	FOOTPRINT_SETTLE    how long after the last pod is Running the loaded measure waits (default 30s)
//	FOOTPRINT_VARIANTS  the clusters to measure, one after the other, separated by ';':
//	                    NAME or NAME=ITEM ITEM… (space-separated) where an ITEM is a k3s server argument
//	                    (given to k3kcli --server-args) or env:NAME=VALUE (spec.serverEnvs,
//	                    set after creation; the server pod rolls). Default "default".
//
// Memory is read on the node (the suite runs as root on the host cluster's
// only node): the processes of each container are those in its cgroup
// (kubepods…/pod<uid>/<container id>/cgroup.procs), and for each process
// /proc/<pid>/smaps_rollup gives Pss (private pages plus a share of the shared
// ones), Anonymous (heap and stacks: what only this process holds) and Rss (for
// reference: it counts the binary's pages, which are shared across clusters).
// CPU is each container's utime + stime (/proc/<pid>/stat) over the last
// cpuWindow of the idle wait and of the loaded settle, in millicores.

type footprintVariant struct {
	name       string
	serverArgs []string
	envs       []v1beta1.ServerEnvVar
}

func footprintVariants(t *testing.T) []footprintVariant {
	spec := os.Getenv("FOOTPRINT_VARIANTS")
	if spec == "" {
		spec = "default"
	}
	var out []footprintVariant
	for _, s := range strings.Split(spec, ";") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		name, items, _ := strings.Cut(s, "=")
		v := footprintVariant{name: name}
		for _, it := range strings.Fields(items) {
			switch {
			case it == "":
			case strings.HasPrefix(it, "env:"):
				k, val, ok := strings.Cut(strings.TrimPrefix(it, "env:"), "=")
				if !ok {
					t.Fatalf("FOOTPRINT_VARIANTS: %q: want env:NAME=VALUE", it)
				}
				v.envs = append(v.envs, v1beta1.ServerEnvVar{Name: k, Value: val})
			default:
				v.serverArgs = append(v.serverArgs, it)
			}
		}
		out = append(out, v)
	}
	return out
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return d
}

// memUsage is smaps_rollup's Rss, Pss and Anonymous in KiB.
type memUsage struct{ rss, pss, anon int64 }

func (m *memUsage) add(o memUsage) { m.rss += o.rss; m.pss += o.pss; m.anon += o.anon }

// processMem is one process of a container.
type processMem struct {
	pid  int
	cmd  string
	used memUsage
}

// containerMem is one container of a pod and its processes.
type containerMem struct {
	pod, container string
	procs          []processMem
	total          memUsage
	// ticks is the CPU time (user and system, clock ticks) its processes
	// have used since they started; cpu the millicores used over the
	// measure's window (measureWithCPU).
	ticks int64
	cpu   float64
}

// cpuWindow is how long a measure counts CPU time: the last cpuWindow of the
// idle wait and of the loaded settle.
const cpuWindow = 30 * time.Second

// measureWithCPU waits wait, counting CPU time over its last cpuWindow (all
// of it when shorter), and measures.
func measureWithCPU(t *testing.T, v *vcluster, wait time.Duration) []containerMem {
	t.Helper()
	window := min(cpuWindow, wait)
	time.Sleep(wait - window)
	before := measureCluster(t, v)
	start := time.Now()
	time.Sleep(window)
	after := measureCluster(t, v)
	elapsed := time.Since(start).Seconds()
	for i := range after {
		// A container restarted in the window has fewer ticks: no number.
		if b := findContainer(before, after[i]); b != nil && after[i].ticks >= b.ticks {
			after[i].cpu = float64(after[i].ticks-b.ticks) / clockTicks * 1000 / elapsed
		}
	}
	return after
}

// findContainer is c's entry (same pod role and container name) in list, or nil.
func findContainer(list []containerMem, c containerMem) *containerMem {
	for i := range list {
		if list[i].pod == c.pod && list[i].container == c.container {
			return &list[i]
		}
	}
	return nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on Linux
// x86_64 and arm64.
const clockTicks = 100

// cpuTicks is utime + stime of a process (/proc/<pid>/stat fields 14 and 15;
// the command name, field 2, may hold spaces, so fields count after its ')').
func cpuTicks(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	rest := string(data)
	rest = rest[strings.LastIndexByte(rest, ')')+1:]
	f := strings.Fields(rest) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return utime + stime, nil
}

func TestFootprint(t *testing.T) {
	pods, err := strconv.Atoi(envOr("FOOTPRINT_PODS", "100"))
	if err != nil || pods < 0 {
		t.Fatalf("FOOTPRINT_PODS=%q: want a number ≥ 0", os.Getenv("FOOTPRINT_PODS"))
	}
	idle := envDuration(t, "FOOTPRINT_IDLE", 60*time.Second)
	settle := envDuration(t, "FOOTPRINT_SETTLE", 30*time.Second)
	var report []string
	for _, variant := range footprintVariants(t) {
		var ns string
		t.Run(variant.name, func(t *testing.T) {
			name := "fp-" + strings.ToLower(variant.name)
			ns = "e2e-" + name
			var flags []string
			for _, a := range variant.serverArgs {
				flags = append(flags, "--server-args="+a)
			}
			v := createCluster(t, name, flags...)
			if len(variant.envs) > 0 {
				setServerEnvs(t, v, variant.envs)
			}
			waitAgentNode(t, v)
			t.Logf("variant %s: server args %q, envs %v; idle for %s", variant.name, variant.serverArgs, variant.envs, idle)
			idleMem := measureWithCPU(t, v, idle)
			t.Log("\n" + footprintTable(variant, idleMem, nil, 0))
			var loadedMem []containerMem
			running := 0
			if pods > 0 {
				start := time.Now()
				running = loadPods(t, v, pods, envDuration(t, "FOOTPRINT_LOAD_WAIT", 3*time.Minute))
				t.Logf("%d of %d virtual pods Running after %s; settling %s", running, pods, time.Since(start).Round(time.Second), settle)
				loadedMem = measureWithCPU(t, v, settle)
			}
			table := footprintTable(variant, idleMem, loadedMem, running)
			if pods > 0 {
				t.Log("\n" + table)
			}
			report = append(report, table)
		})
		// Next variant only once this one's host pods are gone (pod capacity).
		if ns != "" {
			waitNamespaceGone(t, ns, 5*time.Minute)
		}
	}
	t.Log("footprint, all variants:\n" + strings.Join(report, "\n"))
}

func envOr(name, def string) string {
	if s := os.Getenv(name); s != "" {
		return s
	}
	return def
}

// setServerEnvs sets spec.serverEnvs and waits for the rolled server pod.
func setServerEnvs(t *testing.T, v *vcluster, envs []v1beta1.ServerEnvVar) {
	t.Helper()
	crc := clusterClient(t)
	old := getPod(t, v, v.pod())
	var c v1beta1.Cluster
	if err := crc.Get(context.Background(), client.ObjectKey{Namespace: v.namespace, Name: v.name}, &c); err != nil {
		t.Fatal(err)
	}
	c.Spec.ServerEnvs = envs
	if err := crc.Update(context.Background(), &c); err != nil {
		t.Fatalf("setting serverEnvs: %v", err)
	}
	waitPodReplaced(t, v, old, 5*time.Minute)
	serving(t, v.client, 3*time.Minute)
}

// loadPods runs n toolbox pods (sleep) in the virtual cluster through the
// agent and waits until all are Running, or at most wait; it returns how many
// are Running and logs why the others are not.
func loadPods(t *testing.T, v *vcluster, n int, wait time.Duration) int {
	t.Helper()
	const ns = "load"
	labels := map[string]string{"app": "load"}
	createVirtualNamespace(t, v, ns)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "load", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(n)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(1)),
					Containers: []corev1.Container{{
						Name: "sleep", Image: toolboxImage, ImagePullPolicy: corev1.PullNever,
						Command: []string{"sleep", "86400"},
					}},
				},
			},
		},
	}
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	last, running := -1, 0
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := v.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		cancel()
		if err == nil {
			running = 0
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			if running/10 != last/10 {
				t.Logf("%d of %d virtual pods Running", running, n)
				last = running
			}
			if running >= n {
				return running
			}
			if time.Now().After(deadline) {
				shown := 0
				for _, p := range list.Items {
					if p.Status.Phase != corev1.PodRunning && shown < 3 {
						shown++
						t.Logf("not Running: %s phase %s conditions %+v", p.Name, p.Status.Phase, p.Status.Conditions)
					}
				}
				t.Logf("only %d of %d virtual pods Running after %s: measuring as it is", running, n, wait)
				return running
			}
		}
		time.Sleep(time.Second)
	}
}

func waitNamespaceGone(t *testing.T, ns string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "namespace "+ns+" deleted", func(ctx context.Context) (bool, error) {
		_, err := host.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// measureCluster measures every running container of the server pod and of
// the agent's pods.
func measureCluster(t *testing.T, v *vcluster) []containerMem {
	t.Helper()
	list, err := host.CoreV1().Pods(v.namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []containerMem
	for i := range list.Items {
		p := &list.Items[i]
		role := ""
		switch {
		case p.Name == v.pod():
			role = "server"
		case strings.HasPrefix(p.Name, "k3k-"+v.name+"-kubelet-"):
			role = "agent"
		default:
			continue
		}
		for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if cs.State.Running == nil || cs.ContainerID == "" {
				continue
			}
			id := cs.ContainerID[strings.Index(cs.ContainerID, "://")+3:]
			cm := containerMem{pod: role, container: cs.Name}
			for _, pid := range containerPIDs(t, string(p.UID), id) {
				u, err := smapsRollup(pid)
				if err != nil {
					t.Logf("pid %d of %s/%s: %v", pid, role, cs.Name, err)
					continue
				}
				cm.procs = append(cm.procs, processMem{pid: pid, cmd: cmdline(pid), used: u})
				cm.total.add(u)
				if ticks, err := cpuTicks(pid); err == nil {
					cm.ticks += ticks
				}
			}
			if len(cm.procs) == 0 {
				t.Errorf("no processes found for %s/%s (container %s)", role, cs.Name, id)
			}
			out = append(out, cm)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].pod != out[j].pod {
			return out[i].pod > out[j].pod // server first
		}
		return out[i].container < out[j].container
	})
	return out
}

// smapsRollup reads Rss, Pss and Anonymous (KiB) of one process.
func smapsRollup(pid int) (memUsage, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return memUsage{}, err
	}
	defer f.Close()
	var u memUsage
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		n, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Rss:":
			u.rss = n
		case "Pss:":
			u.pss = n
		case "Anonymous:":
			u.anon = n
		}
	}
	return u, s.Err()
}

func mib(kib int64) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }

// footprintTable prints container × (idle, loaded) PSS and anonymous MiB, RSS
// for reference, each container's processes and the totals.
func footprintTable(v footprintVariant, idle, loaded []containerMem, pods int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "variant %s (server args %q, envs %v), loaded: %d virtual pods Running\n", v.name, v.serverArgs, v.envs, pods)
	fmt.Fprintf(&b, "MiB; CPU in millicores over the last %s of each wait\n", cpuWindow)
	b.WriteString("| container | process | idle PSS | idle anon | idle RSS | idle CPU | loaded PSS | loaded anon | loaded RSS | loaded CPU |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	cells := func(u *memUsage) string {
		if u == nil {
			return "- | - | -"
		}
		return mib(u.pss) + " | " + mib(u.anon) + " | " + mib(u.rss)
	}
	cpu := func(c *containerMem) string {
		if c == nil {
			return "-"
		}
		return fmt.Sprintf("%.0f", c.cpu)
	}
	// The totals are containers too: their memory and CPU summed.
	var ti, tl containerMem
	for _, c := range idle {
		l := findContainer(loaded, c)
		var lt *memUsage
		if l != nil {
			lt = &l.total
			tl.total.add(l.total)
			tl.cpu += l.cpu
		}
		ti.total.add(c.total)
		ti.cpu += c.cpu
		fmt.Fprintf(&b, "| %s/%s | all (%d) | %s | %s | %s | %s |\n", c.pod, c.container, len(c.procs), cells(&c.total), cpu(&c), cells(lt), cpu(l))
		if len(c.procs) > 1 {
			for i, p := range c.procs {
				var lp *memUsage
				if l != nil && i < len(l.procs) {
					lp = &l.procs[i].used
				}
				fmt.Fprintf(&b, "|  | %s | %s | | %s | |\n", p.cmd, cells(&p.used), cells(lp))
			}
		}
	}
	var tlMem *memUsage
	var tlCPU *containerMem
	if loaded != nil {
		tlMem, tlCPU = &tl.total, &tl
	}
	fmt.Fprintf(&b, "| **total** | | %s | %s | %s | %s |\n", cells(&ti.total), cpu(&ti), cells(tlMem), cpu(tlCPU))
	return b.String()
}
