package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

func TestApplyPolicyTightensToTheStricterAndReportsWhatItCannot(t *testing.T) {
	c := sampleCluster()
	c.Spec.PodSecurityLevel = v1beta1.PodSecurityPrivileged
	c.Spec.Servers = 3
	c.Spec.Quota = &v1beta1.QuotaConfig{Hard: corev1.ResourceList{"requests.cpu": resource.MustParse("8"), "pods": resource.MustParse("5")}}
	c.Spec.Limits = &v1beta1.LimitsConfig{Default: corev1.ResourceList{"memory": resource.MustParse("1Gi")}}
	c.Spec.StorageClasses = []string{"fast", "slow"}
	p := &v1beta1.VirtualClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team"}, Spec: v1beta1.VirtualClusterPolicySpec{
		AllowedDatastores:                []v1beta1.DatastoreType{v1beta1.SQLiteDatastore},
		MaxServers:                       ptr.To[int32](1),
		PodSecurityLevel:                 v1beta1.PodSecurityRestricted,
		Quota:                            &v1beta1.QuotaConfig{Hard: corev1.ResourceList{"requests.cpu": resource.MustParse("4"), "pods": resource.MustParse("10"), "limits.memory": resource.MustParse("8Gi")}},
		MaxLimits:                        corev1.ResourceList{"memory": resource.MustParse("512Mi"), "cpu": resource.MustParse("2")},
		StorageClasses:                   []string{"fast"},
		MaxTerminationGracePeriodSeconds: ptr.To[int64](30),
	}}
	// The controller's defaults: a quota on limits.memory above the
	// policy's, a max cpu below it.
	d := IsolationDefaults{
		QuotaHard: corev1.ResourceList{"limits.memory": resource.MustParse("16Gi")},
		LimitMax:  corev1.ResourceList{"cpu": resource.MustParse("1")},
	}
	out := applyPolicy(c, p, v1beta1.EtcdDatastore, d)

	q := DesiredQuota(c, d).Spec.Hard
	for name, want := range map[corev1.ResourceName]string{"requests.cpu": "4", "pods": "5", "limits.memory": "8Gi"} {
		if got := q[name]; got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("quota %s = %s, want %s (the smaller of the Cluster's or default and the policy's)", name, got.String(), want)
		}
	}
	lr := DesiredLimitRange(c, d).Spec.Limits[0]
	for name, want := range map[corev1.ResourceName]string{"cpu": "1", "memory": "512Mi"} {
		if got := lr.Max[name]; got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("limits.max %s = %s, want %s", name, got.String(), want)
		}
	}
	if got := lr.Default[corev1.ResourceMemory]; got.Cmp(resource.MustParse("512Mi")) != 0 {
		t.Errorf("limits.default memory = %s, want 512Mi (cut to the max, or the LimitRange refuses every container that sets nothing)", got.String())
	}
	if _, ok := lr.Default[corev1.ResourceCPU]; ok {
		t.Errorf("limits.default got a cpu the Cluster never set: %v", lr.Default)
	}
	if c.Spec.PodSecurityLevel != v1beta1.PodSecurityRestricted || !slices.Equal(c.Spec.StorageClasses, []string{"fast"}) || ptr.Deref(c.Spec.MaxTerminationGracePeriodSeconds, 0) != 30 {
		t.Errorf("spec after the policy: podSecurityLevel %s, storageClasses %v, maxTerminationGracePeriodSeconds %v", c.Spec.PodSecurityLevel, c.Spec.StorageClasses, c.Spec.MaxTerminationGracePeriodSeconds)
	}
	if c.Spec.Servers != 3 {
		t.Errorf("servers changed to %d: the policy may not remove etcd members", c.Spec.Servers)
	}
	ok, reason, msg := out.condition()
	t.Logf("Policy=%v %s: %s", ok, reason, msg)
	if ok || reason != v1beta1.ReasonPolicyBroken {
		t.Errorf("condition %v %s, want False PolicyBroken", ok, reason)
	}
	for _, want := range []string{`"team"`, "datastore etcd is not one of [sqlite]", "servers 3 is more than maxServers 1",
		"podSecurityLevel privileged → restricted", "quota requests.cpu 8 → 4", "quota limits.memory 16Gi → 8Gi", "limits.max memory (none) → 512Mi",
		"limits.default memory 1Gi → 512Mi", "storageClasses [fast slow] → [fast]", "maxTerminationGracePeriodSeconds 300 → 30"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q", want)
		}
	}
	if strings.Contains(msg, "pods") || strings.Contains(msg, "limits.max cpu") {
		t.Errorf("message names a bound the Cluster keeps to: %s", msg)
	}

	// A Cluster that keeps to the policy: nothing tightened, True.
	c2 := sampleCluster()
	c2.Spec.PodSecurityLevel = v1beta1.PodSecurityRestricted
	ok, reason, msg = applyPolicy(c2, &v1beta1.VirtualClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team"}, Spec: v1beta1.VirtualClusterPolicySpec{PodSecurityLevel: v1beta1.PodSecurityBaseline}}, v1beta1.SQLiteDatastore, d).condition()
	if !ok || reason != v1beta1.ReasonPolicyApplied || !strings.Contains(msg, "nothing tightened") || c2.Spec.PodSecurityLevel != v1beta1.PodSecurityRestricted {
		t.Errorf("a stricter Cluster: %v %s %q, level %s", ok, reason, msg, c2.Spec.PodSecurityLevel)
	}
}

