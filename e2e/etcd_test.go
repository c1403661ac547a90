//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// TestEtcdHA is scenario 6: a 3-server cluster on etcd (every server pod runs a
// member named after the pod, reached by its DNS name). Each server pod deleted
// in turn comes back on a new IP as the same member, while a client's requests
// through the Service never fail once a replacement is Ready; every server pod deleted at once
// (a host reboot) comes back with no manual step; scale 3 → 1 → 3, twice,
// removes and adds members one at a time without losing quorum (scenario c of
// issue 16). The workload written at the start must be there after every step.
func TestEtcdHA(t *testing.T) {
	t.Parallel()
	v := createCluster(t, "ha", "--servers", "3", "--datastore", "etcd", "--timeout", "15m")
	crc := clusterClient(t)
	members := waitMembers(t, crc, v, 3, 10*time.Minute)
	t.Logf("etcd members: %v", members)
	w := workload{namespace: "ha-data"}
	w.create(t, v.client)

	// Was two scenarios, each with a cluster of its own (TestEtcdHA deleted
	// one pod, TestReadinessHAServersDeletedOneByOne all three in turn under
	// requests); one cluster now carries what both asserted.
	t.Run("each server pod deleted in turn rejoins on a new IP as the same member, and no request fails once it is Ready", func(t *testing.T) {
		rollingServerDeletion(t, v, crc, members)
		w.check(t, v.client)
	})

	t.Run("every server pod is deleted at once and the cluster comes back by itself", func(t *testing.T) {
		var olds []*corev1.Pod
		for i := range 3 {
			olds = append(olds, getPod(t, v, fmt.Sprintf("k3k-ha-server-%d", i)))
		}
		start := time.Now()
		for _, p := range olds {
			if err := host.CoreV1().Pods(v.namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range olds {
			waitPodReplaced(t, v, p, 10*time.Minute)
		}
		after := waitMembers(t, crc, v, 3, 10*time.Minute)
		if !maps.Equal(after, members) {
			t.Fatalf("members changed from %v to %v after a full restart", members, after)
		}
		serving(t, v.client, 5*time.Minute)
		t.Logf("all three server pods replaced; quorum and the virtual API back after %s", time.Since(start).Round(time.Second))
		w.check(t, v.client)
	})

	// Was its own scenario, with a cluster of its own: 3 → 1 → 3 twice, the
	// first scale-down the one this scenario checked before.
	t.Run("scale 3 to 1 to 3, twice: members removed and added one at a time, no datastore restart", func(t *testing.T) {
		scaleThreeOneThreeTwice(t, v, crc, members, w)
	})
}

// clusterClient reads Cluster objects on the host.
func clusterClient(t *testing.T) client.Client {
	t.Helper()
	rc := restConfig(t, cfg.hostKubeconfig)
	scheme := runtime.NewScheme()
	if err := v1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitMembers waits until the Cluster's status lists exactly n voting members,
// all healthy, one leading, and the datastore ready; it returns name → id.
func waitMembers(t *testing.T, crc client.Client, v *vcluster, n int, timeout time.Duration) map[string]string {
	t.Helper()
	var got map[string]string
	var last string
	eventually(t, timeout, fmt.Sprintf("%d healthy etcd members", n), func(ctx context.Context) (bool, error) {
		c := &v1beta1.Cluster{}
		if err := crc.Get(ctx, client.ObjectKey{Namespace: v.namespace, Name: v.name}, c); err != nil {
			return false, err
		}
		ds := c.Status.Datastore
		if ds == nil {
			return false, nil
		}
		if now := fmt.Sprintf("%+v quorum %+v", ds.Members, ds.Quorum); now != last {
			t.Logf("etcd status: %s", now) // each change, to explain a timeout
			last = now
		}
		leaders := 0
		got = map[string]string{}
		for _, m := range ds.Members {
			if m.Learner || !m.Healthy {
				return false, nil
			}
			if m.Leader {
				leaders++
			}
			got[m.Name] = m.ID
		}
		ready := slices.ContainsFunc(c.Status.Conditions, func(c metav1.Condition) bool {
			return c.Type == "DatastoreReady" && c.Status == metav1.ConditionTrue
		})
		return len(ds.Members) == n && leaders == 1 && ready, nil
	})
	return got
}

// etcdClusterWithWorkload creates a virtual cluster name with three etcd
// servers, waits for three healthy members and writes a workload into
// namespace <name>-data; it returns the cluster, a client for Cluster objects,
// the members by pod name and the workload to check later.
func etcdClusterWithWorkload(t *testing.T, name string) (*vcluster, client.Client, map[string]string, workload) {
	t.Helper()
	v := createCluster(t, name, "--servers", "3", "--datastore", "etcd", "--timeout", "15m")
	crc := clusterClient(t)
	members := waitMembers(t, crc, v, 3, 10*time.Minute)
	w := workload{namespace: name + "-data"}
	w.create(t, v.client)
	return v, crc, members, w
}
