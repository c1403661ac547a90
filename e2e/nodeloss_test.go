//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// The node-loss scenario needs a host of three nodes, one of which it may cut
// off for good (E2E_KILL_NODE). hack/e2e.sh runs it after the rest of the
// suite (which it runs with -skip '^TestNodeLoss'), on the same host cluster
// with two nodes added (hostcluster.sh add-node) and the controller's
// node-loss timeout set to 10 s. Nodes of the harness that can be killed are
// named <node 1>-nI.

var killable = regexp.MustCompile(`-n[2-9]$`)

// nodeLossHost checks that the scenario can run and returns the Ready nodes
// it may kill and node 1's name.
func nodeLossHost(t *testing.T) (killableReady []string, first string) {
	t.Helper()
	if len(cfg.nodeKill) == 0 {
		t.Skip("E2E_KILL_NODE is not set: this host cluster's nodes cannot be cut off by the suite (hack/e2e.sh sets it for its node-loss phase)")
	}
	nodes, err := host.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		switch {
		case !killable.MatchString(n.Name):
			first = n.Name
		case ready:
			killableReady = append(killableReady, n.Name)
		}
	}
	if first == "" || len(killableReady) == 0 {
		t.Fatalf("nodes %d, node 1 %q, Ready nodes that may be killed %v: want node 1 and one more at least", len(nodes.Items), first, killableReady)
	}
	return killableReady, first
}

// killNode cuts node off with E2E_KILL_NODE.
func killNode(t *testing.T, node string) {
	t.Helper()
	args := append(append([]string(nil), cfg.nodeKill[1:]...), node)
	start := time.Now()
	out, err := exec.Command(cfg.nodeKill[0], args...).CombinedOutput()
	t.Logf("%s %s (%s):\n%s", strings.Join(cfg.nodeKill, " "), node, time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("killing node %s: %v", node, err)
	}
}

// clientBack waits until Deployment client in the virtual namespace ns has
// a Ready pod whose host copy is not on node lost, and returns how long
// after cut that was (0 when its pod never was on lost).
func clientBack(t *testing.T, v *vcluster, ns, lost string, cut time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	var at time.Time
	eventually(t, timeout, "Deployment client with a Ready pod on a node that answers", func(ctx context.Context) (bool, error) {
		pods, err := v.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=client"})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !podReady(&p) {
				continue
			}
			hp := runningHostPod(ctx, v, ns, p.Name)
			if hp == nil || hp.Spec.NodeName == lost {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady {
					at = c.LastTransitionTime.Time
				}
			}
			return true, nil
		}
		return false, nil
	})
	if at.Before(cut) {
		return 0
	}
	return at.Sub(cut)
}