// policyNamespace creates a namespace bound to policy (the label), and the
// policy guard bound to that namespace only, so that it does not reach
// other tests' requests, and waits until the guard refuses a Cluster.
func policyNamespace(t *testing.T, policy string) string {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t)
	bindPolicy(t, ns, policy)
	vap, binding := DesiredPolicyGuard("k3k-policy-guard-" + ns)
	binding.Spec.MatchResources.NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": ns}
	for _, obj := range []client.Object{vap, binding} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, obj := range []client.Object{vap, binding} {
			_ = k8s.Delete(context.Background(), obj)
		}
	})
	return ns
}

// bindPolicy labels namespace ns with policy; "" removes the label.
func bindPolicy(t *testing.T, ns, policy string) {
	t.Helper()
	n := &corev1.Namespace{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: ns}, n); err != nil {
		t.Fatal(err)
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if policy == "" {
		delete(n.Labels, v1beta1.LabelPolicyName)
	} else {
		n.Labels[v1beta1.LabelPolicyName] = policy
	}
	if err := k8s.Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}

func createPolicy(t *testing.T, name string, spec v1beta1.VirtualClusterPolicySpec) *v1beta1.VirtualClusterPolicy {
	t.Helper()
	p := &v1beta1.VirtualClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if err := k8s.Create(context.Background(), p); err != nil {
		t.Fatalf("creating VirtualClusterPolicy %s: %v", name, err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
	return p
}

func TestPolicyGuardRefusesAClusterThatBreaksItsPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := fmt.Sprintf("team-%d", nsCounter.Add(1))
	createPolicy(t, name, v1beta1.VirtualClusterPolicySpec{
		AllowedMode:                      v1beta1.SharedMode,
		AllowedDatastores:                []v1beta1.DatastoreType{v1beta1.SQLiteDatastore, v1beta1.EtcdDatastore},
		MaxServers:                       ptr.To[int32](3),
		PodSecurityLevel:                 v1beta1.PodSecurityBaseline,
		Quota:                            &v1beta1.QuotaConfig{Hard: corev1.ResourceList{"requests.cpu": resource.MustParse("4"), "pods": resource.MustParse("20")}},
		MaxLimits:                        corev1.ResourceList{"memory": resource.MustParse("2Gi")},
		StorageClasses:                   []string{"fast"},
		MaxTerminationGracePeriodSeconds: ptr.To[int64](60),
	})
	// Another policy, bound to no namespace here: its evaluation passes.
	createPolicy(t, name+"-other", v1beta1.VirtualClusterPolicySpec{MaxServers: ptr.To[int32](1)})
	ns := policyNamespace(t, name)
	sqlite := func(c *v1beta1.Cluster) { c.Spec.Datastore.Type = v1beta1.SQLiteDatastore }

	// The API server loads policies in the background.
	deadline := time.Now().Add(time.Minute)
	for {
		err := k8s.Create(ctx, newCluster(ns, "probe", sqlite, func(c *v1beta1.Cluster) { c.Spec.MaxTerminationGracePeriodSeconds = ptr.To[int64](61) }))
		if err != nil && strings.Contains(err.Error(), "VirtualClusterPolicy "+name) {
			break
		}
		if err == nil {
			_ = k8s.Delete(ctx, newCluster(ns, "probe"))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy guard never took effect; last answer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	for _, tc := range []struct {
		name   string
		change func(*v1beta1.Cluster)
		want   string
	}{
		{"a datastore the policy does not allow", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.ExternalDatastore
			c.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "postgres://db.example:5432/k3s"}
		}, "spec.datastore.type: VirtualClusterPolicy " + name + " allows datastores sqlite, etcd only, not external"},
		{"no datastore named, where the policy names some", func(c *v1beta1.Cluster) {}, "allows datastores sqlite, etcd only: name one"},
		{"more servers than the policy's", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.EtcdDatastore
			c.Spec.Servers = 5
		}, "spec.servers: VirtualClusterPolicy " + name + " allows at most 3 servers, not 5"},
		{"a looser Pod Security level", func(c *v1beta1.Cluster) { sqlite(c); c.Spec.PodSecurityLevel = v1beta1.PodSecurityPrivileged },
			"spec.podSecurityLevel: VirtualClusterPolicy " + name + " allows no Pod Security level looser than baseline"},
		{"a larger quota", func(c *v1beta1.Cluster) {
			sqlite(c)
			c.Spec.Quota = &v1beta1.QuotaConfig{Hard: corev1.ResourceList{"requests.cpu": resource.MustParse("8"), "pods": resource.MustParse("20"), "services": resource.MustParse("100")}}
		}, "spec.quota.hard: VirtualClusterPolicy " + name + " bounds quota.hard: requests.cpu 8 > 4"},
		{"a larger container max", func(c *v1beta1.Cluster) {
			sqlite(c)
			c.Spec.Limits = &v1beta1.LimitsConfig{Max: corev1.ResourceList{"memory": resource.MustParse("4Gi")}}
		}, "spec.limits.max: VirtualClusterPolicy " + name + " bounds limits.max: memory 4Gi > 2Gi"},
		{"a storage class the policy does not name", func(c *v1beta1.Cluster) { sqlite(c); c.Spec.StorageClasses = []string{"fast", "slow"} },
			"spec.storageClasses: VirtualClusterPolicy " + name + " allows storage classes fast only, not slow"},
		{"a longer grace period", func(c *v1beta1.Cluster) { sqlite(c); c.Spec.MaxTerminationGracePeriodSeconds = ptr.To[int64](600) },
			"spec.maxTerminationGracePeriodSeconds: VirtualClusterPolicy " + name + " allows at most 60, not 600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := k8s.Create(ctx, newCluster(ns, "breaks", tc.change))
			if err == nil {
				_ = k8s.Delete(ctx, newCluster(ns, "breaks"))
				t.Fatalf("created; want refused with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with %v; want %q", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}

	t.Run("a Cluster that keeps to the policy is created", func(t *testing.T) {
		c := newCluster(ns, "keeps", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.EtcdDatastore
			c.Spec.Servers = 3
			c.Spec.PodSecurityLevel = v1beta1.PodSecurityRestricted
			c.Spec.Quota = &v1beta1.QuotaConfig{Hard: corev1.ResourceList{"requests.cpu": resource.MustParse("4000m"), "services": resource.MustParse("100")}}
			c.Spec.StorageClasses = []string{"fast"}
			c.Spec.MaxTerminationGracePeriodSeconds = ptr.To[int64](60)
		})
		if err := k8s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a Cluster made before its namespace was bound can still change what keeps to the policy, and nothing else", func(t *testing.T) {
		old := newNamespace(t)
		vap, binding := DesiredPolicyGuard("k3k-policy-guard-" + old)
		binding.Spec.MatchResources.NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": old}
		for _, obj := range []client.Object{vap, binding} {
			if err := k8s.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
		}
		c := newCluster(old, "before", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.EtcdDatastore
			c.Spec.Servers = 7
			c.Spec.PodSecurityLevel = v1beta1.PodSecurityPrivileged
			c.Spec.Quota = &v1beta1.QuotaConfig{Hard: corev1.ResourceList{"requests.cpu": resource.MustParse("16")}}
		})
		if err := k8s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		bindPolicy(t, old, name)
		update := func(change func(*v1beta1.Cluster)) error {
			cur := &v1beta1.Cluster{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
				t.Fatal(err)
			}
			change(cur)
			return k8s.Update(ctx, cur)
		}
		// Until the guard sees the label: raising the quota is refused.
		deadline := time.Now().Add(time.Minute)
		for {
			err := update(func(c *v1beta1.Cluster) { c.Spec.Quota.Hard["requests.cpu"] = resource.MustParse("32") })
			if err != nil && strings.Contains(err.Error(), "requests.cpu 32 > 4") {
				t.Logf("raising what breaks the policy: refused: %v", err)
				break
			}
			if err == nil {
				_ = update(func(c *v1beta1.Cluster) { c.Spec.Quota.Hard["requests.cpu"] = resource.MustParse("16") })
			}
			if time.Now().After(deadline) {
				t.Fatalf("raising the quota past the policy of a bound namespace was never refused; last answer: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := update(func(c *v1beta1.Cluster) { c.Spec.Paused = true }); err != nil {
			t.Errorf("pausing it (nothing of what breaks the policy changed): %v", err)
		}
		if err := update(func(c *v1beta1.Cluster) { c.Spec.Servers = 5 }); err != nil {
			t.Errorf("scaling it down towards the policy: %v", err)
		}
		if err := update(func(c *v1beta1.Cluster) { c.Spec.Servers = 7 }); err == nil || !strings.Contains(err.Error(), "allows at most 3 servers, not 7") {
			t.Errorf("scaling it up again: %v, want refused", err)
		}
	})
}

func TestPolicyTightensAClusterMadeBeforeIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, writes := newReconciler(t)
	ns := newNamespace(t)
	c := createCluster(t, newCluster(ns, "early", func(c *v1beta1.Cluster) {
		c.Spec.PodSecurityLevel = v1beta1.PodSecurityBaseline
		c.Spec.Quota = &v1beta1.QuotaConfig{Hard: corev1.ResourceList{"requests.cpu": resource.MustParse("8")}}
		c.Spec.StorageClasses = []string{"fast", "slow"}
	}))
	reconcileOnce(t, r, c)
	if cond := meta.FindStatusCondition(getCluster(t, c).Status.Conditions, v1beta1.ConditionPolicy); cond != nil {
		t.Fatalf("Policy condition without a binding: %+v", cond)
	}

	name := fmt.Sprintf("tight-%d", nsCounter.Add(1))
	bindPolicy(t, ns, name)
	reconcileOnce(t, r, c)
	cond := condition(t, c, v1beta1.ConditionPolicy)
	if cond.Status != metav1.ConditionFalse || cond.Reason != v1beta1.ReasonPolicyNotFound || !strings.Contains(cond.Message, name) {
		t.Errorf("bound to a policy that does not exist: %+v", cond)
	}

	p := createPolicy(t, name, v1beta1.VirtualClusterPolicySpec{
		AllowedDatastores:                []v1beta1.DatastoreType{v1beta1.EtcdDatastore},
		Quota:                            &v1beta1.QuotaConfig{Hard: corev1.ResourceList{"requests.cpu": resource.MustParse("4"), "pods": resource.MustParse("10")}},
		PodSecurityLevel:                 v1beta1.PodSecurityRestricted,
		StorageClasses:                   []string{"fast"},
		MaxTerminationGracePeriodSeconds: ptr.To[int64](30),
	})
	reconcileOnce(t, r, c)
	quota := &corev1.ResourceQuota{}
	get(t, c, IsolationNamesFor(c).Quota, quota)
	for res, want := range map[corev1.ResourceName]string{"requests.cpu": "4", "pods": "10"} {
		if got := quota.Spec.Hard[res]; got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("ResourceQuota %s = %s, want the policy's %s", res, got.String(), want)
		}
	}
	agent := &appsv1.Deployment{}
	get(t, c, layout.AgentName(c.Name), agent)
	args := agent.Spec.Template.Spec.Containers[0].Command
	for _, want := range []string{"--pod-security-level=restricted", "--storage-classes=fast", "--max-termination-grace-period-seconds=30"} {
		if !slices.Contains(args, want) {
			t.Errorf("agent args lack %s: %v", want, args)
		}
	}
	// Applied again, the same policy writes nothing.
	before := writes.count()
	reconcileOnce(t, r, c)
	if n := writes.count() - before; n != 0 {
		t.Errorf("a second reconcile under the same policy made %d writes", n)
	}
	cl := getCluster(t, c)
	if b := cl.Status.PolicyBounds; b == nil || b.PodSecurityLevel != v1beta1.PodSecurityRestricted || ptr.Deref(b.MaxTerminationGracePeriodSeconds, 0) != 30 {
		t.Errorf("status.policyBounds %+v, want restricted and 30 s for the agent guard", b)
	}
	if cl.Status.PolicyName != name {
		t.Errorf("status.policyName %q, want %q", cl.Status.PolicyName, name)
	}
	if got := cl.Spec.Quota.Hard["requests.cpu"]; got.Cmp(resource.MustParse("8")) != 0 || len(cl.Spec.StorageClasses) != 2 {
		t.Errorf("the stored spec changed: %+v", cl.Spec)
	}
	cond = condition(t, c, v1beta1.ConditionPolicy)
	t.Logf("Policy=%s %s: %s", cond.Status, cond.Reason, cond.Message)
	if cond.Status != metav1.ConditionFalse || cond.Reason != v1beta1.ReasonPolicyBroken ||
		!strings.Contains(cond.Message, "datastore sqlite is not one of [etcd]") || !strings.Contains(cond.Message, "quota requests.cpu 8 → 4") ||
		!strings.Contains(cond.Message, "podSecurityLevel baseline → restricted") {
		t.Errorf("Policy condition %+v", cond)
	}

	// The policy allows what the Cluster runs on now: True, still tightened.
	p.Spec.AllowedDatastores = nil
	if err := k8s.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	if cond := condition(t, c, v1beta1.ConditionPolicy); cond.Status != metav1.ConditionTrue || cond.Reason != v1beta1.ReasonPolicyApplied || !strings.Contains(cond.Message, "storageClasses [fast slow] → [fast]") {
		t.Errorf("Policy condition %+v", cond)
	}

	// Unbound: the Cluster's own choices again, no condition.
	bindPolicy(t, ns, "")
	reconcileOnce(t, r, c)
	get(t, c, IsolationNamesFor(c).Quota, quota)
	if got := quota.Spec.Hard["requests.cpu"]; got.Cmp(resource.MustParse("8")) != 0 {
		t.Errorf("ResourceQuota requests.cpu = %s after unbinding, want the Cluster's 8", got.String())
	}
	if _, ok := quota.Spec.Hard["pods"]; ok {
		t.Errorf("ResourceQuota keeps the policy's pods after unbinding: %v", quota.Spec.Hard)
	}
	cl = getCluster(t, c)
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1beta1.ConditionPolicy); cond != nil || cl.Status.PolicyName != "" || cl.Status.PolicyBounds != nil {
		t.Errorf("after unbinding: condition %+v, policyName %q", cond, cl.Status.PolicyName)
	}
}

func getCluster(t *testing.T, c *v1beta1.Cluster) *v1beta1.Cluster {
	t.Helper()
	cl := &v1beta1.Cluster{}
	get(t, c, c.Name, cl)
	return cl
}
