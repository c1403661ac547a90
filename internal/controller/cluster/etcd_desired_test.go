package cluster

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
)

func TestServerOrdinal(t *testing.T) {
	c := sampleCluster()
	for name, want := range map[string]int{
		"k3k-demo-server-0": 0, "k3k-demo-server-6": 6, "k3k-demo-server-12": 12,
		"k3k-demo-server-": -1, "k3k-demo-server-01": -1, "k3k-demo-server-x": -1,
		"k3k-other-server-1": -1, "k3k-demo-server-1-1": -1,
	} {
		if got := ServerOrdinal(c, name); got != want {
			t.Errorf("ServerOrdinal(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestStatefulSetReplicasKeepsPodsOfListedMembers(t *testing.T) {
	cases := []struct {
		name     string
		servers  int32
		members  []int
		known    bool
		current  int32
		want     int32
		whyThisN string
	}{
		{"in sync", 3, []int{0, 1, 2}, true, 3, 3, "members match spec"},
		{"scale up starts every pod at once", 5, []int{0, 1, 2}, true, 3, 5, "new pods wait for the roster"},
		{"scale down waits for the member", 1, []int{0, 1, 2}, true, 3, 3, "member 2 still listed"},
		{"scale down after one removal", 1, []int{0, 1}, true, 3, 2, "member 2 removed: its pod may go"},
		{"scale down done", 1, []int{0}, true, 2, 1, "only member 0 left"},
		{"nobody answers: keep the running size", 1, nil, false, 3, 3, "cannot tell which members remain"},
		{"nobody answers on a scale up", 5, nil, false, 3, 5, "more pods never endanger quorum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := StatefulSetReplicas(tc.servers, tc.members, tc.known, tc.current); got != tc.want {
				t.Fatalf("replicas %d, want %d (%s)", got, tc.want, tc.whyThisN)
			}
		})
	}
}

func TestMemberOrdinalsMatchUnstartedMembersByPeerURL(t *testing.T) {
	c := sampleCluster()
	o := etcd.Observed{Members: []etcd.Member{
		{ID: 1, Name: "k3k-demo-server-0", PeerURLs: []string{EtcdPeer(c, 0).PeerURL}},
		{ID: 2, PeerURLs: []string{EtcdPeer(c, 4).PeerURL}, IsLearner: true}, // added, never started
		{ID: 3, Name: "stranger", PeerURLs: []string{"https://elsewhere:2380"}},
	}}
	got := memberOrdinals(c, o)
	if len(got) != 2 || got[0] != 0 || got[1] != 4 {
		t.Fatalf("ordinals %v, want [0 4]", got)
	}
}

func TestLostMemberIDReadsTheTerminationMessageOfAStoppedSidecarOnly(t *testing.T) {
	lost := &corev1.ContainerStateTerminated{ExitCode: 1, Message: etcd.DataLostReport(0xabc) + "\n"}
	noID := &corev1.ContainerStateTerminated{ExitCode: 1, Message: etcd.DataLostMessage + "\n"}
	other := &corev1.ContainerStateTerminated{ExitCode: 1, Message: "some other failure"}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	cases := []struct {
		name   string
		status corev1.ContainerStatus
		want   uint64
	}{
		{"crash looping with the report as last termination", corev1.ContainerStatus{Name: "datastore", State: waiting, LastTerminationState: corev1.ContainerState{Terminated: lost}}, 0xabc},
		{"terminated with the report", corev1.ContainerStatus{Name: "datastore", State: corev1.ContainerState{Terminated: lost}}, 0xabc},
		{"running again: the report in the last state is history (defect 1)", corev1.ContainerStatus{Name: "datastore", State: running, LastTerminationState: corev1.ContainerState{Terminated: lost}}, 0},
		{"a report without a member ID names no member", corev1.ContainerStatus{Name: "datastore", State: waiting, LastTerminationState: corev1.ContainerState{Terminated: noID}}, 0},
		{"another failure", corev1.ContainerStatus{Name: "datastore", State: waiting, LastTerminationState: corev1.ContainerState{Terminated: other}}, 0},
		{"another container", corev1.ContainerStatus{Name: "k3s", State: waiting, LastTerminationState: corev1.ContainerState{Terminated: lost}}, 0},
	}
	for _, tc := range cases {
		pod := &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{tc.status}}}
		if got := lostMemberID(pod); got != tc.want {
			t.Errorf("%s: %x, want %x", tc.name, got, tc.want)
		}
	}
}

func TestEtcdDesiredMarksLostMembers(t *testing.T) {
	c := sampleCluster()
	d := EtcdDesired(c, 3, map[string]uint64{"k3k-demo-server-1": 7})
	if len(d.Members) != 3 || d.Members[1].Name != "k3k-demo-server-1" || d.Members[1].LostMemberID != 7 || d.Members[0].LostMemberID != 0 {
		t.Fatalf("desired %+v", d.Members)
	}
	if d.Members[2].ClientURL != "https://k3k-demo-server-2.k3k-demo-server-headless.tenants.svc:2379" {
		t.Fatalf("client URL %s", d.Members[2].ClientURL)
	}
}