// servingAgain returns how long after cut the virtual API first answered a
// list (polled from now on).
func servingAgain(t *testing.T, v *vcluster, cut time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	eventually(t, timeout, "the virtual API serving", func(ctx context.Context) (bool, error) {
		_, err := v.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	return time.Since(cut)
}

// clusterEvents are the messages of the Cluster's Events with reason, in
// the order the host lists them.
func clusterEvents(ctx context.Context, v *vcluster, reason string) []string {
	list, err := host.CoreV1().Events(v.namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", v.name), fields.OneTermEqualSelector("reason", reason)).String(),
	})
	if err != nil {
		return nil
	}
	var msgs []string
	for _, e := range list.Items {
		msgs = append(msgs, e.Message)
	}
	return msgs
}

// serverClaimUID is the UID of the volume claim pod mounts (its server data).
func serverClaimUID(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := host.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(context.Background(), vol.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(pvc.UID)
	}
	t.Fatalf("server pod %s mounts no volume claim", pod.Name)
	return ""
}

// TestNodeLoss cuts off, for good, one node that holds a member of a
// three-server etcd cluster and the server of a SQLite cluster whose volume
// is of class hostcluster-shared (a volume every node can mount, as a
// network volume is), while in each a writer creates a ConfigMap every
// 100 ms and a Deployment runs. One node, two clusters, as a lost machine
// takes whatever it held; the two recover side by side:
//
//   - etcd, on its own: the other two members keep quorum; once the node has
//     not been Ready for the node-loss timeout the controller removes the
//     lost member, deletes its pod and (node-local) volume claim, and the pod
//     starts on a node that answers with a new volume and joins as a new
//     member;
//   - SQLite, once the operator says the node is off: until then the server
//     is not moved (ServersReady says ServerNodeLost and what to do); then
//     the test does what it says, the taint node.kubernetes.io/out-of-service,
//     and the pod starts elsewhere with its volume.
//
// The taint also makes Kubernetes delete the etcd pod on that node, in
// whatever order relative to the controller's own steps: the member must be
// replaced either way. Each cluster must serve again, have its Deployment
// Ready on a node that answers, and hold every acknowledged write.
func TestNodeLoss(t *testing.T) {
	killableNodes, first := nodeLossHost(t)
	et := createCluster(t, "lossetcd", "--servers", "3", "--datastore", "etcd", "--timeout", "10m")
	crc := clusterClient(t)
	members := waitMembers(t, crc, et, 3, 10*time.Minute)

	// The node to lose: one that may be killed and holds exactly one member.
	onNode := map[string][]*corev1.Pod{}
	for i := 0; i < 3; i++ {
		p := getPod(t, et, fmt.Sprintf("k3k-%s-server-%d", et.name, i))
		onNode[p.Spec.NodeName] = append(onNode[p.Spec.NodeName], p)
	}
	var victim *corev1.Pod
	var lost string
	for _, n := range killableNodes {
		if len(onNode[n]) == 1 && victim == nil {
			victim, lost = onNode[n][0], n
		}
	}
	if victim == nil {
		t.Fatalf("no node that may be killed (%v) holds exactly one server pod of %s: %v", killableNodes, et.name, onNode)
	}

	// The SQLite server must land on that node: the others are closed to
	// new pods while the cluster is made.
	others := []string{first}
	for _, n := range killableNodes {
		if n != lost {
			others = append(others, n)
		}
	}
	for _, n := range others {
		setUnschedulable(t, n, true)
		t.Cleanup(func() { setUnschedulable(t, n, false) })
	}
	sq := createCluster(t, "losssqlite", "--storage-class", "hostcluster-shared")
	for _, n := range others {
		setUnschedulable(t, n, false)
	}
	sqVictim := getPod(t, sq, sq.pod())
	if sqVictim.Spec.NodeName != lost {
		t.Fatalf("server pod %s is on %s, not on %s, the only node open when it was made", sqVictim.Name, sqVictim.Spec.NodeName, lost)
	}

	const ns = "loss"
	for _, v := range []*vcluster{et, sq} {
		createVirtualNamespace(t, v, ns)
		createClientDeployment(t, v, ns)
	}
	for _, v := range []*vcluster{et, sq} {
		waitClientHostPod(t, v, ns)
	}
	etClaim, sqClaim := serverClaimUID(t, victim), serverClaimUID(t, sqVictim)
	t.Logf("killing node %s, which holds %s (member %s) and %s", lost, victim.Name, members[victim.Name], sqVictim.Name)
	etWriter, sqWriter := startWriter(et.client, ns), startWriter(sq.client, ns)
	time.Sleep(3 * time.Second)
	cut := time.Now()
	killNode(t, lost)

	t.Run("the etcd cluster replaces the lost member", func(t *testing.T) {
		t.Parallel()
		serve := servingAgain(t, et, cut, 3*time.Minute)
		replaced := waitPodReplaced(t, et, victim, 6*time.Minute)
		if replaced.Spec.NodeName == lost {
			t.Fatalf("%s came back on the lost node %s", replaced.Name, lost)
		}
		after := waitMembers(t, crc, et, 3, 6*time.Minute)
		healed := time.Since(cut)
		for name, id := range members {
			switch {
			case name == victim.Name && after[name] == id:
				t.Errorf("%s's member is still %s: the lost member was not replaced", name, id)
			case name != victim.Name && after[name] != id:
				t.Errorf("member of %s changed from %s to %s: only the lost one may", name, id, after[name])
			}
		}
		if got := serverClaimUID(t, getPod(t, et, victim.Name)); got == etClaim {
			t.Errorf("%s mounts the same volume claim (%s) as on the lost node: want a new one", victim.Name, got)
		}
		// Which way it went (the controller's deletion first, or the pod
		// garbage collector's after the taint) shows in the messages.
		msgs := clusterEvents(context.Background(), et, v1beta1.ReasonServerNodeLost)
		if len(msgs) == 0 {
			t.Errorf("no %s Event on the Cluster", v1beta1.ReasonServerNodeLost)
		}
		for _, msg := range msgs {
			t.Logf("Event %s: %s", v1beta1.ReasonServerNodeLost, msg)
		}
		workload := clientBack(t, et, ns, lost, cut, 6*time.Minute)
		time.Sleep(2 * time.Second)
		before, later, failed := etWriter.stop(cut)
		t.Logf("node %s lost: virtual API serving %s after the cut; %s on node %s and three healthy members (%v) %s after it; Deployment client Ready on a node that answers %s after it (0: its pod was elsewhere)",
			lost, serve.Round(time.Millisecond), victim.Name, replaced.Spec.NodeName, after, healed.Round(time.Second), workload.Round(time.Second))
		t.Logf("%d writes acknowledged before the cut, %d after it, %d not acknowledged", before, later, failed)
		if later == 0 {
			t.Errorf("no write was acknowledged after the node was lost")
		}
		etWriter.check(t, et.client)
	})

	t.Run("the SQLite server moves with its volume once the node is declared off", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		// Not moved while the node may still write its volume.
		var said string
		eventually(t, 4*time.Minute, "ServersReady saying ServerNodeLost and how to declare the node off", func(ctx context.Context) (bool, error) {
			c := &v1beta1.Cluster{}
			if err := crc.Get(ctx, client.ObjectKey{Namespace: sq.namespace, Name: sq.name}, c); err != nil {
				return false, err
			}
			for _, cond := range c.Status.Conditions {
				if cond.Type == v1beta1.ConditionServersReady && cond.Reason == v1beta1.ReasonServerNodeLost {
					said = cond.Message
					return strings.Contains(cond.Message, corev1.TaintNodeOutOfService), nil
				}
			}
			return false, nil
		})
		t.Logf("ServersReady %s after the cut: %s", time.Since(cut).Round(time.Second), said)
		time.Sleep(3 * time.Second)
		if p := getPod(t, sq, sqVictim.Name); p.UID != sqVictim.UID || p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 0 {
			t.Fatalf("server pod %s was replaced or force-deleted before anything said node %s is off", sqVictim.Name, lost)
		}

		// The operator powers the machine off and says so.
		fenced := time.Now()
		node, err := host.CoreV1().Nodes().Get(ctx, lost, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		if _, err := host.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		replaced := waitPodReplaced(t, sq, sqVictim, 5*time.Minute)
		serve := servingAgain(t, sq, cut, 5*time.Minute)
		if replaced.Spec.NodeName == lost {
			t.Fatalf("%s came back on the lost node", replaced.Name)
		}
		if got := serverClaimUID(t, replaced); got != sqClaim {
			t.Errorf("%s mounts claim %s after the move, %s before: the data must move with it", replaced.Name, got, sqClaim)
		}
		workload := clientBack(t, sq, ns, lost, cut, 5*time.Minute)
		time.Sleep(2 * time.Second)
		before, later, failed := sqWriter.stop(cut)
		t.Logf("node %s lost: taint set %s after the cut; virtual API serving %s after the cut (%s after the taint) on node %s; Deployment client Ready on a node that answers %s after the cut",
			lost, fenced.Sub(cut).Round(time.Second), serve.Round(time.Second), time.Since(fenced).Round(time.Second), replaced.Spec.NodeName, workload.Round(time.Second))
		t.Logf("%d writes acknowledged before the cut, %d after it, %d not acknowledged", before, later, failed)
		if later == 0 {
			t.Errorf("no write was acknowledged after the server moved")
		}
		sqWriter.check(t, sq.client)
	})
}

// setUnschedulable cordons or uncordons node, as kubectl cordon does.
func setUnschedulable(t *testing.T, node string, on bool) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%v}}`, on)
	if _, err := host.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("setting node %s unschedulable=%v: %v", node, on, err)
	}
}
