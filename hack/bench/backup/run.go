package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/pki"
	"github.com/k3k-io/k3k/pkg/snapshot"
)

// configMapPrefix holds the objects; counting under it leaves out the keys a
// datastore writes for itself (sqlite's /registry/health).
const configMapPrefix = "/registry/configmaps/"

type bench struct {
	bin              string
	objects, writers int
	changed          int
	// The etcd members' CA, certificate and key (one set for every member:
	// they are separate clusters, never peers).
	caFile, certFile, keyFile string
	tls                       *tls.Config
}

// writeCerts issues the certificate every etcd member serves and dials with,
// for localhost, as the controller issues one per pod.
func (b *bench) writeCerts(dir string) error {
	ca, err := pki.NewCA("k3k-bench-etcd-ca", time.Now(), 0)
	if err != nil {
		return err
	}
	kp, err := pki.Issue(ca, pki.MemberSpec("member", "localhost"), time.Now())
	if err != nil {
		return err
	}
	b.caFile, b.certFile, b.keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for path, data := range map[string][]byte{b.caFile: ca.CertPEM, b.certFile: kp.CertPEM, b.keyFile: kp.KeyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		return err
	}
	b.tls = &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return nil
}

// datastore is one running datastore process and what the snapshot and
// restore commands need to reach it, as the sidecar's own flags give them.
type datastore struct {
	cmd    *exec.Cmd
	done   chan struct{}
	log    *os.File
	client *clientv3.Client
	// snapshot is the `datastore snapshot` command line for it.
	snapshot []string
	// restore is the `datastore restore` command line for it, and replace
	// the flags `--replace` adds.
	restore, replace []string
}

