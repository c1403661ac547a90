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
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/pkg/v3/featuregate"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/features"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/pkg/datastore"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/layout"
)

// Kind is the datastore kind this package serves.
const Kind = "etcd"

// CorruptCheckInterval is how often the leader compares every member's hash of
// its key-value store besides each compaction.
const CorruptCheckInterval = 5 * time.Minute

// Default listen addresses: all addresses, because the pod's IP is not known
// in advance and must not matter, on the server pod's ports (pkg/layout).
var (
	DefaultListenPeerAddress   = net.JoinHostPort("0.0.0.0", strconv.Itoa(layout.DatastorePeerPort))
	DefaultListenClientAddress = net.JoinHostPort("0.0.0.0", strconv.Itoa(layout.DatastoreClientPort))
)

var (
	// ErrNotAMember: the data dir is empty and the roster does not list this
	// member; the controller has not added it yet. Wait for the roster to change.
	ErrNotAMember = errors.New("not in the published member roster yet")
	// ErrDataLost: the data dir is empty but the roster lists this member as
	// one that has run. Rejoining under its old member ID with no log would break
	// raft's guarantees, so the controller must replace it (etcd.Peer.DataLost).
	ErrDataLost = errors.New(etcd.DataLostMessage)
	// ErrRemoved: the member was removed from the cluster while it ran (or
	// while it was away). Its data is of no further use to the cluster: the
	// runner sets it aside (SetAside) and waits to be added again.
	ErrRemoved = errors.New("etcd member was removed from the cluster")
	// ErrJoinPending: a new member could not join the existing cluster yet:
	// no peer answered its request for the member list, or the list it got
	// does not hold it yet (a roster published a moment early, a peer
	// rescheduled, its DNS record not there yet). Nothing was written to the
	// data dir, so the same start is tried again; a crash loop would only add
	// the kubelet's back-off to the wait.
	ErrJoinPending = errors.New("the existing cluster did not accept this member yet")
)

// joinRefusals are the errors of etcd's bootstrap of a new member of an
// existing cluster (etcdserver's bootstrapExistingClusterNoWAL) that pass by
// themselves once the peers answer; they all come before anything is
// written to the data dir.
var joinRefusals = []string{
	"cannot fetch cluster info from peer urls",
	"error validating peerURLs",
	"incompatible with current running cluster",
}

// joinPending reports whether err, from starting a member that joins an
// existing cluster without data, is one that passes by itself.
func joinPending(b Bootstrap, err error) bool {
	if b.FromData || b.State != etcd.ClusterStateExisting {
		return false
	}
	for _, r := range joinRefusals {
		if strings.Contains(err.Error(), r) {
			return true
		}
	}
	return false
}

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
	// CorruptCheckInterval is how often the leader compares the members'
	// hashes; 0 keeps CorruptCheckInterval. Tests shorten it.
	CorruptCheckInterval time.Duration
	// Recover, when set, is an operator's request (etcd.Recovery.Request) to
	// rebuild a cluster that lost quorum from this member's data alone
	// (etcd's --force-new-cluster): every other member is dropped from the
	// membership and added again later by the controller. The member records
	// the request once it serves (RecoveryDone), so that it is done once.
	Recover string
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

// DataDir is what a member's data dir holds, as readDataDir finds it.
type DataDir struct {
	// HasData: the dir holds a member's data (a non-empty WAL).
	HasData bool
	// ID is the member ID recorded for that data (0: not known).
	ID uint64
	// RemovedID is the ID of the member whose data was set aside here because
	// it was removed from the cluster (0: none). A roster that still lists
	// the name under that ID is behind: the member waits for the next one.
	RemovedID uint64
}

