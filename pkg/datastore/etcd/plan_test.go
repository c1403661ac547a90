package etcd

import (
	"strings"
	"testing"
)

// world builds an Observed from a compact description: members by name, which
// of them answer, who leads.
type world struct {
	members  []Member
	down     map[uint64]bool
	leader   uint64
	alarms   []Alarm
	lagging  map[uint64]bool
	disagree bool
	// cutOff members answer for themselves but cannot confirm a quorum; they
	// list only themselves (a stale view).
	cutOff map[uint64]bool
	// noQuorum: no member confirms a quorum (2 of 3 down, say); Members is
	// the survivors' unconfirmed view.
	noQuorum bool
}

func (w world) observed() Observed {
	o := Observed{Members: w.members, Leader: w.leader, Alarms: w.alarms, MembersUnconfirmed: w.noQuorum}
	ids := make([]uint64, 0, len(w.members))
	for _, m := range w.members {
		ids = append(ids, m.ID)
	}
	for i, m := range w.members {
		if w.down[m.ID] || !m.Started() {
			o.Statuses = append(o.Statuses, MemberStatus{Endpoint: ep(m.Name), Error: "unreachable"})
			continue
		}
		applied := uint64(1000)
		if w.lagging[m.ID] {
			applied = 10
		}
		list := ids
		if w.disagree && i == 0 {
			list = ids[:len(ids)-1]
		}
		st := MemberStatus{Endpoint: ep(m.Name), Reachable: true, MemberID: m.ID, Leader: w.leader,
			IsLearner: m.IsLearner, RaftIndex: 1000, RaftAppliedIndex: applied, MemberIDs: list}
		if w.cutOff[m.ID] || w.noQuorum {
			st.QuorumError = "context deadline exceeded"
		}
		if w.cutOff[m.ID] {
			st.MemberIDs = []uint64{m.ID}
		}
		o.Statuses = append(o.Statuses, st)
	}
	return o
}

func ep(name string) string { return "https://" + name + ".svc:2379" }

func peer(name string) Peer {
	return Peer{Name: name, PeerURL: "https://" + name + ".svc:2380", ClientURL: ep(name)}
}

func voter(id uint64, name string) Member {
	return Member{ID: id, Name: name, PeerURLs: []string{"https://" + name + ".svc:2380"}, ClientURLs: []string{ep(name)}}
}

func learner(id uint64, name string, started bool) Member {
	m := voter(id, name)
	m.IsLearner = true
	if !started {
		m.Name, m.ClientURLs = "", nil
	}
	return m
}

func want(names ...string) Desired {
	var d Desired
	for _, n := range names {
		d.Members = append(d.Members, peer(n))
	}
	return d
}

