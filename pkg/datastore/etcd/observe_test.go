package etcd

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// fakeReader answers Observe's calls from fixed values, per endpoint: the
// one way to make AlarmList fail while Status and the member list succeed,
// which real etcd does not do on demand.
type fakeReader struct {
	members  []Member
	statuses map[string]MemberStatus
	alarms   []Alarm
	// alarmErr fails AlarmList on the endpoints it names.
	alarmErr map[string]error
	// alarmAsked records the endpoints AlarmList was sent to, in order.
	alarmAsked []string
}

func (f *fakeReader) Status(_ context.Context, endpoint string) (MemberStatus, error) {
	s, ok := f.statuses[endpoint]
	if !ok {
		return MemberStatus{}, errors.New("connection refused")
	}
	return s, nil
}

func (f *fakeReader) MemberList(_ context.Context, endpoint string, _ bool) ([]Member, error) {
	if _, ok := f.statuses[endpoint]; !ok {
		return nil, errors.New("connection refused")
	}
	return f.members, nil
}

func (f *fakeReader) AlarmList(_ context.Context, endpoint string) ([]Alarm, error) {
	f.alarmAsked = append(f.alarmAsked, endpoint)
	if err := f.alarmErr[endpoint]; err != nil {
		return nil, err
	}
	return f.alarms, nil
}

func threeHealthy() *fakeReader {
	f := &fakeReader{statuses: map[string]MemberStatus{}}
	for i, name := range []string{"m0", "m1", "m2"} {
		id := uint64(i + 1)
		f.members = append(f.members, Member{ID: id, Name: name, PeerURLs: []string{"https://" + name + ".svc:2380"}, ClientURLs: []string{ep(name)}})
		f.statuses[ep(name)] = MemberStatus{MemberID: id, Leader: 1, RaftIndex: 100, RaftAppliedIndex: 100}
	}
	return f
}

func TestObserveAlarmList(t *testing.T) {
	eps := []string{ep("m0"), ep("m1"), ep("m2")}
	t.Run("a failed alarm listing on every voter is reported and is not no alarm", func(t *testing.T) {
		f := threeHealthy()
		f.alarms = []Alarm{{MemberID: 2, Type: AlarmCorrupt}}
		f.alarmErr = map[string]error{}
		for _, e := range eps {
			f.alarmErr[e] = errors.New("rpc error: code = Unavailable")
		}
		o := Observe(context.Background(), f, eps)
		if o.AlarmsUnknown == "" || len(o.Alarms) != 0 {
			t.Fatalf("alarms %+v, unknown %q; want unknown set and no alarm listed", o.Alarms, o.AlarmsUnknown)
		}
		if !strings.Contains(o.AlarmsUnknown, "Unavailable") {
			t.Errorf("AlarmsUnknown %q does not say why", o.AlarmsUnknown)
		}
		if len(f.alarmAsked) != len(eps) {
			t.Errorf("AlarmList asked %v, want every voter in turn", f.alarmAsked)
		}
		conds := Conditions(o, 1)
		if conds[0].Status == "True" {
			t.Errorf("EtcdHealthy True with unknown alarms: %+v", conds[0])
		}
		if conds[1].Status != "Unknown" || conds[1].Reason != ReasonAlarmsUnknown {
			t.Errorf("EtcdAlarm %s/%s, want Unknown/%s", conds[1].Status, conds[1].Reason, ReasonAlarmsUnknown)
		}
	})
	t.Run("a failure on one voter is passed over: the next voter's list counts", func(t *testing.T) {
		f := threeHealthy()
		f.alarms = []Alarm{{MemberID: 2, Type: AlarmNoSpace}}
		f.alarmErr = map[string]error{ep("m0"): errors.New("deadline exceeded")}
		o := Observe(context.Background(), f, eps)
		if o.AlarmsUnknown != "" || !slices.Equal(o.Alarms, f.alarms) {
			t.Fatalf("alarms %+v, unknown %q; want the second voter's list", o.Alarms, o.AlarmsUnknown)
		}
	})
	t.Run("learners are not asked for the alarms", func(t *testing.T) {
		f := threeHealthy()
		f.members[2].IsLearner = true
		s := f.statuses[ep("m2")]
		s.IsLearner = true
		f.statuses[ep("m2")] = s
		f.alarmErr = map[string]error{ep("m0"): errors.New("x"), ep("m1"): errors.New("y")}
		o := Observe(context.Background(), f, eps)
		if o.AlarmsUnknown == "" || slices.Contains(f.alarmAsked, ep("m2")) {
			t.Fatalf("asked %v, unknown %q; want the voters only, and unknown", f.alarmAsked, o.AlarmsUnknown)
		}
	})
}
