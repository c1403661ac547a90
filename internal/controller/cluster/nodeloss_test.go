package cluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/layout"
)

// readyNode is a Node named name whose Ready condition is ready since
// lastTransition, with taints.
func readyNode(name string, ready bool, lastTransition time.Time, taints ...corev1.Taint) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(lastTransition),
		}}},
	}
}

// createNodes creates nodes with their status (envtest runs no kubelet),
// deleted when the test ends.
func createNodes(t *testing.T, nodes ...*corev1.Node) {
	t.Helper()
	for _, n := range nodes {
		status := n.Status
		if err := k8s.Create(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		n.Status = status
		if err := k8s.Status().Update(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	}
}

var outOfServiceTaint = corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}

func TestLostServerPodsCountsFromTheNodesLastReadyTransition(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	nodes := map[string]*corev1.Node{
		"ready":     readyNode("ready", true, now.Add(-time.Hour)),
		"blip":      readyNode("blip", false, now.Add(-20*time.Second)),
		"lost":      readyNode("lost", false, now.Add(-10*time.Minute)),
		"lost-off":  readyNode("lost-off", false, now.Add(-10*time.Minute), outOfServiceTaint),
		"ready-off": readyNode("ready-off", true, now.Add(-time.Hour), outOfServiceTaint),
	}
	pod := func(name, nodeName string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: nodeName}}
	}
	pods := []corev1.Pod{
		pod("s-5", "lost-off"), pod("s-0", "ready"), pod("s-1", "blip"), pod("s-2", "lost"),
		pod("s-3", "deleted"), pod("s-4", ""), pod("s-6", "ready-off"),
	}
	lost, recheck := lostServerPods(pods, nodes, now, time.Minute)
	var got []string
	for _, l := range lost {
		got = append(got, l.pod.Name+"@"+l.node+" fenced="+map[bool]string{true: "yes", false: "no"}[l.fenced != ""])
	}
	want := []string{"s-2@lost fenced=no", "s-3@deleted fenced=yes", "s-5@lost-off fenced=yes"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("lost server pods %v, want %v (a node not Ready for less than the timeout, a Ready one even with the taint, and an unscheduled pod do not count)", got, want)
	}
	if recheck != 40*time.Second {
		t.Errorf("recheck after %s, want 40s (the node not Ready for 20 s reaches the 1 min timeout then)", recheck)
	}
	if !lost[0].since.Equal(now.Add(-10*time.Minute)) || !lost[1].since.IsZero() {
		t.Errorf("since %v and %v: want the Ready transition, and zero for a deleted Node", lost[0].since, lost[1].since)
	}
	if _, recheck := lostServerPods(pods[:1], nodes, now, time.Minute); recheck != 0 {
		t.Errorf("recheck %s with no node on its way to the timeout, want 0", recheck)
	}
}

