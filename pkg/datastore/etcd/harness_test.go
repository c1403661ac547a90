package etcd_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/etcd/member"
	"github.com/k3k-io/k3k/pkg/pki"
)

// The tests give every member a DNS name under testZone, answered by an
// in-process DNS server that the test controls, so that "the pod came back with
// another IP" is a change of one DNS record, as in Kubernetes. The process's Go
// resolver is pointed at it; nothing on the machine is changed. Each cluster
// has its own subdomain (m0.c3.etcd.test), so clusters of tests running side
// by side never answer for each other.
const testZone = "etcd.test"

var dns = &fakeDNS{hosts: map[string]net.IP{}}

// clusterParallel is how many of the tests' clusters run at once unless
// -test.parallel says otherwise. The tests mostly wait for elections, probes
// and timeouts: one at a time they took 371 s of wall time for 42 s of CPU on
// 2 cores, and Go's default (GOMAXPROCS) would run two at a time.
const clusterParallel = 8

func TestMain(m *testing.M) {
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		if err := flag.Set("test.parallel", strconv.Itoa(clusterParallel)); err != nil {
			fmt.Fprintln(os.Stderr, "setting -test.parallel:", err)
			os.Exit(1)
		}
	}
	if err := dns.start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting test DNS server:", err)
		os.Exit(1)
	}
	net.DefaultResolver.PreferGo = true
	net.DefaultResolver.Dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", dns.addr)
	}
	os.Exit(m.Run())
}

type fakeDNS struct {
	mu    sync.Mutex
	hosts map[string]net.IP
	addr  string
}

func (d *fakeDNS) set(host string, ip net.IP) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hosts[strings.ToLower(host)+"."] = ip
}

func (d *fakeDNS) start() error {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	d.addr = conn.LocalAddr().String()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp, err := d.answer(buf[:n]); err == nil {
				_, _ = conn.WriteTo(resp, from)
			}
		}
	}()
	return nil
}

func (d *fakeDNS) answer(req []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	resp := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true},
		Questions: []dnsmessage.Question{q},
	}
	d.mu.Lock()
	ip, ok := d.hosts[strings.ToLower(q.Name.String())]
	d.mu.Unlock()
	switch {
	case !ok:
		resp.Header.RCode = dnsmessage.RCodeNameError
	case q.Type == dnsmessage.TypeA:
		var a [4]byte
		copy(a[:], ip.To4())
		resp.Answers = []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET},
			Body:   &dnsmessage.AResource{A: a},
		}}
	}
	return resp.Pack()
}

// addresses hands out loopback addresses no other test process uses: the
// second octet comes from the process ID.
var addresses = struct {
	sync.Mutex
	next int
}{}

