package etcd_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/etcd/member"
)

func TestScalingOneThreeFiveThreeOneChangesOneMemberAtATimeAndKeepsTheData(t *testing.T) {
	c := newCluster(t)
	c.bootstrap("m0")
	c.write()
	steps := []struct {
		names                   []string
		adds, promotes, removes int
	}{
		{[]string{"m0", "m1", "m2"}, 2, 2, 0},
		{[]string{"m0", "m1", "m2", "m3", "m4"}, 2, 2, 0},
		{[]string{"m0", "m1", "m2"}, 0, 0, 2},
		{[]string{"m0"}, 0, 0, 2},
	}
	for _, s := range steps {
		d := c.desired(s.names...)
		n := countChanges(c.converge(d))
		if n[etcd.ActionAddLearner] != s.adds || n[etcd.ActionPromoteLearner] != s.promotes || n[etcd.ActionRemoveMember] != s.removes {
			t.Fatalf("scaling to %v: changes %v, want %d adds, %d promotions, %d removals", s.names, n, s.adds, s.promotes, s.removes)
		}
		o := c.waitHealthy(d)
		if got := len(o.Members); got != len(s.names) {
			t.Fatalf("scaling to %v: %d members", s.names, got)
		}
		for _, m := range o.Members {
			if m.IsLearner {
				t.Fatalf("scaling to %v: %s is still a learner", s.names, m.Name)
			}
		}
		for _, name := range s.names {
			c.checkData(name)
		}
	}
}

func TestAMemberRestartingOnAnotherAddressStaysTheSameMember(t *testing.T) {
	c, d := threeMembers(t)
	before := memberIDs(c.waitHealthy(d))

	oldIP := c.ips["m1"]
	c.stop("m1")
	c.mustStart("m1") // same data dir, new address, DNS record updated
	if c.ips["m1"].Equal(oldIP) {
		t.Fatal("test bug: the member did not move")
	}
	c.waitReady("m1")
	o := c.waitHealthy(d)
	if after := memberIDs(o); !maps.Equal(before, after) {
		t.Fatalf("membership changed: before %v, after %v", before, after)
	}
	if a := etcd.Plan(o, d); a.Type != etcd.ActionNone || a.Reason != etcd.ReasonInSync {
		t.Fatalf("plan after the move: %+v, want nothing to do", a)
	}
	c.write()
	c.checkData("m1")
}

func TestEveryMemberRestartingOnNewAddressesComesBackWithoutHelp(t *testing.T) {
	c, d := threeMembers(t)
	before := memberIDs(c.waitHealthy(d))

	for _, n := range []string{"m0", "m1", "m2"} {
		c.stop(n)
	}
	o := etcd.Observe(c.ctx, c.client, c.endpoints(d))
	if ok, reason := etcd.CanReleasePod(o, etcd.Desired{}, c.peer("m0")); !ok || reason != etcd.ReasonClusterDown {
		t.Fatalf("finalizer with every member down: release=%v %s, want release with %s", ok, reason, etcd.ReasonClusterDown)
	}
	// The host comes back: every pod gets a new address and they start together.
	for _, n := range []string{"m2", "m0", "m1"} {
		c.mustStart(n)
	}
	c.waitReady("m0", "m1", "m2")
	o = c.waitHealthy(d)
	if after := memberIDs(o); !maps.Equal(before, after) {
		t.Fatalf("membership changed: before %v, after %v", before, after)
	}
	c.write()
	for _, n := range []string{"m0", "m1", "m2"} {
		c.checkData(n)
	}
}

func TestAMemberWhoseDataDirWasLostIsReplacedUnderItsNameAndCatchesUp(t *testing.T) {
	c, d := threeMembers(t)
	oldID := memberIDs(c.waitHealthy(d))["m2"]

	c.stop("m2")
	if err := os.RemoveAll(c.dataDir("m2")); err != nil {
		t.Fatal(err)
	}
	err := c.start("m2")
	if !errors.Is(err, member.ErrDataLost) {
		t.Fatalf("starting with a wiped data dir: %v, want ErrDataLost", err)
	}
	// The controller sees the member's termination message and marks it.
	d.Members[2].LostMemberID = oldID
	actions := c.converge(d)
	if actions[0].Type != etcd.ActionRemoveMember || actions[0].MemberID != oldID || actions[0].Reason != etcd.ReasonReplaceLostMember {
		t.Fatalf("first action %+v, want removal of the old member %x", actions[0], oldID)
	}
	if n := countChanges(actions); n[etcd.ActionAddLearner] != 1 || n[etcd.ActionPromoteLearner] != 1 {
		t.Fatalf("changes %v, want one learner added and promoted", n)
	}
	o := c.waitHealthy(d)
	if newID := memberIDs(o)["m2"]; newID == oldID || newID == 0 {
		t.Fatalf("m2 has id %x, old id %x", newID, oldID)
	}
	c.checkData("m2")
}

