package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/testenv"
)

// node is a Node named name whose default runtime handler reports user
// namespace support as userns (nil: the kubelet reports no handlers, as
// before 1.30), changed by change.
func node(name string, userns *bool, change ...func(*corev1.Node)) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if userns != nil {
		n.Status.RuntimeHandlers = []corev1.NodeRuntimeHandler{
			{Name: "", Features: &corev1.NodeRuntimeHandlerFeatures{UserNamespaces: userns}},
			{Name: "runc", Features: &corev1.NodeRuntimeHandlerFeatures{UserNamespaces: userns}},
		}
	}
	for _, c := range change {
		c(&n)
	}
	return n
}

func TestUserNamespacesCondition(t *testing.T) {
	yes, no := ptr.To(true), ptr.To(false)
	taint := func(effect corev1.TaintEffect) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: effect}} }
	}
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	onlyOtherHandler := func(n *corev1.Node) { n.Status.RuntimeHandlers = n.Status.RuntimeHandlers[1:] }
	cases := []struct {
		name   string
		mode   UserNamespacesMode
		nodes  []corev1.Node
		ok     bool
		reason string
		says   string
	}{
		{"off", UserNamespacesOff, []corev1.Node{node("a", yes)}, false, v1beta1.ReasonUserNamespacesDisabled, "turned user namespaces off"},
		{"on, whatever the nodes say", UserNamespacesOn, []corev1.Node{node("a", no)}, true, v1beta1.ReasonUserNamespacesRequired, "sharedAgent.userNamespaces true"},
		{"auto, every node supports them", UserNamespacesAuto, []corev1.Node{node("a", yes), node("b", yes)}, true, v1beta1.ReasonUserNamespacesSupported, "may run them (2) reports"},
		{"auto, one node does not", UserNamespacesAuto, []corev1.Node{node("a", yes), node("b", no)}, false, v1beta1.ReasonUserNamespacesUnsupported, "support (status.runtimeHandlers; containerd 2.0 and runc 1.2 or newer do): b"},
		{"auto, a kubelet that reports no handlers", UserNamespacesAuto, []corev1.Node{node("old", nil)}, false, v1beta1.ReasonUserNamespacesUnsupported, "do): old"},
		{"auto, only another handler supports them", UserNamespacesAuto, []corev1.Node{node("a", yes, onlyOtherHandler)}, false, v1beta1.ReasonUserNamespacesUnsupported, "do): a"},
		{"auto, a tainted or cordoned node without support runs no workload", UserNamespacesAuto,
			[]corev1.Node{node("a", yes), node("cp", no, taint(corev1.TaintEffectNoSchedule)), node("gone", no, taint(corev1.TaintEffectNoExecute)), node("drained", no, cordoned)},
			true, v1beta1.ReasonUserNamespacesSupported, "may run them (1) reports"},
		{"auto, a PreferNoSchedule taint still runs workloads", UserNamespacesAuto, []corev1.Node{node("a", yes), node("b", no, taint(corev1.TaintEffectPreferNoSchedule))},
			false, v1beta1.ReasonUserNamespacesUnsupported, "do): b"},
		{"auto, no node", UserNamespacesAuto, nil, false, v1beta1.ReasonUserNamespacesUnsupported, "no node can run them yet"},
		{"auto, many nodes without: three named and a count", UserNamespacesAuto,
			[]corev1.Node{node("n5", no), node("n1", no), node("n4", no), node("n2", no), node("n3", yes)},
			false, v1beta1.ReasonUserNamespacesUnsupported, "do): n1, n2, n4 and 1 more"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := userNamespacesCondition(tc.mode, tc.nodes)
			if got.ok != tc.ok || got.reason != tc.reason || !strings.Contains(got.message, tc.says) {
				t.Errorf("got %+v, want ok=%v reason %s saying %q", got, tc.ok, tc.reason, tc.says)
			}
		})
	}
}