func TestPlan(t *testing.T) {
	three := []Member{voter(1, "m0"), voter(2, "m1"), voter(3, "m2")}
	lost := want("m0", "m1", "m2")
	lost.Members[2].LostMemberID = 3
	// The report of a member that was replaced since (3 became 33) lingers
	// in the pod's last state.
	replaced := []Member{voter(1, "m0"), voter(2, "m1"), voter(33, "m2")}
	moved := want("m0", "m1", "m2")
	moved.Members[1].PeerURL = "https://m1.elsewhere.svc:2380"
	cases := []struct {
		name    string
		w       world
		d       Desired
		typ     ActionType
		reason  string
		id      uint64
		peerURL string
	}{
		{"nothing is done when no member answers",
			world{members: three, down: map[uint64]bool{1: true, 2: true, 3: true}}, want("m0", "m1", "m2"), ActionNone, ReasonClusterUnreachable, 0, ""},
		{"nothing is done while members disagree about the member list",
			world{members: three, leader: 1, disagree: true}, want("m0", "m1"), ActionNone, ReasonMembershipConverging, 0, ""},
		{"a healthy cluster that matches is left alone",
			world{members: three, leader: 1}, want("m0", "m1", "m2"), ActionNone, ReasonInSync, 0, ""},
		{"a missing member is added as a learner",
			world{members: three[:1], leader: 1}, want("m0", "m1"), ActionAddLearner, ReasonScaleUp, 0, "https://m1.svc:2380"},
		{"only one learner at a time: the next member waits for the learner",
			world{members: []Member{voter(1, "m0"), learner(2, "m1", false)}, leader: 1}, want("m0", "m1", "m2"), ActionNone, ReasonWaitingForLearner, 0, ""},
		{"a learner that has not caught up is not promoted",
			world{members: []Member{voter(1, "m0"), learner(2, "m1", true)}, leader: 1, lagging: map[uint64]bool{2: true}}, want("m0", "m1"), ActionNone, ReasonWaitingForLearner, 0, ""},
		{"a caught-up learner is promoted",
			world{members: []Member{voter(1, "m0"), learner(2, "m1", true)}, leader: 1}, want("m0", "m1"), ActionPromoteLearner, ReasonLearnerCaughtUp, 2, ""},
		{"no member is added while a voting member is down",
			world{members: three, leader: 1, down: map[uint64]bool{3: true}}, want("m0", "m1", "m2", "m3"), ActionNone, ReasonMemberUnhealthy, 0, ""},
		{"an unwanted follower is removed",
			world{members: three, leader: 1}, want("m0", "m1"), ActionRemoveMember, ReasonNotDesired, 3, ""},
		{"a dead orphan is removed before a live one",
			world{members: three, leader: 1, down: map[uint64]bool{2: true}}, want("m0"), ActionRemoveMember, ReasonNotDesired, 2, ""},
		{"an unwanted learner goes first",
			world{members: append(three[:2:2], learner(4, "m9", false)), leader: 1}, want("m0"), ActionRemoveMember, ReasonNotDesired, 4, ""},
		{"a leaving leader hands over leadership first",
			world{members: three, leader: 3}, want("m0", "m1"), ActionMoveLeader, ReasonLeaderLeaving, 1, ""},
		{"a removal that would leave too few healthy voters is refused",
			world{members: three, leader: 1, down: map[uint64]bool{2: true}}, want("m0", "m1"), ActionNone, ReasonQuorumAtRisk, 0, ""},
		{"the last member is never removed",
			world{members: three[:1], leader: 1}, Desired{}, ActionNone, ReasonLastMember, 0, ""},
		{"a member whose data was lost is removed to be added again",
			world{members: three, leader: 1, down: map[uint64]bool{3: true}}, lost, ActionRemoveMember, ReasonReplaceLostMember, 3, ""},
		{"a member marked as lost that answers is not replaced",
			world{members: three, leader: 1}, lost, ActionNone, ReasonInSync, 0, ""},
		{"an old data-lost report does not remove the member that replaced the lost one when it misses a probe (defect 1)",
			world{members: replaced, leader: 1, down: map[uint64]bool{33: true}}, lost, ActionNone, ReasonInSync, 0, ""},
		{"nothing is changed while quorum is lost, and the reason says so (defect 4)",
			world{members: three, leader: 0, noQuorum: true, down: map[uint64]bool{2: true, 3: true}}, want("m0"), ActionNone, ReasonQuorumLost, 0, ""},
		{"a member cut off from its peers does not block the others: its stale list is not compared (defect 6)",
			world{members: three, leader: 1, cutOff: map[uint64]bool{3: true}}, want("m0", "m1", "m2"), ActionNone, ReasonInSync, 0, ""},
		{"a member cut off from its peers is unhealthy and can be removed (defect 6)",
			world{members: three, leader: 1, cutOff: map[uint64]bool{3: true}}, want("m0", "m1"), ActionRemoveMember, ReasonNotDesired, 3, ""},
		{"no member is added while a voter is cut off from its peers (defect 6)",
			world{members: three, leader: 1, cutOff: map[uint64]bool{3: true}}, want("m0", "m1", "m2", "m3"), ActionNone, ReasonMemberUnhealthy, 0, ""},
		{"after a replacement's removal the name is added again",
			world{members: three[:2], leader: 1}, lost, ActionAddLearner, ReasonScaleUp, 0, "https://m2.svc:2380"},
		{"a peer URL that differs from the desired one is updated, keyed on the name",
			world{members: three, leader: 1}, moved, ActionUpdatePeerURLs, ReasonPeerURLChanged, 2, "https://m1.elsewhere.svc:2380"},
		{"a CORRUPT alarm stops every automatic change",
			world{members: three, leader: 1, alarms: []Alarm{{MemberID: 2, Type: AlarmCorrupt}}}, want("m0", "m1"), ActionNone, ReasonAlarmCorrupt, 0, ""},
		{"the CORRUPT alarm of a member that was removed (replaced) is disarmed: etcd keeps it, and nothing else would clear it",
			world{members: three[:2], leader: 1, alarms: []Alarm{{MemberID: 3, Type: AlarmCorrupt}}}, lost, ActionDisarmAlarm, ReasonAlarmOfRemovedMember, 3, ""},
		{"the NOSPACE alarm of a member that was removed is disarmed at once",
			world{members: three[:2], leader: 1, alarms: []Alarm{{MemberID: 3, Type: AlarmNoSpace}}}, want("m0", "m1"), ActionDisarmAlarm, ReasonAlarmOfRemovedMember, 3, ""},
		{"a cluster-wide CORRUPT alarm (member ID 0) is left to the operator and blocks every change",
			world{members: three[:2], leader: 1, alarms: []Alarm{{MemberID: 0, Type: AlarmCorrupt}}}, lost, ActionNone, ReasonAlarmCorrupt, 0, ""},
		{"the CORRUPT alarm of a current member stays and blocks adding a member",
			world{members: three, leader: 1, alarms: []Alarm{{MemberID: 2, Type: AlarmCorrupt}}}, want("m0", "m1", "m2", "m3"), ActionNone, ReasonAlarmCorrupt, 0, ""},
		{"a removed member's alarm is not disarmed while quorum is lost",
			world{members: three[:2], noQuorum: true, down: map[uint64]bool{2: true}, alarms: []Alarm{{MemberID: 3, Type: AlarmCorrupt}}}, want("m0", "m1"), ActionNone, ReasonQuorumLost, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Plan(c.w.observed(), c.d)
			if a.Type != c.typ || a.Reason != c.reason || (c.id != 0 && a.MemberID != c.id) || a.PeerURL != c.peerURL {
				t.Fatalf("got %+v, want %s/%s member %d peer %q", a, c.typ, c.reason, c.id, c.peerURL)
			}
			if a.Type == ActionDisarmAlarm && a.Alarm.MemberID != c.id {
				t.Fatalf("disarms %+v, want the alarm of member %d", a.Alarm, c.id)
			}
			if a.Type != ActionNone && a.Endpoint == "" {
				t.Fatalf("action %+v has no endpoint", a)
			}
		})
	}
}

