//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestRestoreInPlace is the in-place restore drill on a SQLite cluster:
// objects and a Deployment run by the agent written, a snapshot taken,
// objects added, changed and deleted, a pod run by the agent added, the
// Deployment deleted (its host pod gone), a watch opened; then `k3kcli
// cluster restore` → exactly the snapshot's objects with their content and
// new resource versions, the open watch ended, a watch or list from the old
// resource version answered 410 Gone (the client must relist), the cluster
// writable, the agent's pod that the snapshot does not know removed from the
// host, and the Deployment the snapshot holds running again on a host pod.
func TestRestoreInPlace(t *testing.T) {
	t.Parallel()
	restoreInPlace(t, "inplace", "--datastore", "sqlite", "--persistence-type", "dynamic")
}

// TestRestoreInPlaceEtcd is the same drill on three etcd servers: the data
// goes through member 0 and raft replicates it.
func TestRestoreInPlaceEtcd(t *testing.T) {
	t.Parallel()
	restoreInPlace(t, "inplace-ha", "--datastore", "etcd", "--servers", "3", "--timeout", "15m")
}

func restoreInPlace(t *testing.T, name string, flags ...string) {
	v := createCluster(t, name, flags...)
	waitAgentNode(t, v)
	const ns = "drill"
	w := workload{namespace: ns}
	w.create(t, v.client)
	// A Deployment the agent runs, in the snapshot and deleted after it.
	createClientDeployment(t, v, ns)
	writeKept(t, v.client, ns, "object", 50)
	snapHost := waitClientHostPod(t, v, ns)
	snapPod := snapHost.Annotations["k3k.io/virtual-name"]
	before := contents(keptObjects(t, v.client))
	file := filepath.Join(cfg.workDir, name+".snapshot")
	_ = os.Remove(file)
	k3kcli(t, "cluster", "snapshot", v.name, "-n", v.namespace, "-o", file)

	// After the snapshot: more objects, changed ones, a deleted one, and a
	// pod the agent runs on the host.
	writeKept(t, v.client, ns, "after-snapshot", 5)
	for i := range 5 {
		name := fmt.Sprintf("object-%03d", i)
		if err := retry(func(ctx context.Context) error {
			cm, err := v.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cm.Data["value"] = "changed after the snapshot"
			_, err = v.client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatalf("changing %s: %v", name, err)
		}
	}
	if err := retry(func(ctx context.Context) error {
		err := v.client.CoreV1().ConfigMaps(ns).Delete(ctx, "object-010", metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.CoreV1().Pods(ns).Create(ctx, laterPod(), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := retry(func(ctx context.Context) error {
		err := v.client.AppsV1().Deployments(ns).Delete(ctx, "client", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the agent's host copy of pod later", func(ctx context.Context) (bool, error) {
		_, ok := findHostCopy(ctx, v, "pods", ns, "later")
		return ok, nil
	})
	eventually(t, 3*time.Minute, "the host pods of the deleted Deployment client to be gone", func(ctx context.Context) (bool, error) {
		left, err := hostPodsOf(ctx, v, ns, "client-")
		return err == nil && len(left) == 0, err
	})

	// A watch open across the restore, from the newest resource version.
	wc := watchClient(t, v)
	var list *corev1.ConfigMapList
	if err := retry(func(ctx context.Context) (err error) {
		list, err = v.client.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	oldRV := list.ResourceVersion
	open, err := wc.CoreV1().ConfigMaps("").Watch(context.Background(), metav1.ListOptions{ResourceVersion: oldRV})
	if err != nil {
		t.Fatalf("opening a watch at resourceVersion %s: %v", oldRV, err)
	}
	defer open.Stop()

	start := time.Now()
	k3kcli(t, "cluster", "restore", v.name, "-n", v.namespace, "--from", file, "--yes", "--timeout", "5m30s")
	t.Logf("restored in place after %s", time.Since(start).Round(time.Millisecond))
	restored := time.Now()

	// The open watch ended: its server stopped. Whatever it delivered
	// before, it never delivers an object of the restored state as if time
	// had gone backwards.
	ended := time.After(time.Minute)
	for done := false; !done; {
		select {
		case ev, ok := <-open.ResultChan():
			if !ok {
				done = true
				break
			}
			if ev.Type == watch.Error {
				t.Logf("the open watch ended with an error: %v", apierrors.FromObject(ev.Object))
				done = true
			}
		case <-ended:
			t.Fatal("the watch opened before the restore is still open a minute after it")
		}
	}

	// From the old resource version: 410 Gone, relist.
	var gone error
	eventually(t, time.Minute, "a watch from resourceVersion "+oldRV+" to be refused as too old", func(ctx context.Context) (bool, error) {
		w, err := wc.CoreV1().ConfigMaps("").Watch(ctx, metav1.ListOptions{ResourceVersion: oldRV})
		if err != nil {
			gone = err
			return apierrors.IsResourceExpired(err) || apierrors.IsGone(err), nil
		}
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Error {
				gone = apierrors.FromObject(ev.Object)
				return apierrors.IsResourceExpired(gone) || apierrors.IsGone(gone), nil
			}
			return false, fmt.Errorf("a watch from the old resourceVersion %s delivered %s", oldRV, ev.Type)
		case <-time.After(10 * time.Second):
			return false, fmt.Errorf("a watch from the old resourceVersion %s is served", oldRV)
		}
	})
	t.Logf("a watch from the old resourceVersion: %v", gone)
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{ResourceVersion: oldRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("a list at the old resourceVersion %s was served", oldRV)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// Exactly the snapshot's objects, each with a resource version newer
	// than any a client held before.
	objs := keptObjects(t, v.client)
	if after := contents(objs); !maps.Equal(before, after) {
		t.Fatalf("the restored cluster holds other objects than the snapshot:\nsnapshot %v\nrestored %v", before, after)
	}
	old, _ := strconv.ParseInt(oldRV, 10, 64)
	for k, v := range objs {
		rv, _, _ := strings.Cut(v, " ")
		if n, err := strconv.ParseInt(rv, 10, 64); err != nil || n <= old {
			t.Fatalf("restored %s has resourceVersion %s, not above %s from before the restore", k, rv, oldRV)
		}
	}
	t.Logf("objects in the snapshot: %d; after the restore: %d", len(before), len(objs))
	w.check(t, v.client)
	c := clusterClient(t)
	if cond := condition(t, c, v, "TokenReady"); cond.Status != metav1.ConditionTrue {
		t.Fatalf("TokenReady %+v", cond)
	}

	// The agent relisted: the pod the snapshot does not know is gone from
	// the virtual cluster and from the host.
	eventually(t, 3*time.Minute, "the host copy of pod later, unknown to the snapshot, to be removed", func(ctx context.Context) (bool, error) {
		_, ok := findHostCopy(ctx, v, "pods", ns, "later")
		return !ok, nil
	})

	// The Deployment deleted after the snapshot is back and runs again: a
	// virtual pod of it Running on a new host pod, also Running. (Its pod
	// in the snapshot says Running, but its host pod is gone: the agent
	// either runs it again or fails it as HostPodLost and the ReplicaSet
	// makes another.)
	var vpod *corev1.Pod
	var hpod *corev1.Pod
	eventually(t, 3*time.Minute, "a pod of Deployment client, in the snapshot and deleted after it, to run again on a host pod", func(ctx context.Context) (bool, error) {
		pods, err := v.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=client"})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			h, ok := findHostCopy(ctx, v, "pods", ns, p.Name)
			if !ok {
				continue
			}
			hp := h.(*corev1.Pod)
			if hp.Annotations["k3k.io/virtual-uid"] == string(p.UID) && hp.Status.Phase == corev1.PodRunning && hp.DeletionTimestamp == nil {
				vpod, hpod = p, hp
				return true, nil
			}
		}
		return false, nil
	})
	if hpod.UID == snapHost.UID {
		t.Fatalf("host pod %s is the one deleted before the restore", hpod.Name)
	}
	snapState := "gone"
	if err := retry(func(ctx context.Context) error {
		p, err := v.client.CoreV1().Pods(ns).Get(ctx, snapPod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			snapState = fmt.Sprintf("%s %s", p.Status.Phase, p.Status.Reason)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("Deployment client, deleted after the snapshot, runs again %s after the restore: virtual pod %s Running on host pod %s; the snapshot's pod %s: %s",
		time.Since(restored).Round(time.Second), vpod.Name, hpod.Name, snapPod, snapState)

	writes := workload{namespace: "written-after-restore"}
	writes.create(t, v.client)
	writes.check(t, v.client)
}

// laterPod is a pod written after the snapshot, for the agent to run.
func laterPod() *corev1.Pod {
	image := os.Getenv("E2E_WORKLOAD_IMAGE")
	if image == "" {
		image = "k3k-io/k3k-datastore:dev"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "later"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "later", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"/usr/local/bin/datastore", "sqlite", "--data-dir=/data",
				"--listen-address=127.0.0.1:2379", "--health-address=:8080", "--metrics-address=127.0.0.1:0"},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
		}}, Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}},
	}
}

// hostPodsOf is every host pod (terminating ones too) the agent made for a
// virtual pod in ns whose name starts with prefix.
func hostPodsOf(ctx context.Context, v *vcluster, ns, prefix string) ([]corev1.Pod, error) {
	list, err := host.CoreV1().Pods(v.namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=k3k-kubelet,k3k.io/cluster=" + v.name + ",k3k.io/virtual-namespace=" + ns})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if strings.HasPrefix(p.Annotations["k3k.io/virtual-name"], prefix) {
			out = append(out, p)
		}
	}
	return out, nil
}

// watchClient is a client of v without virtualClient's request timeout,
// which would end a watch after seconds.
func watchClient(t *testing.T, v *vcluster) kubernetes.Interface {
	t.Helper()
	rc := restConfig(t, v.kubeconfig)
	rc.Timeout = 0
	return kubernetes.NewForConfigOrDie(rc)
}
