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
	"syscall"
	"testing"
	"time"

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

// containerPIDs finds the container's cgroup below the pod's (cgroup v1 with
// the cgroupfs driver: …/kubepods/<qos>/pod<uid>/<id>; v2 and systemd names
// contain the same strings) and returns the PIDs in it.
func containerPIDs(t *testing.T, podUID, containerID string) []int {
	t.Helper()
	roots := []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup"}
	uidForms := []string{podUID, strings.ReplaceAll(podUID, "-", "_")}
	for _, root := range roots {
		if _, err := os.Stat(root); err != nil {
			continue
		}
		var procs string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() || !strings.Contains(d.Name(), containerID) {
				return nil
			}
			parent := filepath.Base(filepath.Dir(path))
			for _, u := range uidForms {
				if strings.Contains(parent, u) {
					procs = filepath.Join(path, "cgroup.procs")
					return fs.SkipAll
				}
			}
			return nil
		})
		if procs == "" {
			continue
		}
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

// stopProcessAtStart waits for a process named comm to appear in one of the
// containers of pod podUID and stops it (SIGSTOP) the moment it is seen, before
// it has done more than a few milliseconds of its work. It returns the PID and
// the container's ID (its cgroup's name). It polls the node's cgroups (the
// pids hierarchy of cgroup v1, or v2's single one) every 5ms, from before the
// pod's cgroup exists.
func stopProcessAtStart(podUID, comm string, timeout time.Duration) (int, string, error) {
	root := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(root); err != nil {
		root = "/sys/fs/cgroup"
	}
	uidForms := []string{podUID, strings.ReplaceAll(podUID, "-", "_")}
	deadline := time.Now().Add(timeout)
	podDir := ""
	for ; time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if podDir == "" {
			_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				for _, u := range uidForms {
					if strings.Contains(d.Name(), u) {
						podDir = path
						return fs.SkipAll
					}
				}
				return nil
			})
			continue
		}
		containers, err := os.ReadDir(podDir)
		if err != nil {
			continue // not yet, or being made
		}
		for _, c := range containers {
			if !c.IsDir() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(podDir, c.Name(), "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(data)) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					continue
				}
				name, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				if err != nil || strings.TrimSpace(string(name)) != comm {
					continue
				}
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					return 0, "", fmt.Errorf("stopping %s (pid %d): %w", comm, pid, err)
				}
				return pid, c.Name(), nil
			}
		}
	}
	if podDir == "" {
		return 0, "", fmt.Errorf("no cgroup of pod %s on this node within %s", podUID, timeout)
	}
	return 0, "", fmt.Errorf("no process %q in the containers of pod %s (%s) within %s", comm, podUID, podDir, timeout)
}
