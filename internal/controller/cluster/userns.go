package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// User namespaces for the workloads: whether an agent runs its pods with
// hostUsers: false (translate.Config.UserNamespaces), decided per Cluster
// from the host administrator's choice and, for auto, from what the nodes
// report. Root in a container of such a pod is an unprivileged user on the
// node, so a kernel bug reached through the container's capabilities acts on
// nothing the node owns. A kubelet whose runtime cannot (containerd before
// 2.0, runc before 1.2) refuses every such pod, which is why auto looks
// before it turns them on. Pure, like desired.go, but for
// CheckUserNamespacesAccess, which asks the API server once at start.

// UserNamespacesMode is the host administrator's choice
// (--agent-user-namespaces, the chart's sharedAgent.userNamespaces).
type UserNamespacesMode string

const (
	// UserNamespacesOff: pods keep the node's users. The zero value, so an
	// AgentDefaults without the choice adds nothing to agents' command lines.
	UserNamespacesOff UserNamespacesMode = ""
	// UserNamespacesAuto: on for a Cluster while every node its workloads
	// may run on reports that its default runtime handler supports them
	// (Node status.runtimeHandlers), off otherwise. The chart's default.
	UserNamespacesAuto UserNamespacesMode = "auto"
	// UserNamespacesOn: on whatever the nodes report (for a controller that
	// may not read Nodes; a kubelet that cannot refuses the pods).
	UserNamespacesOn UserNamespacesMode = "true"
)

// ParseUserNamespacesMode reads the flag's value: auto, true or false.
func ParseUserNamespacesMode(s string) (UserNamespacesMode, error) {
	switch s {
	case "auto":
		return UserNamespacesAuto, nil
	case "true":
		return UserNamespacesOn, nil
	case "false":
		return UserNamespacesOff, nil
	}
	return "", fmt.Errorf("%q: want auto, true or false", s)
}

// userNamespacesCondition decides whether the agent runs its pods in user
// namespaces (ok), with the reason and message of ConditionUserNamespaces.
// nodes are the host's Nodes; only read for auto.
func userNamespacesCondition(mode UserNamespacesMode, nodes []corev1.Node) condResult {
	switch mode {
	case UserNamespacesOn:
		return condResult{true, v1beta1.ReasonUserNamespacesRequired,
			"the host administrator runs every workload in a user namespace (sharedAgent.userNamespaces true)"}
	case UserNamespacesAuto:
	default:
		return condResult{false, v1beta1.ReasonUserNamespacesDisabled,
			"workloads keep the node's users: the host administrator turned user namespaces off (sharedAgent.userNamespaces false)"}
	}
	var eligible int
	var lacking []string
	for i := range nodes {
		if !runsWorkloads(&nodes[i]) {
			continue
		}
		eligible++
		if !supportsUserNamespaces(&nodes[i]) {
			lacking = append(lacking, nodes[i].Name)
		}
	}
	if eligible == 0 {
		return condResult{false, v1beta1.ReasonUserNamespacesUnsupported,
			"workloads keep the node's users: no node can run them yet to tell whether its runtime supports user namespaces"}
	}
	if len(lacking) > 0 {
		sort.Strings(lacking)
		shown := strings.Join(lacking[:min(3, len(lacking))], ", ")
		if len(lacking) > 3 {
			shown += fmt.Sprintf(" and %d more", len(lacking)-3)
		}
		return condResult{false, v1beta1.ReasonUserNamespacesUnsupported,
			"workloads keep the node's users: these nodes' runtimes report no user namespace support (status.runtimeHandlers; containerd 2.0 and runc 1.2 or newer do): " + shown}
	}
	return condResult{true, v1beta1.ReasonUserNamespacesSupported,
		fmt.Sprintf("every workload runs in a user namespace: every node that may run them (%d) reports runtime support", eligible)}
}

