package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/k3s-io/kine/pkg/endpoint"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/k3k-io/k3k/pkg/datastore"
	"github.com/k3k-io/k3k/pkg/datastore/sqlite/batchlog"
)

// Kind is the datastore kind this package serves.
const Kind = "sqlite"

// kine settings that are not ours to choose differently from kine's own binary.
const (
	busyTimeoutMillis  = 30000
	compactTimeout     = 5 * time.Second
	compactMinRetain   = 1000
	compactBatchSize   = 1000
	pollBatchSize      = 500
	pollInterval       = time.Second
	notifyInterval     = 5 * time.Second
	emulatedEtcd       = "3.6.11"
	readyProbeKey      = "/k3k.io/datastore/readyz"
	grpcOverheadBytes  = 512 * 1024
	probeTableCreation = `CREATE TABLE IF NOT EXISTS k3k_datastore_probe (id INTEGER PRIMARY KEY, checked_at INTEGER)`
	probeWrite         = `INSERT INTO k3k_datastore_probe (id, checked_at) VALUES (1, ?)
		ON CONFLICT(id) DO UPDATE SET checked_at = excluded.checked_at`
)

// Server is a running SQLite datastore. Open starts it; Close stops it.
type Server struct {
	cfg      Config
	dbPath   string
	endpoint string

	lock   *dirLock
	side   *sql.DB
	client *clientv3.Client
	gsync  *groupSync // nil in SyncCommit mode
	ckpt   *checkpointer
	failed chan struct{}

	stop       context.CancelFunc
	unregister func() // v2: drops the hooks left for the driver
	wg         *sync.WaitGroup
	closeOnce  sync.Once
	closeErr   error
}

var _ datastore.Datastore = (*Server)(nil)

