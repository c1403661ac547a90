package etcd

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClusterState tells a member with an empty data dir whether it bootstraps a new
// cluster or joins an existing one (etcd's --initial-cluster-state).
type ClusterState string

// The two cluster states.
const (
	ClusterStateNew      ClusterState = "new"
	ClusterStateExisting ClusterState = "existing"
)

// Roster is the member list the controller publishes (as JSON in a ConfigMap or
// Secret mounted into every server pod) so that a member with an empty data dir
// joins only as the member the controller added for it. A member never derives
// cluster state from anything else, least of all from IPs.
type Roster struct {
	// State is "new" only for the very first member of a cluster, before any
	// member has been observed; "existing" from then on, forever.
	State ClusterState `json:"state"`
	// Token is etcd's initial cluster token, unique per virtual cluster, so that
	// members of two clusters can never join each other by accident.
	Token   string         `json:"token"`
	Members []RosterMember `json:"members"`
	// Recover, set only while an operator's recovery from quorum loss is
	// under way, names the surviving member that rebuilds the cluster from
	// its data alone (etcd's --force-new-cluster).
	Recover *Recovery `json:"recover,omitempty"`
}

// Recovery names the member that rebuilds a cluster which lost quorum.
type Recovery struct {
	// Name and ID are the member's; a member acts on the recovery only when
	// both are its own.
	Name string `json:"name"`
	ID   string `json:"id"`
	// Request identifies the operator's request, so that a member rebuilds
	// the cluster once per request, never again on a restart.
	Request string `json:"request"`
}

// RosterMember is one member of the Roster.
type RosterMember struct {
	Name    string `json:"name"`
	PeerURL string `json:"peerURL"`
	// ID is the etcd member ID in hex (empty for a member not yet added).
	ID string `json:"id,omitempty"`
	// Started is true once the member has run (etcd lists its name); a member
	// whose entry is started but whose data dir is empty has lost its data.
	Started bool `json:"started,omitempty"`
}

// DataLostMessage starts what a member whose data dir was lost writes as its
// container's termination message (DataLostReport); the controller reads it to
// set the pod's Peer.LostMemberID and replace that member.
const DataLostMessage = "etcd member data dir lost: the controller must replace this member"

// DataLostReport is the termination message for the lost member id.
func DataLostReport(id uint64) string {
	return fmt.Sprintf("%s (member %s)", DataLostMessage, FormatID(id))
}

// ParseDataLostReport returns the member ID a termination message reports as
// lost, and false for any other message (including a report without an ID,
// which cannot be tied to one member).
func ParseDataLostReport(msg string) (uint64, bool) {
	_, rest, ok := strings.Cut(msg, DataLostMessage+" (member ")
	if !ok {
		return 0, false
	}
	hex, _, ok := strings.Cut(rest, ")")
	if !ok {
		return 0, false
	}
	id, err := ParseID(hex)
	return id, err == nil && id != 0
}

// FormatID writes a member ID the way etcd prints it.
func FormatID(id uint64) string { return strconv.FormatUint(id, 16) }

// ParseID reads a member ID written by FormatID.
func ParseID(s string) (uint64, error) { return strconv.ParseUint(s, 16, 64) }

// InitialRoster is the roster of a cluster that does not exist yet: its first
// member alone, bootstrapping. Every later member joins as a learner.
func InitialRoster(token string, first Peer) Roster {
	return Roster{State: ClusterStateNew, Token: token, Members: []RosterMember{{Name: first.Name, PeerURL: first.PeerURL}}}
}

// RosterFor is the roster to publish after observing o: every listed member under
// its desired name. It returns false when no member answered or none could
// confirm the member list through a quorum, because then the controller knows
// nothing new and must keep the roster it published last.
func RosterFor(token string, o Observed, d Desired) (Roster, bool) {
	if !o.AnyReachable() || len(o.Members) == 0 || o.MembersUnconfirmed {
		return Roster{}, false
	}
	r := Roster{State: ClusterStateExisting, Token: token}
	for _, m := range o.Members {
		name := m.Name
		for _, p := range d.Members {
			if name == "" && len(m.PeerURLs) > 0 && m.PeerURLs[0] == p.PeerURL {
				name = p.Name
			}
		}
		if name == "" || len(m.PeerURLs) == 0 {
			continue // added for a pod that is no longer desired; it will be removed
		}
		r.Members = append(r.Members, RosterMember{Name: name, PeerURL: m.PeerURLs[0], ID: FormatID(m.ID), Started: m.Started()})
	}
	return r, true
}

// ReadRoster reads a roster file.
func ReadRoster(path string) (Roster, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Roster{}, fmt.Errorf("reading member roster: %w", err)
	}
	var r Roster
	if err := json.Unmarshal(b, &r); err != nil {
		return Roster{}, fmt.Errorf("parsing member roster %s: %w", path, err)
	}
	if r.State != ClusterStateNew && r.State != ClusterStateExisting {
		return Roster{}, fmt.Errorf("member roster %s: state %q is neither %q nor %q", path, r.State, ClusterStateNew, ClusterStateExisting)
	}
	return r, nil
}

// Find returns the roster entry named name.
func (r Roster) Find(name string) (RosterMember, bool) {
	for _, m := range r.Members {
		if m.Name == name {
			return m, true
		}
	}
	return RosterMember{}, false
}
