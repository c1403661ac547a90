package cluster

import (
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
)

// tokenState is what the controller observed of the token Secret.
type tokenState struct {
	ready   bool
	reason  string
	message string
}

// observation is what one reconcile saw of the world; status is a pure
// function of it and never of earlier conditions.
type observation struct {
	settings    Settings
	settingsErr error
	token       tokenState
	// statefulSet is nil when it does not exist (yet, or not for this datastore).
	statefulSet *appsv1.StatefulSet
	serverPods  []corev1.Pod
	// kubeconfig is the content of the kubeconfig Secret; kubeconfigErr says why
	// it is not usable when it is not empty.
	kubeconfig    []byte
	kubeconfigErr error
	// etcd is filled for datastore.type etcd only.
	etcd etcdState
	// agent is the shared-mode agent's Deployment; nil when it does not exist.
	// agentWanted is false when the controller deploys no agent (no image).
	agent       *appsv1.Deployment
	agentWanted bool
	// userNamespaces is the agent's user namespace decision, nil when the
	// agent step did not run (its condition then stays as it was).
	userNamespaces *condResult
	// external is what was observed of the external datastore's Secret.
	external externalState
	// externalHosts are the hosts and ports of the endpoint that Secret
	// holds, parsed; nil when it holds none. The endpoint itself, which
	// carries credentials, is not kept.
	externalHosts *parsedHosts
	// claims are the server volume claims by name, read only while a server
	// pod is not ready (they explain why).
	claims map[string]claimFacts
	// backup is what was observed of the scheduled snapshots.
	backup backupState
	// restore is what was observed of spec.restoreFrom.
	restore restoreState
	// policy is what the namespace's VirtualClusterPolicy did; nil when the
	// namespace is bound to none.
	policy *policyOutcome
	// policyErr: the namespace or its policy could not be read.
	policyErr bool
	// migration is what was observed of a migration from sqlite to etcd.
	migration migrationState
	// lostServers are the server pods on lost nodes, read once per
	// reconcile (observeNodeLoss); nil until read.
	lostServers *lostServers
	// nodeLoss is what reconcileNodeLoss did about them, or what waits;
	// nil when no server pod is on a lost node.
	nodeLoss *blocker
	// deleting: the Cluster is being deleted; nothing is observed.
	deleting bool
	// failure is the step that failed in this reconcile; nil when none did.
	failure *stepFailure
}

// stepFailure is a reconcile step that returned an error.
type stepFailure struct {
	step string
	err  error
}

// fail records that step failed with err and returns err with the step's
// name; a nil err records nothing and returns nil. A conflict is returned but
// not recorded: the cache was behind the object the step updated, and the
// retry (at once) works from the newer copy; reporting it would flip Ready,
// with two Events, on a cluster that is fine.
func (o *observation) fail(step string, err error) error {
	if err == nil {
		return nil
	}
	if !apierrors.IsConflict(err) {
		o.failure = &stepFailure{step, err}
	}
	return fmt.Errorf("%s: %w", step, err)
}

// message is Ready's message for a failed step: the step and its
// error, on one line. Step errors name objects and API errors, never a
// Secret's content.
func (f *stepFailure) message() string {
	return clip(fmt.Sprintf("step %q failed: %v", f.step, f.err))
}

// computeStatus derives the Cluster's status from what was observed. A step
// that failed in this reconcile overrides Ready (ReconcileError, whatever
// else Ready would say) and keeps the phase from Ready.
func computeStatus(c *v1beta1.Cluster, o observation) v1beta1.ClusterStatus {
	st := observedStatus(c, o)
	if o.failure == nil {
		return st
	}
	msg := o.failure.message()
	if o.settingsErr != nil {
		msg += "; and the spec is invalid: " + o.settingsErr.Error()
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: v1beta1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1beta1.ReasonReconcileError, Message: msg, ObservedGeneration: c.Generation,
	})
	if st.Phase == v1beta1.PhaseReady {
		st.Phase = v1beta1.PhaseProvisioning
	}
	return st
}

