package cluster

import (
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
)

// etcdMembers is the members list of the status, in name order.
func etcdMembers(o etcd.Observed) []v1beta1.EtcdMemberStatus {
	out := make([]v1beta1.EtcdMemberStatus, 0, len(o.Members))
	for _, m := range o.Members {
		out = append(out, v1beta1.EtcdMemberStatus{
			Name: m.Name, ID: etcd.FormatID(m.ID), Learner: m.IsLearner,
			Healthy: o.Healthy(m.ID), Leader: m.ID == o.Leader && o.Leader != 0,
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// etcdQuorum counts voters; nil when no member answered.
func etcdQuorum(o etcd.Observed) *v1beta1.EtcdQuorumStatus {
	if !o.AnyReachable() || len(o.Members) == 0 {
		return nil
	}
	q := &v1beta1.EtcdQuorumStatus{}
	for _, m := range o.Members {
		if m.IsLearner {
			continue
		}
		q.Voters++
		if o.Healthy(m.ID) {
			q.HealthyVoters++
		}
	}
	q.Needed = q.Voters/2 + 1
	return q
}

// etcdDatastoreCondition is DatastoreReady for etcd: a quorum of voters answers.
func etcdDatastoreCondition(o observation) condResult {
	switch {
	case o.etcd.pkiProblem != "":
		return condResult{false, v1beta1.ReasonEtcdCAUnusable, o.etcd.pkiProblem}
	case o.etcd.observed == nil:
		return condResult{false, v1beta1.ReasonDatastoreStarting, "the etcd members have not been observed yet"}
	}
	q := etcdQuorum(*o.etcd.observed)
	if q == nil {
		return condResult{false, etcd.ReasonClusterUnreachable, "no etcd member answered"}
	}
	msg := fmt.Sprintf("%d/%d voting members healthy, quorum %d", q.HealthyVoters, q.Voters, q.Needed)
	if o.etcd.observed.QuorumLost() {
		return condResult{false, v1beta1.ReasonQuorumLost, etcd.QuorumLostMessage(*o.etcd.observed)}
	}
	if q.HealthyVoters >= q.Needed {
		return condResult{true, v1beta1.ReasonQuorumHealthy, msg}
	}
	// A member's linearizable list went through a quorum the controller
	// cannot see whole: the datastore serves. Calling this QuorumLost would
	// contradict EtcdHealthy and invite a recovery nothing needs.
	return condResult{true, v1beta1.ReasonQuorumConfirmed, msg + "; a member confirmed a quorum, the controller does not reach the rest (see EtcdHealthy)"}
}

// etcdConditions are EtcdHealthy, EtcdAlarm and EtcdMembership.
func etcdConditions(o observation, generation int64) []metav1.Condition {
	if o.etcd.observed == nil {
		reason, msg := v1beta1.ReasonNotObserved, "the etcd members have not been observed yet"
		if o.etcd.pkiProblem != "" {
			reason, msg = v1beta1.ReasonEtcdCAUnusable, o.etcd.pkiProblem
		}
		return []metav1.Condition{{Type: v1beta1.ConditionEtcdMembership, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: generation}}
	}
	conds := etcd.Conditions(*o.etcd.observed, generation)
	if rc := o.etcd.recovery; rc != nil {
		st := metav1.ConditionFalse
		if rc.ok {
			st = metav1.ConditionTrue
		}
		conds = append(conds, metav1.Condition{Type: v1beta1.ConditionEtcdRecovery, Status: st, Reason: rc.reason, Message: rc.message, ObservedGeneration: generation})
	}
	m := metav1.Condition{Type: v1beta1.ConditionEtcdMembership, Status: metav1.ConditionTrue, Reason: o.etcd.action.Reason, Message: o.etcd.action.Message, ObservedGeneration: generation}
	var notes []string
	switch {
	case o.etcd.observed.QuorumLost():
		// One reason for one state, whatever the reconcile got to: Plan says
		// QuorumLost too, but a step that failed before it left no action.
		m.Reason, m.Message = v1beta1.ReasonQuorumLost, etcd.QuorumLostMessage(*o.etcd.observed)
	case m.Reason == "":
		// A step between observing the members and planning failed (the
		// error is on Ready): an empty reason would get the whole status
		// refused by the API.
		m.Reason, m.Message = v1beta1.ReasonStepNotDone, "no membership step was planned: the reconcile failed before it (see Ready)"
	}
	if o.etcd.actionErr != nil {
		m.Reason = v1beta1.ReasonStepNotDone
		notes = append(notes, o.etcd.actionErr.Error())
	}
	if len(o.etcd.held) > 0 {
		notes = append(notes, "server pods waiting to leave: "+strings.Join(o.etcd.held, ", "))
		if m.Reason == etcd.ReasonInSync {
			m.Reason = v1beta1.ReasonPodsWaitToLeave
		}
	}
	if o.etcd.rosterProblem != "" {
		notes = append(notes, o.etcd.rosterProblem)
		if m.Reason == etcd.ReasonInSync {
			m.Reason = v1beta1.ReasonRosterNotWritten
		}
	}
	if m.Reason != etcd.ReasonInSync {
		m.Status = metav1.ConditionFalse
	}
	if len(notes) > 0 {
		m.Message = strings.Join(append([]string{m.Message}, notes...), "; ")
	}
	return append(conds, m)
}

// etcdRecoveryRequest is the recovery request handled last: the one handled
// now, else the one recorded before (a record, like the resolved types).
func etcdRecoveryRequest(c *v1beta1.Cluster, o observation) string {
	if o.etcd.handledRequest != "" {
		return o.etcd.handledRequest
	}
	if c.Status.Datastore != nil {
		return c.Status.Datastore.RecoveryRequest
	}
	return ""
}
