package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/pkg/datastore"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/etcd/member"
	"github.com/k3k-io/k3k/pkg/layout"
)

// rosterPollInterval is how often a member waiting to be added re-reads the
// roster file (a mounted ConfigMap or Secret, which the kubelet refreshes).
const rosterPollInterval = 2 * time.Second

type etcdOptions struct {
	name, dataDir, peerURL, clientURL     string
	listenPeer, listenClient, membersFile string
	caFile, certFile, keyFile             string
	healthAddress, metricsAddress         string
	terminationMessagePath                string
	quotaBytes                            int64
	// migrateFromSQLite is the read-only SQLite data dir whose data the
	// member loads before it reports started (migrate.go).
	migrateFromSQLite string
}

// newEtcdCommand is the `datastore etcd` subcommand: one etcd member of an HA
// virtual cluster.
func newEtcdCommand() *cobra.Command {
	var o etcdOptions
	cmd := &cobra.Command{
		Use:   "etcd --name POD --data-dir DIR --peer-url URL --client-url URL --members-file FILE ...",
		Short: "Run one etcd member of a virtual cluster",
		Long: `Run one etcd member whose identity is its name (the pod name) and whose URLs
name the pod by DNS. With a data dir it starts from it, whatever its address is
now. With an empty data dir it waits until the member roster the controller
publishes (--members-file, JSON) lists it, then joins as that member; a member
listed as started whose data dir is empty exits: the controller replaces it.
A member removed from the cluster sets its data aside and waits to be added
again.

The health address serves /healthz, /readyz (joined, voting, quorum) and /status;
the metrics address serves /metrics (etcd's own metrics and k3k's).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEtcd(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.name, "name", "", "member name: the pod name (required)")
	f.StringVar(&o.dataDir, "data-dir", "", "data directory on the pod's volume (required)")
	f.StringVar(&o.peerURL, "peer-url", "", "advertised peer URL, https://<pod>.<headless service>.<ns>.svc:2380 (required)")
	f.StringVar(&o.clientURL, "client-url", "", "advertised client URL, https://<pod>.<headless service>.<ns>.svc:2379 (required)")
	f.StringVar(&o.listenPeer, "listen-peer-address", member.DefaultListenPeerAddress, "host:port the peer port binds")
	f.StringVar(&o.listenClient, "listen-client-address", member.DefaultListenClientAddress, "host:port the client port binds")
	f.StringVar(&o.membersFile, "members-file", "", "member roster published by the controller, JSON (required)")
	f.StringVar(&o.caFile, "ca-file", "", "cluster CA certificate (required)")
	f.StringVar(&o.certFile, "cert-file", "", "member certificate, server and client usage (required)")
	f.StringVar(&o.keyFile, "key-file", "", "member key (required)")
	f.StringVar(&o.healthAddress, "health-address", fmt.Sprintf("0.0.0.0:%d", layout.DatastoreHealthPort), "host:port for /healthz, /readyz and /status")
	f.StringVar(&o.metricsAddress, "metrics-address", fmt.Sprintf("0.0.0.0:%d", layout.DatastoreMetricsPort), "host:port for /metrics")
	f.StringVar(&o.terminationMessagePath, "termination-message-path", "/dev/termination-log",
		"file the data-lost marker is written to, for the controller to read from the pod's status (empty: none)")
	f.Int64Var(&o.quotaBytes, "quota-backend-bytes", 0, "database size that raises NOSPACE (0: etcd's default, 2 GiB)")
	f.StringVar(&o.migrateFromSQLite, "migrate-from-sqlite", "",
		"the SQLite datastore's data dir (read-only) whose data this member, alone in its cluster, loads before it reports started: the migration from sqlite to etcd; done once (a marker key in etcd says so)")
	for _, name := range []string{"name", "data-dir", "peer-url", "client-url", "members-file", "ca-file", "cert-file", "key-file"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func runEtcd(ctx context.Context, o etcdOptions, stderr io.Writer) error {
	log := newLogger(stderr)
	ctx = logr.NewContext(ctx, log)
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()

	healthLn, err := net.Listen("tcp", o.healthAddress)
	if err != nil {
		return fmt.Errorf("--health-address: %w", err)
	}
	defer healthLn.Close()
	metricsLn, err := net.Listen("tcp", o.metricsAddress)
	if err != nil {
		return fmt.Errorf("--metrics-address: %w", err)
	}
	defer metricsLn.Close()

	// Probes answer from the start: "not ready" while the member waits for the
	// roster or for quorum, rather than a refused connection.
	ds := &pendingMember{}
	health := &http.Server{Handler: datastore.HealthHandler(ds), ReadHeaderTimeout: 10 * time.Second}
	go serveHTTP(log, "health", health, healthLn)
	// etcd registers its metrics with the default registry; serve that one.
	reg := prometheus.DefaultRegisterer.(*prometheus.Registry)
	reg.MustRegister(datastore.NewCollector(ds))
	metrics := &http.Server{Handler: metricsMux(reg), ReadHeaderTimeout: 10 * time.Second}
	go serveHTTP(log, "metrics", metrics, metricsLn)
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = health.Shutdown(shutdownCtx)
		_ = metrics.Shutdown(shutdownCtx)
	}()

	zl, err := zap.NewProduction()
	if err != nil {
		return fmt.Errorf("building etcd logger: %w", err)
	}
	// rebuild is set once the running member found an operator's recovery
	// request naming it and saw no quorum; only then does the next start
	// rebuild the cluster from this member's data. A start never does so on
	// the roster's word alone: the roster the kubelet mounts can lag a
	// minute behind the controller, and a quorum that came back by itself in
	// the meantime must not be split by a forced new cluster.
	rebuild := false
	for {
		m, err := startWhenListed(ctx, o, zl, rebuild)
		if err != nil {
			return err
		}
		if o.migrateFromSQLite != "" {
			if err := loadFromSQLite(ctx, m, o.migrateFromSQLite, o.dataDir, stderr); err != nil {
				if o.terminationMessagePath != "" {
					_ = os.WriteFile(o.terminationMessagePath, []byte(etcd.MigrationFailedReport(err)+"\n"), 0o644)
				}
				shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
				closeErr := m.Close(shutdownCtx)
				cancel()
				return errors.Join(fmt.Errorf("loading the SQLite data of %s (the migration to etcd; the SQLite data is untouched): %w", o.migrateFromSQLite, err), closeErr)
			}
		}
		ds.set(m)
		log.Info("etcd member started", "name", o.name, "id", etcd.FormatID(m.ID()), "peerURL", o.peerURL, "clientURL", o.clientURL,
			"healthAddress", healthLn.Addr().String(), "metricsAddress", metricsLn.Addr().String())

		var runErr error
		rebuild = false
		poll := time.NewTicker(rosterPollInterval)
		for !rebuild && runErr == nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
				log.Info("signal received, shutting down")
			case runErr = <-m.Failed():
			case <-poll.C:
				// An operator's recovery from quorum loss names this member
				// in the roster: restart it to rebuild the cluster.
				roster, err := etcd.ReadRoster(o.membersFile)
				rebuild = err == nil && recoveryFor(roster, o, m.ID()) != "" && !hasQuorum(ctx, m)
			}
		}
		poll.Stop()
		ds.set(nil)
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		closeErr := m.Close(shutdownCtx)
		cancel()
		if rebuild && ctx.Err() == nil {
			if closeErr != nil {
				return closeErr
			}
			log.Info("restarting to rebuild the cluster from this member's data, as an operator asked", "name", o.name)
			continue
		}
		if !errors.Is(runErr, member.ErrRemoved) || ctx.Err() != nil {
			if runErr != nil {
				log.Error(runErr, "etcd member stopped")
			}
			return errors.Join(runErr, closeErr)
		}
		// Removed from the cluster (scaled away, replaced, or left out of a
		// recovered cluster): the data can never serve this member again, and
		// starting from it would only be refused ("permanently removed"). Set
		// it aside and wait, in this process, to be added again as a new
		// member; a crash loop would only delay that.
		id := m.ID()
		if err := member.SetAside(o.dataDir, id); err != nil {
			return fmt.Errorf("member %s was removed; setting its data aside: %w", etcd.FormatID(id), err)
		}
		log.Info("this member was removed from the cluster: its data is set aside; waiting to be added again",
			"name", o.name, "removedID", etcd.FormatID(id))
	}
}

// startWhenListed starts the member, waiting while the roster does not list it
// yet or its peers have not accepted it yet. With rebuild, a recovery the roster names for this member's data is
// performed (--force-new-cluster, once per request); the caller sets it only
// after it saw the request and no quorum. ErrDataLost is returned at once,
// after the report the controller reads (the termination message, naming the
// lost member) is written: it needs the controller, not time.
func startWhenListed(ctx context.Context, o etcdOptions, zl *zap.Logger, rebuild bool) (*member.Member, error) {
	log := logr.FromContextOrDiscard(ctx)
	for {
		// A member with data starts from it even when the roster is missing or
		// unreadable (its ConfigMap deleted, say): it needs nothing from the
		// roster then. Only an empty member waits for it.
		roster, readErr := etcd.ReadRoster(o.membersFile)
		var request string
		if dir, err := member.ReadDataDir(o.dataDir); rebuild && err == nil && dir.HasData {
			request = recoveryFor(roster, o, dir.ID)
		}
		m, err := member.Start(ctx, member.Config{
			Recover: request,
			Name:    o.name, DataDir: o.dataDir, PeerURL: o.peerURL, ClientURL: o.clientURL,
			ListenPeerAddress: o.listenPeer, ListenClientAddress: o.listenClient,
			CAFile: o.caFile, CertFile: o.certFile, KeyFile: o.keyFile,
			Roster: roster, QuotaBackendBytes: o.quotaBytes, Logger: zl,
		})
		if errors.Is(err, member.ErrDataLost) && o.terminationMessagePath != "" {
			self, _ := roster.Find(o.name)
			if id, perr := etcd.ParseID(self.ID); perr == nil {
				_ = os.WriteFile(o.terminationMessagePath, []byte(etcd.DataLostReport(id)+"\n"), 0o644)
			}
		}
		switch {
		case errors.Is(err, member.ErrJoinPending):
			// Added, but the peers did not answer its join yet: try again in
			// this process rather than exit into the kubelet's back-off.
			log.Info("waiting for the cluster's members to accept this member", "name", o.name, "reason", err.Error())
		case errors.Is(err, member.ErrNotAMember):
			log.Info("waiting for the controller to add this member", "name", o.name, "reason", fmt.Sprint(errors.Join(readErr, err)))
		default:
			return m, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(rosterPollInterval):
		}
	}
}

// hasQuorum reports whether the member serves a linearizable read now. A
// recovery is performed only by a member without quorum: if quorum came back
// meanwhile, rebuilding would drop healthy members for nothing.
func hasQuorum(ctx context.Context, m *member.Member) bool {
	ctx, cancel := context.WithTimeout(ctx, etcd.ProbeTimeout)
	defer cancel()
	return m.Ready(ctx) == nil
}

// recoveryFor is the recovery request the roster asks this member (its name
// and the member ID id) to perform, and "" when there is none or it was done.
func recoveryFor(r etcd.Roster, o etcdOptions, id uint64) string {
	rec := r.Recover
	if rec == nil || rec.Name != o.name || rec.ID != etcd.FormatID(id) || id == 0 || member.RecoveryDone(o.dataDir, rec.Request) {
		return ""
	}
	return rec.Request
}

// pendingMember is the Datastore the probes see before the member has started.
type pendingMember struct {
	m atomic.Pointer[member.Member]
}

// set makes m the member the probes see; nil while none runs.
func (p *pendingMember) set(m *member.Member) { p.m.Store(m) }

func (p *pendingMember) Endpoint() string {
	if m := p.m.Load(); m != nil {
		return m.Endpoint()
	}
	return ""
}

func (p *pendingMember) Ready(ctx context.Context) error {
	if m := p.m.Load(); m != nil {
		return m.Ready(ctx)
	}
	return errors.New("member not started: waiting for the member roster")
}

func (p *pendingMember) Status(ctx context.Context) (datastore.Status, error) {
	if m := p.m.Load(); m != nil {
		return m.Status(ctx)
	}
	return datastore.Status{}, errors.New("member not started")
}
