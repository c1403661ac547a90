// Command bench compares our SQLite datastore with stock kine and a single etcd
// member, through the etcd API and through kube-apiserver, and prints a table
// (make bench-datastore). It is a measurement, not a test: nothing here passes
// or fails on a number.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
)

func main() {
	if len(os.Args) == 5 && os.Args[1] == "serve-kine" {
		exitOn(serveKine(os.Args[2], os.Args[3], os.Args[4]))
		return
	}
	if (len(os.Args) == 6 || len(os.Args) == 7) && os.Args[1] == "serve-sqlite" {
		backend := string(sqlite.BackendKine)
		if len(os.Args) == 7 {
			backend = os.Args[6]
		}
		exitOn(serveSQLite(os.Args[2], os.Args[3], os.Args[4], os.Args[5], backend))
		return
	}
	if len(os.Args) == 4 && os.Args[1] == "serve-etcd" {
		exitOn(serveEtcd(os.Args[2], os.Args[3], 0))
		return
	}
	if len(os.Args) == 5 && os.Args[1] == "serve-etcd-checks" {
		every, err := time.ParseDuration(os.Args[4])
		exitOn(err)
		exitOn(serveEtcd(os.Args[2], os.Args[3], every))
		return
	}
	bin := flag.String("datastore-bin", "", "path of the datastore binary (built with CGO_ENABLED=0)")
	dir := flag.String("dir", "/var/tmp", "directory on the disk to measure; every datastore gets a subdirectory")
	kinds := flag.String("datastores", "sqlite-v2,sqlite,kine,etcd", "datastores to run: sqlite-v2 (ours with --backend v2, the default backend), sqlite (ours with --backend kine, the default before v2), sqlite-commit (--backend kine --sync commit), sqlite-base, kine (stock), etcd, etcd-checks (etcd with the corruption checks our members run)")
	checkEvery := flag.Duration("corrupt-check-interval", 5*time.Second, "the periodic corruption check's interval for etcd-checks (members run it every 5m; shorter, so that hash passes happen during the run)")
	baseBin := flag.String("base-datastore-bin", "", "another build of the datastore binary, run as the sqlite-base column (e.g. the last release), so that a change is compared side by side in one run")
	scale := flag.Float64("scale", 1, "multiplies the number of operations")
	apiserver := flag.Bool("apiserver", true, "also measure through kube-apiserver")
	rounds := flag.Int("rounds", 3, "how often every datastore is measured; each round starts with the next datastore in turn, and the table gives medians")
	profileDir := flag.String("profile-dir", "", "write a CPU profile of every write step of sqlite, sqlite-commit, sqlite-v2 and kine into this directory (go tool pprof); sqlite, sqlite-commit and sqlite-v2 then run inside the bench binary (the same library as the datastore binary)")
	keep := flag.Bool("keep-data", false, "keep every datastore's data dir (printed at the end), e.g. to inspect the SQLite files")
	flag.Parse()
	if *bin == "" {
		exitOn(fmt.Errorf("--datastore-bin is required"))
	}
	if *rounds < 1 {
		exitOn(fmt.Errorf("--rounds must be at least 1"))
	}
	if strings.Contains(*kinds, "sqlite-base") && *baseBin == "" {
		exitOn(fmt.Errorf("the sqlite-base column needs --base-datastore-bin"))
	}
	base, err := os.MkdirTemp(*dir, "k3k-bench-")
	exitOn(err)
	if *keep {
		defer fmt.Fprintln(os.Stderr, "data kept in", base)
	} else {
		defer os.RemoveAll(base)
	}
	if *profileDir != "" {
		exitOn(os.MkdirAll(*profileDir, 0o755))
	}

	b := &bench{scale: *scale, baseBin: *baseBin, checkEvery: *checkEvery, profileDir: *profileDir}
	names := strings.Split(*kinds, ",")
	var results []round
	for r := range *rounds {
		fsyncRate, err := measureFsync(base)
		exitOn(err)
		fmt.Fprintf(os.Stderr, "round %d: serial fsync rate of %s: %.0f/s\n", r+1, *dir, fsyncRate)
		rd := round{fsyncRate: fsyncRate, res: map[string]map[string]float64{}}
		// Each round starts with the next datastore, so that none is always
		// measured first (cold page cache) or last (after the others' files).
		for i := range names {
			name := names[(r+i)%len(names)]
			dir := filepath.Join(base, fmt.Sprintf("%s-%d", name, r+1))
			b.name, b.round = name, r+1
			res, err := b.run(name, *bin, dir, *apiserver)
			exitOn(err)
			rd.res[name] = res
			// Measured (its size is in res): the disk holds one datastore's
			// files at a time, not every round's.
			if !*keep {
				exitOn(os.RemoveAll(dir))
			}
		}
		results = append(results, rd)
	}
	printTable(os.Stdout, names, results)
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type bench struct {
	scale      float64
	baseBin    string
	checkEvery time.Duration
	profileDir string
	pid        int // the datastore being measured
	name       string
	round      int
	// control is the measured datastore's metrics URL ("" for etcd), where
	// kine's SQL counters are read; profiles can be taken there when it runs
	// in this binary (profiling).
	control   string
	profiling bool
}

// round is one measurement of every datastore: results by datastore, then by
// metric.
type round struct {
	fsyncRate float64
	res       map[string]map[string]float64
}

func (b *bench) n(base int) int { return max(1, int(float64(base)*b.scale)) }

// run starts one datastore, measures it and stops it.
func (b *bench) run(name, bin, dir string, apiserver bool) (map[string]float64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	port, err := testenv.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	self, _ := os.Executable()
	cport, err := testenv.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	control := net.JoinHostPort("127.0.0.1", strconv.Itoa(cport))
	b.control, b.profiling = "http://"+control, false
	var cmd *exec.Cmd
	switch name {
	case "sqlite", "sqlite-commit", "sqlite-v2":
		sync, backend := "group", string(sqlite.BackendKine)
		if name == "sqlite-commit" {
			sync = "commit"
		}
		if name == "sqlite-v2" {
			backend = string(sqlite.BackendV2)
		}
		if b.profileDir != "" {
			cmd = exec.Command(self, "serve-sqlite", dir, addr, sync, control, backend)
			b.profiling = true
		} else {
			cmd = exec.Command(bin, "sqlite", "--data-dir", dir, "--listen-address", addr, "--sync", sync, "--backend", backend, "--metrics-address", control)
		}
	case "sqlite-base":
		cmd = exec.Command(b.baseBin, "sqlite", "--data-dir", dir, "--listen-address", addr, "--metrics-address", control)
	case "kine":
		cmd = exec.Command(self, "serve-kine", dir, addr, control)
		b.profiling = b.profileDir != ""
	case "etcd":
		cmd = exec.Command(self, "serve-etcd", dir, addr)
		b.control = ""
	case "etcd-checks":
		b.control = ""
		cmd = exec.Command(self, "serve-etcd-checks", dir, addr, b.checkEvery.String())
	default:
		return nil, fmt.Errorf("unknown datastore %q", name)
	}
	logf, err := os.Create(filepath.Join(dir, "..", name+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	b.pid = cmd.Process.Pid
	ep := "http://" + addr
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx := context.Background()
	if err := waitServing(ctx, c); err != nil {
		return nil, fmt.Errorf("%s not ready: %w", name, err)
	}
	fmt.Fprintf(os.Stderr, "== %s on %s\n", name, ep)
	res := map[string]float64{}
	if err := b.etcdAPI(ctx, c, res); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if apiserver {
		api, err := testenv.StartAPIServer(ctx, testenv.APIServerConfig{
			EtcdServers: []string{ep}, Dir: filepath.Join(dir, ".."),
			// Without the watch cache every read reaches the datastore, which is
			// what this table compares.
			ExtraArgs: []string{"--watch-cache=false"},
		})
		if err != nil {
			return nil, fmt.Errorf("%s: kube-apiserver: %w", name, err)
		}
		cs, err := kubernetes.NewForConfig(api.RESTConfig())
		if err == nil {
			err = b.kubeAPI(ctx, cs, res)
		}
		_ = api.Stop()
		if err != nil {
			return nil, fmt.Errorf("%s via kube-apiserver: %w", name, err)
		}
	}
	res["rss peak MiB"] = rssMiB(cmd.Process.Pid)
	count, err := c.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("%s: counting keys: %w", name, err)
	}
	res["keys at stop"] = float64(count.Count)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	size, err := dirSize(dir)
	if err != nil {
		return nil, err
	}
	res["db size MiB (after stop)"] = float64(size) / (1 << 20)
	// Start-up with the run's data (etcd's initial corruption check hashes
	// all of it): from the start of the process to the first answered read.
	again := exec.Command(cmd.Args[0], cmd.Args[1:]...)
	again.Stdout, again.Stderr = logf, logf
	again.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := again.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = again.Process.Signal(syscall.SIGTERM); _ = again.Wait() }()
	if err := waitServing(ctx, c); err != nil {
		return nil, fmt.Errorf("%s not ready after a restart: %w", name, err)
	}
	res["start-up ms, keys at stop"] = float64(time.Since(start).Microseconds()) / 1000
	return res, nil
}

// waitServing waits until the datastore at c answers a read, for at most a
// minute.
func waitServing(ctx context.Context, c *clientv3.Client) error {
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Get(cctx, "/ready")
		cancel()
		if err == nil {
			return nil
		}
		if time.Since(start) > time.Minute {
			return err
		}
	}
}

