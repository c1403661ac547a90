package etcd

import (
	"fmt"
	"slices"
	"strings"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// ActionType is the one thing Execute does.
type ActionType string

// The actions. Only AddLearner, PromoteLearner, RemoveMember and UpdatePeerURLs
// change membership; Plan returns at most one action, so a reconcile changes
// membership at most once.
const (
	ActionNone           ActionType = "None"
	ActionAddLearner     ActionType = "AddLearner"
	ActionPromoteLearner ActionType = "PromoteLearner"
	ActionRemoveMember   ActionType = "RemoveMember"
	ActionMoveLeader     ActionType = "MoveLeader"
	ActionUpdatePeerURLs ActionType = "UpdatePeerURLs"
	ActionCompact        ActionType = "Compact"
	ActionDefragment     ActionType = "Defragment"
	ActionDisarmAlarm    ActionType = "DisarmAlarm"
)

// Reasons, CamelCase so that they can be condition reasons as they are.
const (
	ReasonInSync             = "InSync"
	ReasonClusterUnreachable = "ClusterUnreachable"
	// ReasonQuorumLost is the Cluster's own reason, so that under quorum loss
	// every condition, the ones this package writes and the controller's, says it.
	ReasonQuorumLost           = v1beta1.ReasonQuorumLost
	ReasonMembershipConverging = "MembershipConverging"
	ReasonReplaceLostMember    = "ReplaceLostMember"
	ReasonPeerURLChanged       = "PeerURLChanged"
	ReasonAlarmCorrupt         = "AlarmCorrupt"
	ReasonAlarmNoSpace         = "AlarmNoSpace"
	ReasonAlarmOfRemovedMember = "AlarmOfRemovedMember"
	ReasonNoSpaceNeedsOperator = "NoSpaceNeedsOperator"
	ReasonLearnerCaughtUp      = "LearnerCaughtUp"
	ReasonWaitingForLearner    = "WaitingForLearner"
	ReasonNotDesired           = "NotDesired"
	ReasonLeaderLeaving        = "LeaderLeaving"
	ReasonQuorumAtRisk         = "QuorumAtRisk"
	ReasonLastMember           = "LastMember"
	ReasonScaleUp              = "ScaleUp"
	ReasonMemberUnhealthy      = "MemberUnhealthy"
	// Pod finalizer reasons.
	ReasonClusterDown       = "ClusterDown"
	ReasonNotAMember        = "NotAMember"
	ReasonMemberStays       = "MemberStays"
	ReasonRemoveMemberFirst = "RemoveMemberFirst"
)

// Action is what Plan decided. Type None with a Reason says why nothing is done
// (in sync, waiting, or refused); the controller shows it as a condition.
type Action struct {
	Type    ActionType
	Reason  string
	Message string
	// Endpoint is the client URL the action is sent to.
	Endpoint string
	// Fallbacks are client URLs of other healthy voters that a membership
	// change is sent to, in order, when the member at Endpoint refuses it
	// with ErrUnhealthy. etcd checks that condition on the member that
	// receives the request, against its own view of its peers' connections,
	// and a member's view can lag: seen on a real node after every server pod
	// was replaced, the leader counted one peer as inactive for good (a
	// pipeline send to the peer's old address failed after the peer's stream
	// was up, and nothing marked it active again) and refused every removal,
	// while the other members saw all peers connected.
	Fallbacks []string
	// MemberID is the member acted on (the transferee for MoveLeader).
	MemberID uint64
	// PeerURL is the URL to add (AddLearner) or set (UpdatePeerURLs).
	PeerURL string
	// Revision is the revision to compact to (Compact).
	Revision int64
	// Alarm is the alarm to disarm (DisarmAlarm).
	Alarm Alarm
}

// Changes reports whether the action changes membership.
func (a Action) Changes() bool {
	switch a.Type {
	case ActionAddLearner, ActionPromoteLearner, ActionRemoveMember, ActionUpdatePeerURLs:
		return true
	}
	return false
}

// Learner promotion follows etcd's own rule: a learner is ready once it has
// applied 90% of what the leader has.
const learnerReadyPercent = 90

// Fragmentation above this share of the database makes a member worth
// defragmenting while recovering from NOSPACE.
const defragThresholdPercent = 20

// Disarm NOSPACE only when every member's database is below this share of its
// quota, so that disarming does not just raise the alarm again on the next write.
const disarmBelowPercent = 80

// Plan decides the single next step towards d from o. It is pure. In order:
// nothing when no member answers, when quorum is lost (no member can confirm
// the member list) or members disagree about membership; replace a member that
// lost its data; fix a peer URL; disarm the alarm of a member that is gone;
// handle alarms; promote a caught-up
// learner; remove a member nobody wants (dead ones first, the leader last, after
// moving leadership away); add the next missing member as a learner.
func Plan(o Observed, d Desired) Action {
	a := plan(o, d)
	if a.Changes() {
		exclude := []uint64{}
		if a.Type == ActionRemoveMember {
			exclude = append(exclude, a.MemberID)
		}
		for _, e := range healthyVoterEndpoints(o, exclude...) {
			if e != a.Endpoint {
				a.Fallbacks = append(a.Fallbacks, e)
			}
		}
	}
	return a
}

func plan(o Observed, d Desired) Action {
	if !o.AnyReachable() || len(o.Members) == 0 {
		return none(ReasonClusterUnreachable, "no etcd member answered")
	}
	if o.QuorumLost() {
		return none(ReasonQuorumLost, QuorumLostMessage(o))
	}
	if msg := disagreement(o); msg != "" {
		return none(ReasonMembershipConverging, msg)
	}
	voter := healthyVoterEndpoint(o)

	for _, p := range d.Members {
		m, ok := o.MemberFor(p)
		// Only the member the report names: after its replacement the report
		// may linger in the pod's status, and must not remove the new member
		// the first time it misses a probe.
		if p.LostMemberID != 0 && ok && m.ID == p.LostMemberID && m.Started() && !o.Healthy(m.ID) {
			return removal(o, m, ReasonReplaceLostMember,
				fmt.Sprintf("member %s is lost (its data, or the node it ran on); removing %s so it can rejoin under the same name", p.Name, FormatID(m.ID)))
		}
	}
	for _, p := range d.Members {
		m, ok := o.MemberFor(p)
		if ok && m.Started() && !slices.Equal(m.PeerURLs, []string{p.PeerURL}) && voter != "" {
			return Action{Type: ActionUpdatePeerURLs, Reason: ReasonPeerURLChanged, Endpoint: voter, MemberID: m.ID, PeerURL: p.PeerURL,
				Message: fmt.Sprintf("member %s advertises %v, want %s", p.Name, m.PeerURLs, p.PeerURL)}
		}
	}
	// etcd keeps an alarm after its member is removed, and no member can clear
	// it by getting better: the CORRUPT alarm of a replaced member would block
	// adding it again for ever. Such an alarm is about data that is gone with
	// the member, so it is disarmed. A cluster-wide alarm (member ID 0: etcd
	// could not tell whose data is corrupt) and alarms of current members are
	// left to the steps below.
	for _, al := range o.Alarms {
		if _, listed := o.Member(al.MemberID); al.MemberID != 0 && !listed && voter != "" {
			return Action{Type: ActionDisarmAlarm, Reason: ReasonAlarmOfRemovedMember, Endpoint: voter, MemberID: al.MemberID, Alarm: al,
				Message: fmt.Sprintf("disarming %s of member %s, which is no longer a member", al.Type, FormatID(al.MemberID))}
		}
	}
	if o.hasAlarm(AlarmCorrupt) {
		return none(ReasonAlarmCorrupt, "a CORRUPT alarm is raised: no automatic change is safe; see docs/etcd.md")
	}
	if o.hasAlarm(AlarmNoSpace) {
		return planNoSpace(o)
	}

	waiting := ""
	for _, m := range o.Members {
		if !m.IsLearner || !d.wants(m) {
			continue
		}
		if caughtUp(o, m) && voter != "" {
			return Action{Type: ActionPromoteLearner, Reason: ReasonLearnerCaughtUp, Endpoint: voter, MemberID: m.ID,
				Message: fmt.Sprintf("learner %s caught up", describe(m))}
		}
		waiting = fmt.Sprintf("learner %s is not caught up yet (its pod may still be starting)", describe(m))
	}

	if m, ok := nextUnwanted(o, d); ok {
		return removal(o, m, ReasonNotDesired, fmt.Sprintf("member %s has no desired pod", describe(m)))
	}

	for _, p := range d.Members {
		if _, ok := o.MemberFor(p); ok {
			continue
		}
		if waiting != "" {
			return none(ReasonWaitingForLearner, waiting)
		}
		for _, v := range o.voters() {
			if !o.Healthy(v.ID) {
				return none(ReasonMemberUnhealthy, fmt.Sprintf("not adding %s while member %s is unhealthy", p.Name, describe(v)))
			}
		}
		return Action{Type: ActionAddLearner, Reason: ReasonScaleUp, Endpoint: voter, PeerURL: p.PeerURL,
			Message: fmt.Sprintf("adding %s as a learner", p.Name)}
	}
	if waiting != "" {
		return none(ReasonWaitingForLearner, waiting)
	}
	return none(ReasonInSync, "membership matches the desired members")
}

// CanReleasePod decides whether the finalizer of server pod p may be removed now.
// It releases when the pod's member is gone already, when the pod stays a desired
// member (a restart or reschedule: the pod comes back under the same name with
// its data), and when no member answers at all or quorum is lost, since then
// nothing can be removed and holding the pod could only deadlock the cluster's
// recovery: the StatefulSet must be free to bring the pod back so that its
// member can restore quorum. Otherwise the
// member must be removed first, and the reason says whether Plan will do that
// (RemoveMemberFirst) or refuses (QuorumAtRisk, LastMember).
func CanReleasePod(o Observed, d Desired, p Peer) (bool, string) {
	if !o.AnyReachable() {
		return true, ReasonClusterDown
	}
	if o.QuorumLost() {
		return true, ReasonQuorumLost
	}
	m, ok := o.MemberFor(p)
	if !ok {
		return true, ReasonNotAMember
	}
	if d.wants(m) {
		return true, ReasonMemberStays
	}
	if ok, reason, _ := removable(o, m); !ok {
		return false, reason
	}
	return false, ReasonRemoveMemberFirst
}

// removal is the action that removes m: refused when removing it would leave
// fewer healthy voters than the quorum of the remaining voters, preceded by a
// leadership transfer when m leads.
func removal(o Observed, m Member, reason, msg string) Action {
	if ok, why, detail := removable(o, m); !ok {
		return none(why, msg+": refused: "+detail)
	}
	voter := healthyVoterEndpoint(o, m.ID)
	if m.ID == o.Leader {
		for _, v := range o.voters() {
			if v.ID != m.ID && caughtUp(o, v) {
				s, _ := o.Status(m.ID)
				return Action{Type: ActionMoveLeader, Reason: ReasonLeaderLeaving, Endpoint: s.Endpoint, MemberID: v.ID,
					Message: fmt.Sprintf("%s; moving leadership to %s first", msg, describe(v))}
			}
		}
		return none(ReasonLeaderLeaving, msg+": no caught-up member to take over leadership yet")
	}
	return Action{Type: ActionRemoveMember, Reason: reason, Endpoint: voter, MemberID: m.ID, Message: msg}
}

// removable projects the cluster after removing m.
func removable(o Observed, m Member) (bool, string, string) {
	if m.IsLearner {
		return true, "", ""
	}
	after := slices.DeleteFunc(o.voters(), func(v Member) bool { return v.ID == m.ID })
	if len(after) == 0 {
		return false, ReasonLastMember, "it is the last voting member"
	}
	healthy := 0
	for _, v := range after {
		if o.Healthy(v.ID) {
			healthy++
		}
	}
	if quorum := len(after)/2 + 1; healthy < quorum {
		return false, ReasonQuorumAtRisk, fmt.Sprintf("%d of the remaining %d voting members are healthy, quorum needs %d", healthy, len(after), quorum)
	}
	return true, "", ""
}

// nextUnwanted picks the member to remove first: learners, then members that do
// not answer, then followers, the leader last.
func nextUnwanted(o Observed, d Desired) (Member, bool) {
	var unwanted []Member
	for _, m := range o.Members {
		if !d.wants(m) {
			unwanted = append(unwanted, m)
		}
	}
	rank := func(m Member) int {
		switch {
		case m.IsLearner:
			return 0
		case !o.Healthy(m.ID):
			return 1
		case m.ID != o.Leader:
			return 2
		}
		return 3
	}
	slices.SortStableFunc(unwanted, func(a, b Member) int { return rank(a) - rank(b) })
	if len(unwanted) == 0 {
		return Member{}, false
	}
	return unwanted[0], true
}

// planNoSpace automates the safe part of the documented NOSPACE recovery. etcd
// raises NOSPACE on each member whose database file outgrows the quota, so the
// file of every member must shrink before any alarm is disarmed: compact the
// history when a member's space is live data, defragment fragmented members one
// at a time (followers first, the leader last), then disarm the alarms one by
// one. Compaction drops old revisions only; Kubernetes compacts them anyway.
func planNoSpace(o Observed) Action {
	var leader MemberStatus
	var big []MemberStatus
	for _, s := range o.Statuses {
		if !s.Reachable {
			continue
		}
		if s.MemberID == o.Leader {
			leader = s
		}
		if s.DBSizeQuota > 0 && s.DBSize*100 >= s.DBSizeQuota*disarmBelowPercent {
			big = append(big, s)
		}
	}
	if leader.Endpoint == "" {
		return none(ReasonAlarmNoSpace, "NOSPACE alarm raised and no leader answers")
	}
	slices.SortStableFunc(big, func(a, b MemberStatus) int {
		return boolInt(a.MemberID == o.Leader) - boolInt(b.MemberID == o.Leader)
	})
	for _, s := range big {
		if (s.DBSize-s.DBSizeInUse)*100 > s.DBSize*defragThresholdPercent {
			return Action{Type: ActionDefragment, Reason: ReasonAlarmNoSpace, Endpoint: s.Endpoint, MemberID: s.MemberID,
				Message: fmt.Sprintf("defragmenting member %s (%d of %d bytes in use)", FormatID(s.MemberID), s.DBSizeInUse, s.DBSize)}
		}
	}
	if len(big) > 0 {
		if leader.Revision > 1 {
			return Action{Type: ActionCompact, Reason: ReasonAlarmNoSpace, Endpoint: leader.Endpoint, Revision: leader.Revision,
				Message: fmt.Sprintf("compacting history up to revision %d (member %s: %d of %d bytes in use, quota %d)",
					leader.Revision, FormatID(big[0].MemberID), big[0].DBSizeInUse, big[0].DBSize, big[0].DBSizeQuota)}
		}
		return none(ReasonNoSpaceNeedsOperator, "the live data does not fit the quota: raise the quota (see docs/etcd.md)")
	}
	for _, a := range o.Alarms {
		if a.Type == AlarmNoSpace {
			return Action{Type: ActionDisarmAlarm, Reason: ReasonAlarmNoSpace, Endpoint: leader.Endpoint, MemberID: a.MemberID, Alarm: a,
				Message: fmt.Sprintf("disarming NOSPACE of member %s: every member's database is below %d%% of its quota", FormatID(a.MemberID), disarmBelowPercent)}
		}
	}
	return none(ReasonAlarmNoSpace, "NOSPACE alarm raised")
}

func caughtUp(o Observed, m Member) bool {
	s, ok := o.Status(m.ID)
	l, lok := o.Status(o.Leader)
	if !ok || !lok || !m.Started() {
		return false
	}
	return s.RaftAppliedIndex*100 >= l.RaftIndex*learnerReadyPercent
}

// disagreement describes how the confirmed views of the member list differ. A
// member that could not confirm its list (cut off from the quorum) is not
// compared: it is unhealthy, and must not block every step, its own removal
// included.
func disagreement(o Observed) string {
	var first *MemberStatus
	for i := range o.Statuses {
		s := &o.Statuses[i]
		if !s.Confirmed() || s.IsLearner {
			continue
		}
		if first == nil {
			first = s
			continue
		}
		if !slices.Equal(first.MemberIDs, s.MemberIDs) {
			return fmt.Sprintf("member %s lists %s but member %s lists %s",
				FormatID(first.MemberID), formatIDs(first.MemberIDs), FormatID(s.MemberID), formatIDs(s.MemberIDs))
		}
	}
	return ""
}

// healthyVoterEndpoint is a client URL of a healthy voting member other than
// the excluded ones, the leader's when it qualifies.
func healthyVoterEndpoint(o Observed, exclude ...uint64) string {
	if all := healthyVoterEndpoints(o, exclude...); len(all) > 0 {
		return all[0]
	}
	return ""
}

// healthyVoterEndpoints are the client URLs of the healthy voting members other
// than the excluded ones, the leader's first.
func healthyVoterEndpoints(o Observed, exclude ...uint64) []string {
	var out []string
	for _, v := range o.voters() {
		if slices.Contains(exclude, v.ID) || !o.Healthy(v.ID) {
			continue
		}
		s, _ := o.Status(v.ID)
		if v.ID == o.Leader {
			out = append([]string{s.Endpoint}, out...)
		} else {
			out = append(out, s.Endpoint)
		}
	}
	return out
}

// QuorumLostMessage says member by member what answered, for a cluster whose
// members cannot confirm a quorum.
func QuorumLostMessage(o Observed) string {
	voters, healthy := 0, 0
	for _, m := range o.voters() {
		voters++
		if o.Healthy(m.ID) {
			healthy++
		}
	}
	return fmt.Sprintf("quorum lost: %d of %d voting members healthy, %d needed; %s; nothing is changed until a majority is back; if it cannot come back, recover from the most advanced survivor with k3kcli cluster recover (see docs/etcd.md)",
		healthy, voters, voters/2+1, strings.Join(MemberReport(o), "; "))
}

// MemberReport says for each listed member what it answered: healthy, answered
// without quorum (and why), or not answering (and why).
func MemberReport(o Observed) []string {
	out := make([]string, 0, len(o.Members))
	for _, m := range o.Members {
		s, answered := o.Status(m.ID)
		switch {
		case answered && o.Healthy(m.ID):
			out = append(out, describe(m)+" healthy")
		case answered && s.QuorumError != "":
			out = append(out, fmt.Sprintf("%s answered but cannot reach a quorum (%s)", describe(m), s.QuorumError))
		case answered:
			out = append(out, describe(m)+" answered but knows no leader")
		default:
			why := "not asked"
			for _, st := range o.Statuses {
				if !st.Reachable && slices.Contains(m.ClientURLs, st.Endpoint) {
					why = st.Error
				}
			}
			out = append(out, fmt.Sprintf("%s not answering (%s)", describe(m), why))
		}
	}
	return out
}

func none(reason, msg string) Action { return Action{Type: ActionNone, Reason: reason, Message: msg} }

func describe(m Member) string {
	if m.Name != "" {
		return fmt.Sprintf("%s (%s)", m.Name, FormatID(m.ID))
	}
	return fmt.Sprintf("%s (%v, not started)", FormatID(m.ID), m.PeerURLs)
}

func formatIDs(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = FormatID(id)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
