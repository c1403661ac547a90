package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
)

// What a Cluster does when a host node holding one of its server pods stops
// answering. Kubernetes never replaces a StatefulSet's pod on such a node by
// itself: the pod is marked for deletion after the taint's toleration, and
// stays Terminating until the node's kubelet confirms, which a lost node never
// does. Deleting the pod object at once ("force") is safe only where the old
// copy can no longer write what the new one will use:
//
//   - etcd: the datastore fences the old copy itself. The lost member is
//     removed from the cluster first (the remaining members keep quorum, as
//     etcd.Plan checks); a removed member's writes are refused by every other
//     member whatever its process still does. Then its volume claim and its
//     pod are deleted, and the StatefulSet brings the pod back on another
//     node with a new, empty volume, which joins as a new member and receives
//     the data from the others. Automatic, after Config.NodeLossTimeout.
//   - SQLite and an external datastore: nothing in the datastore tells the
//     old server from the new one, so the pod is force-deleted only once the
//     node is known to be off: it carries the taint
//     node.kubernetes.io/out-of-service (Kubernetes' non-graceful node
//     shutdown: whoever sets it declares the node powered off or fenced), or
//     its Node object was deleted (what a cloud's node controller does for a
//     machine that no longer exists). Until then ServersReady says what an
//     operator does. A volume that only the lost node can mount (local
//     storage) cannot follow the pod at all: the condition says so, and the
//     pod is left where it is.
//
// A server pod that no node holds can be lost too: when something other than
// this controller deleted the pod on the lost node (Kubernetes' pod garbage
// collector does, for a node with the out-of-service taint or a deleted
// Node), the StatefulSet makes it again, and it waits unscheduled for a
// volume only the lost node can mount. It is handled as the pod on the node
// was: an etcd member is replaced (its new pod gets a new volume); a SQLite
// or external server's condition says the volume cannot move.
//
// docs/etcd.md, "When a node is lost", is the operator's side of this.

// ReasonServerNodeLost is ServersReady's reason while a server pod sits on a
// lost node: the message says what the controller does about it, or what
// the operator must do.
const ReasonServerNodeLost = v1beta1.ReasonServerNodeLost

// nodeLoss is one server pod on a node lost for at least the node-loss
// timeout.
type nodeLoss struct {
	pod  *corev1.Pod
	node string
	// since is when the node stopped being Ready; zero when its Node object
	// is gone.
	since time.Time
	// fenced says why the node can no longer write (out-of-service taint,
	// Node deleted); empty when nothing says so.
	fenced string
	// volume is set when the pod is on no node: it waits for this volume,
	// which only the lost node can mount.
	volume string
}

// lostServerPods are the pods bound to a node whose Ready condition has not
// been True for at least timeout, or whose Node is gone, in pod name order.
// recheck is how long until a node that stopped being Ready less than
// timeout ago would count as lost (0: none). nodes holds the Nodes by name;
// a name missing from it is a deleted Node. Pure.
func lostServerPods(pods []corev1.Pod, nodes map[string]*corev1.Node, now time.Time, timeout time.Duration) (lost []nodeLoss, recheck time.Duration) {
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" {
			continue
		}
		l, wait, ok := nodeLost(p.Spec.NodeName, nodes[p.Spec.NodeName], now, timeout)
		recheck = sooner(recheck, wait)
		if ok {
			l.pod = p
			lost = append(lost, l)
		}
	}
	sortLoss(lost)
	return lost, recheck
}

// nodeLost says whether the node named name is lost: n is nil (its Node is
// gone), or its Ready condition has not been True for at least timeout.
// wait is how long until a node not Ready for less would count (0: never).
// Pure.
func nodeLost(name string, n *corev1.Node, now time.Time, timeout time.Duration) (l nodeLoss, wait time.Duration, lost bool) {
	if n == nil {
		return nodeLoss{node: name, fenced: fmt.Sprintf("its Node %s was deleted", name)}, 0, true
	}
	since, ready := notReadySince(n)
	if ready {
		return nodeLoss{}, 0, false
	}
	if wait := since.Add(timeout).Sub(now); wait > 0 {
		return nodeLoss{}, wait, false
	}
	l = nodeLoss{node: name, since: since}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			l.fenced = fmt.Sprintf("node %s carries the taint %s", name, corev1.TaintNodeOutOfService)
		}
	}
	return l, 0, true
}