func TestMountableElsewhereFollowsTheVolumesNodeAffinity(t *testing.T) {
	now := time.Now()
	zoned := func(n *corev1.Node, zone string) corev1.Node {
		n.Labels[corev1.LabelTopologyZone] = zone
		return *n
	}
	nodes := []corev1.Node{
		zoned(readyNode("a", false, now), "z1"),
		zoned(readyNode("b", true, now), "z1"),
		zoned(readyNode("c", false, now), "z2"),
		zoned(readyNode("d", true, now), "z3"),
	}
	selector := func(key string, values ...string) *corev1.NodeSelector {
		return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values},
		}}}}
	}
	for _, tc := range []struct {
		name     string
		required *corev1.NodeSelector
		lost     string
		want     bool
	}{
		{"local volume of the lost node", selector(corev1.LabelHostname, "a"), "a", false},
		{"zonal volume with another Ready node in the zone", selector(corev1.LabelTopologyZone, "z1"), "a", true},
		{"zonal volume whose zone's other node is not Ready", selector(corev1.LabelTopologyZone, "z2"), "c", false},
		{"volume of two zones", selector(corev1.LabelTopologyZone, "z2", "z3"), "c", true},
	} {
		if got := mountableElsewhere(tc.required, nodes, tc.lost); got != tc.want {
			t.Errorf("%s: mountable elsewhere %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStrandedOnNeedsEveryNodeTheVolumeCanUseLost(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	zoned := func(n *corev1.Node, zone string) corev1.Node {
		n.Labels[corev1.LabelTopologyZone] = zone
		return *n
	}
	nodes := []corev1.Node{
		zoned(readyNode("lost", false, now.Add(-10*time.Minute)), "z1"),
		zoned(readyNode("off", false, now.Add(-10*time.Minute), outOfServiceTaint), "z1"),
		zoned(readyNode("blip", false, now.Add(-20*time.Second)), "z2"),
		zoned(readyNode("ready", true, now.Add(-time.Hour)), "z3"),
	}
	volume := func(key string, values ...string) *corev1.PersistentVolume {
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}}
		if key != "" {
			pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}},
			}}}}
		}
		return pv
	}
	// withZone adds a zone the volume's node must be in (the expressions of
	// a term are ANDed).
	withZone := func(pv *corev1.PersistentVolume, zone string) *corev1.PersistentVolume {
		term := &pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0]
		term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}})
		return pv
	}
	for _, tc := range []struct {
		name    string
		pv      *corev1.PersistentVolume
		want    string // node@fenced, "" when not stranded
		recheck time.Duration
	}{
		{"local volume of a lost node", volume(corev1.LabelHostname, "lost"), "lost@no", 0},
		{"local volume of a node declared off", volume(corev1.LabelHostname, "off"), "off@yes", 0},
		{"local volume of a deleted Node", volume(corev1.LabelHostname, "gone"), "gone@yes", 0},
		{"local volume of a Ready node, asking for a label it lost", withZone(volume(corev1.LabelHostname, "ready"), "z9"), "", 0},
		{"zone whose every node is lost", volume(corev1.LabelTopologyZone, "z1"), "lost@no", 0},
		{"local volume of a node not Ready for less than the timeout", volume(corev1.LabelHostname, "blip"), "", 40 * time.Second},
		{"local volume of a Ready node", volume(corev1.LabelHostname, "ready"), "", 0},
		{"zone with a Ready node", volume(corev1.LabelTopologyZone, "z1", "z3"), "", 0},
		{"zone of no node, named by no hostname", volume(corev1.LabelTopologyZone, "z9"), "", 0},
		{"volume without node affinity (a network volume)", volume(""), "", 0},
	} {
		l, wait, ok := strandedOn(tc.pv, nodes, now, time.Minute)
		got := ""
		if ok {
			got = l.node + "@" + map[bool]string{true: "yes", false: "no"}[l.fenced != ""]
			if l.volume != "pv" {
				t.Errorf("%s: volume %q, want pv", tc.name, l.volume)
			}
		}
		if got != tc.want || wait != tc.recheck {
			t.Errorf("%s: stranded on %q, recheck %s; want %q, %s", tc.name, got, wait, tc.want, tc.recheck)
		}
	}
}

