// Package member runs one etcd member in-process (go.etcd.io/etcd/server/v3/embed)
// as a server pod's datastore sidecar. Its identity is its name and the DNS names
// in its URLs, never an IP. With a data dir it starts from it, whatever address it
// now has; with an empty one it joins only as the member the controller added for
// it, as published in the Roster, and never guesses.
package member

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/pkg/datastore"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
)

// Kind is the datastore kind this package serves.
const Kind = "etcd"

// Default listen addresses: all addresses, because the pod's IP is not known
// in advance and must not matter.
const (
	DefaultListenPeerAddress   = "0.0.0.0:2380"
	DefaultListenClientAddress = "0.0.0.0:2379"
)

var (
	// ErrNotAMember: the data dir is empty and the roster does not list this
	// member; the controller has not added it yet. Wait for the roster to change.
	ErrNotAMember = errors.New("not in the published member roster yet")
	// ErrDataLost: the data dir is empty but the roster lists this member as
	// one that has run. Rejoining under its old member ID with no log would break
	// raft's guarantees, so the controller must replace it (etcd.Peer.DataLost).
	ErrDataLost = errors.New(etcd.DataLostMessage)
)

// Config is one member's configuration.
type Config struct {
	// Name is the member name: the pod name.
	Name string
	// DataDir holds the member's data (on the pod's volume).
	DataDir string
	// PeerURL and ClientURL are advertised to the cluster; they name the pod by
	// DNS, e.g. https://<pod>.k3k-<cluster>-server-headless.<ns>.svc:2380.
	PeerURL   string
	ClientURL string
	// ListenPeerAddress and ListenClientAddress are host:port to bind; default
	// DefaultListenPeerAddress and DefaultListenClientAddress.
	ListenPeerAddress   string
	ListenClientAddress string
	// CAFile, CertFile and KeyFile are the cluster CA and this member's
	// certificate (server and client usage, its DNS names as SANs); peers and
	// clients must present certificates signed by the CA.
	CAFile, CertFile, KeyFile string
	// Roster is the member list the controller published.
	Roster etcd.Roster
	// QuotaBackendBytes is the database size at which etcd raises NOSPACE;
	// 0 keeps etcd's default (2 GiB).
	QuotaBackendBytes int64
	// SnapshotCount, TickMs and ElectionMs tune etcd; 0 keeps etcd's defaults.
	// Tests shorten them.
	SnapshotCount      uint64
	TickMs, ElectionMs uint
	// Logger receives etcd's logs; nil logs at info to stderr.
	Logger *zap.Logger
	// UnsafeNoFsync trades durability for speed; tests only.
	UnsafeNoFsync bool
}

// Bootstrap is how a member starts: etcd's initial cluster state and list.
type Bootstrap struct {
	// FromData: a data dir exists and is this member's; etcd ignores the rest.
	FromData       bool
	State          etcd.ClusterState
	InitialCluster string
	// DiscardData: the data dir belongs to an earlier incarnation of this name
	// (removed, then added again with a new ID): set it aside and join afresh.
	DiscardData bool
}

// Plan decides how a member named name with peerURL starts. dataID is the member
// ID recorded in the data dir (0 when there is no data, or it is not known). It
// is pure, so every case is tested without etcd.
func Plan(name, peerURL string, hasData bool, dataID uint64, r etcd.Roster) (Bootstrap, error) {
	self, listed := r.Find(name)
	if hasData {
		if listed && self.ID != "" && dataID != 0 {
			if id, err := etcd.ParseID(self.ID); err == nil && id != dataID && !self.Started {
				return plan(name, peerURL, r, self, true)
			}
		}
		return Bootstrap{FromData: true, State: etcd.ClusterStateExisting, InitialCluster: name + "=" + peerURL}, nil
	}
	if !listed {
		return Bootstrap{}, ErrNotAMember
	}
	if self.Started && r.State == etcd.ClusterStateExisting {
		return Bootstrap{}, ErrDataLost
	}
	return plan(name, peerURL, r, self, false)
}

func plan(name, peerURL string, r etcd.Roster, self etcd.RosterMember, discard bool) (Bootstrap, error) {
	if self.PeerURL != peerURL {
		return Bootstrap{}, fmt.Errorf("roster lists %s with peer URL %s, this member advertises %s", name, self.PeerURL, peerURL)
	}
	parts := make([]string, 0, len(r.Members))
	for _, m := range r.Members {
		parts = append(parts, m.Name+"="+m.PeerURL)
	}
	return Bootstrap{State: r.State, InitialCluster: strings.Join(parts, ","), DiscardData: discard}, nil
}