// rssMiB is the peak resident set (VmHWM) of pid.
func rssMiB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return math.NaN()
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return math.NaN()
}

// cpuSeconds is the user and system CPU time pid has used (utime and stime
// of /proc/<pid>/stat), NaN when it cannot be read.
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return math.NaN()
	}
	// The command name in brackets may hold spaces; the fields after it are
	// fixed: utime and stime are the 12th and 13th after the ")".
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 13 {
		return math.NaN()
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

func dirSize(dir string) (int64, error) {
	var total int64
	err := filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			total += info.Size()
		}
		return err
	})
	return total, err
}

// measureFsync is the disk's serial rate of 4 KiB write + fdatasync: the floor
// under every durable write.
func measureFsync(dir string) (float64, error) {
	f, err := os.Create(filepath.Join(dir, "fsync-probe"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 4096)
	n := 0
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		if _, err := f.WriteAt(buf, int64(n%256)*4096); err != nil {
			return 0, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
}

// printTable prints, for every metric, each datastore's median over the
// rounds and, against etcd, the median of the ratios taken within each round
// with their range: a ratio from one round compares runs made minutes apart
// on the same machine, which is what survives a noisy machine best.
func printTable(w io.Writer, names []string, rounds []round) {
	var metrics []string
	seen := map[string]bool{}
	for _, rd := range rounds {
		for _, n := range names {
			for m := range rd.res[n] {
				if !seen[m] {
					seen[m] = true
					metrics = append(metrics, m)
				}
			}
		}
	}
	sort.Strings(metrics)
	hasEtcd := slices.Contains(names, "etcd")
	header, sep := "| metric |", "| --- |"
	for _, n := range names {
		header += " " + n + " |"
		sep += " ---: |"
	}
	if hasEtcd {
		for _, n := range names {
			if n != "etcd" {
				header += " " + n + "/etcd |"
				sep += " ---: |"
			}
		}
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, sep)
	for _, m := range metrics {
		row := "| " + m + " |"
		for _, n := range names {
			var vals []float64
			for _, rd := range rounds {
				vals = append(vals, metricValue(rd.res[n], m))
			}
			row += " " + formatRange(vals) + " |"
		}
		if hasEtcd {
			for _, n := range names {
				if n == "etcd" {
					continue
				}
				var ratios []float64
				for _, rd := range rounds {
					ratios = append(ratios, metricValue(rd.res[n], m)/metricValue(rd.res["etcd"], m))
				}
				row += " " + formatRatio(ratios) + " |"
			}
		}
		fmt.Fprintln(w, row)
	}
	var rates []float64
	for _, rd := range rounds {
		rates = append(rates, rd.fsyncRate)
	}
	fmt.Fprintf(w, "\n%d round(s); values are medians over the rounds, ratios the median of each round's ratio (min–max in brackets).\n", len(rounds))
	fmt.Fprintf(w, "serial fsync rate of the disk (4 KiB write + fdatasync): %.0f/s\n", median(rates))
	fmt.Fprintln(w, "ops/s: higher is better; ms and MiB: lower is better.")
}

// metricValue is a metric's value, NaN (printed n/a) when the datastore has none,
// such as kine's SQL counters for etcd.
func metricValue(res map[string]float64, metric string) float64 {
	if v, ok := res[metric]; ok {
		return v
	}
	return math.NaN()
}

// median of vals, NaN when empty; vals is sorted in place.
func median(vals []float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	sort.Float64s(vals)
	if len(vals)%2 == 1 {
		return vals[len(vals)/2]
	}
	return (vals[len(vals)/2-1] + vals[len(vals)/2]) / 2
}

// formatRange gives the median of vals, and with more than one round the
// range (min–max) in brackets; vals is sorted in place.
func formatRange(vals []float64) string {
	m := median(vals) // sorts
	if len(vals) == 1 || math.IsNaN(m) {
		return format(m)
	}
	return fmt.Sprintf("%s (%s–%s)", format(m), format(vals[0]), format(vals[len(vals)-1]))
}

// formatRatio gives the median ratio, and with more than one round the range.
func formatRatio(ratios []float64) string {
	m := median(ratios) // sorts
	if math.IsNaN(m) || math.IsInf(m, 0) {
		return "n/a"
	}
	if len(ratios) == 1 {
		return fmt.Sprintf("%.2f", m)
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", m, ratios[0], ratios[len(ratios)-1])
}

func format(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