func TestParseUserNamespacesMode(t *testing.T) {
	for in, want := range map[string]UserNamespacesMode{"auto": UserNamespacesAuto, "true": UserNamespacesOn, "false": UserNamespacesOff} {
		if got, err := ParseUserNamespacesMode(in); err != nil || got != want {
			t.Errorf("%q: got %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "yes", "Auto"} {
		if _, err := ParseUserNamespacesMode(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// TestTrimNodeKeepsWhatTheDecisionReads: the cache's copy of a Node gives
// the same user namespace and node-loss decisions as the Node, without its
// images and other conditions.
func TestTrimNodeKeepsWhatTheDecisionReads(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC))
	n := node("a", ptr.To(true), func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectPreferNoSchedule}, outOfServiceTaint}
		n.Status.Images = []corev1.ContainerImage{{Names: []string{"big"}}}
		n.Status.Conditions = []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: since, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."},
		}
		n.Labels = map[string]string{"x": "y"}
	})
	out, err := trimNode(&n)
	if err != nil {
		t.Fatal(err)
	}
	tn := out.(*corev1.Node)
	if tn.Name != "a" || len(tn.Status.Images) != 0 || len(tn.Status.Conditions) != 1 || tn.Status.Conditions[0].Message != "" || len(tn.Labels) != 0 {
		t.Errorf("kept too much: %+v", tn)
	}
	if runsWorkloads(tn) != runsWorkloads(&n) || supportsUserNamespaces(tn) != supportsUserNamespaces(&n) || !supportsUserNamespaces(tn) {
		t.Errorf("the trimmed Node decides otherwise: %+v", tn)
	}
	gotSince, gotReady := notReadySince(tn)
	if gotReady || !gotSince.Equal(since.Time) || !outOfService(tn) {
		t.Errorf("the trimmed Node reads Ready=%v since %v, out of service %v; want not Ready since %v, out of service", gotReady, gotSince, outOfService(tn), since.Time)
	}
}

// TestCheckUserNamespacesAccess asks a real kube-apiserver as a controller
// without rights on Nodes, then with the chart's nodes rule: refused naming
// the verbs and the two ways out, then allowed; nothing is asked unless the
// mode is auto and agents are configured.
func TestCheckUserNamespacesAccess(t *testing.T) {
	ctx := context.Background()
	controller, grant := controllerWithoutNodeReads(t)
	auto := Config{AgentImage: "k3k-io/k3k-kubelet:dev", Agent: AgentDefaults{UserNamespaces: UserNamespacesAuto}}

	err := CheckUserNamespacesAccess(ctx, controller, auto)
	for _, want := range []string{"may not list or watch Nodes", "get, list and watch on nodes", "to true or false"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("without rights: err = %v, want it to contain %q", err, want)
		}
	}
	for _, c := range []Config{
		{AgentImage: auto.AgentImage, Agent: AgentDefaults{UserNamespaces: UserNamespacesOn}},
		{AgentImage: auto.AgentImage},
		{Agent: auto.Agent},
	} {
		if err := CheckUserNamespacesAccess(ctx, controller, c); err != nil {
			t.Errorf("mode %q, agent image %q: %v, want nothing checked", c.Agent.UserNamespaces, c.AgentImage, err)
		}
	}
	grant()
	if err := testenv.Poll(30*time.Second, 100*time.Millisecond, func() error {
		return CheckUserNamespacesAccess(ctx, controller, auto)
	}); err != nil {
		t.Errorf("with the nodes rule: %v", err)
	}
}

// TestCheckNodeLossAccess: node-loss handling watches Nodes; a controller
// without the right is refused before its cache would time out, naming the
// flag that turns it off; with the chart's nodes rule it passes; with the
// timeout 0 nothing is asked.
func TestCheckNodeLossAccess(t *testing.T) {
	ctx := context.Background()
	controller, grant := controllerWithoutNodeReads(t)
	on := Config{NodeLossTimeout: 5 * time.Minute}
	err := CheckNodeLossAccess(ctx, controller, on)
	for _, want := range []string{"may not list or watch Nodes", "get, list and watch on nodes", "--node-loss-timeout=0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("without rights: err = %v, want it to contain %q", err, want)
		}
	}
	if err := CheckNodeLossAccess(ctx, controller, Config{}); err != nil {
		t.Errorf("timeout 0: %v, want nothing checked", err)
	}
	grant()
	if err := testenv.Poll(30*time.Second, 100*time.Millisecond, func() error {
		return CheckNodeLossAccess(ctx, controller, on)
	}); err != nil {
		t.Errorf("with the nodes rule: %v", err)
	}
}

// controllerWithoutNodeReads is a client acting as a controller's
// ServiceAccount that holds no rights, and grant, which gives it the chart's
// nodes rule (get, list, watch), removed when the test ends. The authorizer
// sees a new binding once its informer has it: at once on an idle machine,
// not always under CI's load (CI of 2026-12-07 failed there), so callers
// poll after grant.
func controllerWithoutNodeReads(t *testing.T) (controller client.Client, grant func()) {
	t.Helper()
	ns := newNamespace(t)
	user := "system:serviceaccount:" + ns + ":k3k-controller"
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	controller, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return controller, func() {
		t.Helper()
		admin, err := client.New(restConfig, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		name := "k3k-nodes-" + ns
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		for _, o := range []client.Object{role, binding} {
			if err := admin.Create(context.Background(), o); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = admin.Delete(context.Background(), o) })
		}
	}
}