func freeAddr() (string, error) {
	port, err := testenv.FreePort("127.0.0.1")
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// start runs a datastore of kind on an empty dir and waits until it is
// ready.
func (b *bench) start(ctx context.Context, kind, dir string) (*datastore, error) {
	data, tmp := filepath.Join(dir, "data"), filepath.Join(dir, "tmp")
	for _, d := range []string{data, tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	var addrs [4]string
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	listen, health, metrics, peer := addrs[0], addrs[1], addrs[2], addrs[3]
	ds := &datastore{done: make(chan struct{})}
	var args []string
	cfg := clientv3.Config{DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	switch kind {
	case "sqlite":
		// The sidecar's durability: --sync left at its default (group).
		args = []string{"sqlite", "--data-dir", data, "--listen-address", listen, "--health-address", health, "--metrics-address", metrics}
		cfg.Endpoints = []string{"http://" + listen}
		ds.snapshot = []string{"sqlite", "--data-dir", data, "--tmp-dir", tmp}
		ds.restore = []string{"--endpoint", "http://" + listen, "--tmp-dir", tmp}
		ds.replace = []string{"--replace", "--sqlite-data-dir", data}
	case "etcd":
		// One member of a new cluster, as the first server pod of an etcd
		// Cluster starts: the roster the controller publishes names it alone.
		_, peerPort, _ := net.SplitHostPort(peer)
		_, clientPort, _ := net.SplitHostPort(listen)
		self := etcd.Peer{Name: "member-0", PeerURL: "https://localhost:" + peerPort, ClientURL: "https://localhost:" + clientPort}
		roster, err := json.Marshal(etcd.InitialRoster("k3k-bench", self))
		if err != nil {
			return nil, err
		}
		rosterFile := filepath.Join(dir, "members.json")
		if err := os.WriteFile(rosterFile, roster, 0o600); err != nil {
			return nil, err
		}
		tlsFlags := []string{"--ca-file", b.caFile, "--cert-file", b.certFile, "--key-file", b.keyFile}
		args = append([]string{"etcd", "--name", self.Name, "--data-dir", filepath.Join(data, "member"),
			"--peer-url", self.PeerURL, "--client-url", self.ClientURL, "--listen-peer-address", peer, "--listen-client-address", listen,
			"--members-file", rosterFile, "--health-address", health, "--metrics-address", metrics,
			"--termination-message-path", filepath.Join(dir, "termination-log")}, tlsFlags...)
		// By the name in the certificate, as the sidecar's clients dial it.
		cfg.Endpoints, cfg.TLS = []string{self.ClientURL}, b.tls
		dial := []string{"--endpoint", self.ClientURL, "--dial-address", listen}
		ds.snapshot = append(append([]string{"etcd"}, dial...), tlsFlags...)
		ds.restore = append(append(append([]string{}, dial...), tlsFlags...), "--tmp-dir", tmp)
		ds.replace = []string{"--replace"}
	default:
		return nil, fmt.Errorf("unknown datastore %q", kind)
	}
	log, err := os.Create(filepath.Join(dir, kind+".log"))
	if err != nil {
		return nil, err
	}
	ds.log = log
	ds.cmd = exec.Command(b.bin, args...)
	ds.cmd.Stdout, ds.cmd.Stderr = log, log
	ds.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := ds.cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	go func() { _ = ds.cmd.Wait(); close(ds.done) }()
	if err := ds.waitReady(ctx, "http://"+health+"/readyz"); err != nil {
		ds.stop()
		return nil, fmt.Errorf("%s not ready: %w (its log: %s)", kind, err, log.Name())
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		ds.stop()
		return nil, err
	}
	ds.client = c
	// A client that cannot reach it (a TLS mistake) would retry until the
	// round's timeout; one read makes that an error at once.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Get(rctx, configMapPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		ds.stop()
		return nil, fmt.Errorf("%s ready but not answering: %w", kind, err)
	}
	return ds, nil
}

// waitReady waits for the datastore's own readiness probe, the one the
// kubelet asks, for at most 90 s.
func (ds *datastore) waitReady(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		select {
		case <-ds.done:
			return fmt.Errorf("exited: %v", ds.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
}

// stop ends the datastore as the kubelet does, SIGTERM, and waits for it.
func (ds *datastore) stop() {
	if ds.client != nil {
		ds.client.Close()
	}
	_ = ds.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ds.done:
	case <-time.After(time.Minute):
		_ = ds.cmd.Process.Kill()
		<-ds.done
	}
	ds.log.Close()
}

// run measures one datastore: N objects written into a new one, its
// snapshot, the snapshot restored into a second new one, then in place into
// the first after some of its objects changed.
func (b *bench) run(ctx context.Context, kind, dir string) (map[string]float64, error) {
	res := map[string]float64{}
	src, err := b.start(ctx, kind, filepath.Join(dir, "source"))
	if err != nil {
		return nil, err
	}
	defer src.stop()
	start := time.Now()
	if err := b.write(ctx, src.client, b.objects, func(int) string { return "" }); err != nil {
		return nil, fmt.Errorf("writing the objects: %w", err)
	}
	fmt.Fprintf(os.Stderr, "%s: %d objects written in %.1f s\n", kind, b.objects, time.Since(start).Seconds())

	file := filepath.Join(dir, "snapshot.stream")
	start = time.Now()
	m, err := b.takeSnapshot(ctx, src, file)
	if err != nil {
		return nil, err
	}
	res[metricSnapshotSeconds] = time.Since(start).Seconds()
	res[metricSnapshotMiB] = float64(m.Size) / (1 << 20)
	fmt.Fprintf(os.Stderr, "%s: snapshot of %.1f MiB in %.2f s\n", kind, res[metricSnapshotMiB], res[metricSnapshotSeconds])

	dst, err := b.start(ctx, kind, filepath.Join(dir, "new"))
	if err != nil {
		return nil, err
	}
	secs, err := b.restore(ctx, dst, file, dst.restore)
	if err == nil {
		err = b.check(ctx, dst.client, "")
	}
	dst.stop()
	if err != nil {
		return nil, fmt.Errorf("restore into a new datastore: %w", err)
	}
	res[metricRestoreNew] = secs
	fmt.Fprintf(os.Stderr, "%s: restored into a new datastore in %.2f s\n", kind, secs)

	// Every k-th object changed, so the changes spread over the key range.
	every := max(1, b.objects/b.changed)
	if err := b.write(ctx, src.client, b.objects, func(i int) string {
		if i%every == 0 && i/every < b.changed {
			return "changed after the snapshot"
		}
		return "-"
	}); err != nil {
		return nil, fmt.Errorf("changing objects: %w", err)
	}
	secs, err = b.restore(ctx, src, file, append(append([]string{}, src.restore...), src.replace...))
	if err == nil {
		err = b.check(ctx, src.client, "changed after the snapshot")
	}
	if err != nil {
		return nil, fmt.Errorf("restore in place: %w", err)
	}
	res[metricRestoreInPlace] = secs
	fmt.Fprintf(os.Stderr, "%s: restored in place in %.2f s\n", kind, secs)
	return res, nil
}

func objectKey(i int) string { return fmt.Sprintf("%sns/cm-%06d", configMapPrefix, i) }

// configMap is object i as kube-apiserver would store it, padded to about
// 1 KiB (JSON rather than protobuf: the datastores do not look inside); note,
// when not empty, goes into its data.
func configMap(i int, note string) string {
	name := fmt.Sprintf("cm-%06d", i)
	obj := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": name, "namespace": "ns", "uid": fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
			"creationTimestamp": "2026-12-01T00:00:00Z", "labels": map[string]string{"app": "bench", "shard": strconv.Itoa(i % 16)},
		},
		"data": map[string]string{"note": note, "payload": strings.Repeat(strconv.Itoa(i%10), 760)},
	}
	raw, _ := json.Marshal(obj)
	return string(raw)
}

// write puts objects 0..n-1 with writers clients at once; note(i) == "-"
// leaves object i as it is.
func (b *bench) write(ctx context.Context, c *clientv3.Client, n int, note func(int) string) error {
	next := make(chan int)
	errs := make(chan error, b.writers)
	var wg sync.WaitGroup
	for range b.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if note(i) == "-" {
					continue
				}
				if _, err := c.Put(ctx, objectKey(i), configMap(i, note(i))); err != nil {
					errs <- fmt.Errorf("put %s: %w", objectKey(i), err)
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range n {
		select {
		case next <- i:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err != nil {
		return err
	}
	select {
	case err = <-errs:
	default:
	}
	return err
}

// takeSnapshot runs `datastore snapshot` as k3kcli does through pods/exec:
// its stdout checked as it arrives (size and sha256 against the manifest)
// and written to file, which is synced before it counts as taken.
func (b *bench) takeSnapshot(ctx context.Context, ds *datastore, file string) (snapshot.Manifest, error) {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return snapshot.Manifest{}, err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, b.bin, append([]string{"snapshot"}, ds.snapshot...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return snapshot.Manifest{}, err
	}
	if err := cmd.Start(); err != nil {
		return snapshot.Manifest{}, err
	}
	m, readErr := snapshot.ReadStream(io.TeeReader(stdout, f), io.Discard)
	if readErr != nil {
		_, _ = io.Copy(io.Discard, stdout)
	}
	if err := errors.Join(cmd.Wait(), readErr); err != nil {
		return snapshot.Manifest{}, fmt.Errorf("datastore snapshot: %w\n%s", err, stderr.String())
	}
	if err := f.Sync(); err != nil {
		return snapshot.Manifest{}, err
	}
	return m, nil
}

// restore runs `datastore restore ARGS…` with the snapshot file on stdin, as
// the sidecar gets it from k3kcli, and returns how long it took.
func (b *bench) restore(ctx context.Context, ds *datastore, file string, args []string) (float64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, b.bin, append([]string{"restore"}, args...)...)
	cmd.Stdin = f
	start := time.Now()
	out, err := cmd.CombinedOutput()
	secs := time.Since(start).Seconds()
	if err != nil {
		return 0, fmt.Errorf("datastore restore: %w\n%s", err, out)
	}
	return secs, nil
}

// check fails unless c holds exactly the N objects, none of them with the
// note unlike (what was changed after the snapshot): a restore that lost,
// kept or left behind an object is a broken restore, not a number.
func (b *bench) check(ctx context.Context, c *clientv3.Client, unlike string) error {
	resp, err := c.Get(ctx, configMapPrefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("reading the objects back: %w", err)
	}
	if len(resp.Kvs) != b.objects {
		return fmt.Errorf("%d objects read back, want %d", len(resp.Kvs), b.objects)
	}
	for _, kv := range resp.Kvs {
		if unlike != "" && bytes.Contains(kv.Value, []byte(unlike)) {
			return fmt.Errorf("%s still holds the change made after the snapshot", kv.Key)
		}
	}
	return nil
}
