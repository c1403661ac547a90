package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// controlGet calls the measured datastore's control endpoint (serveControl).
func (b *bench) controlGet(path string) error {
	resp, err := controlClient.Get(b.control + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s", resp.Status, msg)
	}
	return nil
}

// parallel runs op(i) for i in [0,n) on `clients` goroutines and returns ops/s.
func parallel(clients, n int, op func(i int) error) (float64, error) {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := op(i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), firstErr
}

// measure runs one throughput step and records its rate under name; for writes
// it also records the datastore's CPU time per operation, which a busy machine
// disturbs far less than the rate and which says what a write costs the
// datastore itself.
func (b *bench) measure(name string, clients, n int, op func(int) error, res map[string]float64) error {
	write := strings.Contains(name, "create") || strings.Contains(name, "update")
	profile := b.profiling && write
	// The counters are read outside the profile and the CPU time.
	sql0 := sqlCounts(b.control)
	if profile {
		if err := b.controlGet("/profile/start?path=" + url.QueryEscape(profilePath(b.profileDir, b.name, b.round, name))); err != nil {
			return fmt.Errorf("%s: starting a CPU profile: %w", name, err)
		}
	}
	cpu0 := cpuSeconds(b.pid)
	rate, err := parallel(clients, n, op)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	res[name] = rate
	if write {
		res[strings.Replace(name, "ops/s", "datastore CPU µs/op", 1)] = (cpuSeconds(b.pid) - cpu0) / float64(n) * 1e6
	}
	if profile {
		if err := b.controlGet("/profile/stop"); err != nil {
			return fmt.Errorf("%s: stopping the CPU profile: %w", name, err)
		}
	}
	if sql0 != nil {
		total, breakdown := sqlPerOp(sql0, sqlCounts(b.control), n)
		res[strings.Replace(name, "ops/s", "kine SQL statements/op", 1)] = total
		fmt.Fprintf(os.Stderr, "%s, %s: kine SQL statements per op: %.2f (%s)\n", b.name, name, total, breakdown)
	}
	return nil
}

var value = strings.Repeat("v", 1024) // a small Kubernetes object's size

// etcdAPI measures through the etcd v3 API with kube-apiserver's request shapes.
func (b *bench) etcdAPI(ctx context.Context, c *clientv3.Client, res map[string]float64) error {
	create := func(prefix string) func(int) error {
		return func(i int) error {
			key := prefix + strconv.Itoa(i)
			r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, value)).Else(clientv3.OpGet(key)).Commit()
			if err == nil && !r.Succeeded {
				err = fmt.Errorf("create %s failed its guard", key)
			}
			return err
		}
	}
	update := func(prefix string) func(int) error {
		return func(i int) error {
			key := prefix + strconv.Itoa(i)
			g, err := c.Get(ctx, key)
			if err != nil || len(g.Kvs) == 0 {
				return fmt.Errorf("get %s: %v", key, err)
			}
			r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", g.Kvs[0].ModRevision)).
				Then(clientv3.OpPut(key, value+"u")).Else(clientv3.OpGet(key)).Commit()
			if err == nil && !r.Succeeded {
				err = fmt.Errorf("update %s failed its guard", key)
			}
			return err
		}
	}
	steps := []struct {
		name    string
		clients int
		n       int
		op      func(int) error
	}{
		{"etcd: create ops/s, 1 client", 1, b.n(1000), create("/bench/c1/")},
		{"etcd: create ops/s, 16 clients", 16, b.n(3000), create("/bench/c16/")},
		{"etcd: update ops/s, 1 client", 1, b.n(1000), update("/bench/c1/")},
		{"etcd: update ops/s, 16 clients", 16, b.n(3000), update("/bench/c16/")},
		{"etcd: get ops/s, 16 clients", 16, b.n(6000), func(i int) error {
			_, err := c.Get(ctx, "/bench/c16/"+strconv.Itoa(i%b.n(3000)))
			return err
		}},
	}
	for _, s := range steps {
		if err := b.measure(s.name, s.clients, s.n, s.op, res); err != nil {
			return err
		}
	}
	for _, size := range []int{1000, 10000} {
		prefix := fmt.Sprintf("/bench/list%d/", size)
		if _, err := parallel(16, size, func(i int) error {
			_, err := c.Put(ctx, prefix+fmt.Sprintf("%06d", i), value)
			return err
		}); err != nil {
			return err
		}
		var times []time.Duration
		for range 5 {
			start := time.Now()
			r, err := c.Get(ctx, prefix, clientv3.WithPrefix())
			if err != nil {
				return err
			}
			if len(r.Kvs) != size {
				return fmt.Errorf("list %s: %d keys, want %d", prefix, len(r.Kvs), size)
			}
			times = append(times, time.Since(start))
		}
		res[fmt.Sprintf("etcd: list %dk keys ms (median)", size/1000)] = percentile(times, 0.5)
	}
	// Watch delivery: from the moment a put is sent to the moment the watcher
	// has the event.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := c.Watch(wctx, "/bench/watch/", clientv3.WithPrefix())
	time.Sleep(200 * time.Millisecond)
	n := b.n(300)
	sent := make([]time.Time, n)
	got := make(chan []time.Duration)
	go func() {
		var lat []time.Duration
		for resp := range wch {
			for _, ev := range resp.Events {
				i, _ := strconv.Atoi(strings.TrimPrefix(string(ev.Kv.Key), "/bench/watch/"))
				lat = append(lat, time.Since(sent[i]))
			}
			if len(lat) >= n {
				break
			}
		}
		got <- lat
	}()
	for i := range n {
		sent[i] = time.Now()
		if _, err := c.Put(ctx, "/bench/watch/"+strconv.Itoa(i), value); err != nil {
			return err
		}
	}
	select {
	case lat := <-got:
		res["etcd: watch delivery ms p50"] = percentile(lat, 0.5)
		res["etcd: watch delivery ms p99"] = percentile(lat, 0.99)
	case <-time.After(time.Minute):
		return fmt.Errorf("watch events missing")
	}
	return nil
}