func TestPlanNoSpaceRecoveryOrder(t *testing.T) {
	three := []Member{voter(1, "m0"), voter(2, "m1"), voter(3, "m2")}
	base := world{members: three, leader: 1, alarms: []Alarm{{MemberID: 2, Type: AlarmNoSpace}}}
	set := func(o Observed, size, inUse int64, only ...uint64) Observed {
		for i := range o.Statuses {
			if len(only) == 0 || o.Statuses[i].MemberID == only[0] {
				o.Statuses[i].DBSize, o.Statuses[i].DBSizeInUse = size, inUse
			}
			o.Statuses[i].DBSizeQuota, o.Statuses[i].Revision = 100, 50
		}
		return o
	}
	full := set(base.observed(), 100, 95)
	if a := Plan(full, want("m0", "m1", "m2")); a.Type != ActionCompact || a.Revision != 50 {
		t.Fatalf("full and unfragmented: %+v, want compaction", a)
	}
	fragmented := set(set(base.observed(), 10, 10), 100, 10, 1)
	fragmented = set(fragmented, 100, 10, 3)
	if a := Plan(fragmented, want("m0", "m1", "m2")); a.Type != ActionDefragment || a.MemberID != 3 {
		t.Fatalf("fragmented leader and follower: %+v, want the follower defragmented first", a)
	}
	clean := set(base.observed(), 10, 10)
	if a := Plan(clean, want("m0", "m1", "m2")); a.Type != ActionDisarmAlarm || a.Alarm.MemberID != 2 {
		t.Fatalf("space freed: %+v, want disarm", a)
	}
}

