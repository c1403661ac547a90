//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// writeKept writes n ConfigMaps labelled e2e=kept into namespace ns.
func writeKept(t *testing.T, c kubernetes.Interface, ns, prefix string, n int) {
	t.Helper()
	for i := range n {
		if err := retry(func(ctx context.Context) error {
			_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%03d", prefix, i), Labels: map[string]string{"e2e": "kept"}},
				Data:       map[string]string{"value": fmt.Sprintf("%s-%d", prefix, i)},
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}); err != nil {
			t.Fatalf("writing object %d: %v", i, err)
		}
	}
}

// contents drops the resourceVersions of keptObjects' answer: a restore into
// a new cluster keeps what objects hold, not their revisions.
func contents(objs map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range objs {
		_, value, _ := strings.Cut(v, " ")
		out[k] = value
	}
	return out
}

// TestRestoreIntoANewCluster: objects written, a snapshot taken
// (k3kcli cluster snapshot), more objects written, then `k3kcli cluster
// create --restore-from` in another namespace → exactly the snapshot's
// objects with their content, none written after it, the source's token,
// and the new cluster accepts writes.
func TestRestoreIntoANewCluster(t *testing.T) {
	t.Parallel()
	restoreIntoANewCluster(t, "restore-src", "restored")
}

// TestRestoreIntoANewEtcdCluster restores a SQLite cluster's snapshot into a
// new cluster of three etcd servers: the data is loaded into member 0 while
// the others join, and what a restore reads does not depend on where it
// writes.
func TestRestoreIntoANewEtcdCluster(t *testing.T) {
	t.Parallel()
	restoreIntoANewCluster(t, "restore-src-2", "restored-ha", "--servers", "3", "--datastore", "etcd", "--timeout", "15m")
}

func restoreIntoANewCluster(t *testing.T, srcName, dstName string, dstFlags ...string) {
	src := createCluster(t, srcName, "--datastore", "sqlite", "--persistence-type", "dynamic")
	w := workload{namespace: "restore-data"}
	w.create(t, src.client)
	writeKept(t, src.client, w.namespace, "object", 50)
	before := contents(keptObjects(t, src.client))
	file := filepath.Join(cfg.workDir, srcName+".snapshot")
	k3kcli(t, "cluster", "snapshot", src.name, "-n", src.namespace, "-o", file)
	writeKept(t, src.client, w.namespace, "after-snapshot", 5)
	token := secretData(t, src, src.tokenSecret())

	ctx := context.Background()
	v := &vcluster{name: dstName, namespace: "e2e-" + dstName, kubeconfig: filepath.Join(cfg.workDir, dstName+".kubeconfig")}
	if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v.namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpPod(t, v)
			return
		}
		_ = host.CoreV1().Namespaces().Delete(context.Background(), v.namespace, metav1.DeleteOptions{})
	})
	start := time.Now()
	k3kcli(t, append([]string{"cluster", "create", v.name, "-n", v.namespace, "--restore-from", file, "--expose", "nodeport",
		"--timeout", "10m", "--output-kubeconfig", v.kubeconfig}, dstFlags...)...)
	t.Logf("restored cluster ready after %s", time.Since(start).Round(time.Millisecond))
	v.client = virtualClient(t, v.kubeconfig)

	after := contents(keptObjects(t, v.client))
	t.Logf("objects in the snapshot: %d; in the restored cluster: %d", len(before), len(after))
	if len(before) != 50 || !maps.Equal(before, after) {
		t.Fatalf("the restored cluster holds other objects than the snapshot:\nsnapshot %v\nrestored %v", before, after)
	}
	w.check(t, v.client)
	if got := secretData(t, v, v.tokenSecret()); !equalData(got, token) {
		t.Fatal("the restored cluster's token is not the snapshot's")
	}
	c := clusterClient(t)
	if cond := condition(t, c, v, "TokenReady"); cond.Status != metav1.ConditionTrue {
		t.Fatalf("TokenReady %+v", cond)
	}
	writes := workload{namespace: "written-after-restore"}
	writes.create(t, v.client)
	writes.check(t, v.client)
}