// strandedOn says whether volume pv, which an unscheduled server pod waits
// for, can only be mounted on lost nodes: its required node affinity
// matches nodes, none of which counts as anything but lost (a node not Ready
// for less than timeout makes it wait, and then wait says how long), or
// matches no node at all while naming a hostname (that Node was deleted).
// A volume without node affinity is not stranded. Pure.
func strandedOn(pv *corev1.PersistentVolume, nodes []corev1.Node, now time.Time, timeout time.Duration) (l nodeLoss, wait time.Duration, stranded bool) {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nodeLoss{}, 0, false
	}
	sel, err := nodeaffinity.NewNodeSelector(pv.Spec.NodeAffinity.Required)
	if err != nil {
		return nodeLoss{}, 0, false
	}
	matched := false
	for i := range nodes {
		if !sel.Match(&nodes[i]) {
			continue
		}
		nl, w, lost := nodeLost(nodes[i].Name, &nodes[i], now, timeout)
		if !lost {
			return nodeLoss{}, w, false
		}
		if !matched {
			l, matched = nl, true
		}
	}
	if !matched {
		// Matching no node counts as its node deleted only when the one
		// hostname it names is no node's at all: a node that lost a label
		// the affinity asks for, or an affinity that never matched, is not
		// a lost node.
		host := affinityHostname(pv.Spec.NodeAffinity.Required)
		if host == "" {
			return nodeLoss{}, 0, false
		}
		for i := range nodes {
			if nodes[i].Name == host || nodes[i].Labels[corev1.LabelHostname] == host {
				return nodeLoss{}, 0, false
			}
		}
		l, _, _ = nodeLost(host, nil, now, timeout)
	}
	l.volume = pv.Name
	return l, 0, true
}

// affinityHostname is the one hostname a local volume's node affinity names
// (kubernetes.io/hostname In [name]), or "".
func affinityHostname(required *corev1.NodeSelector) string {
	for _, term := range required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}

func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

func sortLoss(lost []nodeLoss) {
	sort.Slice(lost, func(i, j int) bool { return lost[i].pod.Name < lost[j].pod.Name })
}

// notReadySince is when n's Ready condition last left True; ready when it is
// True. A node that never reported one counts from its creation.
func notReadySince(n *corev1.Node) (since time.Time, ready bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastTransitionTime.Time, c.Status == corev1.ConditionTrue
		}
	}
	return n.CreationTimestamp.Time, false
}

// lostServers is what observeNodeLoss found in one reconcile.
type lostServers struct {
	pods []nodeLoss
	// recheck is lostServerPods's: when a node on its way to the timeout
	// gets there.
	recheck time.Duration
}

// observeNodeLoss returns the server pods on lost nodes, read once per
// reconcile (the etcd members step and reconcileNodeLoss both need them):
// the Nodes of pods, or of the Cluster's server pods listed here when pods
// is nil. Nothing while node-loss handling is off (timeout 0).
func (r *Reconciler) observeNodeLoss(ctx context.Context, c *v1beta1.Cluster, o *observation, pods []corev1.Pod) (lostServers, error) {
	if r.Config.NodeLossTimeout <= 0 {
		return lostServers{}, nil
	}
	if o.lostServers != nil {
		return *o.lostServers, nil
	}
	if pods == nil {
		list := &corev1.PodList{}
		if err := r.Client.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels(serverLabels(c))); err != nil {
			return lostServers{}, fmt.Errorf("listing server pods: %w", err)
		}
		pods = list.Items
	}
	nodes := map[string]*corev1.Node{}
	for i := range pods {
		name := pods[i].Spec.NodeName
		if name == "" || nodes[name] != nil {
			continue
		}
		n := &corev1.Node{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: name}, n)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return lostServers{}, fmt.Errorf("getting node %s of server pod %s: %w", name, pods[i].Name, err)
		}
		nodes[name] = n
	}
	lost, recheck := lostServerPods(pods, nodes, r.now(), r.Config.NodeLossTimeout)
	stranded, wait, err := r.strandedServerPods(ctx, pods)
	if err != nil {
		return lostServers{}, err
	}
	lost = append(lost, stranded...)
	sortLoss(lost)
	o.lostServers = &lostServers{lost, sooner(recheck, wait)}
	return *o.lostServers, nil
}