func TestCanReleasePod(t *testing.T) {
	three := []Member{voter(1, "m0"), voter(2, "m1"), voter(3, "m2")}
	cases := []struct {
		name    string
		w       world
		d       Desired
		pod     string
		release bool
		reason  string
	}{
		{"every member down: release, nothing can be removed and holding would deadlock",
			world{members: three, down: map[uint64]bool{1: true, 2: true, 3: true}}, want("m0", "m1"), "m2", true, ReasonClusterDown},
		{"the member is gone already: release",
			world{members: three[:2], leader: 1}, want("m0", "m1"), "m2", true, ReasonNotAMember},
		{"the pod stays a member (restart, reschedule): release, it comes back by name",
			world{members: three, leader: 1}, want("m0", "m1", "m2"), "m2", true, ReasonMemberStays},
		{"a leaving member is removed first",
			world{members: three, leader: 1}, want("m0", "m1"), "m2", false, ReasonRemoveMemberFirst},
		{"a leaving member whose removal loses quorum is held",
			world{members: three, leader: 1, down: map[uint64]bool{2: true}}, want("m0", "m1"), "m2", false, ReasonQuorumAtRisk},
		{"quorum lost while scaling down: release, the pod must come back for its member to restore quorum (defect 2)",
			world{members: three, noQuorum: true, down: map[uint64]bool{2: true, 3: true}}, want("m0"), "m2", true, ReasonQuorumLost},
		{"quorum lost: a pod of a desired member is released too",
			world{members: three, noQuorum: true, down: map[uint64]bool{2: true, 3: true}}, want("m0"), "m0", true, ReasonQuorumLost},
		{"the last member is held",
			world{members: three[:1], leader: 1}, Desired{}, "m0", false, ReasonLastMember},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok, reason := CanReleasePod(c.w.observed(), c.d, peer(c.pod))
			if ok != c.release || reason != c.reason {
				t.Fatalf("got %v/%s, want %v/%s", ok, reason, c.release, c.reason)
			}
		})
	}
}

func TestRosterForNamesAddedMembersByTheirDesiredPod(t *testing.T) {
	w := world{members: []Member{voter(1, "m0"), learner(2, "m1", false)}, leader: 1}
	r, ok := RosterFor("tok", w.observed(), want("m0", "m1"))
	if !ok || r.State != ClusterStateExisting || len(r.Members) != 2 {
		t.Fatalf("roster %+v", r)
	}
	if m, _ := r.Find("m1"); m.Started || m.ID != "2" || !strings.HasSuffix(m.PeerURL, ":2380") {
		t.Fatalf("m1 entry %+v, want not started, id 2", m)
	}
	if _, ok := RosterFor("tok", world{members: w.members, down: map[uint64]bool{1: true}}.observed(), want("m0")); ok {
		t.Fatal("a roster was built with no member answering")
	}
}

func TestConditionsUnderQuorumLossAgreeAndSayMemberByMemberWhatAnswered(t *testing.T) {
	three := []Member{voter(1, "m0"), voter(2, "m1"), voter(3, "m2")}
	o := world{members: three, noQuorum: true, down: map[uint64]bool{2: true, 3: true}}.observed()
	o.AlarmsUnknown = "no member could confirm quorum, so the alarms could not be listed"
	conds := Conditions(o, 1)
	healthy, alarm := conds[0], conds[1]
	if healthy.Status != "False" || healthy.Reason != ReasonQuorumLost {
		t.Fatalf("EtcdHealthy %s/%s, want False/%s", healthy.Status, healthy.Reason, ReasonQuorumLost)
	}
	for _, want := range []string{"m0 (1) answered but cannot reach a quorum", "m1 (2) not answering (unreachable)", "m2 (3) not answering", "0 of 3 voting members healthy, 2 needed"} {
		if !strings.Contains(healthy.Message, want) {
			t.Errorf("EtcdHealthy message %q does not say %q", healthy.Message, want)
		}
	}
	if alarm.Status != "Unknown" || alarm.Reason != ReasonQuorumLost {
		t.Errorf("EtcdAlarm %s/%s, want Unknown/%s: alarms that could not be listed are not \"no alarm\"", alarm.Status, alarm.Reason, ReasonQuorumLost)
	}
	if a := Plan(o, want("m0", "m1", "m2")); a.Reason != healthy.Reason {
		t.Errorf("Plan says %s, EtcdHealthy says %s: one reason for one state", a.Reason, healthy.Reason)
	}
}

