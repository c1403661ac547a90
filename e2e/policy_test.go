//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// TestVirtualClusterPolicy: a policy made and bound with k3kcli on the host
// the chart installed. A Cluster made before the binding is tightened by the
// controller (its ResourceQuota, its agent's Pod Security level, its Policy
// condition), with nothing of the Cluster changed, only because the
// namespace's label and the policy changed; a Cluster that breaks the policy
// is refused by the host API with the policy's name; unbinding gives the
// first its own choices back. The Cluster is paused (SQLite): every host
// object is made, no server runs.
func TestVirtualClusterPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ns, policy = "e2e-vcp", "e2e-team"
	if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		_, _ = runK3kcli(time.Minute, "policy", "delete", policy, "--unbind")
		_ = host.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	crc := clusterClient(t)
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "early"}, Spec: v1beta1.ClusterSpec{
		Paused:    true,
		Datastore: v1beta1.DatastoreConfig{Type: v1beta1.SQLiteDatastore},
		Quota:     &v1beta1.QuotaConfig{Hard: corev1.ResourceList{"requests.cpu": resource.MustParse("8")}},
	}}
	if err := crc.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	quotaCPU := func(want string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			q, err := host.CoreV1().ResourceQuotas(ns).Get(ctx, "k3k-early-quota", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got := q.Spec.Hard["requests.cpu"]
			return got.Cmp(resource.MustParse(want)) == 0, nil
		}
	}
	eventually(t, time.Minute, "the Cluster's own ResourceQuota, requests.cpu 8", quotaCPU("8"))

	start := time.Now()
	out := k3kcli(t, "policy", "create", policy, "--datastores", "sqlite", "--max-servers", "1", "--pod-security-level", "restricted",
		"--quota", "requests.cpu=2,pods=20", "--bind", ns)
	if !strings.Contains(out, "namespace "+ns+": bound to VirtualClusterPolicy "+policy) {
		t.Errorf("k3kcli did not say the namespace was bound:\n%s", out)
	}
	eventually(t, time.Minute, "the ResourceQuota tightened to the policy's requests.cpu 2", quotaCPU("2"))
	eventually(t, time.Minute, "the agent at the policy's Pod Security level", func(ctx context.Context) (bool, error) {
		d, err := host.AppsV1().Deployments(ns).Get(ctx, "k3k-early-kubelet", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return slices.Contains(d.Spec.Template.Spec.Containers[0].Command, "--pod-security-level=restricted"), nil
	})
	var cond *metav1.Condition
	eventually(t, time.Minute, "the Policy condition", func(ctx context.Context) (bool, error) {
		cur := &v1beta1.Cluster{}
		if err := crc.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
			return false, err
		}
		cond = meta.FindStatusCondition(cur.Status.Conditions, v1beta1.ConditionPolicy)
		return cond != nil && cond.Status == metav1.ConditionTrue && cur.Status.PolicyName == policy, nil
	})
	t.Logf("tightened %s after binding: Policy=%s %s: %s", time.Since(start).Round(time.Millisecond), cond.Status, cond.Reason, cond.Message)
	// pods: the chart's default quota (or none) cut to the policy's.
	for _, want := range []string{"quota requests.cpu 8 → 2", "quota pods ", " → 20", "podSecurityLevel baseline → restricted"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("the Policy condition does not say %q", want)
		}
	}
	stored := &v1beta1.Cluster{}
	if err := crc.Get(ctx, client.ObjectKeyFromObject(c), stored); err != nil {
		t.Fatal(err)
	}
	if got := stored.Spec.Quota.Hard["requests.cpu"]; got.Cmp(resource.MustParse("8")) != 0 || stored.Spec.PodSecurityLevel != v1beta1.PodSecurityBaseline {
		t.Errorf("the stored spec changed: quota %v, level %s", stored.Spec.Quota.Hard, stored.Spec.PodSecurityLevel)
	}
	t.Logf("k3kcli policy describe:\n%s", k3kcli(t, "policy", "describe", policy))

	// Refused by the host API, naming the policy.
	out, err := runK3kcli(time.Minute, "cluster", "create", "ha", "-n", ns, "--datastore", "etcd", "--servers", "3", "--wait=false")
	t.Logf("k3kcli cluster create ha --datastore etcd --servers 3: %v\n%s", err, out)
	if err == nil || !strings.Contains(out, "VirtualClusterPolicy "+policy) || !strings.Contains(out, "allows datastores sqlite only, not etcd") {
		t.Errorf("a Cluster that breaks the policy was not refused with the policy's name")
	}
	if err := crc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ha"}, &v1beta1.Cluster{}); err == nil {
		t.Errorf("Cluster ha exists")
	}
	// A change of the policy reaches the Cluster by itself.
	vcp := &v1beta1.VirtualClusterPolicy{}
	if err := crc.Get(ctx, client.ObjectKey{Name: policy}, vcp); err != nil {
		t.Fatal(err)
	}
	vcp.Spec.Quota.Hard["requests.cpu"] = resource.MustParse("3")
	if err := crc.Update(ctx, vcp); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the ResourceQuota following the policy's change to requests.cpu 3", quotaCPU("3"))

	// Raising the quota of the Cluster made before: refused too.
	if err := crc.Get(ctx, client.ObjectKeyFromObject(c), stored); err != nil {
		t.Fatal(err)
	}
	stored.Spec.Quota.Hard["requests.cpu"] = resource.MustParse("16")
	if err := crc.Update(ctx, stored); err == nil || !strings.Contains(err.Error(), "requests.cpu 16 > 3") {
		t.Errorf("raising the quota past the policy: %v, want refused", err)
	} else {
		t.Logf("raising the quota: refused: %v", err)
	}

	k3kcli(t, "policy", "unbind", ns)
	eventually(t, time.Minute, "the Cluster's own requests.cpu 8 after unbinding", quotaCPU("8"))
}
