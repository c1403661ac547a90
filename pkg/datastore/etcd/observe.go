package etcd

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// Reader is what Observe needs from etcd. Every call is addressed to one member's
// client URL, so that each member's own view is seen, not a load balancer's.
type Reader interface {
	// Status fills everything in MemberStatus but Endpoint, Reachable, Error
	// and MemberIDs.
	Status(ctx context.Context, endpoint string) (MemberStatus, error)
	// MemberList is the member list as that member sees it. Linearizable, it
	// is confirmed through a quorum (kubeadm reads it so): a member cut off
	// from its peers cannot answer it and so never passes off a stale list as
	// the cluster's. Serializable, it is the member's own copy, answered even
	// without quorum; Observe uses it only to report on a cluster that lost
	// quorum.
	MemberList(ctx context.Context, endpoint string, linearizable bool) ([]Member, error)
	AlarmList(ctx context.Context, endpoint string) ([]Alarm, error)
}

// ProbeTimeout bounds each call Observe makes, so that a dead member costs a
// reconcile a few seconds, not a hang. The real Client may bound its calls more
// tightly (ClientConfig.CallTimeout).
const ProbeTimeout = 3 * time.Second

// Observe asks every endpoint, and every client URL the members list, for its
// status and member list, and the cluster for its alarms. It never fails: an
// endpoint that does not answer is recorded as unreachable with the reason.
func Observe(ctx context.Context, r Reader, endpoints []string) Observed {
	var o Observed
	asked := map[string]bool{}
	lists := map[uint64][]Member{}
	round := endpoints
	// Members are probed concurrently, round by round (the endpoints given, then
	// client URLs those members list that were not asked yet), so that dead
	// members cost one timeout, not one each.
	for len(round) > 0 {
		var todo []string
		for _, ep := range round {
			if ep != "" && !asked[ep] {
				asked[ep] = true
				todo = append(todo, ep)
			}
		}
		type answer struct {
			st      MemberStatus
			members []Member
		}
		answers := make([]answer, len(todo))
		var wg sync.WaitGroup
		for i, ep := range todo {
			wg.Go(func() {
				st, members, err := probe(ctx, r, ep)
				if err != nil {
					st = MemberStatus{Endpoint: ep, Error: err.Error()}
				}
				answers[i] = answer{st, members}
			})
		}
		wg.Wait()
		round = nil
		for _, a := range answers {
			o.Statuses = append(o.Statuses, a.st)
			if !a.st.Reachable {
				continue
			}
			lists[a.st.MemberID] = a.members
			for _, m := range a.members {
				round = append(round, m.ClientURLs...)
			}
		}
	}
	// The leader's confirmed view wins; a follower's can only lag behind it.
	var viewer *MemberStatus
	for i := range o.Statuses {
		s := &o.Statuses[i]
		if !s.Reachable {
			continue
		}
		if s.Confirmed() && !s.IsLearner && (viewer == nil || (s.Leader != 0 && s.MemberID == s.Leader)) {
			viewer = s
		}
		if s.Leader != 0 && o.Leader == 0 && s.Confirmed() {
			o.Leader = s.Leader
		}
	}
	if viewer == nil {
		// No member confirmed its list: quorum is lost (or only learners
		// answered). Report the list of the most advanced member that has one,
		// marked unconfirmed, so the status can say member by member what
		// answered; Plan changes nothing on it.
		for i := range o.Statuses {
			s := &o.Statuses[i]
			if s.Reachable && !s.IsLearner && lists[s.MemberID] != nil && (viewer == nil || s.RaftIndex > viewer.RaftIndex) {
				viewer = s
			}
		}
		if viewer == nil {
			return o
		}
		o.Members, o.MembersUnconfirmed = lists[viewer.MemberID], true
		o.AlarmsUnknown = "no member could confirm quorum, so the alarms could not be listed"
		return o
	}
	o.Members = lists[viewer.MemberID]
	// Alarms are cluster-wide; ask a voting member that has quorum (learners
	// refuse the call). A failure is reported, never read as "no alarm".
	var errs []string
	for _, s := range o.Statuses {
		if s.Confirmed() && !s.IsLearner {
			actx, cancel := context.WithTimeout(ctx, ProbeTimeout)
			alarms, err := r.AlarmList(actx, s.Endpoint)
			cancel()
			if err == nil {
				o.Alarms, errs = alarms, nil
				break
			}
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		o.AlarmsUnknown = "listing the alarms failed: " + strings.Join(errs, "; ")
	}
	return o
}

func probe(ctx context.Context, r Reader, ep string) (MemberStatus, []Member, error) {
	sctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	st, err := r.Status(sctx, ep)
	if err != nil {
		return MemberStatus{}, nil, err
	}
	st.Endpoint, st.Reachable, st.Error = ep, true, ""
	if st.IsLearner {
		// Learners serve no member list; their view is not compared.
		return st, nil, nil
	}
	lctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	members, err := r.MemberList(lctx, ep, true)
	if err != nil {
		// The member answers for itself but not through a quorum. Its own copy
		// of the list is kept for the report only.
		st.QuorumError = err.Error()
		uctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
		defer cancel()
		if members, err = r.MemberList(uctx, ep, false); err != nil {
			return st, nil, nil
		}
	}
	st.MemberIDs = make([]uint64, 0, len(members))
	for _, m := range members {
		st.MemberIDs = append(st.MemberIDs, m.ID)
	}
	slices.Sort(st.MemberIDs)
	return st, members, nil
}
