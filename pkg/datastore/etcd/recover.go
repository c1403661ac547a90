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
// the surviving voter that is furthest along by what etcd's Status reports —
// the highest current term, then the highest committed index, then the highest
// applied index. That approximates raft's rule (last log term, then last log
// index) from outside: Status does not report a member's last log entry, so a
// survivor that appended an entry whose commit it had not learned yet can lose
// to one that lacks it, and that entry is then lost with the rest of the
// uncommitted tail. Every entry a survivor knows to be committed is kept. A
// write acknowledged by the lost quorum was on a majority, and a survivor holds
// it only if that majority included it. It refuses (false,
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
		if best == nil || s.RaftTerm > best.RaftTerm || (s.RaftTerm == best.RaftTerm && s.RaftIndex > best.RaftIndex) ||
			(s.RaftTerm == best.RaftTerm && s.RaftIndex == best.RaftIndex && s.RaftAppliedIndex > best.RaftAppliedIndex) {
			best = s
		}
	}
	if best == nil {
		return Recovery{}, false, "no voting member answers: a learner cannot rebuild the cluster"
	}
	m, _ := o.Member(best.MemberID)
	return Recovery{Name: m.Name, ID: FormatID(m.ID), Request: request}, true,
		fmt.Sprintf("rebuilding the cluster from member %s (raft term %d, index %d), the most advanced survivor; the other members are added again as new members",
			describe(m), best.RaftTerm, best.RaftIndex)
}