func cm(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}
}

// kubeAPI measures the same operations on ConfigMaps through kube-apiserver.
func (b *bench) kubeAPI(ctx context.Context, cs *kubernetes.Clientset, res map[string]float64) error {
	for _, ns := range []string{"c1", "c16", "l1k", "l10k", "w"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	create := func(ns string) func(int) error {
		return func(i int) error {
			_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm("cm-"+strconv.Itoa(i)), metav1.CreateOptions{})
			return err
		}
	}
	update := func(ns string) func(int) error {
		return func(i int) error {
			o, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "cm-"+strconv.Itoa(i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.Data["v"] += "u"
			_, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, o, metav1.UpdateOptions{})
			return err
		}
	}
	steps := []struct {
		name    string
		clients int
		n       int
		op      func(int) error
	}{
		{"kube: create ops/s, 1 client", 1, b.n(500), create("c1")},
		{"kube: create ops/s, 16 clients", 16, b.n(1500), create("c16")},
		{"kube: update ops/s, 1 client", 1, b.n(500), update("c1")},
		{"kube: update ops/s, 16 clients", 16, b.n(1500), update("c16")},
		{"kube: get ops/s, 16 clients", 16, b.n(3000), func(i int) error {
			_, err := cs.CoreV1().ConfigMaps("c16").Get(ctx, "cm-"+strconv.Itoa(i%b.n(1500)), metav1.GetOptions{})
			return err
		}},
	}
	for _, s := range steps {
		if err := b.measure(s.name, s.clients, s.n, s.op, res); err != nil {
			return err
		}
	}
	for _, l := range []struct {
		ns   string
		size int
	}{{"l1k", 1000}, {"l10k", 10000}} {
		if _, err := parallel(16, l.size, create(l.ns)); err != nil {
			return err
		}
		var times []time.Duration
		for range 3 {
			start := time.Now()
			list, err := cs.CoreV1().ConfigMaps(l.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(list.Items) != l.size {
				return fmt.Errorf("list %s: %d items, want %d", l.ns, len(list.Items), l.size)
			}
			times = append(times, time.Since(start))
		}
		res[fmt.Sprintf("kube: list %dk objects ms (median)", l.size/1000)] = percentile(times, 0.5)
	}
	w, err := cs.CoreV1().ConfigMaps("w").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	defer w.Stop()
	n := b.n(150)
	sent := make([]time.Time, n)
	got := make(chan []time.Duration)
	go func() {
		var lat []time.Duration
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added {
				continue
			}
			i, _ := strconv.Atoi(strings.TrimPrefix(ev.Object.(*corev1.ConfigMap).Name, "cm-"))
			lat = append(lat, time.Since(sent[i]))
			if len(lat) >= n {
				break
			}
		}
		got <- lat
	}()
	for i := range n {
		sent[i] = time.Now()
		if err := create("w")(i); err != nil {
			return err
		}
	}
	select {
	case lat := <-got:
		res["kube: watch delivery ms p50"] = percentile(lat, 0.5)
		res["kube: watch delivery ms p99"] = percentile(lat, 0.99)
	case <-time.After(time.Minute):
		return fmt.Errorf("watch events missing")
	}
	return nil
}
