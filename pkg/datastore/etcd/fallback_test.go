package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// refusingClient answers Remove, AddLearner, Promote and UpdatePeerURLs with
// the error its refuse map holds for the endpoint asked, and records the
// endpoints in the order they were asked. etcd's strict reconfiguration check
// runs on the member that receives the request, against that member's view of
// its peers; a member whose view lags (seen on a real node, see
// Action.Fallbacks) refuses what the others accept. That lag cannot be brought
// about on demand in real etcd, so this client stands for the members' answers.
type refusingClient struct {
	Reader
	refuse map[string]error
	asked  []string
}

func (c *refusingClient) answer(endpoint string) error {
	c.asked = append(c.asked, endpoint)
	if err := c.refuse[endpoint]; err != nil {
		return fmt.Errorf("etcdserver: %w", err)
	}
	return nil
}

func (c *refusingClient) AddLearner(_ context.Context, endpoint, _ string) error {
	return c.answer(endpoint)
}
func (c *refusingClient) Promote(_ context.Context, endpoint string, _ uint64) error {
	return c.answer(endpoint)
}
func (c *refusingClient) Remove(_ context.Context, endpoint string, _ uint64) error {
	return c.answer(endpoint)
}
func (c *refusingClient) UpdatePeerURLs(_ context.Context, endpoint string, _ uint64, _ []string) error {
	return c.answer(endpoint)
}
func (c *refusingClient) MoveLeader(_ context.Context, endpoint string, _ uint64) error {
	return c.answer(endpoint)
}
func (c *refusingClient) Compact(_ context.Context, endpoint string, _ int64) error {
	return c.answer(endpoint)
}
func (c *refusingClient) Defragment(_ context.Context, endpoint string) error {
	return c.answer(endpoint)
}
func (c *refusingClient) Disarm(_ context.Context, endpoint string, _ Alarm) error {
	return c.answer(endpoint)
}

func TestARemovalNamesTheOtherHealthyVotersAsFallbacksLeaderFirst(t *testing.T) {
	w := world{members: []Member{voter(1, "s0"), voter(2, "s1"), voter(3, "s2")}, leader: 2}
	a := Plan(w.observed(), want("s0", "s1"))
	if a.Type != ActionRemoveMember || a.MemberID != 3 {
		t.Fatalf("plan: %+v, want the removal of s2", a)
	}
	if a.Endpoint != ep("s1") {
		t.Errorf("sent to %s, want the leader %s", a.Endpoint, ep("s1"))
	}
	if !slices.Equal(a.Fallbacks, []string{ep("s0")}) {
		t.Errorf("fallbacks %v, want [%s]: the other healthy voter, never the member removed", a.Fallbacks, ep("s0"))
	}
}

func TestActionsThatChangeNoMembershipHaveNoFallbacks(t *testing.T) {
	w := world{members: []Member{voter(1, "s0"), voter(2, "s1"), voter(3, "s2")}, leader: 3}
	a := Plan(w.observed(), want("s0", "s1"))
	if a.Type != ActionMoveLeader {
		t.Fatalf("plan: %+v, want leadership moved off s2 first", a)
	}
	if len(a.Fallbacks) != 0 {
		t.Errorf("fallbacks %v on %s", a.Fallbacks, a.Type)
	}
}

func TestExecuteSendsARefusedChangeThroughTheFallbacksInTurn(t *testing.T) {
	remove := Action{Type: ActionRemoveMember, MemberID: 3, Endpoint: "a", Fallbacks: []string{"b", "c"}}
	cases := []struct {
		name      string
		action    Action
		refuse    map[string]error
		wantAsked []string
		wantErr   error
	}{
		{"the first member accepts: nobody else is asked", remove,
			nil, []string{"a"}, nil},
		{"the first refuses as unhealthy, the second accepts", remove,
			map[string]error{"a": ErrUnhealthy}, []string{"a", "b"}, nil},
		{"all refuse as unhealthy: the last refusal is returned", remove,
			map[string]error{"a": ErrUnhealthy, "b": ErrUnhealthy, "c": ErrUnhealthy}, []string{"a", "b", "c"}, ErrUnhealthy},
		{"another error stops at once", remove,
			map[string]error{"a": ErrLearnerNotReady}, []string{"a"}, ErrLearnerNotReady},
		{"a learner not caught up is not sent elsewhere",
			Action{Type: ActionPromoteLearner, MemberID: 4, Endpoint: "a", Fallbacks: []string{"b"}},
			map[string]error{"a": ErrLearnerNotReady}, []string{"a"}, ErrLearnerNotReady},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &refusingClient{refuse: tc.refuse}
			err := Execute(context.Background(), c, tc.action)
			if !slices.Equal(c.asked, tc.wantAsked) {
				t.Errorf("asked %v, want %v", c.asked, tc.wantAsked)
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
		})
	}
}
