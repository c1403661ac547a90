//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// TestMigrateSQLiteToEtcd is the migration drill: a SQLite cluster with
// ConfigMaps and a Deployment the agent runs on the host, `k3kcli cluster
// migrate --to etcd --servers 3` → every ConfigMap with its content, the
// cluster an etcd cluster of 3 ready servers, the Deployment's pod still
// running on the host as the same host pod (the migration makes only the
// server pods again; the agent and its host pods stay, and the virtual
// pod's object, copied with the data, keeps its UID), the cluster writable.
// The downtime (how long the virtual API answered nothing, sampled every
// 250 ms) is logged.
func TestMigrateSQLiteToEtcd(t *testing.T) {
	t.Parallel()
	v := createCluster(t, "migrate", "--datastore", "sqlite", "--persistence-type", "dynamic")
	waitAgentNode(t, v)
	const ns = "drill"
	w := workload{namespace: ns}
	w.create(t, v.client)
	writeKept(t, v.client, ns, "object", 50)
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.AppsV1().Deployments(ns).Create(ctx, clientDeployment(ns), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var hostPod *corev1.Pod
	eventually(t, 3*time.Minute, "the agent's host pod of Deployment client, running", func(ctx context.Context) (bool, error) {
		hostPod = runningHostPod(ctx, v, ns, "client-")
		return hostPod != nil, nil
	})
	before := contents(keptObjects(t, v.client))

	probe := startDowntimeProbe(v.client)
	start := time.Now()
	k3kcliWithin(t, 15*time.Minute, "cluster", "migrate", v.name, "-n", v.namespace, "--to", "etcd", "--servers", "3", "--yes", "--timeout", "14m")
	down, longest := probe.stop()
	t.Logf("migrated to etcd with 3 servers after %s; the virtual API answered nothing for %s in all, %s at the longest stretch (sampled every 250 ms)",
		time.Since(start).Round(time.Second), down.Round(time.Millisecond), longest.Round(time.Millisecond))

	c := &v1beta1.Cluster{}
	if err := clusterClient(t).Get(context.Background(), client.ObjectKey{Namespace: v.namespace, Name: v.name}, c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.Datastore.Type != v1beta1.EtcdDatastore || c.Spec.Datastore.MigrateFrom != "" || c.Spec.Servers != 3 || c.Annotations[v1beta1.AnnotationRestorePending] != "" {
		t.Fatalf("after the migration: datastore %q, migrateFrom %q, servers %d, restore-pending %q", c.Spec.Datastore.Type, c.Spec.Datastore.MigrateFrom, c.Spec.Servers, c.Annotations[v1beta1.AnnotationRestorePending])
	}
	if c.Status.Datastore == nil || c.Status.Datastore.Type != v1beta1.EtcdDatastore {
		t.Fatalf("status.datastore %+v, want etcd", c.Status.Datastore)
	}

	if after := contents(keptObjects(t, v.client)); !maps.Equal(before, after) {
		t.Fatalf("the migrated cluster holds other objects than before:\nbefore %v\nafter  %v", before, after)
	}
	t.Logf("objects before and after the migration: %d", len(before))
	w.check(t, v.client)

	// The same host pod, still running: the agent kept it through the
	// downtime and found the same virtual pod when the API came back.
	eventually(t, 2*time.Minute, "host pod "+hostPod.Name+" of before the migration to be running, the same pod", func(ctx context.Context) (bool, error) {
		p, err := host.CoreV1().Pods(v.namespace).Get(ctx, hostPod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.UID != hostPod.UID || p.DeletionTimestamp != nil {
			return false, fmt.Errorf("host pod %s was made again or is being deleted: the workload was restarted", hostPod.Name)
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})

	writes := workload{namespace: "written-after-migration"}
	writes.create(t, v.client)
	writes.check(t, v.client)
}

// runningHostPod is the agent's running host copy of a virtual pod in ns
// whose name starts with prefix, or nil.
func runningHostPod(ctx context.Context, v *vcluster, ns, prefix string) *corev1.Pod {
	list, err := host.CoreV1().Pods(v.namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=k3k-kubelet,k3k.io/cluster=" + v.name + ",k3k.io/virtual-namespace=" + ns})
	if err != nil {
		return nil
	}
	for i := range list.Items {
		p := &list.Items[i]
		if strings.HasPrefix(p.Annotations["k3k.io/virtual-name"], prefix) && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p
		}
	}
	return nil
}

// downtimeProbe asks the virtual API for /readyz every 250 ms and adds up
// the time during which it did not answer ok.
type downtimeProbe struct {
	done    chan struct{}
	wg      sync.WaitGroup
	down    time.Duration
	longest time.Duration
}

func startDowntimeProbe(c kubernetes.Interface) *downtimeProbe {
	p := &downtimeProbe{done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		var since time.Time // when the current stretch without an answer began
		for {
			select {
			case <-p.done:
				if !since.IsZero() {
					p.add(time.Since(since))
				}
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1*time.Second)
			_, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			cancel()
			switch {
			case err != nil && since.IsZero():
				since = time.Now()
			case err == nil && !since.IsZero():
				p.add(time.Since(since))
				since = time.Time{}
			}
		}
	}()
	return p
}

func (p *downtimeProbe) add(d time.Duration) {
	p.down += d
	p.longest = max(p.longest, d)
}

// stop ends the probe and returns the total time without an answer and the
// longest stretch of it.
func (p *downtimeProbe) stop() (total, longest time.Duration) {
	close(p.done)
	p.wg.Wait()
	return p.down, p.longest
}
