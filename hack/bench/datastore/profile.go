package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
)

// serveSQLite runs our datastore library in this process, as `datastore
// sqlite` does, so that --profile-dir can take CPU profiles of it: the library
// and settings are the binary's, only the process differs (no health server).
func serveSQLite(dir, addr, sync, controlAddr, backend string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	reg := prometheus.NewRegistry()
	srv, err := sqlite.Open(ctx, sqlite.Config{
		DataDir: dir, ListenAddress: addr, Sync: sqlite.SyncMode(sync), Backend: sqlite.BackendKind(backend), MetricsRegisterer: reg,
	})
	if err != nil {
		return err
	}
	if err := serveControl(controlAddr, reg); err != nil {
		return err
	}
	<-ctx.Done()
	return srv.Close(context.Background())
}

// serveControl serves, for the bench, /metrics (kine's SQL counters among
// them) and /profile/start?path=P, /profile/stop, which write a CPU profile
// of this process to P.
func serveControl(addr string, reg *prometheus.Registry) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var out *os.File
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/profile/start", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		f, err := os.Create(r.URL.Query().Get("path"))
		if err == nil {
			if err = pprof.StartCPUProfile(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out = f
	})
	mux.HandleFunc("/profile/stop", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if out != nil {
			pprof.StopCPUProfile()
			out.Close()
			out = nil
		}
	})
	go func() { _ = (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln) }()
	return nil
}

// controlClient talks to the measured datastore's control endpoint; a
// datastore that does not answer must not hang the bench.
var controlClient = &http.Client{Timeout: 30 * time.Second}

// sqlCounts scrapes kine_sql_total from a metrics endpoint, summed per query
// name over error codes; nil when there is no endpoint.
func sqlCounts(metricsURL string) map[string]float64 {
	if metricsURL == "" {
		return nil
	}
	resp, err := controlClient.Get(metricsURL + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	return parseSQLCounts(resp.Body)
}

// parseSQLCounts reads kine_sql_total samples from Prometheus text format.
func parseSQLCounts(r io.Reader) map[string]float64 {
	counts := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "kine_sql_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		name := ""
		for _, l := range strings.Split(labels, ",") {
			if s, ok := strings.CutPrefix(l, `name="`); ok {
				name = strings.TrimSuffix(s, `"`)
			}
		}
		counts[name] += v
	}
	return counts
}

// sqlPerOp is what ran between two scrapes, per operation: the total and a
// "name=per-op" breakdown, largest first.
func sqlPerOp(before, after map[string]float64, n int) (float64, string) {
	var total float64
	type q struct {
		name string
		per  float64
	}
	var qs []q
	for name, v := range after {
		d := (v - before[name]) / float64(n)
		if d > 0 {
			total += d
			qs = append(qs, q{name, d})
		}
	}
	sort.Slice(qs, func(i, j int) bool {
		return qs[i].per > qs[j].per || (qs[i].per == qs[j].per && qs[i].name < qs[j].name)
	})
	parts := make([]string, len(qs))
	for i, x := range qs {
		parts[i] = fmt.Sprintf("%s=%.2f", x.name, x.per)
	}
	return total, strings.Join(parts, " ")
}

// profilePath names a step's CPU profile: datastore, round, step.
func profilePath(dir, datastore string, round int, step string) string {
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(step))
	for strings.Contains(slug, "--") {
		slug = strings.ReplaceAll(slug, "--", "-")
	}
	return filepath.Join(dir, fmt.Sprintf("%s-r%d-%s.pprof", datastore, round, strings.Trim(slug, "-")))
}
