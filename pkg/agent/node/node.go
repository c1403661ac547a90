// Package node registers the agent as a node of the virtual cluster and keeps
// it alive: a Lease in kube-node-lease renewed every few seconds (what the node
// lifecycle controller watches to decide a node is alive), and the Node object
// with its capacity, addresses and a Ready condition, updated when something
// changes and at least every StatusInterval, as kubelet does.
//
// Run never gives up: while the virtual API server is unreachable it logs and
// tries again on the next tick, so the node comes back Ready by itself once the
// server returns. A Node deleted by someone is created again.
package node

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// LeaseNamespace is where kubelets keep their heartbeat Leases.
const LeaseNamespace = "kube-node-lease"

// Labels on the virtual node. LabelVirtual lets users select or avoid it.
const (
	LabelVirtual = "k3k.io/virtual-kubelet"
	// ReasonReady is the Ready condition's reason, as kubelet writes it.
	ReasonReady = "KubeletReady"
)

// Config describes the node.
type Config struct {
	// Name is the Node's name.
	Name string
	// InternalIP is the address reported for the node (the agent pod's IP).
	InternalIP string
	// KubeletPort is advertised as the kubelet endpoint (logs, exec).
	KubeletPort int32
	// Capacity is reported as capacity and allocatable. Defaults: 8 CPUs, 32Gi
	// memory, 110 pods.
	Capacity corev1.ResourceList
	// Labels are added to the defaults.
	Labels map[string]string
	// Version is reported as the kubelet version.
	Version string
	// LeaseDuration is the Lease's duration; it is renewed every quarter of it.
	// Default 40s, like kubelet.
	LeaseDuration time.Duration
	// StatusInterval bounds how long the Node's status goes unwritten. Default
	// one minute (kubelet's is five; the Lease is the liveness signal).
	StatusInterval time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Node keeps one virtual node registered.
type Node struct {
	cfg Config

	mu          sync.Mutex
	lastRenew   time.Time
	lastStatus  time.Time
	lastErr     error
	transitions time.Time
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Node, error) {
	if cfg.Name == "" {
		return nil, errors.New("node: name is required")
	}
	if cfg.Capacity == nil {
		cfg.Capacity = corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("8"),
			corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Version == "" {
		cfg.Version = "v0.0.0-k3k"
	}
	return &Node{cfg: cfg}, nil
}

// Capacity is the allocatable the node advertises; the agent admits pods
// within it (podsync).
func (n *Node) Capacity() corev1.ResourceList { return n.cfg.Capacity.DeepCopy() }

// Healthy reports whether the Lease was renewed within its duration.
func (n *Node) Healthy() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lastRenew.IsZero() || n.cfg.Now().Sub(n.lastRenew) > n.cfg.LeaseDuration {
		if n.lastErr != nil {
			return fmt.Errorf("node lease not renewed: %w", n.lastErr)
		}
		return errors.New("node lease not renewed yet")
	}
	return nil
}

// Desired is the Node as the agent reports it. readySince is when the Ready
// condition last became true; heartbeat is now.
func Desired(cfg Config, readySince, heartbeat time.Time) *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname":           cfg.Name,
		"kubernetes.io/os":                 "linux",
		"kubernetes.io/arch":               runtime.GOARCH,
		"kubernetes.io/role":               "agent",
		"node.kubernetes.io/instance-type": "k3k-virtual",
		LabelVirtual:                       "true",
	}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	addresses := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: cfg.Name}}
	if cfg.InternalIP != "" {
		addresses = append([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: cfg.InternalIP}}, addresses...)
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{
			Type: t, Status: s, Reason: reason, Message: msg,
			LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(readySince),
		}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: cfg.Name, Labels: labels},
		Status: corev1.NodeStatus{
			Capacity:    cfg.Capacity.DeepCopy(),
			Allocatable: cfg.Capacity.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Addresses:   addresses,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionTrue, ReasonReady, "k3k agent is posting ready status"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "memory is the host's concern"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "disk is the host's concern"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "PIDs are the host's concern"),
				cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", "pods use the host network"),
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: cfg.KubeletPort}},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:  cfg.Version,
				OperatingSystem: "linux",
				Architecture:    runtime.GOARCH,
			},
		},
	}
}

// DesiredLease is the node's heartbeat Lease, owned by the Node so it goes
// with it.
func DesiredLease(cfg Config, node *corev1.Node, renew time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: cfg.Name, Namespace: LeaseNamespace},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(cfg.Name),
			LeaseDurationSeconds: ptr.To(int32(cfg.LeaseDuration / time.Second)),
			RenewTime:            &metav1.MicroTime{Time: renew},
		},
	}
	if node != nil && node.UID != "" {
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
	}
	return l
}

// Run registers the node and renews its Lease until ctx ends. Errors are
// logged and retried on the next tick; Run returns only when ctx ends.
func (n *Node) Run(ctx context.Context, client kubernetes.Interface) {
	log := logr.FromContextOrDiscard(ctx).WithValues("node", n.cfg.Name)
	tick := time.NewTicker(n.cfg.LeaseDuration / 4)
	defer tick.Stop()
	for {
		err := n.Sync(ctx, client)
		n.mu.Lock()
		n.lastErr = err
		n.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			log.Info("node heartbeat failed; retrying", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Sync makes one pass: the Node exists with current status (written when it
// changed or StatusInterval passed), and the Lease is renewed.
func (n *Node) Sync(ctx context.Context, client kubernetes.Interface) error {
	now := n.cfg.Now()
	n.mu.Lock()
	if n.transitions.IsZero() {
		n.transitions = now
	}
	since, lastStatus := n.transitions, n.lastStatus
	n.mu.Unlock()

	want := Desired(n.cfg, since, now)
	node, err := client.CoreV1().Nodes().Get(ctx, n.cfg.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		node, err = client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("registering node: %w", err)
		}
		lastStatus = time.Time{}
	case err != nil:
		return fmt.Errorf("reading node: %w", err)
	default:
		if !labelsContain(node.Labels, want.Labels) {
			node.Labels = mergeLabels(node.Labels, want.Labels)
			if node, err = client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating node labels: %w", err)
			}
		}
	}
	if lastStatus.IsZero() || now.Sub(lastStatus) >= n.cfg.StatusInterval || statusChanged(node, want) {
		node.Status = want.Status
		if node, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating node status: %w", err)
		}
		n.mu.Lock()
		n.lastStatus = now
		n.mu.Unlock()
	}
	if err := n.renewLease(ctx, client, node, now); err != nil {
		return err
	}
	n.mu.Lock()
	n.lastRenew = now
	n.mu.Unlock()
	return nil
}

func (n *Node) renewLease(ctx context.Context, client kubernetes.Interface, node *corev1.Node, now time.Time) error {
	leases := client.CoordinationV1().Leases(LeaseNamespace)
	want := DesiredLease(n.cfg, node, now)
	lease, err := leases.Get(ctx, n.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err := leases.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading node lease: %w", err)
	}
	lease.Spec = want.Spec
	lease.OwnerReferences = want.OwnerReferences
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renewing node lease: %w", err)
	}
	return nil
}

// statusChanged compares what the agent reports, ignoring heartbeat times.
func statusChanged(live, want *corev1.Node) bool {
	strip := func(s corev1.NodeStatus) corev1.NodeStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastHeartbeatTime = metav1.Time{}
			s.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		s.Images, s.VolumesAttached, s.VolumesInUse = nil, nil, nil
		return s
	}
	return !equality.Semantic.DeepEqual(strip(live.Status), strip(want.Status))
}

func labelsContain(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func mergeLabels(have, want map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range have {
		out[k] = v
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}