// TestSQLiteServerOnALostNodeMovesOnlyOnceTheNodeIsOff: a SQLite server pod
// on a node that has not been Ready for longer than the timeout stays where
// it is, with ServersReady saying what the operator does, until the node
// carries the out-of-service taint; then the pod is deleted (the
// StatefulSet makes it again on another node). A volume only that node can
// mount keeps the pod where it is, taint or not.
func TestSQLiteServerOnALostNodeMovesOnlyOnceTheNodeIsOff(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		nodeBound bool
	}{{"volume that moves", false}, {"node-local volume", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			lostName, liveName := ns+"-lost", ns+"-live"
			lostNode := readyNode(lostName, false, time.Now().Add(-10*time.Minute))
			liveNode := readyNode(liveName, true, time.Now().Add(-time.Hour))
			createNodes(t, lostNode, liveNode)
			r, _ := newReconciler(t)
			r.Config.NodeLossTimeout = 5 * time.Minute
			c := createCluster(t, &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "moving"}})
			reconcileOnce(t, r, c)

			// What the StatefulSet controller and the scheduler would have
			// made (envtest runs neither): the server's claim, bound, and
			// its pod on the node that is now lost.
			pv := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: ns + "-data"},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
					AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/" + ns}},
				},
			}
			if tc.nodeBound {
				pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{lostName}}},
				}}}}
			}
			if err := k8s.Create(ctx, pv); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), pv) })
			claim := &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-" + layout.ServerPodName(c, 0), Labels: serverLabels(c)},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
					VolumeName:  pv.Name,
				},
			}
			if err := k8s.Create(ctx, claim); err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: layout.ServerPodName(c, 0), Labels: serverLabels(c)},
				Spec: corev1.PodSpec{
					NodeName:   lostName,
					Containers: []corev1.Container{{Name: "k3s", Image: "k3s"}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
						PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name},
					}}},
				},
			}
			if err := k8s.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}

			reconcileOnce(t, r, c)
			cond := condition(t, c, v1beta1.ConditionServersReady)
			want := "out-of-service"
			if tc.nodeBound {
				want = "can only be mounted there"
			}
			if cond.Status != metav1.ConditionFalse || cond.Reason != v1beta1.ReasonServerNodeLost || !strings.Contains(cond.Message, want) || !strings.Contains(cond.Message, lostName) {
				t.Fatalf("ServersReady %s %s %q: want False, %s, naming node %s and saying %q", cond.Status, cond.Reason, cond.Message, v1beta1.ReasonServerNodeLost, lostName, want)
			}
			if state := podState(t, c, pod.Name); state != "live" {
				t.Fatalf("server pod %s before the node is known to be off, want live", state)
			}

			// The operator declares the node off.
			live := &corev1.Node{}
			if err := k8s.Get(ctx, types.NamespacedName{Name: lostName}, live); err != nil {
				t.Fatal(err)
			}
			live.Spec.Taints = append(live.Spec.Taints, outOfServiceTaint)
			if err := k8s.Update(ctx, live); err != nil {
				t.Fatal(err)
			}
			reconcileOnce(t, r, c)
			wantState := "gone"
			if tc.nodeBound {
				wantState = "live" // a new pod could start nowhere
			}
			if state := podState(t, c, pod.Name); state != wantState {
				t.Fatalf("server pod %s once the node carries %s, want %s", state, corev1.TaintNodeOutOfService, wantState)
			}
			if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: claim.Name}, &corev1.PersistentVolumeClaim{}); err != nil {
				t.Errorf("the server's volume claim after the pod was replaced: %v (it holds the data and must stay)", err)
			}
			if !tc.nodeBound {
				cond = condition(t, c, v1beta1.ConditionServersReady)
				if !strings.Contains(cond.Message, "was deleted and starts on another node") {
					t.Errorf("ServersReady message %q does not say the pod was replaced", cond.Message)
				}
			}
		})
	}
}

// TestEphemeralServerOnALostNodeSaysItsDataIsGone: a server with no volume
// claim (persistence ephemeral) kept its data on the lost node: the
// condition says so, and once the node is declared off the pod is deleted
// to start empty elsewhere.
func TestEphemeralServerOnALostNodeSaysItsDataIsGone(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	lost := readyNode(ns+"-lost", false, time.Now().Add(-10*time.Minute))
	createNodes(t, lost)
	r, _ := newReconciler(t)
	r.Config.NodeLossTimeout = time.Minute
	c := createCluster(t, &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scratch"},
		Spec: v1beta1.ClusterSpec{Persistence: v1beta1.PersistenceConfig{Type: v1beta1.EphemeralPersistence}}})
	reconcileOnce(t, r, c)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: layout.ServerPodName(c, 0), Labels: serverLabels(c)},
		Spec:       corev1.PodSpec{NodeName: lost.Name, Containers: []corev1.Container{{Name: "k3s", Image: "k3s"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	if cond := condition(t, c, v1beta1.ConditionServersReady); cond.Reason != v1beta1.ReasonServerNodeLost || !strings.Contains(cond.Message, "persistence ephemeral") {
		t.Fatalf("ServersReady %s %q: want %s saying the data was on the node", cond.Reason, cond.Message, v1beta1.ReasonServerNodeLost)
	}
	if state := podState(t, c, pod.Name); state != "live" {
		t.Fatalf("server pod %s before the node is known to be off, want live", state)
	}
	lost.Spec.Taints = append(lost.Spec.Taints, outOfServiceTaint)
	if err := k8s.Update(ctx, lost); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	if state := podState(t, c, pod.Name); state != "gone" {
		t.Fatalf("server pod %s once the node is declared off, want gone", state)
	}
	if cond := condition(t, c, v1beta1.ConditionServersReady); !strings.Contains(cond.Message, "starts empty on another node") {
		t.Errorf("ServersReady %q does not say the pod starts empty elsewhere", cond.Message)
	}
}

// TestNodeLossHandlingOffLeavesServerPodsAlone: with the timeout 0 nothing
// reads Nodes and nothing is deleted.
func TestNodeLossHandlingOffLeavesServerPodsAlone(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	r, _ := newReconciler(t)
	c := createCluster(t, &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "off"}})
	reconcileOnce(t, r, c)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: layout.ServerPodName(c, 0), Labels: serverLabels(c)},
		Spec:       corev1.PodSpec{NodeName: ns + "-never-existed", Containers: []corev1.Container{{Name: "k3s", Image: "k3s"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod.Name}, &corev1.Pod{}); apierrors.IsNotFound(err) {
		t.Fatal("a server pod on a node with no Node object was deleted with node-loss handling off")
	}
	if cond := condition(t, c, v1beta1.ConditionServersReady); cond.Reason == v1beta1.ReasonServerNodeLost {
		t.Errorf("ServersReady %s with node-loss handling off", cond.Reason)
	}
}

