//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The processes of a container, read on the node: the suite runs as root on
// the host cluster's only node (docs/e2e.md).

// serverContainerPIDs returns the PIDs of one running container of v's
// server pod.
func serverContainerPIDs(t *testing.T, v *vcluster, container string) []int {
	t.Helper()
	p, err := serverPod(context.Background(), v)
	if err != nil || p == nil {
		t.Fatalf("server pod: %v", err)
	}
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if cs.Name != container {
			continue
		}
		if cs.State.Running == nil || cs.ContainerID == "" {
			t.Fatalf("container %s of %s is not running", container, p.Name)
		}
		pids := containerPIDs(t, string(p.UID), cs.ContainerID[strings.Index(cs.ContainerID, "://")+3:])
		if len(pids) == 0 {
			t.Fatalf("no processes found for container %s of %s", container, p.Name)
		}
		return pids
	}
	t.Fatalf("server pod %s has no container %s", p.Name, container)
	return nil
}

// containerCgroup finds the container's cgroup directory below the pod's in
// the hierarchy mounted at root (cgroup v1 with the cgroupfs driver:
// …/kubepods/<qos>/pod<uid>/<id>; v2 and systemd names contain the same
// strings), or "" when there is none.
func containerCgroup(root, podUID, containerID string) string {
	if _, err := os.Stat(root); err != nil {
		return ""
	}
	uidForms := []string{podUID, strings.ReplaceAll(podUID, "-", "_")}
	var dir string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || !strings.Contains(d.Name(), containerID) {
			return nil
		}
		parent := filepath.Base(filepath.Dir(path))
		for _, u := range uidForms {
			if strings.Contains(parent, u) {
				dir = path
				return fs.SkipAll
			}
		}
		return nil
	})
	return dir
}

// containerPIDs returns the PIDs in the container's cgroup.
func containerPIDs(t *testing.T, podUID, containerID string) []int {
	t.Helper()
	for _, root := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		dir := containerCgroup(root, podUID, containerID)
		if dir == "" {
			continue
		}
		procs := filepath.Join(dir, "cgroup.procs")
		data, err := os.ReadFile(procs)
		if err != nil {
			t.Logf("reading %s: %v", procs, err)
			return nil
		}
		var pids []int
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	return nil
}

// throttleContainer caps the container's CPU at percent of one CPU by
// writing its cgroup's CFS quota (v1 cpu.cfs_quota_us, v2 cpu.max) directly,
// behind the kubelet's back: the container keeps the cap until it ends (a
// restart gets a new cgroup). The suite uses it to widen a window in a
// process's start that is otherwise shorter than the node's scheduling
// latency under load.
func throttleContainer(t *testing.T, podUID, containerID string, percent int) {
	t.Helper()
	const period = 100000
	quota := period * percent / 100
	if dir := containerCgroup("/sys/fs/cgroup/cpu", podUID, containerID); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(quota)), 0); err != nil {
			t.Fatalf("throttling container %s: %v", containerID, err)
		}
		return
	}
	if dir := containerCgroup("/sys/fs/cgroup", podUID, containerID); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, period)), 0); err != nil {
			t.Fatalf("throttling container %s: %v", containerID, err)
		}
		return
	}
	t.Fatalf("no cpu cgroup found for container %s of pod %s", containerID, podUID)
}

// pidNamespace is the PID namespace a process is in (the link's target,
// e.g. pid:[4026532871]), and nsPID its PID inside that namespace (the last
// NSpid field of its status).
func pidNamespace(t *testing.T, pid int) string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func nsPID(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" {
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				t.Fatalf("pid %d: %q", pid, line)
			}
			return n
		}
	}
	t.Fatalf("pid %d: no NSpid in its status", pid)
	return 0
}

func cmdline(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "?"
	}
	s := strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}