// Plan decides how a member named name with peerURL starts, given what its data
// dir holds and the roster. It is pure, so every case is tested without etcd.
//
// A readable roster of an existing cluster that does not list a member with
// data means the member was removed (scaled away, replaced, or left out of a
// recovered cluster): it does not start from that data, which its peers would
// refuse ("permanently removed"), but waits to be added again; the data is set
// aside once the roster lists the name under a new ID.
func Plan(name, peerURL string, dir DataDir, r etcd.Roster) (Bootstrap, error) {
	self, listed := r.Find(name)
	var rosterID uint64
	if listed && self.ID != "" {
		rosterID, _ = etcd.ParseID(self.ID)
	}
	if dir.HasData {
		if listed && rosterID != 0 && dir.ID != 0 && rosterID != dir.ID && !self.Started {
			return plan(name, peerURL, r, self, true)
		}
		if !listed && r.State == etcd.ClusterStateExisting && len(r.Members) > 0 {
			return Bootstrap{}, fmt.Errorf("%w: the roster of the existing cluster no longer lists this member, whose data dir holds member %s: waiting to be added again",
				ErrNotAMember, etcd.FormatID(dir.ID))
		}
		return Bootstrap{FromData: true, State: etcd.ClusterStateExisting, InitialCluster: name + "=" + peerURL}, nil
	}
	if !listed {
		return Bootstrap{}, ErrNotAMember
	}
	if dir.RemovedID != 0 && rosterID == dir.RemovedID {
		return Bootstrap{}, fmt.Errorf("%w: the roster still lists the removed member %s", ErrNotAMember, self.ID)
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
// left behind by an earlier incarnation of the same name is recognised;
// removedFile the ID of a member whose data was set aside after its removal.
const (
	idFile      = "k3k-member-id"
	removedFile = "k3k-removed-id"
	// recoveredFile records the last recovery request this member performed.
	recoveredFile = "k3k-recovered-request"
)

// RecoveryDone reports whether the member with data in dataDir has already
// rebuilt the cluster for request.
func RecoveryDone(dataDir, request string) bool {
	b, err := os.ReadFile(filepath.Join(dataDir, recoveredFile))
	return err == nil && strings.TrimSpace(string(b)) == request
}

// staleSuffix names a set-aside data dir: <data-dir>.stale-<unix nanoseconds>.
const staleSuffix = ".stale-"

// Member is a running etcd member.
type Member struct {
	cfg       Config
	etcd      *embed.Etcd
	closing   atomic.Bool
	closeOnce sync.Once
	closed    chan struct{}
	failed    chan error
}

var _ datastore.Datastore = (*Member)(nil)

// Start starts the member and returns once it listens; it does not wait for the
// cluster (see ReadyNotify), so that all members of a rebooted cluster can start
// together. It returns ErrNotAMember or ErrDataLost (wrapped) when the roster
// says it must not start, and ErrJoinPending when the cluster it joins did not
// answer yet.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	if cfg.Name == "" || cfg.DataDir == "" || cfg.PeerURL == "" || cfg.ClientURL == "" {
		return nil, errors.New("etcd member: name, data dir, peer URL and client URL are required")
	}
	dir, err := ReadDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	b, err := Plan(cfg.Name, cfg.PeerURL, dir, cfg.Roster)
	if err != nil {
		return nil, fmt.Errorf("starting etcd member %s: %w", cfg.Name, err)
	}
	if cfg.Recover != "" && !b.FromData {
		return nil, fmt.Errorf("etcd member %s: asked to rebuild the cluster, but its data dir holds no data", cfg.Name)
	}
	if b.DiscardData {
		if err := SetAside(cfg.DataDir, 0); err != nil {
			return nil, fmt.Errorf("setting aside the data of an earlier member %s: %w", cfg.Name, err)
		}
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
		if joinPending(b, err) {
			return nil, fmt.Errorf("starting etcd member %s: %w: %v", cfg.Name, ErrJoinPending, err)
		}
		return nil, fmt.Errorf("starting etcd member %s: %w", cfg.Name, err)
	}
	m := &Member{cfg: cfg, etcd: e, closed: make(chan struct{}), failed: make(chan error, 1)}
	go m.watch()
	go m.recordID(ctx)
	return m, nil
}

// watch turns a stop the member did not ask for into a failure. etcd's server
// stops on its own only when the member was removed from the cluster (it
// applied its own removal, or a peer told it so), while the embedded etcd's
// listeners keep serving a server whose database is closed: a Status call then
// crashes the process. So the listeners are closed at once, and Failed says
// ErrRemoved.
func (m *Member) watch() {
	select {
	case err := <-m.etcd.Err():
		m.failed <- err
	case <-m.etcd.Server.StopNotify():
		if m.closing.Load() {
			return
		}
		m.shutdown()
		m.failed <- fmt.Errorf("etcd member %s (%s): %w", m.cfg.Name, etcd.FormatID(m.ID()), ErrRemoved)
	case <-m.closed:
	}
}

// shutdown closes the embedded etcd once, whoever asks first.
func (m *Member) shutdown() {
	m.closeOnce.Do(func() {
		m.etcd.Close()
		close(m.closed)
	})
}

// recordID writes the member ID into the data dir once the member has joined,
// and once it votes removes the data dirs set aside for earlier members of
// this name: a voting member holds the cluster's data, so they can serve no one.
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
	if m.cfg.Recover != "" {
		_ = os.WriteFile(filepath.Join(m.cfg.DataDir, recoveredFile), []byte(m.cfg.Recover+"\n"), 0o600)
	}
	_ = os.Remove(filepath.Join(m.cfg.DataDir, removedFile))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for m.etcd.Server.IsLearner() {
		select {
		case <-tick.C:
		case <-m.etcd.Server.StopNotify():
			return
		case <-ctx.Done():
			return
		}
	}
	_ = RemoveStale(m.cfg.DataDir)
}

