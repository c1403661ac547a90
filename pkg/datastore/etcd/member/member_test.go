package member

import (
	"errors"
	"testing"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
)

func TestPlanBootstrap(t *testing.T) {
	self := "https://m1.svc:2380"
	existing := etcd.Roster{State: etcd.ClusterStateExisting, Members: []etcd.RosterMember{
		{Name: "m0", PeerURL: "https://m0.svc:2380", ID: "a", Started: true},
		{Name: "m1", PeerURL: self, ID: "b"},
	}}
	started := existing
	started.Members = []etcd.RosterMember{existing.Members[0], {Name: "m1", PeerURL: self, ID: "b", Started: true}}
	withoutM1 := etcd.Roster{State: etcd.ClusterStateExisting, Members: existing.Members[:1]}
	cases := []struct {
		name   string
		dir    DataDir
		roster etcd.Roster
		want   Bootstrap
		err    error
	}{
		{"a member with data starts from it when there is no roster", DataDir{HasData: true, ID: 0xb}, etcd.Roster{},
			Bootstrap{FromData: true, State: etcd.ClusterStateExisting, InitialCluster: "m1=" + self}, nil},
		{"a member with data starts from it when the roster lists it", DataDir{HasData: true, ID: 0xb}, started,
			Bootstrap{FromData: true, State: etcd.ClusterStateExisting, InitialCluster: "m1=" + self}, nil},
		{"a member with data that the existing cluster's roster no longer lists waits instead of starting as a removed member (defect 5)",
			DataDir{HasData: true, ID: 0xb}, withoutM1, Bootstrap{}, ErrNotAMember},
		{"an empty member not in the roster waits", DataDir{}, etcd.Roster{State: etcd.ClusterStateExisting}, Bootstrap{}, ErrNotAMember},
		{"an empty member the controller added joins the existing cluster", DataDir{}, existing,
			Bootstrap{State: etcd.ClusterStateExisting, InitialCluster: "m0=https://m0.svc:2380,m1=" + self}, nil},
		{"an empty member listed as started has lost its data", DataDir{}, started, Bootstrap{}, ErrDataLost},
		{"a member that set its data aside after its removal waits while the roster still lists the removed member (defect 3)",
			DataDir{RemovedID: 0xb}, started, Bootstrap{}, ErrNotAMember},
		{"a member that set its data aside after its removal joins as the new member the roster lists",
			DataDir{RemovedID: 0x5}, existing, Bootstrap{State: etcd.ClusterStateExisting, InitialCluster: "m0=https://m0.svc:2380,m1=" + self}, nil},
		{"the first member bootstraps a new cluster", DataDir{}, etcd.Roster{State: etcd.ClusterStateNew, Members: []etcd.RosterMember{{Name: "m1", PeerURL: self}}},
			Bootstrap{State: etcd.ClusterStateNew, InitialCluster: "m1=" + self}, nil},
		{"data of an earlier incarnation of the name is set aside", DataDir{HasData: true, ID: 0x5}, existing,
			Bootstrap{State: etcd.ClusterStateExisting, InitialCluster: "m0=https://m0.svc:2380,m1=" + self, DiscardData: true}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Plan("m1", self, c.dir, c.roster)
			if !errors.Is(err, c.err) || got != c.want {
				t.Fatalf("got %+v, %v; want %+v, %v", got, err, c.want, c.err)
			}
		})
	}
	if _, err := Plan("m1", "https://m1.other:2380", DataDir{}, existing); err == nil {
		t.Fatal("joined with a peer URL that differs from the roster's")
	}
}