// strandedServerPods are the unscheduled server pods waiting for a volume
// that only lost nodes can mount (strandedOn), and how long until a node on
// its way to the timeout would strand one. Volumes are read uncached (the
// controller watches none), and only those of unscheduled pods whose claims
// are bound: while a cluster is healthy, none.
func (r *Reconciler) strandedServerPods(ctx context.Context, pods []corev1.Pod) (stranded []nodeLoss, recheck time.Duration, err error) {
	var nodes *corev1.NodeList
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != "" || !p.DeletionTimestamp.IsZero() {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			pvc := &corev1.PersistentVolumeClaim{}
			err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc)
			if apierrors.IsNotFound(err) || (err == nil && pvc.Spec.VolumeName == "") {
				continue
			}
			if err != nil {
				return nil, 0, fmt.Errorf("getting volume claim %s of unscheduled server pod %s: %w", v.PersistentVolumeClaim.ClaimName, p.Name, err)
			}
			pv := &corev1.PersistentVolume{}
			if err := r.APIReader.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, 0, fmt.Errorf("getting volume %s of unscheduled server pod %s: %w", pvc.Spec.VolumeName, p.Name, err)
			}
			if nodes == nil {
				nodes = &corev1.NodeList{}
				if err := r.Client.List(ctx, nodes); err != nil {
					return nil, 0, fmt.Errorf("listing nodes (where volume %s can be mounted): %w", pv.Name, err)
				}
			}
			l, wait, ok := strandedOn(pv, nodes.Items, r.now(), r.Config.NodeLossTimeout)
			recheck = sooner(recheck, wait)
			if ok {
				l.pod = p
				stranded = append(stranded, l)
				break
			}
		}
	}
	return stranded, recheck, nil
}

// lostEtcdMembers adds to lost (pod name → member ID) the started member of
// each server pod on a lost node, so that etcd.Plan removes it as it removes
// a member that lost its data. Plan removes only a member that does not
// answer, and only while the others keep quorum.
func lostEtcdMembers(c *v1beta1.Cluster, lost map[string]uint64, onLostNodes []nodeLoss, observed etcd.Observed) bool {
	added := false
	for _, l := range onLostNodes {
		i := ServerOrdinal(c, l.pod.Name)
		if i < 0 || lost[l.pod.Name] != 0 {
			continue
		}
		if m, ok := observed.MemberFor(EtcdPeer(c, i)); ok && m.Started() {
			lost[l.pod.Name] = m.ID
			added = true
		}
	}
	return added
}

