// Command bench compares our SQLite datastore with stock kine and a single etcd
// member, through the etcd API and through kube-apiserver, and prints a table
// (make bench-datastore). It is a measurement, not a test: nothing here passes
// or fails on a number.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/k3k-io/k3k/internal/testenv"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "serve-kine" {
		exitOn(serveKine(os.Args[2], os.Args[3]))
		return
	}
	if len(os.Args) == 4 && os.Args[1] == "serve-etcd" {
		exitOn(serveEtcd(os.Args[2], os.Args[3]))
		return
	}
	bin := flag.String("datastore-bin", "", "path of the datastore binary (built with CGO_ENABLED=0)")
	dir := flag.String("dir", "/var/tmp", "directory on the disk to measure; every datastore gets a subdirectory")
	kinds := flag.String("datastores", "sqlite,kine,etcd", "datastores to run: sqlite, sqlite-commit, sqlite-base, kine, etcd")
	baseBin := flag.String("base-datastore-bin", "", "another build of the datastore binary, run as the sqlite-base column (e.g. the last release), so that a change is compared side by side in one run")
	scale := flag.Float64("scale", 1, "multiplies the number of operations")
	apiserver := flag.Bool("apiserver", true, "also measure through kube-apiserver")
	flag.Parse()
	if *bin == "" {
		exitOn(fmt.Errorf("--datastore-bin is required"))
	}
	if strings.Contains(*kinds, "sqlite-base") && *baseBin == "" {
		exitOn(fmt.Errorf("the sqlite-base column needs --base-datastore-bin"))
	}
	base, err := os.MkdirTemp(*dir, "k3k-bench-")
	exitOn(err)
	defer os.RemoveAll(base)

	b := &bench{scale: *scale, baseBin: *baseBin, results: map[string]map[string]float64{}}
	fsyncRate, err := measureFsync(base)
	exitOn(err)
	fmt.Fprintf(os.Stderr, "serial fsync rate of %s: %.0f/s\n", *dir, fsyncRate)
	names := strings.Split(*kinds, ",")
	for _, name := range names {
		res, err := b.run(name, *bin, filepath.Join(base, name), *apiserver)
		exitOn(err)
		b.results[name] = res
	}
	printTable(names, b.results, fsyncRate)
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type bench struct {
	scale   float64
	baseBin string
	results map[string]map[string]float64
}

func (b *bench) n(base int) int { return max(1, int(float64(base)*b.scale)) }

// run starts one datastore, measures it and stops it.
func (b *bench) run(name, bin, dir string, apiserver bool) (map[string]float64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	self, _ := os.Executable()
	var cmd *exec.Cmd
	switch name {
	case "sqlite":
		cmd = exec.Command(bin, "sqlite", "--data-dir", dir, "--listen-address", addr)
	case "sqlite-commit":
		cmd = exec.Command(bin, "sqlite", "--data-dir", dir, "--listen-address", addr, "--sync", "commit")
	case "sqlite-base":
		cmd = exec.Command(b.baseBin, "sqlite", "--data-dir", dir, "--listen-address", addr)
	case "kine":
		cmd = exec.Command(self, "serve-kine", dir, addr)
	case "etcd":
		cmd = exec.Command(self, "serve-etcd", dir, addr)
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
	ep := "http://" + addr
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx := context.Background()
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Get(cctx, "/ready")
		cancel()
		if err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			return nil, fmt.Errorf("%s not ready: %v", name, err)
		}
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
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	size, err := dirSize(dir)
	if err != nil {
		return nil, err
	}
	res["db size MiB (after stop)"] = float64(size) / (1 << 20)
	return res, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
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

func printTable(names []string, res map[string]map[string]float64, fsyncRate float64) {
	var metrics []string
	seen := map[string]bool{}
	for _, n := range names {
		for m := range res[n] {
			if !seen[m] {
				seen[m] = true
				metrics = append(metrics, m)
			}
		}
	}
	sort.Strings(metrics)
	_, hasEtcd := res["etcd"]
	header := "| metric |"
	sep := "| --- |"
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
	fmt.Println(header)
	fmt.Println(sep)
	for _, m := range metrics {
		row := "| " + m + " |"
		for _, n := range names {
			row += " " + format(res[n][m]) + " |"
		}
		if hasEtcd {
			for _, n := range names {
				if n != "etcd" {
					row += fmt.Sprintf(" %.2f |", res[n][m]/res["etcd"][m])
				}
			}
		}
		fmt.Println(row)
	}
	fmt.Printf("\nserial fsync rate of the disk (4 KiB write + fdatasync): %.0f/s\n", fsyncRate)
	fmt.Println("ops/s: higher is better; ms and MiB: lower is better.")
	_ = http.StatusOK
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