// lostEtcdNode is a three-member etcd Cluster whose pods 0 and 1 are on
// node live and pod 2, with its claim, on node lost (both Ready), with real
// members answering.
type lostEtcdNode struct {
	r          *Reconciler
	c          *v1beta1.Cluster
	pm         *podMembers
	live, lost *corev1.Node
	claim      *corev1.PersistentVolumeClaim
	old        *corev1.Pod
	lostID     string
}

func newLostEtcdNode(t *testing.T) *lostEtcdNode {
	t.Helper()
	ctx := context.Background()
	dns := startPodDNS(t)
	r, _ := newReconciler(t)
	r.Config.NodeLossTimeout = time.Minute
	ns := newNamespace(t)
	// Both Ready while the members start; the second is lost below.
	live, lost := readyNode(ns+"-live", true, time.Now().Add(-time.Hour)), readyNode(ns+"-lost", true, time.Now().Add(-time.Hour))
	createNodes(t, live, lost)
	c := createCluster(t, newEtcdCluster(ns, "lostnode", 3))
	reconcileOnce(t, r, c)
	pm := newPodMembers(t, c, dns)
	pm.start(0, "")
	<-pm.running[0].ReadyNotify()
	// What the StatefulSet controller and the scheduler would make: pods 0
	// and 1 on the live node, pod 2 with its claim on the lost one.
	e := &lostEtcdNode{r: r, c: c, pm: pm, live: live, lost: lost}
	e.serverPod(t, 0, live.Name, "")
	e.serverPod(t, 1, live.Name, "")
	e.claim = &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-" + layout.ServerPodName(c, 2), Labels: serverLabels(c)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
	}
	if err := k8s.Create(ctx, e.claim); err != nil {
		t.Fatal(err)
	}
	e.old = e.serverPod(t, 2, lost.Name, e.claim.Name)
	reconcileUntil(t, r, c, pm, "three healthy voters", healthyVoters(3))
	e.lostID = etcd.FormatID(pm.running[2].ID())
	return e
}

// serverPod creates server pod i on node (none: unscheduled), mounting claim
// when it is set.
func (e *lostEtcdNode) serverPod(t *testing.T, i int, node string, claim string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.c.Namespace, Name: layout.ServerPodName(e.c, i), Labels: serverLabels(e.c)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "k3s", Image: "k3s"}}},
	}
	if claim != "" {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	}
	if err := k8s.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// loseNode marks the lost node not Ready since ten minutes ago (past the
// timeout).
func (e *lostEtcdNode) loseNode(t *testing.T) {
	t.Helper()
	e.lost.Status = readyNode(e.lost.Name, false, time.Now().Add(-10*time.Minute)).Status
	if err := k8s.Status().Update(context.Background(), e.lost); err != nil {
		t.Fatal(err)
	}
}

