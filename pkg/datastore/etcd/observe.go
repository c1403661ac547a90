package etcd

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Reader is what Observe needs from etcd. Every call is addressed to one member's
// client URL, so that each member's own view is seen, not a load balancer's.
type Reader interface {
	// Status fills everything in MemberStatus but Endpoint, Reachable, Error
	// and MemberIDs.
	Status(ctx context.Context, endpoint string) (MemberStatus, error)
	// MemberList is the member list as that member sees it (serializable), so
	// that a member that disagrees with the others shows up.
	MemberList(ctx context.Context, endpoint string) ([]Member, error)
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
	// The leader's view wins; a follower's view can only lag behind it.
	var viewer *MemberStatus
	for i := range o.Statuses {
		s := &o.Statuses[i]
		if !s.Reachable {
			continue
		}
		if !s.IsLearner && (viewer == nil || (s.Leader != 0 && s.MemberID == s.Leader)) {
			viewer = s
		}
		if s.Leader != 0 && o.Leader == 0 {
			o.Leader = s.Leader
		}
	}
	if viewer == nil {
		return o
	}
	o.Members = lists[viewer.MemberID]
	// Alarms are cluster-wide; ask a voting member (learners refuse the call).
	for _, s := range o.Statuses {
		if s.Reachable && !s.IsLearner {
			actx, cancel := context.WithTimeout(ctx, ProbeTimeout)
			alarms, err := r.AlarmList(actx, s.Endpoint)
			cancel()
			if err == nil {
				o.Alarms = alarms
				break
			}
		}
	}
	return o
}

func probe(ctx context.Context, r Reader, ep string) (MemberStatus, []Member, error) {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	st, err := r.Status(ctx, ep)
	if err != nil {
		return MemberStatus{}, nil, err
	}
	st.Endpoint, st.Reachable, st.Error = ep, true, ""
	if st.IsLearner {
		// Learners serve no member list; their view is not compared.
		return st, nil, nil
	}
	members, err := r.MemberList(ctx, ep)
	if err != nil {
		return MemberStatus{}, nil, err
	}
	st.MemberIDs = make([]uint64, 0, len(members))
	for _, m := range members {
		st.MemberIDs = append(st.MemberIDs, m.ID)
	}
	slices.Sort(st.MemberIDs)
	return st, members, nil
}