// runsWorkloads says whether the host scheduler may place a workload there:
// the agent gives its pods no tolerations and no node selector, so a node
// that is cordoned or carries a NoSchedule or NoExecute taint (a control
// plane, a node not ready) gets none.
func runsWorkloads(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	return true
}

// supportsUserNamespaces says whether n's default runtime handler reports
// user namespace support, which the kubelet checks before it runs a pod with
// hostUsers: false.
func supportsUserNamespaces(n *corev1.Node) bool {
	for _, h := range n.Status.RuntimeHandlers {
		if h.Name == "" {
			return h.Features != nil && ptr.Deref(h.Features.UserNamespaces, false)
		}
	}
	return false
}

// trimNode keeps of a Node only what userNamespacesCondition and node-loss
// handling (its Ready condition) read, so the controller's cache does not
// hold every node's image list and other conditions. Without the Ready
// condition every node looked lost to node-loss handling (the first
// three-node e2e run of 2026-12-07 showed it: "not Ready since" the node's
// creation, on a node that was Ready).
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	var ready []corev1.NodeCondition
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = append(ready, corev1.NodeCondition{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime})
		}
	}
	return &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Generation: n.Generation,
			CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp,
		},
		Spec:   corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
		Status: corev1.NodeStatus{RuntimeHandlers: n.Status.RuntimeHandlers, Conditions: ready},
	}, nil
}

// readsNodes says whether the controller reads Nodes: only to decide user
// namespaces with auto, and only when it deploys agents (the chart grants
// reading Nodes only then).
func (c Config) readsNodes() bool {
	return c.AgentImage != "" && c.Agent.UserNamespaces == UserNamespacesAuto
}

// watchesNodes says whether Node changes are watched: for user namespaces
// (readsNodes) or node-loss handling (NodeLossTimeout, nodeloss.go).
func (c Config) watchesNodes() bool {
	return c.readsNodes() || c.NodeLossTimeout > 0
}

// CheckUserNamespacesAccess says, before the manager starts, whether the
// controller may read what auto decides from: it lists and watches Nodes.
// Without that right the Node informer never syncs and the manager stops
// after its cache timeout with only "timed out waiting for cache to be
// synced for Kind *v1.Node"; this names the right and the two ways out.
// Nothing to check unless agents are configured and the mode is auto.
func CheckUserNamespacesAccess(ctx context.Context, c client.Client, cfg Config) error {
	if !cfg.readsNodes() {
		return nil
	}
	return checkNodeReads(ctx, c, "--agent-user-namespaces=auto", "--agent-user-namespaces=auto reads the Nodes' runtime support",
		"rbac.create and sharedAgent.userNamespaces auto", "set --agent-user-namespaces (sharedAgent.userNamespaces) to true or false")
}

// checkNodeReads asks whether the controller may list and watch Nodes, which
// flag needs, and says otherwise: what flag does with them (need), the
// chart values that grant the right (chart), and the way out (remedy).
func checkNodeReads(ctx context.Context, c client.Client, flag, need, chart, remedy string) error {
	denied, err := deniedListWatch(ctx, c, "", "nodes")
	if err != nil {
		return fmt.Errorf("asking whether this controller may read Nodes (%s reads them): %w", flag, err)
	}
	if len(denied) > 0 {
		return fmt.Errorf("%s, but this controller may not %s Nodes: grant it get, list and watch on nodes (the chart's ClusterRole <release>-nodes, made with %s), or %s",
			need, strings.Join(denied, " or "), chart, remedy)
	}
	return nil
}

// deniedListWatch asks the host which of list and watch on the
// cluster-scoped resource of group the controller is denied: the verbs an
// informer needs, without which it never syncs.
func deniedListWatch(ctx context.Context, c client.Client, group, resource string) ([]string, error) {
	var denied []string
	for _, verb := range []string{"list", "watch"} {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource},
		}}
		if err := c.Create(ctx, review); err != nil {
			return nil, err
		}
		if !review.Status.Allowed {
			denied = append(denied, verb)
		}
	}
	return denied, nil
}