// idFile records the member ID a data dir was created for, so that a data dir
// left behind by an earlier incarnation of the same name is recognised.
const idFile = "k3k-member-id"

// Member is a running etcd member.
type Member struct {
	cfg  Config
	etcd *embed.Etcd
}

var _ datastore.Datastore = (*Member)(nil)

// Start starts the member and returns once it listens; it does not wait for the
// cluster (see ReadyNotify), so that all members of a rebooted cluster can start
// together. It returns ErrNotAMember or ErrDataLost (wrapped) when the roster
// says it must not start.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	if cfg.Name == "" || cfg.DataDir == "" || cfg.PeerURL == "" || cfg.ClientURL == "" {
		return nil, errors.New("etcd member: name, data dir, peer URL and client URL are required")
	}
	hasData, dataID, err := readData(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	b, err := Plan(cfg.Name, cfg.PeerURL, hasData, dataID, cfg.Roster)
	if err != nil {
		return nil, fmt.Errorf("starting etcd member %s: %w", cfg.Name, err)
	}
	if b.DiscardData {
		aside := fmt.Sprintf("%s.stale-%d", filepath.Clean(cfg.DataDir), time.Now().Unix())
		if err := os.Rename(filepath.Join(cfg.DataDir, "member"), aside); err != nil {
			return nil, fmt.Errorf("setting aside the data of an earlier member %s: %w", cfg.Name, err)
		}
		_ = os.Remove(filepath.Join(cfg.DataDir, idFile))
	}
	ecfg, err := embedConfig(cfg, b)
	if err != nil {
		return nil, err
	}
	e, err := embed.StartEtcd(ecfg)
	if err != nil {
		if strings.Contains(err.Error(), "has already been bootstrapped") {
			return nil, fmt.Errorf("starting etcd member %s: %w (%v)", cfg.Name, ErrDataLost, err)
		}
		return nil, fmt.Errorf("starting etcd member %s: %w", cfg.Name, err)
	}
	m := &Member{cfg: cfg, etcd: e}
	go m.recordID(ctx)
	return m, nil
}

// recordID writes the member ID into the data dir once the member has joined.
func (m *Member) recordID(ctx context.Context) {
	select {
	case <-m.etcd.Server.ReadyNotify():
	case <-m.etcd.Server.StopNotify():
		return
	case <-ctx.Done():
		return
	}
	id := etcd.FormatID(uint64(m.etcd.Server.MemberID()))
	_ = os.WriteFile(filepath.Join(m.cfg.DataDir, idFile), []byte(id+"\n"), 0o600)
}

func readData(dir string) (bool, uint64, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "member", "wal"))
	if errors.Is(err, os.ErrNotExist) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("reading etcd data dir: %w", err)
	}
	if len(entries) == 0 {
		return false, 0, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, idFile))
	if err != nil {
		return true, 0, nil
	}
	id, err := etcd.ParseID(strings.TrimSpace(string(b)))
	if err != nil {
		return true, 0, nil
	}
	return true, id, nil
}

