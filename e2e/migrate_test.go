//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// TestMigrateSQLiteToEtcd is the migration drill, through a plain update of
// the Cluster's spec (no k3kcli): a SQLite cluster with ConfigMaps and a
// Deployment the agent runs on the host, then spec.datastore.type etcd and
// servers 3 in one patch → the controller's Migrating steps, then every
// ConfigMap with its content, the cluster an etcd cluster of 3 ready
// servers, the Deployment's pod still running on the host as the same host
// pod (the migration makes only server pod 0 again; the agent and its host
// pods stay, and the virtual pod's object, copied with the data, keeps its
// UID), a watch from a resourceVersion of before the migration told to
// relist (410), and the cluster writable. The downtime (how long the
// virtual API answered nothing, sampled every 250 ms) is logged.
func TestMigrateSQLiteToEtcd(t *testing.T) {
	t.Parallel()
	const ns = "drill"
	v, hostPod, before := sqliteClusterToMigrate(t, "migrate", ns, 50)
	var oldRV string
	if err := retry(func(ctx context.Context) error {
		list, err := v.client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			oldRV = list.ResourceVersion
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	probe := startDowntimeProbe(v.client)
	start := time.Now()
	cl := clusterClient(t)
	c := &v1beta1.Cluster{}
	key := client.ObjectKey{Namespace: v.namespace, Name: v.name}
	if err := cl.Get(context.Background(), key, c); err != nil {
		t.Fatal(err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"servers":3,"datastore":{"type":"etcd"}}}`))
	if err := cl.Patch(context.Background(), c, patch); err != nil {
		t.Fatalf("the migration's spec change was refused: %v", err)
	}
	var steps []string
	eventually(t, 15*time.Minute, "the migration to etcd with 3 ready servers", func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, key, c); err != nil {
			return false, nil
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, v1beta1.ConditionMigrating)
		if cond != nil && (len(steps) == 0 || !strings.HasPrefix(steps[len(steps)-1], cond.Reason)) {
			steps = append(steps, fmt.Sprintf("%s after %s", cond.Reason, time.Since(start).Round(time.Second)))
			t.Logf("Migrating=%s %s: %s", cond.Status, cond.Reason, cond.Message)
		}
		return cond == nil && c.Status.Datastore != nil && c.Status.Datastore.Type == v1beta1.EtcdDatastore &&
			meta.IsStatusConditionTrue(c.Status.Conditions, v1beta1.ConditionReady) && c.Status.ReadyServers == 3, nil
	})
	down, longest := probe.stop()
	t.Logf("migrated to etcd with 3 servers after %s (steps: %s); the virtual API answered nothing for %s in all, %s at the longest stretch (sampled every 250 ms)",
		time.Since(start).Round(time.Second), strings.Join(steps, ", "), down.Round(time.Millisecond), longest.Round(time.Millisecond))
	if len(steps) == 0 || !strings.HasPrefix(steps[0], v1beta1.ReasonMigrationLoadingEtcd) {
		t.Errorf("the Migrating steps seen: %v; want %s first", steps, v1beta1.ReasonMigrationLoadingEtcd)
	}
	if c.Status.Datastore.MigratedFrom != v1beta1.SQLiteDatastore {
		t.Errorf("status.datastore %+v, want migratedFrom sqlite", c.Status.Datastore)
	}
	checkMigrated(t, v, before, hostPod)
	checkRelist(t, v, ns, oldRV)

	// No way back after the switch.
	back := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"servers":1,"datastore":{"type":"sqlite"}}}`))
	if err := cl.Patch(context.Background(), c, back); err == nil || !strings.Contains(err.Error(), "has not switched") {
		t.Fatalf("datastore.type back to sqlite after the switch: %v, want it refused", err)
	}
}

