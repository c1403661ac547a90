// Command controller-bench measures the controller's cold start: N Clusters
// exist, the controller starts, and the clock runs until every Cluster's
// status describes its spec (status.observedGeneration = generation). It runs
// once per --workers setting and round against one envtest kube-apiserver,
// each run in a child process so that its CPU time and peak memory are its
// own, and prints a table (make bench-controller). It is a measurement, not a
// test: nothing passes or fails on a number.
//
// Each run gets its own namespace and the child's cache sees only that one, so
// the Clusters of earlier runs cost it nothing but the apiserver's growing
// store; the order of the settings turns every round to spread that drift.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/controller/cluster"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
)

// childResult is what a child prints on its last line.
type childResult struct {
	Seconds float64 `json:"seconds"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		exitOn(child(os.Args[2:]))
		return
	}
	exitOn(bench())
}

// bench is the parent: it owns the envtest, which every way out stops.
func bench() error {
	clusters := flag.Int("clusters", 300, "Clusters that exist when the controller starts")
	workersList := flag.String("workers", "1,2,4,8", "comma-separated --workers settings to compare")
	rounds := flag.Int("rounds", 3, "runs per setting; the table gives medians and the spread")
	crds := flag.String("crds", "charts/k3k/crds", "directory of the CRDs")
	flag.Parse()
	var workers []int
	for _, s := range strings.Split(*workersList, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || w < 1 {
			return fmt.Errorf("--workers: %q is not a positive number", s)
		}
		workers = append(workers, w)
	}
	if *clusters < 1 || *rounds < 1 {
		return errors.New("--clusters and --rounds must be at least 1")
	}

	// Every Cluster has two ClusterIP Services: envtest's /24 would run out.
	env, err := testenv.StartEnvtestWithFlags(map[string]string{"service-cluster-ip-range": "10.96.0.0/12"}, *crds)
	if err != nil {
		return err
	}
	defer env.Stop()
	kc, err := env.AdminKubeconfig("controller-bench")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "controller-bench-*.kubeconfig")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(kc)
	if err := errors.Join(err, f.Close()); err != nil {
		return err
	}

	fmt.Printf("controller cold start: %d Clusters, %d rounds, envtest kube-apiserver (no nodes, so no pods)\n", *clusters, *rounds)
	runs := map[int][]run{}
	for round := range *rounds {
		order := slices.Concat(workers[round%len(workers):], workers[:round%len(workers)])
		for _, w := range order {
			ns := fmt.Sprintf("bench-r%d-w%d", round, w)
			if err := createClusters(env.Client, ns, *clusters); err != nil {
				return err
			}
			r, err := runChild(f.Name(), ns, *clusters, w)
			if err != nil {
				return err
			}
			fmt.Printf("  round %d, %d workers: %.1f s, CPU %.1f s, peak RSS %d MiB\n", round+1, w, r.seconds, r.cpu, r.rssMiB)
			runs[w] = append(runs[w], r)
		}
	}
	fmt.Print(table(workers, runs, *clusters))
	return nil
}

// run is one measured cold start.
type run struct {
	seconds, cpu float64
	rssMiB       int64
}

// createClusters makes namespace ns with n Clusters of the default spec.
func createClusters(c client.Client, ns string, n int) error {
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				cl := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c%04d", i)}}
				if err := c.Create(ctx, cl); err != nil {
					errs <- fmt.Errorf("creating Cluster %s/%s: %w", ns, cl.Name, err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

// runChild runs the controller in a child process and reads its CPU time and
// peak RSS from the kernel's accounting of that process.
func runChild(kubeconfigPath, ns string, n, workers int) (run, error) {
	cmd := exec.Command(os.Args[0], "child", kubeconfigPath, ns, strconv.Itoa(n), strconv.Itoa(workers))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return run{}, fmt.Errorf("child with %d workers: %w", workers, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var res childResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return run{}, fmt.Errorf("child with %d workers printed %q: %w", workers, out, err)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return run{}, errors.New("no resource usage for the child")
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	return run{seconds: res.Seconds, cpu: cpu, rssMiB: ru.Maxrss / 1024}, nil
}

// child is the controller as cmd/controller runs it (production cache
// settings and watches, one namespace), timed from its start until every
// Cluster in ns has a status for its generation.
func child(args []string) error {
	if len(args) != 4 {
		return errors.New("usage: child KUBECONFIG NAMESPACE CLUSTERS WORKERS")
	}
	ns := args[1]
	n, err := strconv.Atoi(args[2])
	if err != nil {
		return err
	}
	workers, err := strconv.Atoi(args[3])
	if err != nil {
		return err
	}
	// The client configuration the way cmd/controller gets it, client-side
	// rate limits included: they are part of what a worker waits on.
	if err := os.Setenv("KUBECONFIG", args[0]); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// Errors only (a failing reconcile), on stderr, which the parent passes on.
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel), zap.WriteTo(os.Stderr)))
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1beta1.AddToScheme(scheme)); err != nil {
		return err
	}
	start := time.Now()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cache.Options{ByObject: cluster.CacheByObject(), DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	r := &cluster.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Config: cluster.Config{
			ServerImage: "rancher/k3s", DefaultVersion: "v1.34.3-k3s1",
			DatastoreImage: "k3k-io/k3k-datastore:bench", AgentImage: "k3k-io/k3k-kubelet:bench",
			AgentClusterRole: "k3k-agent", PullPolicy: corev1.PullIfNotPresent,
			DefaultPersistence: v1beta1.DynamicPersistence, DefaultDatastore: v1beta1.SQLiteDatastore,
		},
		ValidateKubeconfig: kubeconfig.Validate,
		Recorder:           mgr.GetEventRecorder("k3k-cluster"),
		Workers:            workers,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("the cache did not sync")
	}
	for {
		list := &v1beta1.ClusterList{}
		if err := mgr.GetClient().List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		described := 0
		for _, c := range list.Items {
			if c.Status.ObservedGeneration == c.Generation {
				described++
			}
		}
		if len(list.Items) == n && described == n {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d Clusters described when the time ran out", described, n)
		case err := <-done:
			return fmt.Errorf("the manager stopped: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	cancel()
	<-done
	return json.NewEncoder(os.Stdout).Encode(childResult{Seconds: elapsed.Seconds()})
}

// table renders the medians per setting, with min–max, and each setting's
// time relative to the first one's, run by run.
func table(workers []int, runs map[int][]run, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| workers | time s, median (min–max) | Clusters/s | time vs %d worker(s), median (min–max) | controller CPU s, median | peak RSS MiB, median |\n", workers[0])
	b.WriteString("|---|---|---|---|---|---|\n")
	base := runs[workers[0]]
	for _, w := range workers {
		rs := runs[w]
		secs := pick(rs, func(r run) float64 { return r.seconds })
		var ratios []float64
		for i, r := range rs {
			ratios = append(ratios, r.seconds/base[i].seconds)
		}
		slices.Sort(ratios)
		fmt.Fprintf(&b, "| %d | %.1f (%.1f–%.1f) | %.1f | %.2f× (%.2f–%.2f) | %.1f | %.0f |\n",
			w, median(secs), secs[0], secs[len(secs)-1], float64(n)/median(secs),
			median(ratios), ratios[0], ratios[len(ratios)-1],
			median(pick(rs, func(r run) float64 { return r.cpu })),
			median(pick(rs, func(r run) float64 { return float64(r.rssMiB) })))
	}
	return b.String()
}

// pick returns f of every run, sorted.
func pick(rs []run, f func(run) float64) []float64 {
	out := make([]float64, 0, len(rs))
	for _, r := range rs {
		out = append(out, f(r))
	}
	slices.Sort(out)
	return out
}

func median(sorted []float64) float64 {
	m := len(sorted) / 2
	if len(sorted)%2 == 1 {
		return sorted[m]
	}
	return (sorted[m-1] + sorted[m]) / 2
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller-bench:", err)
		os.Exit(1)
	}
}