func embedConfig(cfg Config, b Bootstrap) (*embed.Config, error) {
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	peer, err := url.Parse(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("peer URL: %w", err)
	}
	client, err := url.Parse(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("client URL: %w", err)
	}
	lp, err := listenURL(orDefault(cfg.ListenPeerAddress, DefaultListenPeerAddress))
	if err != nil {
		return nil, fmt.Errorf("listen peer address: %w", err)
	}
	lc, err := listenURL(orDefault(cfg.ListenClientAddress, DefaultListenClientAddress))
	if err != nil {
		return nil, fmt.Errorf("listen client address: %w", err)
	}
	ec.AdvertisePeerUrls, ec.AdvertiseClientUrls = []url.URL{*peer}, []url.URL{*client}
	ec.ListenPeerUrls, ec.ListenClientUrls = []url.URL{*lp}, []url.URL{*lc}
	ec.InitialCluster = b.InitialCluster
	ec.InitialClusterToken = cfg.Roster.Token
	ec.ClusterState = string(b.State)
	if b.State == "" {
		ec.ClusterState = string(etcd.ClusterStateExisting)
	}
	// Mutual TLS on both ports with the cluster's own CA. The peer port does not
	// match the dialling peer's source IP against its certificate's names: that
	// check depends on DNS answering for an IP that has just changed, which is
	// exactly when it must not fail; the private CA is the authentication.
	ec.ClientTLSInfo.CertFile, ec.ClientTLSInfo.KeyFile, ec.ClientTLSInfo.TrustedCAFile = cfg.CertFile, cfg.KeyFile, cfg.CAFile
	ec.ClientTLSInfo.ClientCertAuth = true
	ec.PeerTLSInfo.CertFile, ec.PeerTLSInfo.KeyFile, ec.PeerTLSInfo.TrustedCAFile = cfg.CertFile, cfg.KeyFile, cfg.CAFile
	ec.PeerTLSInfo.ClientCertAuth = true
	ec.PeerTLSInfo.SkipClientSANVerify = true
	// Refuse membership changes that the cluster could not survive right now.
	ec.StrictReconfigCheck = true
	// The JSON gateway is not needed by k3s; without it the member never dials
	// itself by a listen address its certificate does not name.
	ec.EnableGRPCGateway = false
	if cfg.QuotaBackendBytes > 0 {
		ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	}
	if cfg.SnapshotCount > 0 {
		ec.SnapshotCount = cfg.SnapshotCount
		ec.SnapshotCatchUpEntries = cfg.SnapshotCount
	}
	if cfg.TickMs > 0 {
		ec.TickMs = cfg.TickMs
	}
	if cfg.ElectionMs > 0 {
		ec.ElectionMs = cfg.ElectionMs
	}
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	if cfg.Logger != nil {
		ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(cfg.Logger)
	} else {
		ec.Logger, ec.LogOutputs, ec.LogLevel = "zap", []string{"stderr"}, "info"
	}
	return ec, nil
}

func listenURL(hostport string) (*url.URL, error) {
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		return nil, err
	}
	return &url.URL{Scheme: "https", Host: hostport}, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// ReadyNotify is closed once the member has joined the cluster and the cluster
// has a quorum (the member has published itself).
func (m *Member) ReadyNotify() <-chan struct{} { return m.etcd.Server.ReadyNotify() }

// Failed delivers an error when the member stops on its own (e.g. it was removed
// from the cluster); the process should exit.
func (m *Member) Failed() <-chan error { return m.etcd.Err() }

// ID is the member's etcd ID.
func (m *Member) ID() uint64 { return uint64(m.etcd.Server.MemberID()) }

// Endpoint implements datastore.Datastore: the advertised client URL.
func (m *Member) Endpoint() string { return m.cfg.ClientURL }

// Ready implements datastore.Datastore: the member has a leader, votes (a
// learner cannot serve k3s) and answers a linearizable read, which needs quorum.
func (m *Member) Ready(ctx context.Context) error {
	s := m.etcd.Server
	select {
	case <-s.ReadyNotify():
	default:
		return errors.New("member has not joined the cluster yet")
	}
	if s.IsLearner() {
		return errors.New("member is a learner, not yet promoted")
	}
	if s.Leader() == 0 {
		return errors.New("no leader")
	}
	if err := s.LinearizableReadNotify(ctx); err != nil {
		return fmt.Errorf("linearizable read: %w", err)
	}
	return nil
}

// Status implements datastore.Datastore.
func (m *Member) Status(_ context.Context) (datastore.Status, error) {
	s := m.etcd.Server
	be := s.Backend()
	st := datastore.Status{
		Kind:            Kind,
		Endpoint:        m.cfg.ClientURL,
		DBSizeBytes:     be.Size(),
		DBFreeBytes:     be.Size() - be.SizeInUse(),
		Revision:        s.KV().Rev(),
		CompactRevision: s.KV().FirstRev(),
	}
	if fs, err := statfs(m.cfg.DataDir); err == nil {
		st.VolumeSizeBytes, st.VolumeFreeBytes = fs.size, fs.free
	}
	return st, nil
}

// Close stops the member, waiting at most until ctx ends.
func (m *Member) Close(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		m.etcd.Close()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping etcd member %s: %w", m.cfg.Name, ctx.Err())
	}
}

// String names the member for logs.
func (m *Member) String() string {
	return m.cfg.Name + "/" + strconv.FormatUint(m.ID(), 16)
}