// TestMigrateSQLiteToEtcdWithK3kcli: the same migration through `k3kcli
// cluster migrate --to etcd`, to one etcd server (the cheap run: the
// growth is the other drill's) → every ConfigMap with its content, the
// workload's host pod the same, writable.
func TestMigrateSQLiteToEtcdWithK3kcli(t *testing.T) {
	t.Parallel()
	const ns = "drill"
	v, hostPod, before := sqliteClusterToMigrate(t, "migrate-cli", ns, 20)
	probe := startDowntimeProbe(v.client)
	start := time.Now()
	out := k3kcliWithin(t, 15*time.Minute, "cluster", "migrate", v.name, "-n", v.namespace, "--to", "etcd", "--servers", "1", "--yes", "--timeout", "14m")
	down, longest := probe.stop()
	t.Logf("k3kcli migrated to etcd with 1 server after %s; the virtual API answered nothing for %s in all, %s at the longest stretch; k3kcli said: %s",
		time.Since(start).Round(time.Second), down.Round(time.Millisecond), longest.Round(time.Millisecond), strings.TrimSpace(out))
	c := &v1beta1.Cluster{}
	if err := clusterClient(t).Get(context.Background(), client.ObjectKey{Namespace: v.namespace, Name: v.name}, c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.Datastore.Type != v1beta1.EtcdDatastore || c.Status.Datastore == nil || c.Status.Datastore.Type != v1beta1.EtcdDatastore {
		t.Fatalf("after k3kcli cluster migrate: spec %q, status %+v", c.Spec.Datastore.Type, c.Status.Datastore)
	}
	checkMigrated(t, v, before, hostPod)
}

// checkMigrated: every kept ConfigMap with its content, the workload's
// objects, the same host pod running, and a write accepted.
func checkMigrated(t *testing.T, v *vcluster, before map[string]string, hostPod *corev1.Pod) {
	t.Helper()
	if after := contents(keptObjects(t, v.client)); !maps.Equal(before, after) {
		t.Fatalf("the migrated cluster holds other objects than before:\nbefore %v\nafter  %v", before, after)
	}
	t.Logf("objects before and after the migration: %d", len(before))
	(&workload{namespace: "drill"}).check(t, v.client)

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

// checkRelist: a watch from rv, a resourceVersion of before the migration,
// is told to relist (410 Gone or Expired), not served etcd's history under
// numbers the client saw from SQLite.
func checkRelist(t *testing.T, v *vcluster, ns, rv string) {
	t.Helper()
	eventually(t, time.Minute, "a watch from resourceVersion "+rv+" of before the migration to be told to relist", func(ctx context.Context) (bool, error) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		wi, err := v.client.CoreV1().ConfigMaps(ns).Watch(wctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return true, nil
			}
			return false, nil // the API answered nothing yet
		}
		defer wi.Stop()
		select {
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return false, nil
			}
			if ev.Type == watch.Error {
				if st, isStatus := ev.Object.(*metav1.Status); isStatus && st.Code == http.StatusGone {
					t.Logf("a watch from resourceVersion %s: %s", rv, st.Message)
					return true, nil
				}
			}
			return false, fmt.Errorf("a watch from resourceVersion %s of before the migration got a %s event, not 410 Gone", rv, ev.Type)
		case <-wctx.Done():
			return false, fmt.Errorf("a watch from resourceVersion %s of before the migration was neither refused nor served", rv)
		}
	})
}

// sqliteClusterToMigrate makes what both migration drills start from: a
// SQLite cluster on a volume with the agent's node, the workload, as many
// kept ConfigMaps as objects in the virtual namespace ns, and Deployment
// client running on the host. It returns the cluster, the host pod of Deployment client and
// the content of the kept objects.
func sqliteClusterToMigrate(t *testing.T, name, ns string, objects int) (*vcluster, *corev1.Pod, map[string]string) {
	t.Helper()
	v := createCluster(t, name, "--datastore", "sqlite", "--persistence-type", "dynamic")
	waitAgentNode(t, v)
	w := workload{namespace: ns}
	w.create(t, v.client)
	writeKept(t, v.client, ns, "object", objects)
	createClientDeployment(t, v, ns)
	hostPod := waitClientHostPod(t, v, ns)
	return v, hostPod, contents(keptObjects(t, v.client))
}

// createClientDeployment creates Deployment client (clientDeployment) in
// the virtual namespace ns; one that exists already is fine, so a retried
// create that did land is no failure.
func createClientDeployment(t *testing.T, v *vcluster, ns string) {
	t.Helper()
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.AppsV1().Deployments(ns).Create(ctx, clientDeployment(ns), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// waitClientHostPod waits up to 3 minutes for the agent's running host pod
// of Deployment client in the virtual namespace ns.
func waitClientHostPod(t *testing.T, v *vcluster, ns string) *corev1.Pod {
	t.Helper()
	var hostPod *corev1.Pod
	eventually(t, 3*time.Minute, "the agent's host pod of Deployment client, running", func(ctx context.Context) (bool, error) {
		hostPod = runningHostPod(ctx, v, ns, "client-")
		return hostPod != nil, nil
	})
	return hostPod
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
