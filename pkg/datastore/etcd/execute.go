package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Client is what Execute needs: Reader plus the one call per action. The real
// one is NewClient's; every call is addressed to one member's client URL.
type Client interface {
	Reader
	AddLearner(ctx context.Context, endpoint, peerURL string) error
	Promote(ctx context.Context, endpoint string, id uint64) error
	Remove(ctx context.Context, endpoint string, id uint64) error
	UpdatePeerURLs(ctx context.Context, endpoint string, id uint64, peerURLs []string) error
	MoveLeader(ctx context.Context, leaderEndpoint string, to uint64) error
	Compact(ctx context.Context, endpoint string, rev int64) error
	Defragment(ctx context.Context, endpoint string) error
	Disarm(ctx context.Context, endpoint string, a Alarm) error
}

// Errors a Client returns for etcd's answers that Execute must tell apart.
var (
	// ErrMemberNotFound: the member is not (or no longer) in the cluster.
	ErrMemberNotFound = errors.New("etcd member not found")
	// ErrPeerURLExists: a member with the peer URL is already in the cluster.
	ErrPeerURLExists = errors.New("etcd peer URL already exists")
	// ErrNotLearner: the member is a voting member already.
	ErrNotLearner = errors.New("etcd member is not a learner")
	// ErrLearnerNotReady: etcd refused to promote a learner that lags behind;
	// retry on a later reconcile.
	ErrLearnerNotReady = errors.New("etcd learner not caught up with the leader")
	// ErrUnhealthy: etcd refused a membership change because a member has not
	// been connected long enough (strict reconfiguration check); retry later.
	ErrUnhealthy = errors.New("etcd refused the change: cluster not healthy long enough")
	// ErrCompacted: the revision is compacted already.
	ErrCompacted = errors.New("etcd revision already compacted")
)

// ActionTimeout bounds one action. Defragmentation of a large database can take
// longer than a membership change, and blocks only the member being defragmented.
const ActionTimeout = 30 * time.Second

// Execute performs a, and nothing else. A step that turns out to be done
// already (the member is gone, the learner was added or promoted, the history
// compacted) succeeds, so that a reconcile repeated after a crash or a conflict
// is harmless. ErrLearnerNotReady and ErrUnhealthy are returned wrapped: etcd
// said "not yet"; requeue and try again.
//
// A membership change refused with ErrUnhealthy is sent again through each of
// a.Fallbacks in turn (see Action.Fallbacks); at most one of them can succeed,
// so this is still one change.
func Execute(ctx context.Context, c Client, a Action) error {
	ctx, cancel := context.WithTimeout(ctx, ActionTimeout)
	defer cancel()
	err := execute(ctx, c, a)
	for _, e := range a.Fallbacks {
		if !errors.Is(err, ErrUnhealthy) {
			break
		}
		b := a
		b.Endpoint = e
		err = execute(ctx, c, b)
	}
	return err
}

func execute(ctx context.Context, c Client, a Action) error {
	var err error
	switch a.Type {
	case ActionNone:
		return nil
	case ActionAddLearner:
		if err = c.AddLearner(ctx, a.Endpoint, a.PeerURL); errors.Is(err, ErrPeerURLExists) {
			err = nil
		}
	case ActionPromoteLearner:
		if err = c.Promote(ctx, a.Endpoint, a.MemberID); errors.Is(err, ErrNotLearner) {
			err = nil
		}
	case ActionRemoveMember:
		if err = c.Remove(ctx, a.Endpoint, a.MemberID); errors.Is(err, ErrMemberNotFound) {
			err = nil
		}
	case ActionUpdatePeerURLs:
		err = c.UpdatePeerURLs(ctx, a.Endpoint, a.MemberID, []string{a.PeerURL})
	case ActionMoveLeader:
		err = c.MoveLeader(ctx, a.Endpoint, a.MemberID)
	case ActionCompact:
		if err = c.Compact(ctx, a.Endpoint, a.Revision); errors.Is(err, ErrCompacted) {
			err = nil
		}
	case ActionDefragment:
		err = c.Defragment(ctx, a.Endpoint)
	case ActionDisarmAlarm:
		err = c.Disarm(ctx, a.Endpoint, a.Alarm)
	default:
		return fmt.Errorf("unknown etcd action %q", a.Type)
	}
	if err != nil {
		return fmt.Errorf("%s (member %s via %s): %w", a.Type, FormatID(a.MemberID), a.Endpoint, err)
	}
	return nil
}

// Result is one reconcile's worth of membership management.
type Result struct {
	Observed Observed
	// Action is what Plan chose; it was executed when Err is nil.
	Action Action
}

// Reconcile observes the cluster through c, plans one step towards d and
// performs it. The controller requeues after any action other than None, and
// after a None that is waiting (any reason but InSync).
func Reconcile(ctx context.Context, c Client, d Desired) (Result, error) {
	o := Observe(ctx, c, d.Endpoints())
	a := Plan(o, d)
	return Result{Observed: o, Action: a}, Execute(ctx, c, a)
}
