package cluster

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

func mustList(t *testing.T, s string) corev1.ResourceList {
	t.Helper()
	l, err := ParseResourceList(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestParseResourceList(t *testing.T) {
	l := mustList(t, " pods=50, requests.cpu=8,requests.memory=16Gi ,")
	if len(l) != 3 || l.Pods().Value() != 50 || l.Name("requests.cpu", resource.DecimalSI).Value() != 8 {
		t.Fatalf("parsed %v", l)
	}
	if l := mustList(t, ""); len(l) != 0 {
		t.Fatalf("empty string parsed to %v", l)
	}
	for _, bad := range []string{"pods", "pods=lots", "=5", "pods=-1"} {
		if _, err := ParseResourceList(bad); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

func TestDesiredQuotaAndLimits(t *testing.T) {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	if DesiredQuota(c, IsolationDefaults{}) != nil || DesiredLimitRange(c, IsolationDefaults{}) != nil {
		t.Fatal("a quota or LimitRange without any setting")
	}
	d := IsolationDefaults{
		QuotaHard:           mustList(t, "pods=50,requests.cpu=8"),
		LimitDefaultRequest: mustList(t, "cpu=50m,memory=64Mi"),
		LimitMax:            mustList(t, "memory=8Gi"),
	}
	c.Spec.Quota = &v1beta1.QuotaConfig{Hard: resources("pods", "5", "services", "3")}
	c.Spec.Limits = &v1beta1.LimitsConfig{DefaultRequest: resources("memory", "128Mi")}
	q := DesiredQuota(c, d)
	if q.Name != "k3k-a-quota" || q.Namespace != "ns" || q.Labels[v1beta1.LabelCluster] != "a" {
		t.Fatalf("quota meta %+v", q.ObjectMeta)
	}
	want := corev1.ResourceList{"pods": resource.MustParse("5"), "services": resource.MustParse("3"), "requests.cpu": resource.MustParse("8")}
	if len(q.Spec.Hard) != len(want) {
		t.Fatalf("hard %v, want %v (the spec replaces defaults name by name)", q.Spec.Hard, want)
	}
	for k, v := range want {
		if got := q.Spec.Hard[k]; got.Cmp(v) != 0 {
			t.Errorf("hard[%s] = %s, want %s", k, got.String(), v.String())
		}
	}
	lr := DesiredLimitRange(c, d)
	item := lr.Spec.Limits[0]
	if lr.Name != "k3k-a-limits" || item.Type != corev1.LimitTypeContainer || item.DefaultRequest.Memory().String() != "128Mi" ||
		item.DefaultRequest.Cpu().String() != "50m" || item.Max.Memory().String() != "8Gi" || item.Default != nil {
		t.Fatalf("LimitRange %+v", lr.Spec)
	}
	// The defaults are not changed by a Cluster's merge.
	if d.QuotaHard.Pods().Value() != 50 {
		t.Fatal("merging changed the defaults")
	}
}

func TestDesiredNetworkPolicies(t *testing.T) {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	d := IsolationDefaults{EgressCIDRs: []string{"0.0.0.0/0", "192.168.0.0/16"}, EgressExcept: []string{"10.96.0.0/16", "10.244.0.0/16", "fd00::/8"}, ControllerNamespace: "k3k-system"}
	ps := DesiredNetworkPolicies(c, d)
	if len(ps) != 3 {
		t.Fatalf("%d policies, want 3", len(ps))
	}
	byName := map[string]*networkingv1.NetworkPolicy{}
	for _, p := range ps {
		byName[p.Name] = p
	}
	w := byName["k3k-a-workloads"]
	if w == nil || w.Spec.PodSelector.MatchLabels[v1beta1.LabelManagedBy] != "k3k-kubelet" || w.Spec.PodSelector.MatchLabels[v1beta1.LabelCluster] != "a" {
		t.Fatalf("workload policy does not select the agent's pods of cluster a: %+v", w)
	}
	if !slices.Equal(w.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("workload policy types %v", w.Spec.PolicyTypes)
	}
	// Egress: own workloads (any port), own servers' API port only, own
	// agent's DNS port only, then the outside blocks without the host networks.
	e := w.Spec.Egress
	if len(e) != 4 || e[0].To[0].PodSelector.MatchLabels[v1beta1.LabelManagedBy] != "k3k-kubelet" || len(e[0].Ports) != 0 {
		t.Fatalf("egress %+v", e)
	}
	if e[1].To[0].PodSelector.MatchLabels[v1beta1.LabelComponent] != v1beta1.ComponentServer || len(e[1].Ports) != 1 || e[1].Ports[0].Port.IntVal != layout.APIPort {
		t.Errorf("egress to the servers %+v, want the API port only", e[1])
	}
	if e[2].To[0].PodSelector.MatchLabels[v1beta1.LabelComponent] != v1beta1.ComponentAgent || len(e[2].Ports) != 2 || e[2].Ports[0].Port.IntVal != layout.AgentDNSPort {
		t.Errorf("egress to the agent %+v, want its DNS port only", e[2])
	}
	blocks := e[3].To
	if len(blocks) != 2 || blocks[0].IPBlock.CIDR != "0.0.0.0/0" || !slices.Equal(blocks[0].IPBlock.Except, []string{"10.244.0.0/16", "10.96.0.0/16"}) ||
		blocks[1].IPBlock.CIDR != "192.168.0.0/16" || len(blocks[1].IPBlock.Except) != 0 {
		t.Errorf("egress blocks %+v, want each with only the excepts inside it", blocks)
	}
	s := byName["k3k-a-server"]
	if s == nil || s.Spec.PodSelector.MatchLabels[v1beta1.LabelComponent] != v1beta1.ComponentServer || !slices.Equal(s.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Fatalf("server policy %+v", s)
	}
	open := map[int32]bool{}
	for _, r := range s.Spec.Ingress {
		for _, p := range r.Ports {
			open[p.Port.IntVal] = true
		}
		if len(r.Ports) == 0 {
			t.Errorf("server ingress rule without ports opens everything: %+v", r)
		}
	}
	for _, closed := range []int32{layout.DatastoreHealthPort, layout.DatastoreMetricsPort, layout.PublisherHealthPort} {
		if open[closed] {
			t.Errorf("server port %d is open to the network", closed)
		}
	}
	if !open[layout.APIPort] || !open[layout.DatastoreClientPort] || !open[layout.DatastorePeerPort] {
		t.Errorf("server ports open %v, want the API and etcd ports", open)
	}
	if got := s.Spec.Ingress[2].From[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName]; got != "k3k-system" {
		t.Errorf("etcd client port open to namespace %q, want the controller's", got)
	}
	if byName["k3k-a-agent"] == nil {
		t.Fatal("no agent policy")
	}

	// Off by the chart's default, on by the spec; off by the spec.
	if DesiredNetworkPolicies(c, IsolationDefaults{DisableNetworkPolicy: true}) != nil {
		t.Error("policies made with the default off")
	}
	c.Spec.NetworkPolicy = &v1beta1.NetworkPolicyConfig{Enabled: ptr.To(true)}
	if len(DesiredNetworkPolicies(c, IsolationDefaults{DisableNetworkPolicy: true})) != 3 {
		t.Error("spec.networkPolicy.enabled true did not win over the default")
	}
	c.Spec.NetworkPolicy.Enabled = ptr.To(false)
	if DesiredNetworkPolicies(c, IsolationDefaults{}) != nil {
		t.Error("spec.networkPolicy.enabled false did not turn them off")
	}
}

// isolationConfig is testConfig with quota and limit defaults.
func isolationConfig(t *testing.T) Config {
	cfg := testConfig
	cfg.Isolation = IsolationDefaults{
		QuotaHard:           mustList(t, "pods=20,requests.cpu=4,requests.memory=8Gi"),
		LimitDefaultRequest: mustList(t, "cpu=50m,memory=64Mi"),
		LimitMax:            mustList(t, "memory=8Gi"),
		EgressCIDRs:         []string{"0.0.0.0/0"},
		EgressExcept:        []string{"10.244.0.0/16", "10.96.0.0/16"},
		ControllerNamespace: "k3k-system",
	}
	return cfg
}

// TestIsolationObjectsAreAppliedAndKept runs the reconciler against the real
// kube-apiserver (which validates every object): the quota, LimitRange and
// policies are made, a steady state writes nothing, a spec change reaches
// them, and turning the policies off removes them.
func TestIsolationObjectsAreAppliedAndKept(t *testing.T) {
	ctx := context.Background()
	r, writes := newReconciler(t)
	r.Config = isolationConfig(t)
	c := createCluster(t, newCluster(newNamespace(t), "fenced"))
	reconcileOnce(t, r, c)
	reconcileOnce(t, r, c)
	n := IsolationNamesFor(c)
	objs := map[string]interface {
		GetResourceVersion() string
	}{}
	q, lr := &corev1.ResourceQuota{}, &corev1.LimitRange{}
	get(t, c, n.Quota, q)
	get(t, c, n.LimitRange, lr)
	objs["quota"], objs["limits"] = q, lr
	for _, name := range []string{n.WorkloadPolicy, n.ServerPolicy, n.AgentPolicy} {
		p := &networkingv1.NetworkPolicy{}
		get(t, c, name, p)
		objs[name] = p
		if !metav1.IsControlledBy(p, c) {
			t.Errorf("NetworkPolicy %s is not owned by the Cluster", name)
		}
	}
	if q.Spec.Hard.Pods().Value() != 20 || lr.Spec.Limits[0].DefaultRequest.Cpu().String() != "50m" {
		t.Fatalf("quota %v, limits %v: defaults not applied", q.Spec.Hard, lr.Spec.Limits)
	}

	// Steady state: no writes, no changed resourceVersions.
	before := map[string]string{}
	for k, o := range objs {
		before[k] = o.GetResourceVersion()
	}
	start := writes.count()
	reconcileOnce(t, r, c)
	reconcileOnce(t, r, c)
	if d := writes.count() - start; d != 0 {
		t.Fatalf("%d writes in two steady-state reconciles", d)
	}
	q2 := &corev1.ResourceQuota{}
	get(t, c, n.Quota, q2)
	if q2.ResourceVersion != before["quota"] {
		t.Fatal("the quota was written in a steady state")
	}

	// A spec change reaches the quota; turning the policies off removes them.
	live := &v1beta1.Cluster{}
	get(t, c, c.Name, live)
	live.Spec.Quota = &v1beta1.QuotaConfig{Hard: resources("pods", "3")}
	live.Spec.NetworkPolicy = &v1beta1.NetworkPolicyConfig{Enabled: ptr.To(false)}
	if err := k8s.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, live)
	get(t, c, n.Quota, q2)
	if q2.Spec.Hard.Pods().Value() != 3 || q2.Spec.Hard.Name("requests.cpu", resource.DecimalSI).Value() != 4 {
		t.Fatalf("quota after the change %v, want pods 3 over the default requests.cpu 4", q2.Spec.Hard)
	}
	for _, name := range []string{n.WorkloadPolicy, n.ServerPolicy, n.AgentPolicy} {
		err := k8s.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &networkingv1.NetworkPolicy{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("NetworkPolicy %s still there after spec.networkPolicy.enabled false (err %v)", name, err)
		}
	}
	start = writes.count()
	reconcileOnce(t, r, live)
	if d := writes.count() - start; d != 0 {
		t.Fatalf("%d writes in a steady state with the policies off", d)
	}
}

// TestIsolationLeavesOthersObjectsAlone: a NetworkPolicy of the same name that
// the Cluster does not own is not deleted when the Cluster turns its off.
func TestIsolationLeavesOthersObjectsAlone(t *testing.T) {
	ctx := context.Background()
	r, _ := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "neighbour", func(c *v1beta1.Cluster) {
		c.Spec.NetworkPolicy = &v1beta1.NetworkPolicyConfig{Enabled: ptr.To(false)}
	}))
	theirs := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: IsolationNamesFor(c).WorkloadPolicy}}
	if err := k8s.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: theirs.Name}, &networkingv1.NetworkPolicy{}); err != nil {
		t.Fatalf("someone else's NetworkPolicy was removed: %v", err)
	}
}