// observedStatus is the status what was observed says. It starts from the
// current conditions only so that meta.SetStatusCondition keeps their
// transition times when nothing changed.
func observedStatus(c *v1beta1.Cluster, o observation) v1beta1.ClusterStatus {
	st := v1beta1.ClusterStatus{
		ObservedGeneration: c.Generation,
		Endpoint:           layout.Endpoint(c),
		Conditions:         append([]metav1.Condition(nil), c.Status.Conditions...),
		PersistenceType:    o.settings.Persistence,
		ServiceCIDR:        o.settings.ServiceCIDR,
		Datastore:          &v1beta1.DatastoreStatus{RecoveryRequest: etcdRecoveryRequest(c, o)},
	}
	st.Datastore.Type, st.Datastore.MigratedFrom = recordedDatastore(o)
	set := func(t string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: c.Generation,
		})
	}

	if o.statefulSet != nil {
		st.ReadyServers = o.statefulSet.Status.ReadyReplicas
	}
	switch {
	case o.policyErr || o.deleting:
		// Not read this time (for a deleted Cluster, not at all): what was
		// known stays; a failure to read is on Ready.
		st.PolicyName, st.PolicyBounds = c.Status.PolicyName, c.Status.PolicyBounds.DeepCopy()
	case o.policy != nil:
		st.PolicyName, st.PolicyBounds = o.policy.name, o.policy.bounds
		ok, reason, msg := o.policy.condition()
		set(v1beta1.ConditionPolicy, ok, reason, msg)
	default:
		meta.RemoveStatusCondition(&st.Conditions, v1beta1.ConditionPolicy)
	}

	if o.settingsErr != nil {
		// Nothing is observed of the backups; what is known of them stays.
		st.Backup = c.Status.Backup.DeepCopy()
		if cond := meta.FindStatusCondition(c.Status.Conditions, v1beta1.ConditionRestored); cond != nil {
			meta.SetStatusCondition(&st.Conditions, *cond)
		}
		set(v1beta1.ConditionReady, false, v1beta1.ReasonInvalidSpec, o.settingsErr.Error())
		st.Phase = v1beta1.PhaseFailed
		return st
	}

	set(v1beta1.ConditionTokenReady, o.token.ready, o.token.reason, o.token.message)
	ds := datastoreCondition(o)
	set(v1beta1.ConditionDatastoreReady, ds.ok, ds.reason, ds.message)
	srv := serversCondition(o)
	if reason, msg, ok := migratingCondition(c, o, srv.ok); ok {
		set(v1beta1.ConditionMigrating, true, reason, msg)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1beta1.ConditionMigrating)
	}
	set(v1beta1.ConditionServersReady, srv.ok, srv.reason, srv.message)
	kc := kubeconfigCondition(o)
	set(v1beta1.ConditionKubeconfigPublished, kc.ok, kc.reason, kc.message)
	// AgentsReady is reported but does not gate Ready: the virtual API serves
	// without an agent, only workloads wait for it.
	if o.agentWanted {
		ag := agentsCondition(o.agent)
		set(v1beta1.ConditionAgentsReady, ag.ok, ag.reason, ag.message)
		if u := o.userNamespaces; u != nil {
			set(v1beta1.ConditionUserNamespaces, u.ok, u.reason, u.message)
		}
	}
	if o.settings.Datastore == v1beta1.EtcdDatastore {
		for _, cond := range etcdConditions(o, c.Generation) {
			meta.SetStatusCondition(&st.Conditions, cond)
		}
		if o.etcd.observed != nil {
			st.Datastore.Members = etcdMembers(*o.etcd.observed)
			st.Datastore.Quorum = etcdQuorum(*o.etcd.observed)
		}
	}

	ready := condResult{ok: true, reason: v1beta1.ReasonReady, message: "servers are ready and the kubeconfig is published"}
	for _, part := range []struct {
		name string
		r    condResult
	}{{v1beta1.ConditionTokenReady, condResult{o.token.ready, o.token.reason, o.token.message}}, {v1beta1.ConditionDatastoreReady, ds}, {v1beta1.ConditionServersReady, srv}, {v1beta1.ConditionKubeconfigPublished, kc}} {
		if !part.r.ok {
			ready = condResult{ok: false, reason: v1beta1.ReasonNotReady, message: fmt.Sprintf("%s: %s", part.name, part.r.message)}
			if part.r.reason == v1beta1.ReasonQuorumLost {
				// One reason for one state: every condition says QuorumLost.
				ready.reason = v1beta1.ReasonQuorumLost
			}
			break
		}
	}
	set(v1beta1.ConditionReady, ready.ok, ready.reason, ready.message)

	switch {
	case !c.DeletionTimestamp.IsZero():
		st.Phase = v1beta1.PhaseTerminating
	case ready.ok:
		st.Phase = v1beta1.PhaseReady
	case o.statefulSet == nil:
		st.Phase = v1beta1.PhasePending
	default:
		st.Phase = v1beta1.PhaseProvisioning
	}
	pausedStatus(c, o, &st, set)
	setBackupStatus(c, o, &st)
	setRestoreStatus(c, o, &st)
	return st
}

type condResult struct {
	ok      bool
	reason  string
	message string
}

func datastoreCondition(o observation) condResult {
	switch o.settings.Datastore {
	case v1beta1.ExternalDatastore:
		return externalDatastoreCondition(o)
	case v1beta1.EtcdDatastore:
		return etcdDatastoreCondition(o)
	}
	ready := 0
	for _, p := range o.serverPods {
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == "datastore" && s.Ready {
				ready++
			}
		}
	}
	if want := int(o.settings.Servers); ready >= want {
		return condResult{true, v1beta1.ReasonDatastoreServing, fmt.Sprintf("%d/%d datastore sidecars ready", ready, want)}
	}
	return condResult{false, v1beta1.ReasonDatastoreStarting, fmt.Sprintf("%d/%d datastore sidecars ready", ready, o.settings.Servers)}
}

func serversCondition(o observation) condResult {
	sts := o.statefulSet
	if sts == nil {
		return condResult{false, v1beta1.ReasonServersStarting, "the server StatefulSet does not exist yet"}
	}
	want := o.settings.Servers
	current := sts.Status.ObservedGeneration >= sts.Generation && sts.Status.UpdatedReplicas == want
	msg := fmt.Sprintf("%d/%d servers ready", sts.Status.ReadyReplicas, want)
	if current && sts.Status.ReadyReplicas >= want {
		return condResult{true, v1beta1.ReasonServersReady, msg}
	}
	if !current {
		msg += ", rollout in progress"
	}
	if b := o.nodeLoss; b != nil {
		return condResult{false, b.reason, msg + "; " + b.message}
	}
	if b := firstBlocker(o.serverPods, o.claims); b != nil {
		return condResult{false, b.reason, msg + "; " + b.message}
	}
	return condResult{false, v1beta1.ReasonServersStarting, msg}
}

func kubeconfigCondition(o observation) condResult {
	switch {
	case len(o.kubeconfig) == 0 || errors.Is(o.kubeconfigErr, kubeconfig.ErrEmpty):
		return condResult{false, v1beta1.ReasonWaiting, "waiting for the server to write its kubeconfig"}
	case o.kubeconfigErr != nil:
		return condResult{false, v1beta1.ReasonInvalid, o.kubeconfigErr.Error()}
	default:
		return condResult{true, v1beta1.ReasonPublished, "the kubeconfig Secret holds a valid kubeconfig for the cluster's Service"}
	}
}