// Open checks and locks the data dir, checks an existing database, and starts
// serving the etcd API. The logger comes from ctx; ctx bounds the start only.
func Open(ctx context.Context, cfg Config) (_ *Server, rerr error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("dataDir", cfg.DataDir)
	ctx = logr.NewContext(ctx, log)
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	if err := checkDataDir(dir); err != nil {
		return nil, err
	}
	lock, err := lockDataDir(dir)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, dbPath: filepath.Join(dir, DatabaseFile), lock: lock, wg: &sync.WaitGroup{}, failed: make(chan struct{})}
	defer func() {
		if rerr != nil {
			s.abort()
		}
	}()

	checkCtx, cancel := context.WithTimeout(ctx, cfg.IntegrityCheckTimeout)
	err = checkIntegrity(checkCtx, s.dbPath)
	cancel()
	if err != nil {
		return nil, err
	}

	// Our own connection opens lazily: its first use comes after kine has
	// created the file.
	if s.side, err = openSide(s.dbPath); err != nil {
		return nil, err
	}
	serveCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = stop
	if cfg.Sync == SyncGroup {
		s.gsync = newGroupSync(s.dbPath, dir)
		go s.gsync.watch(serveCtx, log, stallAfter)
		go func() {
			<-s.gsync.failed
			close(s.failed)
		}()
	}
	gate := newWriteGate()
	go gate.watch(serveCtx, log, stallAfter)
	s.ckpt = newCheckpointer(s.side, gate)
	go s.ckpt.run(serveCtx)
	gopts := grpcOptions()
	dsn := kineScheme + "://" + s.dbPath + "?" + kineParams(cfg)
	if cfg.Backend == BackendV2 {
		// batchlog waits for the flush and answers exactly, so kine's
		// answers need no guard in front of it.
		key, unregister := registerV2(s.v2Config(log, gate))
		s.unregister = unregister
		dsn = v2Scheme + "://" + s.dbPath + "?" + kineParams(cfg) + "&" + v2Param + "=" + key
	} else {
		guard := newAckGuard(s.side, s.gsync, s.ckpt, gate, log)
		gopts = append(gopts, grpc.ChainUnaryInterceptor(guard.unaryInterceptor))
	}
	log.Info("starting kine on SQLite", "file", s.dbPath, "listenAddress", cfg.ListenAddress,
		"sync", string(cfg.Sync), "backend", string(cfg.Backend), "compactInterval", cfg.CompactInterval.String())
	etcdCfg, err := endpoint.Listen(serveCtx, endpoint.Config{
		GRPCServer:          grpc.NewServer(gopts...),
		WaitGroup:           s.wg,
		Listener:            cfg.ListenAddress,
		Endpoint:            dsn,
		MetricsRegisterer:   cfg.MetricsRegisterer,
		NotifyInterval:      notifyInterval,
		EmulatedETCDVersion: emulatedEtcd,
		CompactInterval:     cfg.CompactInterval,
		CompactTimeout:      compactTimeout,
		CompactMinRetain:    compactMinRetain,
		CompactBatchSize:    compactBatchSize,
		PollBatchSize:       pollBatchSize,
		PollInterval:        pollInterval,
	})
	if err != nil {
		// kine's error already leaves the DSN out.
		return nil, fmt.Errorf("starting kine on %s: %w", s.dbPath, err)
	}
	if len(etcdCfg.Endpoints) == 0 {
		return nil, errors.New("kine reported no endpoint")
	}
	if s.endpoint, err = clientURL(cfg.ListenAddress, etcdCfg.Endpoints[0]); err != nil {
		return nil, err
	}

	if _, err := s.side.ExecContext(ctx, probeTableCreation); err != nil {
		return nil, fmt.Errorf("preparing the readiness probe table in %s: %w", s.dbPath, err)
	}
	s.client, err = clientv3.New(clientv3.Config{
		Endpoints: []string{s.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the readiness client: %w", err)
	}
	log.Info("serving the etcd API", "endpoint", s.endpoint)
	return s, nil
}

// kineParams are the DSN parameters kine passes on to SQLite. Nothing secret:
// the DSN is a file path, but it still stays out of logs like any DSN.
func kineParams(cfg Config) string {
	sync := "NORMAL" // SyncGroup: our interceptor flushes before acknowledging
	if cfg.Sync == SyncCommit {
		sync = "FULL"
	}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", sync)
	q.Set("_busy_timeout", strconv.Itoa(busyTimeoutMillis))
	q.Set("_txlock", "immediate")
	// Checkpoints run in the background (see checkpointer), not inside a
	// write. A pragma in the DSN reaches every connection kine opens.
	q.Add("_pragma", "wal_autocheckpoint(0)")
	// SQLite keeps its temporary files in memory: the statement journal of
	// an insert that changes more than 16 existing pages (64 KiB: an index
	// page split that rebalances its neighbours), and the sorts and temporary
	// tables of big reads. As files they need a writable /tmp, /var/tmp or
	// working directory, which the datastore container (read-only root
	// filesystem) does not have. There such an insert failed with
	// SQLITE_IOERR_GETTEMPPATH, and the same insert failed again on every
	// retry; kine answered the create as done and the update as a failed
	// compare, which kube-apiserver retries at once until its deadline. Lease
	// renewals stopped that way a few minutes into an e2e run.
	q.Add("_pragma", "temp_store(MEMORY)")
	if cfg.CacheBytes > 0 {
		q.Add("_pragma", fmt.Sprintf("cache_size(-%d)", cfg.CacheBytes/1024))
	}
	if cfg.MmapBytes > 0 {
		q.Add("_pragma", fmt.Sprintf("mmap_size(%d)", cfg.MmapBytes))
	}
	// A VACUUM at start rewrites the whole file: slow on a big database and
	// impossible on a full volume. Free pages are reused instead.
	return q.Encode() + "&_kine_disable_startup_vacuum"
}

// grpcOptions are kine's own server options (etcd's limits and keepalives);
// kine builds the same server when it is not handed one.
func grpcOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: embed.DefaultGRPCKeepAliveMinTime,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    embed.DefaultGRPCKeepAliveInterval,
			Timeout: embed.DefaultGRPCKeepAliveTimeout,
		}),
		grpc.MaxConcurrentStreams(embed.DefaultMaxConcurrentStreams),
		grpc.MaxRecvMsgSize(int(embed.DefaultMaxRequestBytes) + grpcOverheadBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
	}
}

// clientURL is the URL a local client dials: the listen host (loopback when it
// listens on all addresses) with the port kine actually bound, so port 0 works.
func clientURL(listen, kineEndpoint string) (string, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", listen, err)
	}
	u, err := url.Parse(kineEndpoint)
	if err != nil {
		return "", fmt.Errorf("parsing kine endpoint: %w", err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, u.Port()), nil
}