func nextIP() net.IP {
	addresses.Lock()
	defer addresses.Unlock()
	addresses.next++
	n := addresses.next
	return net.IPv4(127, byte(20+os.Getpid()%200), byte(n/250), byte(1+n%250))
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := testenv.FreePort("0.0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// cluster is a set of members in one process: the test's stand-in for the
// server pods, their volumes, their DNS records and the controller.
type cluster struct {
	t       *testing.T
	ctx     context.Context
	token   string
	zone    string // the members' DNS subdomain
	dir     string
	ca      pki.KeyPair
	caFile  string
	quota   int64
	client  *etcd.EtcdClient
	tls     *tls.Config
	peers   map[string]etcd.Peer
	ports   map[string][2]int
	ips     map[string]net.IP
	running map[string]*member.Member
	roster  etcd.Roster
	keys    []string
	// recover is the recovery request the next start of a member performs.
	recover map[string]string
	// corruptCheck is the members' hash check interval (0: the default).
	corruptCheck time.Duration
}

// clusters numbers the tests' clusters, for their DNS subdomains.
var clusters atomic.Int64

// newCluster starts an empty cluster for the test and marks the test parallel:
// a cluster shares nothing with another (its own addresses, ports, subdomain,
// CA and data directory).
func newCluster(t *testing.T) *cluster {
	t.Helper()
	t.Parallel()
	dir := t.TempDir()
	ca, err := pki.NewCA("etcd-ca", time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	clientCert, err := pki.Issue(ca, pki.CertSpec{CommonName: "k3k-controller", Client: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(clientCert.CertPEM, clientCert.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	tlsCfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	c := &cluster{
		t: t, ctx: context.Background(), token: "k3k-test-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")),
		zone: fmt.Sprintf("c%d.%s", clusters.Add(1), testZone),
		dir:  dir, ca: ca, caFile: caFile, tls: tlsCfg,
		client: etcd.NewClient(etcd.ClientConfig{TLS: tlsCfg, DialTimeout: time.Second, CallTimeout: time.Second}),
		peers:  map[string]etcd.Peer{}, ports: map[string][2]int{}, ips: map[string]net.IP{}, running: map[string]*member.Member{},
	}
	t.Cleanup(func() {
		for name := range c.running {
			c.stop(name)
		}
		_ = c.client.Close()
	})
	return c
}

// peer is the pod named name: stable DNS URLs, whatever its address.
func (c *cluster) peer(name string) etcd.Peer {
	if p, ok := c.peers[name]; ok {
		return p
	}
	ports := [2]int{freePort(c.t), freePort(c.t)}
	host := name + "." + c.zone
	p := etcd.Peer{
		Name:      name,
		PeerURL:   fmt.Sprintf("https://%s:%d", host, ports[0]),
		ClientURL: fmt.Sprintf("https://%s:%d", host, ports[1]),
	}
	c.peers[name], c.ports[name] = p, ports
	return p
}

func (c *cluster) desired(names ...string) etcd.Desired {
	var d etcd.Desired
	for _, n := range names {
		d.Members = append(d.Members, c.peer(n))
	}
	return d
}

func (c *cluster) dataDir(name string) string { return filepath.Join(c.dir, name, "data") }

// start starts the pod name on a fresh address, as a rescheduled pod would get.
func (c *cluster) start(name string) error {
	c.t.Helper()
	p := c.peer(name)
	ip := nextIP()
	c.ips[name] = ip
	dns.set(name+"."+c.zone, ip)
	certDir := filepath.Join(c.dir, name, "tls")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(c.dataDir(name), 0o700); err != nil {
		return err
	}
	kp, err := pki.Issue(c.ca, pki.MemberSpec(name, name+"."+c.zone), time.Now())
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key")
	if err := os.WriteFile(certFile, kp.CertPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, kp.KeyPEM, 0o600); err != nil {
		return err
	}
	m, err := member.Start(c.ctx, member.Config{
		Name: name, DataDir: c.dataDir(name), PeerURL: p.PeerURL, ClientURL: p.ClientURL,
		ListenPeerAddress:   net.JoinHostPort(ip.String(), fmt.Sprint(c.ports[name][0])),
		ListenClientAddress: net.JoinHostPort(ip.String(), fmt.Sprint(c.ports[name][1])),
		CAFile:              c.caFile, CertFile: certFile, KeyFile: keyFile,
		Roster:            c.roster,
		Recover:           c.recover[name],
		QuotaBackendBytes: c.quota,
		SnapshotCount:     100,
		TickMs:            50, ElectionMs: 500,
		Logger:               zap.NewNop(),
		UnsafeNoFsync:        true,
		CorruptCheckInterval: c.corruptCheck,
	})
	if err != nil {
		return err
	}
	c.running[name] = m
	return nil
}

func (c *cluster) mustStart(name string) {
	c.t.Helper()
	if err := c.start(name); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) stop(name string) {
	c.t.Helper()
	m, ok := c.running[name]
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		c.t.Error(err)
	}
	delete(c.running, name)
}

func (c *cluster) waitReady(names ...string) {
	c.t.Helper()
	for _, n := range names {
		select {
		case <-c.running[n].ReadyNotify():
		case err := <-c.running[n].Failed():
			c.t.Fatalf("member %s failed: %v", n, err)
		case <-time.After(60 * time.Second):
			c.t.Fatalf("member %s not ready after 60s", n)
		}
	}
}

// bootstrap creates the cluster with its first member, the way the controller
// does: an initial roster naming that member alone.
func (c *cluster) bootstrap(name string) {
	c.t.Helper()
	c.roster = etcd.InitialRoster(c.token, c.peer(name))
	c.mustStart(name)
	c.waitReady(name)
}

// publish re-publishes the roster from what is observed now, as the controller
// does after every reconcile.
func (c *cluster) publish(d etcd.Desired) etcd.Observed {
	o := etcd.Observe(c.ctx, c.client, c.endpoints(d))
	if r, ok := etcd.RosterFor(c.token, o, d); ok {
		c.roster = r
	}
	return o
}

func (c *cluster) endpoints(d etcd.Desired) []string {
	eps := d.Endpoints()
	for name := range c.running {
		eps = append(eps, c.peers[name].ClientURL)
	}
	return eps
}

// converge plays the controller until Plan says InSync: one Reconcile (one
// action) at a time; pods of desired members are started once the roster lists
// them; a removed member's pod goes away. After every membership change it
// proves quorum by writing a key. It returns the actions taken.
func (c *cluster) converge(d etcd.Desired) []etcd.Action {
	c.t.Helper()
	var actions []etcd.Action
	wanted := map[string]bool{}
	for _, p := range d.Members {
		wanted[p.Name] = true
	}
	last := ""
	for range 300 {
		o := etcd.Observe(c.ctx, c.client, c.endpoints(d))
		a := etcd.Plan(o, d)
		err := etcd.Execute(c.ctx, c.client, a)
		if errors.Is(err, etcd.ErrLearnerNotReady) || errors.Is(err, etcd.ErrUnhealthy) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			c.t.Fatalf("executing %+v: %v", a, err)
		}
		if a.Type == etcd.ActionNone && a.Reason+a.Message != last {
			last = a.Reason + a.Message
			c.t.Logf("waiting: %s: %s", a.Reason, a.Message)
		}
		if a.Type != etcd.ActionNone {
			actions = append(actions, a)
			c.t.Logf("%s %s: %s", a.Type, a.Reason, a.Message)
		}
		if a.Type == etcd.ActionRemoveMember {
			if m, ok := o.Member(a.MemberID); ok && !wanted[m.Name] {
				c.stop(m.Name)
			}
		}
		if a.Changes() {
			c.write()
		}
		switch {
		case a.Type == etcd.ActionNone && a.Reason == etcd.ReasonInSync:
			c.publish(d)
			return actions
		case a.Type == etcd.ActionNone && a.Reason == etcd.ReasonWaitingForLearner:
			c.publish(d)
			for _, p := range d.Members {
				if _, ok := c.running[p.Name]; !ok {
					if _, listed := c.roster.Find(p.Name); listed {
						c.t.Logf("starting pod %s", p.Name)
						c.mustStart(p.Name)
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		case a.Type == etcd.ActionNone:
			time.Sleep(100 * time.Millisecond)
		}
	}
	c.t.Fatalf("no convergence to %v after 300 reconciles; actions: %v", d, actions)
	return nil
}

// voterClient is a client of the voting members that run now.
func (c *cluster) voterClient() *clientv3.Client {
	c.t.Helper()
	o := etcd.Observe(c.ctx, c.client, c.endpoints(etcd.Desired{}))
	var eps []string
	for _, m := range o.Members {
		if !m.IsLearner && o.Healthy(m.ID) {
			s, _ := o.Status(m.ID)
			eps = append(eps, s.Endpoint)
		}
	}
	if len(eps) == 0 {
		c.t.Fatal("no healthy voting member")
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: c.tls, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// write proves the cluster has quorum by writing a new key; every key written is
// checked later by checkData.
func (c *cluster) write() {
	c.t.Helper()
	key := fmt.Sprintf("/k3k/test/%03d", len(c.keys))
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	if _, err := c.voterClient().Put(ctx, key, "v-"+key); err != nil {
		c.t.Fatalf("quorum lost: writing %s: %v", key, err)
	}
	c.keys = append(c.keys, key)
}

// checkData reads every key written so far from member name alone
// (serializable), proving that member holds the data.
func (c *cluster) checkData(name string) {
	c.t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{c.peer(name).ClientURL}, TLS: c.tls, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing := ""
		for _, k := range c.keys {
			ctx, cancel := context.WithTimeout(c.ctx, 3*time.Second)
			r, err := cl.Get(ctx, k, clientv3.WithSerializable())
			cancel()
			if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v-"+k {
				missing = fmt.Sprintf("%s (err %v)", k, err)
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("member %s does not hold %s", name, missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitHealthy waits until the cluster is healthy as the controller sees it.
func (c *cluster) waitHealthy(d etcd.Desired) etcd.Observed {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		o := etcd.Observe(c.ctx, c.client, c.endpoints(d))
		cond := etcd.Conditions(o, 1)[0]
		if cond.Status == "True" {
			return o
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("not healthy after 60s: %s: %s", cond.Reason, cond.Message)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func memberIDs(o etcd.Observed) map[string]uint64 {
	ids := map[string]uint64{}
	for _, m := range o.Members {
		ids[m.Name] = m.ID
	}
	return ids
}

func countChanges(actions []etcd.Action) map[etcd.ActionType]int {
	n := map[etcd.ActionType]int{}
	for _, a := range actions {
		n[a.Type]++
	}
	return n
}

// threeMembers starts a cluster from m0, grows it to the members m0, m1 and m2
// and writes to it: the start of most fault tests.
func threeMembers(t *testing.T) (*cluster, etcd.Desired) {
	t.Helper()
	c := newCluster(t)
	c.bootstrap("m0")
	d := c.desired("m0", "m1", "m2")
	c.converge(d)
	c.write()
	return c, d
}
