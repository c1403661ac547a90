package etcd

import (
	"slices"
)

// Member is one etcd member as the cluster lists it.
type Member struct {
	ID uint64
	// Name is empty until the member has started once and published itself.
	Name       string
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// Started reports whether the member has ever run: etcd fills in the name only then.
func (m Member) Started() bool { return m.Name != "" }

// AlarmType is an etcd alarm.
type AlarmType string

// The alarms etcd raises. Both stop the cluster from accepting writes.
const (
	AlarmNoSpace AlarmType = "NOSPACE"
	AlarmCorrupt AlarmType = "CORRUPT"
)

// Alarm is one alarm raised on one member.
type Alarm struct {
	MemberID uint64
	Type     AlarmType
}

// MemberStatus is what one endpoint said about itself, or why it did not answer.
type MemberStatus struct {
	Endpoint  string
	Reachable bool
	// Error is why the endpoint was not reachable (empty when it was).
	Error string

	MemberID         uint64
	Leader           uint64
	IsLearner        bool
	RaftTerm         uint64
	RaftIndex        uint64
	RaftAppliedIndex uint64
	Revision         int64
	DBSize           int64
	DBSizeInUse      int64
	DBSizeQuota      int64
	// MemberIDs is the member list as this member sees it, sorted.
	MemberIDs []uint64
	// QuorumError is set when the member answered for itself but could not
	// confirm its member list with a linearizable read: it is cut off from a
	// quorum (partitioned, or the cluster lost quorum). Such a member is not
	// healthy and its member list is not trusted (kubeadm reads the list the
	// same way). Learners are never asked.
	QuorumError string
}

// Confirmed reports whether the member answered and confirmed its member list
// through a quorum (or is a learner, which is not asked for one).
func (s MemberStatus) Confirmed() bool { return s.Reachable && s.QuorumError == "" }

// Observed is the cluster as seen now. It is a plain value so that Plan and
// CanReleasePod can be table-tested without etcd.
type Observed struct {
	// Members is the member list as reported by the leader (or, with no leader
	// reachable, by the first member that confirmed it). When no member could
	// confirm a list (quorum lost) it is the list a member that answered holds,
	// unconfirmed, and MembersUnconfirmed is set: good for reporting which
	// members exist, never for deciding a change.
	Members            []Member
	MembersUnconfirmed bool
	// Leader is the leader's ID, 0 when no reachable member knows one.
	Leader uint64
	Alarms []Alarm
	// AlarmsUnknown says why the alarms could not be listed; Alarms is then
	// empty, which must not be read as "no alarm".
	AlarmsUnknown string
	// Statuses has one entry per endpoint asked, reachable or not.
	Statuses []MemberStatus
}

// Status returns the status of the member with id, if that member answered.
func (o Observed) Status(id uint64) (MemberStatus, bool) {
	for _, s := range o.Statuses {
		if s.Reachable && s.MemberID == id {
			return s, true
		}
	}
	return MemberStatus{}, false
}

// Healthy reports whether the member with id answered, knows a leader and (for
// a voter) confirmed the member list through a quorum.
func (o Observed) Healthy(id uint64) bool {
	s, ok := o.Status(id)
	return ok && s.Leader != 0 && s.QuorumError == ""
}

// QuorumLost reports whether members answered but none of them could confirm
// the member list through a quorum: nothing can be changed until a majority of
// the voters is back (or an operator recovers the cluster from a survivor).
func (o Observed) QuorumLost() bool {
	return o.AnyReachable() && o.MembersUnconfirmed
}

// AnyReachable reports whether any member answered at all.
func (o Observed) AnyReachable() bool {
	return slices.ContainsFunc(o.Statuses, func(s MemberStatus) bool { return s.Reachable })
}

// Member returns the member with id.
func (o Observed) Member(id uint64) (Member, bool) {
	i := slices.IndexFunc(o.Members, func(m Member) bool { return m.ID == id })
	if i < 0 {
		return Member{}, false
	}
	return o.Members[i], true
}

// MemberFor returns the member that is peer p: the one with p's name, or, for a
// member that has not started yet (and so has no name), the one with p's peer URL.
func (o Observed) MemberFor(p Peer) (Member, bool) {
	for _, m := range o.Members {
		if m.Name == p.Name || (!m.Started() && slices.Contains(m.PeerURLs, p.PeerURL)) {
			return m, true
		}
	}
	return Member{}, false
}

func (o Observed) voters() []Member {
	return slices.DeleteFunc(slices.Clone(o.Members), func(m Member) bool { return m.IsLearner })
}

func (o Observed) hasAlarm(t AlarmType) bool {
	return slices.ContainsFunc(o.Alarms, func(a Alarm) bool { return a.Type == t })
}

// Peer is one server pod that should be an etcd member.
type Peer struct {
	// Name is the pod name, the member's identity.
	Name string
	// PeerURL and ClientURL are built from the pod's DNS name, e.g.
	// https://<pod>.k3k-<cluster>-server-headless.<ns>.svc:2380.
	PeerURL   string
	ClientURL string
	// LostMemberID is set by the controller when the pod's sidecar reported
	// member.ErrDataLost (its data dir is empty but the roster lists it as a
	// started member): the ID of the member whose data is gone. That member is
	// removed and the pod added again under the same name. The ID makes the
	// report about one member: once that member is replaced, an old report left
	// in the container's last state can never remove the new one.
	LostMemberID uint64
}

// Desired is the membership the controller wants: every server pod that should
// be a member, in ordinal order (scale-up adds them in this order).
type Desired struct {
	Members []Peer
}

func (d Desired) wants(m Member) bool {
	for _, p := range d.Members {
		if m.Name == p.Name || (!m.Started() && slices.Contains(m.PeerURLs, p.PeerURL)) {
			return true
		}
	}
	return false
}

// Endpoints returns the client URLs to observe: every desired member's.
// Observe adds the client URLs of listed members on its own.
func (d Desired) Endpoints() []string {
	out := make([]string, 0, len(d.Members))
	for _, p := range d.Members {
		out = append(out, p.ClientURL)
	}
	return out
}
