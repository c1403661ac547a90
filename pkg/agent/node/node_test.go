package node

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

func testConfig(t *testing.T) Config {
	t.Helper()
	n, err := New(Config{Name: "k3k-c1-kubelet", InternalIP: "10.1.2.3", KubeletPort: 10250, Labels: map[string]string{"zone": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	return n.cfg
}

func TestDesiredNode(t *testing.T) {
	cfg := testConfig(t)
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := Desired(cfg, since, since.Add(time.Minute))

	if n.Labels["kubernetes.io/hostname"] != "k3k-c1-kubelet" || n.Labels["zone"] != "a" || n.Labels[LabelVirtual] != "true" {
		t.Errorf("labels %v", n.Labels)
	}
	want := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	if diff := cmp.Diff(want.Pods().String(), n.Status.Allocatable.Pods().String()); diff != "" || !n.Status.Capacity.Cpu().Equal(*want.Cpu()) {
		t.Errorf("capacity %v allocatable %v", n.Status.Capacity, n.Status.Allocatable)
	}
	if diff := cmp.Diff([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.2.3"}, {Type: corev1.NodeHostName, Address: "k3k-c1-kubelet"}}, n.Status.Addresses); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
	if n.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("kubelet port %d", n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}
	ready := n.Status.Conditions[0]
	if ready.Type != corev1.NodeReady || ready.Status != corev1.ConditionTrue || !ready.LastTransitionTime.Time.Equal(since) {
		t.Errorf("ready condition %+v", ready)
	}
	if len(n.Spec.Taints) != 0 {
		t.Errorf("taints %v: the only node of a shared-mode cluster must take every pod", n.Spec.Taints)
	}
}

func TestStatusChangedIgnoresHeartbeats(t *testing.T) {
	cfg := testConfig(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		live   *corev1.Node
		want   *corev1.Node
		change bool
	}{
		{"only heartbeat times moved", Desired(cfg, t0, t0), Desired(cfg, t0, t0.Add(time.Hour)), false},
		{"the address changed (agent pod rescheduled)", Desired(cfg, t0, t0), Desired(Config{Name: cfg.Name, InternalIP: "10.9.9.9", KubeletPort: 10250, Capacity: cfg.Capacity, Version: cfg.Version}, t0, t0), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusChanged(tc.live, tc.want); got != tc.change {
				t.Errorf("statusChanged = %v, want %v", got, tc.change)
			}
		})
	}
}

func TestDesiredLeaseIsOwnedByTheNode(t *testing.T) {
	cfg := testConfig(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := Desired(cfg, now, now)
	n.UID = types.UID("node-uid")
	l := DesiredLease(cfg, n, now)
	if l.Namespace != LeaseNamespace || *l.Spec.HolderIdentity != cfg.Name || *l.Spec.LeaseDurationSeconds != 40 || !l.Spec.RenewTime.Time.Equal(now) {
		t.Errorf("lease %+v", l)
	}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("owners %v", l.OwnerReferences)
	}
}

func TestHealthy(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n, err := New(Config{Name: "n", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if n.Healthy() == nil {
		t.Error("healthy before the first renewal")
	}
	n.lastRenew = now.Add(-10 * time.Second)
	if err := n.Healthy(); err != nil {
		t.Errorf("renewed 10s ago: %v", err)
	}
	n.lastRenew = now.Add(-time.Minute)
	if n.Healthy() == nil {
		t.Error("healthy a minute after the last renewal, past the 40s lease")
	}
}
