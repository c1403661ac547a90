package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/k3k-io/k3k/pkg/datastore"
	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
)

// shutdownTimeout bounds the graceful stop; kubelet's default grace period is 30s.
const shutdownTimeout = 20 * time.Second

type sqliteOptions struct {
	dataDir        string
	listenAddress  string
	healthAddress  string
	metricsAddress string
	sync           string
	backend        string
	podDir         string
	k3sDataDir     string
}

func newSQLiteCommand() *cobra.Command {
	var o sqliteOptions
	cmd := &cobra.Command{
		Use:   "sqlite --data-dir DIR",
		Short: "Serve a SQLite database through kine",
		Long: `Serve a SQLite database in DIR over the etcd v3 API through kine.

With --pod-dir, the first start in a pod (before any k3s of the pod can run)
removes the empty k3s bootstrap lock a server that died during its very first
start left behind, which would otherwise hold up the next start ~25s; with
--k3s-data-dir too, and while k3s never stored its bootstrap data, it sets
aside the certificates such a server left half-written, which would stop
every later start.

The health address serves /healthz (process up), /readyz (serving and writable)
and /status (sizes and revisions as JSON); the metrics address serves /metrics.
Unless given, both listen on the host of --listen-address with a port chosen by
the kernel (logged at start), so several instances never collide.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSQLite(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "", "existing, writable directory holding the database (required)")
	f.StringVar(&o.listenAddress, "listen-address", sqlite.DefaultListenAddress, "host:port for the etcd v3 API; port 0 picks a free port")
	f.StringVar(&o.healthAddress, "health-address", "", "host:port for /healthz, /readyz and /status (default: listen host, free port)")
	f.StringVar(&o.metricsAddress, "metrics-address", "", "host:port for /metrics (default: listen host, free port)")
	f.StringVar(&o.sync, "sync", string(sqlite.SyncGroup), `how writes are made durable before they are acknowledged: "group" (shared fsyncs) or "commit" (SQLite fsyncs every commit)`)
	f.StringVar(&o.backend, "backend", string(sqlite.BackendV2), `what serves the requests on the SQLite file: "v2" (batched writes, watch from the write path) or "kine" (stock kine's backend, the default before v2); both keep the file a standard kine database, so either can be started on the other's file`)
	f.StringVar(&o.podDir, "pod-dir", "", "a directory that lives as long as the pod (an emptyDir); on the first start in a pod, k3s bootstrap locks left empty by a server that died are removed (single-server pods only); empty: never")
	f.StringVar(&o.k3sDataDir, "k3s-data-dir", "", "k3s's data dir as mounted in this container; with --pod-dir, on the first start in a pod while k3s never stored its bootstrap data, its server/tls is set aside when a file in it does not parse (k3s died writing it); empty: never")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

func runSQLite(ctx context.Context, o sqliteOptions, stderr io.Writer) error {
	log := newLogger(stderr)
	ctx = logr.NewContext(ctx, log)
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()

	host, _, err := net.SplitHostPort(o.listenAddress)
	if err != nil {
		return fmt.Errorf("--listen-address %q: %w", o.listenAddress, err)
	}
	healthAddr := orDefault(o.healthAddress, net.JoinHostPort(host, "0"))
	metricsAddr := orDefault(o.metricsAddress, net.JoinHostPort(host, "0"))
	// Bind the HTTP ports before opening the database, so a port clash fails
	// fast without touching the data dir.
	healthLn, err := net.Listen("tcp", healthAddr)
	if err != nil {
		return fmt.Errorf("--health-address: %w", err)
	}
	defer healthLn.Close()
	metricsLn, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-address: %w", err)
	}
	defer metricsLn.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := sqlite.Open(ctx, sqlite.Config{
		DataDir:           o.dataDir,
		ListenAddress:     o.listenAddress,
		Sync:              sqlite.SyncMode(o.sync),
		Backend:           sqlite.BackendKind(o.backend),
		MetricsRegisterer: reg,
	})
	if err != nil {
		return err
	}
	reg.MustRegister(datastore.NewCollector(srv))
	if o.podDir != "" {
		// Before /readyz answers, so before this pod's k3s may start.
		repairFirstStart(ctx, log, o.podDir, o.k3sDataDir, srv.Endpoint())
	}

	health := &http.Server{Handler: datastore.HealthHandler(srv), ReadHeaderTimeout: 10 * time.Second}
	metrics := &http.Server{Handler: metricsMux(reg), ReadHeaderTimeout: 10 * time.Second}
	go serveHTTP(log, "health", health, healthLn)
	go serveHTTP(log, "metrics", metrics, metricsLn)
	log.Info("datastore ready to serve", "kind", sqlite.Kind, "endpoint", srv.Endpoint(),
		"healthAddress", healthLn.Addr().String(), "metricsAddress", metricsLn.Addr().String())

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("signal received, shutting down")
	case <-srv.Failed():
		runErr = errors.New("writes can no longer be made durable (fsync failed); exiting so that a restart starts from what is on disk")
		log.Error(runErr, "stopping")
	}
	shutdownCtx, cancel := context.WithTimeout(logr.NewContext(context.Background(), log), shutdownTimeout)
	defer cancel()
	// The datastore stops first so /readyz keeps answering "not ready" rather
	// than refusing connections while requests drain.
	closeErr := srv.Close(shutdownCtx)
	_ = health.Shutdown(shutdownCtx)
	_ = metrics.Shutdown(shutdownCtx)
	return errors.Join(runErr, closeErr)
}

// repairFirstStart undoes, on the sidecar's first start in the pod, what a k3s
// that died during its very first start left behind: its bootstrap lock
// (bootstraplock.go) and, when k3sDataDir is set and no bootstrap data is
// stored, certificates it did not finish writing (unfinishedtls.go). Failures
// are logged, not fatal: k3s removes a stale lock by itself, only later, and
// broken certificates stay as they were.
func repairFirstStart(ctx context.Context, log logr.Logger, podDir, k3sDataDir, endpoint string) {
	first, err := firstStartInPod(podDir)
	if err != nil {
		log.Error(err, "not clearing stale k3s bootstrap locks")
		return
	}
	if !first {
		log.Info("restarted within the pod, whose k3s may hold the bootstrap lock; leaving it alone")
		return
	}
	cleared, stored, err := clearStaleBootstrapLocks(ctx, endpoint)
	if err != nil {
		log.Error(err, "clearing stale k3s bootstrap locks; k3s will time them out itself")
		return
	}
	if len(cleared) > 0 {
		log.Info("removed the k3s bootstrap lock a server that died during its first start left behind", "keys", cleared)
	}
	if stored || k3sDataDir == "" {
		return
	}
	aside, broken, err := setAsideUnfinishedTLS(k3sDataDir, time.Now())
	if err != nil {
		log.Error(err, "k3s's certificates from an unfinished first start stay in place", "broken", broken)
		return
	}
	if aside != "" {
		log.Info("set aside the certificates of a k3s that died writing them on its first start (no bootstrap data stored, so never used); k3s generates new ones",
			"broken", broken, "movedTo", aside)
	}
}

func metricsMux(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

func serveHTTP(log logr.Logger, name string, srv *http.Server, ln net.Listener) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error(err, "http server stopped", "server", name)
	}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// newLogger logs key/value lines to stderr, and sends kine's own logrus output
// (which never contains the DSN) to the same place.
func newLogger(w io.Writer) logr.Logger {
	logrus.SetOutput(w)
	logrus.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: time.RFC3339Nano, DisableColors: true})
	return funcr.New(func(prefix, args string) {
		fmt.Fprintf(w, "time=%s %s\n", time.Now().Format(time.RFC3339Nano), args)
	}, funcr.Options{})
}
