//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPauseKeepsTheData pauses a running sqlite cluster with k3kcli: every
// server and agent pod goes away on the real node, the volume claim stays;
// resume starts the same server on the same volume and what was written
// before the pause is there.
func TestPauseKeepsTheData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := createCluster(t, "pause")
	w := workload{namespace: "before-pause"}
	w.create(t, v.client)
	claims, err := host.CoreV1().PersistentVolumeClaims(v.namespace).List(ctx, metav1.ListOptions{LabelSelector: "k3k.io/cluster=" + v.name})
	if err != nil || len(claims.Items) != 1 {
		t.Fatalf("server volume claims before the pause: %v (%d)", err, len(claims.Items))
	}
	claimUID := claims.Items[0].UID

	out := k3kcli(t, "cluster", "pause", v.name, "-n", v.namespace, "--timeout", "3m")
	if !strings.Contains(out, "paused after") {
		t.Fatalf("pause did not report the cluster paused:\n%s", out)
	}
	pods, err := host.CoreV1().Pods(v.namespace).List(ctx, metav1.ListOptions{LabelSelector: "k3k.io/cluster=" + v.name})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("pod %s still runs while the cluster is paused", p.Name)
		}
	}
	if out := k3kcli(t, "cluster", "list", "-n", v.namespace); !strings.Contains(out, "Paused") {
		t.Errorf("list does not show the phase Paused:\n%s", out)
	}
	claims, err = host.CoreV1().PersistentVolumeClaims(v.namespace).List(ctx, metav1.ListOptions{LabelSelector: "k3k.io/cluster=" + v.name})
	if err != nil || len(claims.Items) != 1 || claims.Items[0].UID != claimUID {
		t.Fatalf("the server volume claim did not survive the pause: %v %+v", err, claims.Items)
	}

	k3kcli(t, "cluster", "resume", v.name, "-n", v.namespace, "--timeout", "4m")
	serving(t, v.client, 2*time.Minute)
	w.check(t, v.client)
}