func TestAFailedAlarmListIsNotNoAlarm(t *testing.T) {
	three := []Member{voter(1, "m0"), voter(2, "m1"), voter(3, "m2")}
	o := world{members: three, leader: 1}.observed()
	o.AlarmsUnknown = "listing the alarms failed: context deadline exceeded"
	conds := Conditions(o, 1)
	if conds[0].Status != "False" || conds[0].Reason != ReasonAlarmsUnknown {
		t.Errorf("EtcdHealthy %s/%s with unknown alarms", conds[0].Status, conds[0].Reason)
	}
	if conds[1].Status != "Unknown" || conds[1].Reason != ReasonAlarmsUnknown {
		t.Errorf("EtcdAlarm %s/%s with unknown alarms, want Unknown/%s", conds[1].Status, conds[1].Reason, ReasonAlarmsUnknown)
	}
}

func TestDataLostReportNamesOneMember(t *testing.T) {
	if id, ok := ParseDataLostReport(DataLostReport(0xabc) + "\n"); !ok || id != 0xabc {
		t.Fatalf("parsed %x %v", id, ok)
	}
	for _, msg := range []string{DataLostMessage, "some other failure", DataLostMessage + " (member zz)"} {
		if _, ok := ParseDataLostReport(msg); ok {
			t.Errorf("%q parsed as a report about one member", msg)
		}
	}
}

func TestPlanRecoveryPicksTheMostAdvancedSurvivorAndOnlyUnderQuorumLoss(t *testing.T) {
	five := []Member{voter(1, "m0"), voter(2, "m1"), voter(3, "m2"), voter(4, "m3"), voter(5, "m4")}
	o := world{members: five, noQuorum: true, down: map[uint64]bool{4: true, 5: true, 1: true}}.observed()
	for i := range o.Statuses {
		switch o.Statuses[i].MemberID {
		case 2:
			o.Statuses[i].RaftTerm, o.Statuses[i].RaftIndex, o.Statuses[i].RaftAppliedIndex = 7, 900, 900
		case 3:
			o.Statuses[i].RaftTerm, o.Statuses[i].RaftIndex, o.Statuses[i].RaftAppliedIndex = 8, 850, 850
		}
	}
	// --force-new-cluster keeps what the member knows to be committed (etcd
	// keeps max(HardState.Commit, consistent index)), so the member with more
	// committed entries keeps more acknowledged writes, whatever its term.
	rec, ok, msg := PlanRecovery(o, "r")
	if !ok || rec.Name != "m1" || rec.ID != "2" || rec.Request != "r" {
		t.Fatalf("recovery %+v %v %s, want m1: committed index 900 beats 850 at a higher term", rec, ok, msg)
	}
	for i := range o.Statuses {
		switch o.Statuses[i].MemberID {
		case 2:
			o.Statuses[i].RaftTerm, o.Statuses[i].RaftIndex, o.Statuses[i].RaftAppliedIndex = 7, 900, 900
		case 3:
			// Applied ahead of the committed index Status reports: what it
			// applied is committed, and force-new-cluster keeps it.
			o.Statuses[i].RaftTerm, o.Statuses[i].RaftIndex, o.Statuses[i].RaftAppliedIndex = 7, 880, 910
		}
	}
	if rec, ok, msg := PlanRecovery(o, "r"); !ok || rec.Name != "m2" {
		t.Fatalf("recovery %+v %v %s, want m2: applied index 910 is committed and beats 900", rec, ok, msg)
	}
	for i := range o.Statuses {
		switch o.Statuses[i].MemberID {
		case 2:
			o.Statuses[i].RaftTerm, o.Statuses[i].RaftIndex, o.Statuses[i].RaftAppliedIndex = 7, 900, 900
		case 3:
			o.Statuses[i].RaftTerm, o.Statuses[i].RaftIndex, o.Statuses[i].RaftAppliedIndex = 8, 900, 900
		}
	}
	if rec, ok, msg := PlanRecovery(o, "r"); !ok || rec.Name != "m2" {
		t.Fatalf("recovery %+v %v %s, want m2: at the same committed index the higher term breaks the tie", rec, ok, msg)
	}
	if _, ok, msg := PlanRecovery(world{members: five, leader: 1}.observed(), "r"); ok || !strings.Contains(msg, "quorum") {
		t.Fatalf("recovery of a healthy cluster: %v %s, want a refusal", ok, msg)
	}
	if _, ok, _ := PlanRecovery(world{members: five, down: map[uint64]bool{1: true, 2: true, 3: true, 4: true, 5: true}}.observed(), "r"); ok {
		t.Fatal("recovery with no member answering")
	}
}