func TestAnOrphanIsRemovedButARemovalThatWouldLoseQuorumIsRefused(t *testing.T) {
	c := newCluster(t)
	c.bootstrap("m0")
	c.converge(c.desired("m0", "m1", "m2", "m3"))
	c.write()

	// m3's pod is gone for good: its member is an orphan.
	c.stop("m3")
	d := c.desired("m0", "m1", "m2")
	actions := c.converge(d)
	if len(actions) != 1 || actions[0].Type != etcd.ActionRemoveMember || actions[0].Reason != etcd.ReasonNotDesired {
		t.Fatalf("actions %+v, want one removal of the orphan", actions)
	}
	c.waitHealthy(d)

	// m1 is down; removing m2 (healthy) would leave m0 alone of two voters.
	c.stop("m1")
	d = c.desired("m0", "m1")
	o := etcd.Observe(c.ctx, c.client, c.endpoints(d))
	a := etcd.Plan(o, d)
	if a.Type != etcd.ActionNone || a.Reason != etcd.ReasonQuorumAtRisk || !strings.Contains(a.Message, "quorum") {
		t.Fatalf("plan %+v, want a refusal for quorum", a)
	}
	if ok, reason := etcd.CanReleasePod(o, d, c.peer("m2")); ok || reason != etcd.ReasonQuorumAtRisk {
		t.Fatalf("finalizer of m2: release=%v %s, want hold with %s", ok, reason, etcd.ReasonQuorumAtRisk)
	}
	if ok, reason := etcd.CanReleasePod(o, d, c.peer("m3")); !ok || reason != etcd.ReasonNotAMember {
		t.Fatalf("finalizer of the removed m3: release=%v %s, want release with %s", ok, reason, etcd.ReasonNotAMember)
	}
	if ok, reason := etcd.CanReleasePod(o, d, c.peer("m0")); !ok || reason != etcd.ReasonMemberStays {
		t.Fatalf("finalizer of a restarting m0: release=%v %s, want release with %s", ok, reason, etcd.ReasonMemberStays)
	}
	// Nothing was removed.
	if got := len(etcd.Observe(c.ctx, c.client, c.endpoints(d)).Members); got != 3 {
		t.Fatalf("%d members after a refused removal, want 3", got)
	}
	c.mustStart("m1")
	c.waitReady("m1")
	c.waitHealthy(c.desired("m0", "m1", "m2"))
}

func TestNoSpaceIsReportedAndTheDocumentedRecoveryWorks(t *testing.T) {
	c := newCluster(t)
	c.quota = 4 << 20
	c.bootstrap("m0")
	d := c.desired("m0", "m1", "m2")
	c.converge(d)

	cl := c.voterClient()
	value := strings.Repeat("x", 256<<10)
	var putErr error
	for i := 0; i < 200 && putErr == nil; i++ {
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		_, putErr = cl.Put(ctx, "/k3k/big", value)
		cancel()
	}
	if putErr == nil || !strings.Contains(putErr.Error(), "database space exceeded") {
		t.Fatalf("filling the database: %v, want a no space error", putErr)
	}
	o := etcd.Observe(c.ctx, c.client, c.endpoints(d))
	conds := etcd.Conditions(o, 1)
	if conds[1].Type != etcd.ConditionAlarm || conds[1].Status != "True" || conds[1].Reason != etcd.ReasonAlarmNoSpace {
		t.Fatalf("alarm condition %+v, want True/%s", conds[1], etcd.ReasonAlarmNoSpace)
	}
	if conds[0].Status != "False" {
		t.Fatalf("healthy condition %+v with an alarm raised", conds[0])
	}

	// Whether the history must be compacted is the planner's call from what
	// it observes when it acts (plan_test.go checks the call itself): a
	// member whose live data is below the disarm level gets there by
	// defragmentation alone. Bolt counts pages freed by transactions still
	// pending as in use, so the level read right after the fill says
	// nothing about the planner's view moments later (in two cold CI runs a
	// member read above it here was at 57% when defragmented). What the
	// recovery must achieve is checked instead: every member's database
	// file below the disarm level (as the planner requires before it
	// disarms), no alarm, writes accepted.
	actions := c.converge(d)
	n := countChanges(actions)
	t.Logf("recovery actions %v", n)
	if n[etcd.ActionDefragment] < 1 || n[etcd.ActionDisarmAlarm] < 1 {
		t.Fatalf("recovery actions %v, want defragmentation of the fragmented members and a disarm", n)
	}
	after := etcd.Observe(c.ctx, c.client, c.endpoints(d))
	for _, s := range after.Statuses {
		if !s.Reachable || s.DBSizeQuota == 0 || s.DBSize*100 >= s.DBSizeQuota*80 {
			t.Errorf("after recovery a member is unreachable or its database is not below 80%% of its quota: %+v", s)
		}
	}
	if conds := etcd.Conditions(after, 1); conds[1].Status != "False" {
		t.Errorf("alarm condition after recovery %+v, want False", conds[1])
	}
	for _, a := range actions {
		if a.Changes() {
			t.Fatalf("recovery changed membership: %+v", a)
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	if _, err := cl.Put(ctx, "/k3k/after", "ok"); err != nil {
		t.Fatalf("writing after recovery: %v", err)
	}
	c.waitHealthy(d)
}