// reconcileNodeLoss acts on the server pods on lost nodes (see the top of
// this file) and leaves what it found for ServersReady.
//
// It asks for no reconcile of its own but when a node on its way to the
// timeout gets there: each later step is brought by a watch (the member's
// removal by the etcd step's requeue, a deleted pod or claim by theirs, the
// out-of-service taint or a deleted Node by the Node watch).
func (r *Reconciler) reconcileNodeLoss(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	lost, err := r.observeNodeLoss(ctx, c, o, nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	var notes []string
	for _, l := range lost.pods {
		note, err := r.replaceServerOnLostNode(ctx, c, o, l)
		if err != nil {
			return ctrl.Result{}, err
		}
		notes = append(notes, note)
	}
	if len(notes) > 0 {
		o.nodeLoss = &blocker{ReasonServerNodeLost, strings.Join(notes, "; "), true}
	}
	return ctrl.Result{RequeueAfter: lost.recheck}, nil
}

// replaceServerOnLostNode does what may be done now for server pod l.pod and
// says what that is, or what waits for whom.
func (r *Reconciler) replaceServerOnLostNode(ctx context.Context, c *v1beta1.Cluster, o *observation, l nodeLoss) (string, error) {
	on := "is on node " + l.node
	if l.volume != "" {
		on = fmt.Sprintf("waits unscheduled for volume %s, which only node %s can mount", l.volume, l.node)
	}
	where := fmt.Sprintf("pod %s %s, which is gone (%s)", l.pod.Name, on, l.fenced)
	if !l.since.IsZero() {
		where = fmt.Sprintf("pod %s %s, not Ready since %s (node-loss timeout %s)", l.pod.Name, on, l.since.UTC().Format(time.RFC3339), r.Config.NodeLossTimeout)
	}
	if o.settings.Datastore == v1beta1.EtcdDatastore {
		return r.replaceEtcdMemberOnLostNode(ctx, c, o, l, where)
	}
	// What the pod does once deleted, unless only the lost node can mount
	// its volume.
	next := "starts empty on another node: its data was on that node (persistence ephemeral) and does not come back"
	if mountsClaims(l.pod) {
		stuck, err := r.claimsBoundToNode(ctx, l)
		if err != nil {
			return "", err
		}
		if len(stuck) > 0 {
			return fmt.Sprintf("%s; its volume %s can only be mounted there (node-local storage): bring the node back, or restore the Cluster from a snapshot (docs/backup.md)",
				where, strings.Join(stuck, ", ")), nil
		}
		next = "starts on another node with its volume"
	}
	if l.fenced == "" {
		return fmt.Sprintf("%s; the pod moves only once nothing on that node can run or write: power the node off, then taint it %s=nodeshutdown:NoExecute (or delete the Node), and the pod %s",
			where, corev1.TaintNodeOutOfService, next), nil
	}
	msg := fmt.Sprintf("%s; %s, so the pod was deleted and %s", where, l.fenced, next)
	deleted, err := r.forceDeletePod(ctx, l.pod, l.node)
	if err != nil {
		return "", err
	}
	if deleted {
		r.event(c, corev1.EventTypeWarning, ReasonServerNodeLost, "DeleteServerPod", msg)
	}
	return msg, nil
}

// replaceEtcdMemberOnLostNode: the member first (etcd step, through
// lostEtcdMembers), then the claims and the pod, only once the members that
// keep quorum confirm the lost one is no longer among them.
func (r *Reconciler) replaceEtcdMemberOnLostNode(ctx context.Context, c *v1beta1.Cluster, o *observation, l nodeLoss, where string) (string, error) {
	observed := o.etcd.observed
	if observed == nil || !observed.AnyReachable() || observed.QuorumLost() || len(observed.Members) == 0 {
		return where + "; waiting for the other etcd members to confirm a quorum before its member is replaced", nil
	}
	i := ServerOrdinal(c, l.pod.Name)
	// A member that never started is not the lost pod's: it is the one
	// etcd.Plan added for the pod's replacement once the lost member was
	// removed (or one the lost pod never got to start), and it waits for
	// that replacement. Waiting for it to go would wait for ever.
	if m, ok := observed.MemberFor(EtcdPeer(c, i)); ok && m.Started() {
		if observed.Healthy(m.ID) {
			return fmt.Sprintf("%s, but its etcd member %s still answers: it stays", where, etcd.FormatID(m.ID)), nil
		}
		return fmt.Sprintf("%s; removing its etcd member %s first (EtcdMembership says how that goes)", where, etcd.FormatID(m.ID)), nil
	}
	claims, claimsDeleted, err := r.deleteServerClaims(ctx, c, l.pod)
	if err != nil {
		return "", err
	}
	msg := fmt.Sprintf("%s; its etcd member was removed, so the pod and its volume %s are deleted: the pod starts on another node with a new volume and joins as a new member",
		where, strings.Join(claims, ", "))
	podDeleted, err := r.forceDeletePod(ctx, l.pod, l.node)
	if err != nil {
		return "", err
	}
	// The Event also when only the claims were this controller's to
	// delete: the pod garbage collector deletes pods on a node declared off
	// by itself, and the finalizer then holds the pod for the member.
	if podDeleted || claimsDeleted {
		r.event(c, corev1.EventTypeWarning, ReasonServerNodeLost, "DeleteServerPod", msg)
	}
	return msg, nil
}

// mountsClaims says whether pod mounts a volume claim (persistence
// dynamic) rather than keeping its data on the node (ephemeral).
func mountsClaims(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return true
		}
	}
	return false
}