// replacedOnLiveNode waits until pod (the lost node's pod 2, or what took
// its place) and the claim are deleted and the lost member removed, then
// makes the StatefulSet's new pod 2 on the live node with a new volume and
// waits for three healthy members, pod 2's a new one.
func (e *lostEtcdNode) replacedOnLiveNode(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	c := e.c
	reconcileUntil(t, e.r, c, nil, "pod 2 deleted and its claim with it", func(c *v1beta1.Cluster) bool {
		p := &corev1.Pod{}
		err := k8s.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: pod.Name}, p)
		if err == nil && p.UID == pod.UID {
			return false
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err = k8s.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: e.claim.Name}, pvc)
		// envtest runs no protection controller: the claim keeps its
		// finalizer, marked for deletion.
		return apierrors.IsNotFound(err) || (err == nil && pvc.DeletionTimestamp != nil)
	})
	for _, m := range c.Status.Datastore.Members {
		if m.ID == e.lostID {
			t.Errorf("the lost member %s is still listed: %+v", e.lostID, c.Status.Datastore.Members)
		}
	}
	if q := c.Status.Datastore.Quorum; q == nil || q.Voters != 2 || q.HealthyVoters != 2 {
		t.Errorf("quorum %+v after the removal, want two healthy voters", q)
	}
	if err := os.RemoveAll(e.pm.data[2]); err != nil {
		t.Fatal(err)
	}
	delete(e.pm.data, 2)
	e.serverPod(t, 2, e.live.Name, "")
	reconcileUntil(t, e.r, c, e.pm, "three healthy voters again", healthyVoters(3))
	for _, m := range c.Status.Datastore.Members {
		if m.Name == layout.ServerPodName(c, 2) && m.ID == e.lostID {
			t.Errorf("pod 2's member is still %s: want a new member", e.lostID)
		}
	}
}

// TestEtcdMemberOnALostNodeIsReplaced: the member of a pod on a node lost
// for longer than the timeout is removed once it no longer answers, then
// its claim and pod are deleted, and the pod made again elsewhere joins as a
// new member.
func TestEtcdMemberOnALostNodeIsReplaced(t *testing.T) {
	t.Parallel() // real etcd members, 30 s: beside the other such tests
	e := newLostEtcdNode(t)
	// The node stops reporting, but its member still answers: the node's
	// kubelet may be what failed.
	e.loseNode(t)
	reconcileOnce(t, e.r, e.c)
	if state := podState(t, e.c, e.old.Name); state != "live+finalizer" {
		t.Fatalf("pod 2 is %s while its member answers, want live+finalizer", state)
	}
	if cond := condition(t, e.c, v1beta1.ConditionServersReady); !strings.Contains(cond.Message, "still answers: it stays") {
		t.Errorf("ServersReady %s %q: want it to say the member stays", cond.Reason, cond.Message)
	}
	// The node is gone with the member.
	e.pm.stop(2)
	e.replacedOnLiveNode(t, e.old)
}

// TestEtcdMemberWaitingForAVolumeOfALostNodeIsReplaced: something else
// removed pod 2 from the lost node (Kubernetes' pod garbage collector does
// once the node carries the out-of-service taint), and the StatefulSet made
// it again with the same claim, whose volume only the lost node can mount:
// the pod waits unscheduled for ever. The controller replaces the member as
// it does for a pod on the node.
func TestEtcdMemberWaitingForAVolumeOfALostNodeIsReplaced(t *testing.T) {
	t.Parallel() // real etcd members, 30 s: beside the other such tests
	ctx := context.Background()
	e := newLostEtcdNode(t)
	e.pm.stop(2)
	e.loseNode(t)
	// The local volume the claim is bound to.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: e.c.Namespace + "-pv"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/volumes/pv"}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{e.lost.Name}}},
			}}}},
		},
	}
	if err := k8s.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pv) })
	e.claim.Spec.VolumeName = pv.Name
	if err := k8s.Update(ctx, e.claim); err != nil {
		t.Fatal(err)
	}
	// The pod garbage collector's force deletion, then the StatefulSet's
	// new pod with the same claim, which no scheduler places.
	old := &corev1.Pod{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: e.c.Namespace, Name: e.old.Name}, old); err != nil {
		t.Fatal(err)
	}
	old.Finalizers = nil
	if err := k8s.Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, old, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waiting := e.serverPod(t, 2, "", e.claim.Name)
	reconcileOnce(t, e.r, e.c)
	if cond := condition(t, e.c, v1beta1.ConditionServersReady); cond.Reason != v1beta1.ReasonServerNodeLost || !strings.Contains(cond.Message, "waits unscheduled for volume "+pv.Name) {
		t.Errorf("ServersReady %s %q: want %s saying the pod waits for a volume of the lost node", cond.Reason, cond.Message, v1beta1.ReasonServerNodeLost)
	}
	e.replacedOnLiveNode(t, waiting)
}