// Endpoint is the etcd client URL, e.g. http://127.0.0.1:2379.
func (s *Server) Endpoint() string { return s.endpoint }

// DatabasePath is the SQLite file.
func (s *Server) DatabasePath() string { return s.dbPath }

// Failed is closed when the server can no longer make writes durable (a failed
// fsync). The owner should Close it and exit so that a restart reads back what
// is really on disk.
func (s *Server) Failed() <-chan struct{} { return s.failed }

// Ready returns nil when the etcd API answers and the database takes a write.
func (s *Server) Ready(ctx context.Context) error {
	if s.gsync != nil {
		if err := s.gsync.failure(); err != nil {
			return err
		}
	}
	if _, err := s.client.Get(ctx, readyProbeKey); err != nil {
		return fmt.Errorf("etcd API on %s does not answer: %w", s.endpoint, err)
	}
	if _, err := s.side.ExecContext(ctx, probeWrite, time.Now().Unix()); err != nil {
		return fmt.Errorf("database %s does not take writes: %w", s.dbPath, err)
	}
	return nil
}

// Close stops serving: in-flight requests get kine's grace period to finish, the
// connections close, the WAL is checkpointed into the database file and the data
// dir is unlocked. ctx bounds the wait.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.shutdown(ctx) })
	return s.closeErr
}

func (s *Server) shutdown(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("dataDir", s.cfg.DataDir)
	log.Info("stopping: finishing in-flight requests")
	if s.client != nil {
		_ = s.client.Close()
	}
	s.stop()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var errs []error
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("waiting for kine to stop: %w", ctx.Err()))
	}
	if s.unregister != nil {
		s.unregister()
	}
	if s.ckpt != nil {
		<-s.ckpt.done
	}
	if s.side != nil {
		var busy, logFrames, checkpointed int64
		err := s.side.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &checkpointed)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("checkpointing the WAL of %s: %w", s.dbPath, err))
		case busy != 0:
			errs = append(errs, fmt.Errorf("checkpointing the WAL of %s: database still busy", s.dbPath))
		default:
			log.Info("WAL checkpointed into the database file", "frames", checkpointed)
		}
		if err := s.side.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing %s: %w", s.dbPath, err))
		}
	}
	if err := s.lock.release(); err != nil {
		errs = append(errs, fmt.Errorf("unlocking data dir: %w", err))
	}
	if len(errs) == 0 {
		log.Info("stopped")
	}
	return errors.Join(errs...)
}

// abort undoes a failed Open.
func (s *Server) abort() {
	if s.stop != nil {
		if s.client != nil {
			_ = s.client.Close()
		}
		s.stop()
		s.wg.Wait()
	}
	if s.unregister != nil {
		s.unregister()
	}
	if s.ckpt != nil {
		<-s.ckpt.done
	}
	if s.side != nil {
		_ = s.side.Close()
	}
	_ = s.lock.release()
}

// v2Config is what the v2 backend takes from this server: the group fsync,
// the write gate and the checkpointer, the same ones the kine path uses, and
// kine's compaction settings.
func (s *Server) v2Config(log logr.Logger, gate *writeGate) batchlog.Config {
	c := batchlog.Config{
		Gate:             v2Gate{gate},
		Wrote:            s.ckpt.wrote,
		CompactInterval:  s.cfg.CompactInterval,
		CompactMinRetain: compactMinRetain,
		CompactBatchSize: compactBatchSize,
		Log:              log.WithName("v2"),
	}
	if s.cfg.v2CompactMinRetain > 0 {
		c.CompactMinRetain = s.cfg.v2CompactMinRetain
	}
	if g := s.gsync; g != nil {
		c.Flush = func() func(context.Context) error {
			b := g.start()
			return func(ctx context.Context) error { return g.wait(ctx, b) }
		}
	}
	return c
}

// v2Gate lends the write gate to the v2 backend's writer.
type v2Gate struct{ g *writeGate }

func (v v2Gate) Enter(ctx context.Context, what, key string) error { return v.g.enter(ctx, what, key) }
func (v v2Gate) Leave()                                            { v.g.leave() }