// ReadDataDir reads what the data dir dir holds.
func ReadDataDir(dir string) (DataDir, error) {
	var d DataDir
	d.RemovedID = readID(filepath.Join(dir, removedFile))
	entries, err := os.ReadDir(filepath.Join(dir, "member", "wal"))
	if errors.Is(err, os.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("reading etcd data dir: %w", err)
	}
	if len(entries) == 0 {
		return d, nil
	}
	d.HasData, d.ID = true, readID(filepath.Join(dir, idFile))
	return d, nil
}

func readID(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	id, err := etcd.ParseID(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return id
}

// SetAside moves the member data in dataDir to <dataDir>.stale-<time> so that
// the member can join again with an empty data dir. removedID, when not 0, is
// recorded as the member that was removed, so that a roster still listing it
// is waited out. The data is kept (not deleted) until a member of this name
// votes again (RemoveStale), in case an operator needs it.
func SetAside(dataDir string, removedID uint64) error {
	dataDir = filepath.Clean(dataDir)
	src := filepath.Join(dataDir, "member")
	if _, err := os.Stat(src); err == nil {
		aside := fmt.Sprintf("%s%s%d", dataDir, staleSuffix, time.Now().UnixNano())
		if err := os.Rename(src, aside); err != nil {
			return fmt.Errorf("setting aside %s: %w", src, err)
		}
	}
	if err := os.Remove(filepath.Join(dataDir, idFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if removedID != 0 {
		return os.WriteFile(filepath.Join(dataDir, removedFile), []byte(etcd.FormatID(removedID)+"\n"), 0o600)
	}
	return nil
}

// RemoveStale deletes the data dirs SetAside left next to dataDir.
func RemoveStale(dataDir string) error {
	stale, err := filepath.Glob(filepath.Clean(dataDir) + staleSuffix + "*")
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range stale {
		errs = append(errs, os.RemoveAll(d))
	}
	return errors.Join(errs...)
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
	ec.ForceNewCluster = cfg.Recover != ""
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
	interval := CorruptCheckInterval
	if cfg.CorruptCheckInterval > 0 {
		interval = cfg.CorruptCheckInterval
	}
	if err := EnableCorruptionChecks(ec, interval); err != nil {
		return nil, err
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

// Failed delivers an error when the member stops on its own: ErrRemoved
// (wrapped) when it was removed from the cluster, a listener's error
// otherwise. The member's ports are closed by then.
func (m *Member) Failed() <-chan error { return m.failed }

// stopped is non-nil once the server is stopping: its database may be closed.
func (m *Member) stopped() error {
	select {
	case <-m.etcd.Server.StoppingNotify():
		return errors.New("member stopped")
	case <-m.closed:
		return errors.New("member stopped")
	default:
		return nil
	}
}

// Embedded is the embedded etcd itself, for fault injection in tests (cutting
// a member off from its peers); the runner never needs it.
func (m *Member) Embedded() *embed.Etcd { return m.etcd }

// ID is the member's etcd ID.
func (m *Member) ID() uint64 { return uint64(m.etcd.Server.MemberID()) }

// Endpoint implements datastore.Datastore: the advertised client URL.
func (m *Member) Endpoint() string { return m.cfg.ClientURL }

// Ready implements datastore.Datastore: the member has a leader, votes (a
// learner cannot serve k3s) and answers a linearizable read, which needs quorum.
func (m *Member) Ready(ctx context.Context) error {
	s := m.etcd.Server
	if err := m.stopped(); err != nil {
		return err
	}
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
func (m *Member) Status(_ context.Context) (st datastore.Status, err error) {
	if err := m.stopped(); err != nil {
		return datastore.Status{}, err
	}
	// The server can still stop between the check and the reads (it is
	// removed at any moment); a read of its closed database then panics.
	defer func() {
		if r := recover(); r != nil {
			st, err = datastore.Status{}, fmt.Errorf("member stopped while reading its status: %v", r)
		}
	}()
	s := m.etcd.Server
	be := s.Backend()
	st = datastore.Status{
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
	m.closing.Store(true)
	done := make(chan struct{})
	go func() {
		m.shutdown()
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

// EnableCorruptionChecks turns on in ec the corruption checks every member
// runs: a member whose data differs from its peers' refuses to start
// (InitialCorruptCheck), and the leader compares the followers' hashes at
// each compaction (CompactHashCheck) and every interval, raising CORRUPT on a
// mismatch (docs/etcd.md says what an operator does then). The datastore
// benchmark measures their cost with the same settings.
func EnableCorruptionChecks(ec *embed.Config, interval time.Duration) error {
	if err := ec.ServerFeatureGate.(featuregate.MutableFeatureGate).SetFromMap(map[string]bool{
		string(features.InitialCorruptCheck): true,
		string(features.CompactHashCheck):    true,
	}); err != nil {
		return fmt.Errorf("enabling etcd's corruption checks: %w", err)
	}
	ec.CorruptCheckTime = interval
	return nil
}
