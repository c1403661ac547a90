package etcd

import (
	"fmt"
)

// Reasons of a recovery from quorum loss.
const (
	ReasonRecovering      = "Recovering"
	ReasonRecovered       = "Recovered"
	ReasonRecoveryRefused = "RecoveryRefused"
)

// PlanRecovery chooses the member that rebuilds a cluster which lost quorum:
// the surviving voter that knows the most entries to be committed. etcd's
// --force-new-cluster keeps a member's log only up to max(its committed index,
// its consistent index) and drops the rest, so the survivor with the highest
// committed index keeps the most acknowledged writes, whatever its term. Status
// reports the committed index (RaftIndex) and the applied index
// (RaftAppliedIndex, never ahead of what was committed); the larger of the two
// is the rank, the current term breaks a tie. A write acknowledged by the lost
// quorum was on a majority, and a survivor holds it only if that majority
// included it; an entry a survivor appended without learning of its commit is
// dropped by force-new-cluster whichever member is chosen. It refuses (false,
// with why) unless quorum is lost now: while members confirm a quorum there is
// nothing to recover, and while no member answers there is nothing to recover
// from. It never runs on its own: an operator asks for it (docs/etcd.md).
func PlanRecovery(o Observed, request string) (Recovery, bool, string) {
	if !o.AnyReachable() || len(o.Members) == 0 {
		return Recovery{}, false, "no etcd member answers: there is no surviving member to rebuild the cluster from"
	}
	if !o.QuorumLost() {
		return Recovery{}, false, "the cluster has quorum: there is nothing to recover"
	}
	var best *MemberStatus
	for i := range o.Statuses {
		s := &o.Statuses[i]
		m, listed := o.Member(s.MemberID)
		if !s.Reachable || s.IsLearner || !listed || !m.Started() {
			continue
		}
		if best == nil || committed(*s) > committed(*best) || (committed(*s) == committed(*best) && s.RaftTerm > best.RaftTerm) {
			best = s
		}
	}
	if best == nil {
		return Recovery{}, false, "no voting member answers: a learner cannot rebuild the cluster"
	}
	m, _ := o.Member(best.MemberID)
	return Recovery{Name: m.Name, ID: FormatID(m.ID), Request: request}, true,
		fmt.Sprintf("rebuilding the cluster from member %s (committed index %d, raft term %d), the survivor with the most committed entries; the other members are added again as new members",
			describe(m), committed(*best), best.RaftTerm)
}

// committed is the highest index the member knows to be committed: what
// --force-new-cluster keeps of its log.
func committed(s MemberStatus) uint64 { return max(s.RaftIndex, s.RaftAppliedIndex) }