// claimsBoundToNode names the volume claims of l.pod whose volume can be
// mounted on no node but l.node: its node affinity matches no other Ready
// node (local storage). Read uncached: the controller watches no volumes.
func (r *Reconciler) claimsBoundToNode(ctx context.Context, l nodeLoss) ([]string, error) {
	var stuck []string
	nodes := &corev1.NodeList{}
	listed := false
	for _, v := range l.pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: l.pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc)
		if apierrors.IsNotFound(err) || (err == nil && pvc.Spec.VolumeName == "") {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("getting volume claim %s: %w", v.PersistentVolumeClaim.ClaimName, err)
		}
		pv := &corev1.PersistentVolume{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
			return nil, fmt.Errorf("getting volume %s of claim %s (whether it can move to another node): %w", pvc.Spec.VolumeName, pvc.Name, err)
		}
		if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
			continue
		}
		if !listed {
			if err := r.Client.List(ctx, nodes); err != nil {
				return nil, fmt.Errorf("listing nodes (where volume %s can be mounted): %w", pv.Name, err)
			}
			listed = true
		}
		if !mountableElsewhere(pv.Spec.NodeAffinity.Required, nodes.Items, l.node) {
			stuck = append(stuck, pvc.Name)
		}
	}
	return stuck, nil
}

// mountableElsewhere says whether a Ready node other than lost matches the
// volume's required node affinity.
func mountableElsewhere(required *corev1.NodeSelector, nodes []corev1.Node, lost string) bool {
	sel, err := nodeaffinity.NewNodeSelector(required)
	if err != nil {
		return false
	}
	for i := range nodes {
		if nodes[i].Name == lost {
			continue
		}
		if _, ready := notReadySince(&nodes[i]); ready && sel.Match(&nodes[i]) {
			return true
		}
	}
	return false
}

// deleteServerClaims deletes the Cluster's volume claims that pod mounts and
// returns their names, and whether it deleted one now (the others were being
// deleted already). They go once the pod is gone (the claim protection
// finalizer holds them until then), and the StatefulSet makes new ones for
// the pod it creates next (it waits while a claim is still being deleted).
func (r *Reconciler) deleteServerClaims(ctx context.Context, c *v1beta1.Cluster, pod *corev1.Pod) (names []string, deleted bool, err error) {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("getting volume claim %s: %w", v.PersistentVolumeClaim.ClaimName, err)
		}
		if pvc.Labels[v1beta1.LabelCluster] != c.Name || pvc.Labels[v1beta1.LabelManagedBy] != v1beta1.ManagedByValue {
			continue
		}
		names = append(names, pvc.Name)
		if !pvc.DeletionTimestamp.IsZero() {
			continue
		}
		switch err := r.Client.Delete(ctx, pvc, client.Preconditions{UID: &pvc.UID}); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, false, fmt.Errorf("deleting volume claim %s of server pod %s on a lost node: %w", pvc.Name, pod.Name, err)
		default:
			deleted = true
		}
	}
	return names, deleted, nil
}

// forceDeletePod deletes pod without waiting for its kubelet (grace period
// 0), as `kubectl delete --force` does, and says whether it did (false: it
// was so deleted already, or is gone). The UID precondition keeps it from
// deleting the pod the StatefulSet made in its place meanwhile.
func (r *Reconciler) forceDeletePod(ctx context.Context, pod *corev1.Pod, node string) (bool, error) {
	if !pod.DeletionTimestamp.IsZero() && ptr.Deref(pod.DeletionGracePeriodSeconds, -1) == 0 {
		return false, nil // done already; an etcd pod waits for its finalizer
	}
	err := r.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deleting server pod %s on a lost node: %w", pod.Name, err)
	}
	log.FromContext(ctx).Info("deleted a server pod on a lost node", "pod", pod.Name, "node", node)
	return true, nil
}

// CheckNodeLossAccess says, before the manager starts, whether the
// controller may watch Nodes, which node-loss handling reads: without list
// and watch the Node informer never syncs and the manager stops after its
// cache timeout with a message that names neither the right nor the flag.
func CheckNodeLossAccess(ctx context.Context, c client.Client, cfg Config) error {
	if cfg.NodeLossTimeout <= 0 {
		return nil
	}
	return checkNodeReads(ctx, c, "--node-loss-timeout", fmt.Sprintf("--node-loss-timeout=%s watches the Nodes of server pods", cfg.NodeLossTimeout),
		"rbac.create", "set --node-loss-timeout=0 (nodeLossTimeout: 0)")
}