func TestScalingDoesNotRollTheServers(t *testing.T) {
	c := sampleCluster()
	c.Spec.Datastore.Type = v1beta1.EtcdDatastore
	c.Spec.Servers = 3
	s3, err := Resolve(c, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	c.Spec.Servers = 5
	s5, err := Resolve(c, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg3, _ := ServerConfig(c, s3)
	cfg5, _ := ServerConfig(c, s5)
	if cfg3.Hash != cfg5.Hash {
		t.Fatalf("the pod template's config hash changes with spec.servers: scaling would roll every server")
	}
	if string(cfg3.Data) == string(cfg5.Data) {
		t.Fatalf("the k3s config does not list the new members")
	}
	c.Spec.ClusterDNS = "10.43.0.20"
	if cfg, _ := ServerConfig(c, s5); cfg.Hash == cfg5.Hash {
		t.Fatalf("another config change does not roll the servers")
	}
}

func TestEvenServersWithTheDefaultEtcdAreRefused(t *testing.T) {
	c := sampleCluster()
	c.Spec.Servers = 2
	cfg := testConfig
	cfg.DefaultDatastore = v1beta1.EtcdDatastore
	var invalid *InvalidSpecError
	if _, err := Resolve(c, cfg); !errors.As(err, &invalid) {
		t.Fatalf("servers: 2 with the default etcd: %v, want InvalidSpecError", err)
	}
}

func TestEtcdStatus(t *testing.T) {
	ready := tokenState{true, v1beta1.ReasonTokenAvailable, "ok"}
	s := Settings{Datastore: v1beta1.EtcdDatastore, Persistence: v1beta1.DynamicPersistence, Servers: 3}
	reachable := func(id, leader uint64) etcd.MemberStatus {
		return etcd.MemberStatus{Endpoint: "ep", Reachable: true, MemberID: id, Leader: leader}
	}
	members := []etcd.Member{{ID: 1, Name: "k3k-demo-server-0"}, {ID: 2, Name: "k3k-demo-server-1"}, {ID: 3, Name: "k3k-demo-server-2"}}
	// Two of three down: the one that answers cannot confirm its member list.
	lost := etcd.Observed{Members: members, Statuses: []etcd.MemberStatus{reachable(1, 0)}, MembersUnconfirmed: true, AlarmsUnknown: "no quorum"}
	cases := []struct {
		name       string
		etcd       etcdState
		want       map[string]string
		wantQuorum *v1beta1.EtcdQuorumStatus
	}{
		{
			name: "all healthy",
			etcd: etcdState{
				observed: &etcd.Observed{Members: members, Leader: 1, Statuses: []etcd.MemberStatus{reachable(1, 1), reachable(2, 1), reachable(3, 1)}},
				action:   etcd.Action{Type: etcd.ActionNone, Reason: etcd.ReasonInSync},
			},
			want:       map[string]string{v1beta1.ConditionDatastoreReady: v1beta1.ReasonQuorumHealthy, v1beta1.ConditionEtcdMembership: etcd.ReasonInSync, etcd.ConditionHealthy: etcd.ReasonHealthy},
			wantQuorum: &v1beta1.EtcdQuorumStatus{Voters: 3, HealthyVoters: 3, Needed: 2},
		},
		{
			name: "one down keeps quorum",
			etcd: etcdState{
				observed: &etcd.Observed{Members: members, Leader: 1, Statuses: []etcd.MemberStatus{reachable(1, 1), reachable(2, 1)}},
				action:   etcd.Action{Type: etcd.ActionNone, Reason: etcd.ReasonInSync},
			},
			want:       map[string]string{v1beta1.ConditionDatastoreReady: v1beta1.ReasonQuorumHealthy, etcd.ConditionHealthy: etcd.ReasonMemberUnreachable},
			wantQuorum: &v1beta1.EtcdQuorumStatus{Voters: 3, HealthyVoters: 2, Needed: 2},
		},
		{
			// What the reconcile really has then: Plan refuses every step
			// (QuorumLost) and CanReleasePod holds no pod.
			name: "two down lose quorum: every condition says so",
			etcd: etcdState{
				observed: &lost,
				action:   etcd.Plan(lost, EtcdDesired(sampleCluster(), 3, nil)),
			},
			want: map[string]string{
				v1beta1.ConditionDatastoreReady: v1beta1.ReasonQuorumLost, v1beta1.ConditionEtcdMembership: v1beta1.ReasonQuorumLost,
				etcd.ConditionHealthy: v1beta1.ReasonQuorumLost, etcd.ConditionAlarm: v1beta1.ReasonQuorumLost, v1beta1.ConditionReady: v1beta1.ReasonQuorumLost,
			},
			wantQuorum: &v1beta1.EtcdQuorumStatus{Voters: 3, HealthyVoters: 0, Needed: 2},
		},
		{
			// A step between Observe and Plan failed (a pod's finalizer patch,
			// the roster write): no action was planned. Membership must still
			// say QuorumLost, not an empty reason the API refuses.
			name: "quorum lost and the reconcile failed before Plan",
			etcd: etcdState{observed: &lost},
			want: map[string]string{
				v1beta1.ConditionDatastoreReady: v1beta1.ReasonQuorumLost, v1beta1.ConditionEtcdMembership: v1beta1.ReasonQuorumLost,
				etcd.ConditionHealthy: v1beta1.ReasonQuorumLost,
			},
			wantQuorum: &v1beta1.EtcdQuorumStatus{Voters: 3, HealthyVoters: 0, Needed: 2},
		},
		{
			name: "the reconcile failed before Plan with quorum: the step is not done",
			etcd: etcdState{
				observed: &etcd.Observed{Members: members, Leader: 1, Statuses: []etcd.MemberStatus{reachable(1, 1), reachable(2, 1), reachable(3, 1)}},
			},
			want: map[string]string{v1beta1.ConditionEtcdMembership: v1beta1.ReasonStepNotDone, etcd.ConditionHealthy: etcd.ReasonHealthy},
		},
		{
			name: "two the controller cannot reach, but the one it reaches confirms a quorum: the datastore serves",
			etcd: etcdState{
				observed: &etcd.Observed{Members: members, Leader: 1, Statuses: []etcd.MemberStatus{reachable(1, 1)}},
				action:   etcd.Action{Type: etcd.ActionNone, Reason: etcd.ReasonInSync},
			},
			want:       map[string]string{v1beta1.ConditionDatastoreReady: v1beta1.ReasonQuorumConfirmed, etcd.ConditionHealthy: etcd.ReasonMemberUnreachable},
			wantQuorum: &v1beta1.EtcdQuorumStatus{Voters: 3, HealthyVoters: 1, Needed: 2},
		},
		{
			name: "a refused step says why",
			etcd: etcdState{
				observed:  &etcd.Observed{Members: members, Leader: 1, Statuses: []etcd.MemberStatus{reachable(1, 1), reachable(2, 1), reachable(3, 1)}},
				action:    etcd.Action{Type: etcd.ActionPromoteLearner, Reason: etcd.ReasonLearnerCaughtUp},
				actionErr: errors.New("not caught up"),
			},
			want: map[string]string{v1beta1.ConditionEtcdMembership: v1beta1.ReasonStepNotDone},
		},
		{
			name: "nobody answers",
			etcd: etcdState{observed: &etcd.Observed{Statuses: []etcd.MemberStatus{{Endpoint: "ep", Error: "refused"}}}, action: etcd.Action{Reason: etcd.ReasonClusterUnreachable}},
			want: map[string]string{v1beta1.ConditionDatastoreReady: etcd.ReasonClusterUnreachable, etcd.ConditionHealthy: etcd.ReasonClusterUnreachable},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := computeStatus(sampleCluster(), observation{settings: s, token: ready, etcd: tc.etcd})
			for _, cond := range st.Conditions {
				if cond.Reason == "" {
					t.Errorf("%s has no reason: the API refuses such a status", cond.Type)
				}
			}
			for typ, reason := range tc.want {
				var got *metav1.Condition
				for i := range st.Conditions {
					if st.Conditions[i].Type == typ {
						got = &st.Conditions[i]
					}
				}
				if got == nil || got.Reason != reason {
					t.Errorf("%s = %+v, want reason %s", typ, got, reason)
				}
			}
			if tc.wantQuorum != nil && (st.Datastore.Quorum == nil || *st.Datastore.Quorum != *tc.wantQuorum) {
				t.Errorf("quorum %+v, want %+v", st.Datastore.Quorum, tc.wantQuorum)
			}
			if tc.wantQuorum != nil && len(st.Datastore.Members) != 3 {
				t.Errorf("members %+v, want 3", st.Datastore.Members)
			}
		})
	}
}

// The quota reaches the sidecar as etcd's own flag, in bytes; without it the
// command line is unchanged, so existing members do not restart on upgrade.
func TestEtcdArgsCarryTheQuotaOnlyWhenSet(t *testing.T) {
	c := sampleCluster()
	c.Spec.Datastore.Type = v1beta1.EtcdDatastore
	c.Spec.Servers = 3
	args := func() []string {
		t.Helper()
		s, err := Resolve(c, testConfig)
		if err != nil {
			t.Fatal(err)
		}
		return EtcdArgs(c, s)
	}
	without := args()
	for _, a := range without {
		if strings.HasPrefix(a, "--quota-backend-bytes") {
			t.Fatalf("no quota set, yet the command line has %s", a)
		}
	}
	c.Spec.Datastore.Etcd = &v1beta1.EtcdDatastoreConfig{QuotaBackendSize: "4Gi"}
	if want, with := append(slices.Clone(without), "--quota-backend-bytes=4294967296"), args(); !slices.Equal(with, want) {
		t.Fatalf("command line with a 4Gi quota:\n%q\nwant\n%q", with, want)
	}
}
