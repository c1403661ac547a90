package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/etcd/member"
	"github.com/k3k-io/k3k/pkg/layout"
)

// These tests run three real members that reach each other by their pod DNS
// names on the real ports (2380 peer, 2379 client), each on a loopback
// address of its own; an in-process DNS server answers for the names. The
// process's Go resolver points at it from the first test that asks until the
// package's tests end: one server for all, so that such tests can run side
// by side (each one's names hold its own namespace). The envtest
// kube-apiserver is reached by IP, and localhost through /etc/hosts.

type podDNS struct {
	mu    sync.Mutex
	hosts map[string]net.IP
	conn  net.PacketConn
}

var sharedPodDNS struct {
	once sync.Once
	d    *podDNS
	err  error
}

// startPodDNS returns the package's pod DNS server, started and made the Go
// resolver's on first use.
func startPodDNS(t *testing.T) *podDNS {
	t.Helper()
	sharedPodDNS.once.Do(func() {
		conn, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			sharedPodDNS.err = err
			return
		}
		d := &podDNS{hosts: map[string]net.IP{}, conn: conn}
		go d.serve()
		net.DefaultResolver.PreferGo = true
		net.DefaultResolver.Dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "udp", conn.LocalAddr().String())
		}
		sharedPodDNS.d = d
	})
	if sharedPodDNS.err != nil {
		t.Fatal(sharedPodDNS.err)
	}
	return sharedPodDNS.d
}

func (d *podDNS) set(host string, ip net.IP) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hosts[strings.ToLower(host)+"."] = ip
}

func (d *podDNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		resp := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true}, Questions: []dnsmessage.Question{q}}
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
		if out, err := resp.Pack(); err == nil {
			_, _ = d.conn.WriteTo(out, from)
		}
	}
}

// podMembers runs server pod i's member on 127.N.M.(i+1) with the roster the
// controller published, as the sidecar would.
type podMembers struct {
	t       *testing.T
	c       *v1beta1.Cluster
	dns     *podDNS
	net     [2]byte
	tls     map[string]string
	data    map[int]string
	running map[int]*member.Member
}

var podNet struct {
	sync.Mutex
	n int
}

func newPodMembers(t *testing.T, c *v1beta1.Cluster, dns *podDNS) *podMembers {
	podNet.Lock()
	podNet.n++
	n := podNet.n
	podNet.Unlock()
	pm := &podMembers{t: t, c: c, dns: dns, net: [2]byte{byte(100 + os.Getpid()%100), byte(n)}, tls: map[string]string{},
		data: map[int]string{}, running: map[int]*member.Member{}}
	secret := &corev1.Secret{}
	get(t, c, layout.NamesFor(c).EtcdMember, secret)
	dir := t.TempDir()
	for _, key := range []string{SecretKeyCACert, SecretKeyTLSCert, SecretKeyTLSKey} {
		pm.tls[key] = filepath.Join(dir, key)
		if err := os.WriteFile(pm.tls[key], secret.Data[key], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := range pm.running {
			pm.stop(i)
		}
	})
	return pm
}

func (pm *podMembers) start(i int, recover string) {
	pm.t.Helper()
	if pm.data[i] == "" {
		pm.data[i] = pm.t.TempDir()
	}
	ip := net.IPv4(127, pm.net[0], pm.net[1], byte(i+1))
	peer := EtcdPeer(pm.c, i)
	host := strings.TrimSuffix(strings.TrimPrefix(peer.PeerURL, "https://"), fmt.Sprintf(":%d", layout.DatastorePeerPort))
	pm.dns.set(host, ip)
	m, err := member.Start(context.Background(), member.Config{
		Name: peer.Name, DataDir: pm.data[i], PeerURL: peer.PeerURL, ClientURL: peer.ClientURL,
		ListenPeerAddress:   net.JoinHostPort(ip.String(), fmt.Sprint(layout.DatastorePeerPort)),
		ListenClientAddress: net.JoinHostPort(ip.String(), fmt.Sprint(layout.DatastoreClientPort)),
		CAFile:              pm.tls[SecretKeyCACert], CertFile: pm.tls[SecretKeyTLSCert], KeyFile: pm.tls[SecretKeyTLSKey],
		Roster: readRoster(pm.t, pm.c), Recover: recover, TickMs: 50, ElectionMs: 500, Logger: zap.NewNop(), UnsafeNoFsync: true,
	})
	if err != nil {
		pm.t.Fatalf("starting member %d: %v", i, err)
	}
	pm.running[i] = m
}

func (pm *podMembers) stop(i int) {
	m, ok := pm.running[i]
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = m.Close(ctx)
	delete(pm.running, i)
}

// reconcileUntil reconciles until done says so, starting the members the
// roster lists but that do not run yet (the sidecars waiting to be added).
func reconcileUntil(t *testing.T, r *Reconciler, c *v1beta1.Cluster, pm *podMembers, what string, done func(*v1beta1.Cluster) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		// etcd saying "not yet" to a step is a wait, not a failed reconcile.
		reconcileOnce(t, r, c)
		get(t, c, c.Name, c)
		if done(c) {
			return
		}
		if pm != nil {
			roster := readRoster(t, c)
			for i := range int(c.Spec.Servers) {
				if _, ok := pm.running[i]; !ok {
					if _, listed := roster.Find(layout.ServerPodName(c, i)); listed {
						pm.start(i, "")
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s after 2 minutes; status %+v", what, c.Status)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func healthyVoters(n int32) func(*v1beta1.Cluster) bool {
	return func(c *v1beta1.Cluster) bool {
		q := c.Status.Datastore.Quorum
		return q != nil && q.Voters == n && q.HealthyVoters == n && len(c.Status.Datastore.Members) == int(n)
	}
}

func TestEtcdQuorumLossReleasesPodsAndRecoveryRebuildsFromTheSurvivor(t *testing.T) {
	t.Parallel() // real etcd members, 30 s: beside the other such tests
	dns := startPodDNS(t)
	r, _ := newReconciler(t)
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	stop := make(chan struct{})
	broadcaster.StartRecordingToSink(stop)
	t.Cleanup(func() { close(stop); broadcaster.Shutdown() })
	r.Recorder = broadcaster.NewRecorder(scheme, "k3k-cluster")

	c := createCluster(t, newEtcdCluster(newNamespace(t), "quorum", 3))
	reconcileOnce(t, r, c)
	pm := newPodMembers(t, c, dns)
	pm.start(0, "")
	<-pm.running[0].ReadyNotify()
	for i := range 3 {
		createServerPod(t, c, i, false)
	}
	reconcileUntil(t, r, c, pm, "three healthy voters", healthyVoters(3))
	survivor := pm.running[0].ID()
	kv, err := clientv3.New(clientv3.Config{Endpoints: []string{EtcdPeer(c, 0).ClientURL}, TLS: testClientTLS(t, c), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kv.Put(ctx, "/k3k/before", "acknowledged"); err != nil {
		t.Fatal(err)
	}

	// Two of three volumes lost; the cluster is scaled to 1 and pods 1 and 2
	// deleted meanwhile.
	for _, i := range []int{1, 2} {
		pm.stop(i)
		if err := os.RemoveAll(pm.data[i]); err != nil {
			t.Fatal(err)
		}
	}
	get(t, c, c.Name, c)
	c.Spec.Servers = 1
	if err := k8s.Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		pod := &corev1.Pod{}
		get(t, c, layout.ServerPodName(c, i), pod)
		deletePod(t, pod)
	}
	reconcileOnce(t, r, c)

	// Defect 2: nothing can be removed, so the pods are not held.
	for _, i := range []int{1, 2} {
		if s := podState(t, c, layout.ServerPodName(c, i)); s != "gone" {
			t.Errorf("pod %d is %s under quorum loss, want gone (QuorumLost)", i, s)
		}
	}
	// Defect 4: one reason everywhere, member by member what answered.
	for _, typ := range []string{v1beta1.ConditionReady, v1beta1.ConditionDatastoreReady, etcd.ConditionHealthy, v1beta1.ConditionEtcdMembership} {
		if got := condition(t, c, typ); got.Status != metav1.ConditionFalse || got.Reason != etcd.ReasonQuorumLost {
			t.Errorf("%s %s/%s (%s), want False/QuorumLost", typ, got.Status, got.Reason, got.Message)
		}
	}
	h := condition(t, c, etcd.ConditionHealthy)
	for _, want := range []string{layout.ServerPodName(c, 0) + " (" + etcd.FormatID(survivor) + ") answered but cannot reach a quorum", layout.ServerPodName(c, 1), "not answering", "k3kcli cluster recover"} {
		if !strings.Contains(h.Message, want) {
			t.Errorf("EtcdHealthy message %q does not say %q", h.Message, want)
		}
	}
	if got := condition(t, c, etcd.ConditionAlarm); got.Status != metav1.ConditionUnknown {
		t.Errorf("EtcdAlarm %s/%s under quorum loss, want Unknown", got.Status, got.Reason)
	}

	// The way back: the operator asks, the controller names the survivor in
	// the roster.
	beforeRequest := &corev1.ConfigMap{}
	get(t, c, layout.NamesFor(c).EtcdRoster, beforeRequest)
	annotate(t, c, "req-1")
	reconcileOnce(t, r, c)
	roster := readRoster(t, c)
	if roster.Recover == nil || roster.Recover.Name != layout.ServerPodName(c, 0) || roster.Recover.ID != etcd.FormatID(survivor) || roster.Recover.Request != "req-1" {
		t.Fatalf("roster recovery %+v, want server-0 (%x)", roster.Recover, survivor)
	}
	if got := condition(t, c, v1beta1.ConditionEtcdRecovery); got.Status != metav1.ConditionFalse || got.Reason != etcd.ReasonRecovering {
		t.Errorf("EtcdRecovery %s/%s, want False/Recovering", got.Status, got.Reason)
	}
	// Its sidecar restarts it with --force-new-cluster. While it restarts
	// nothing answers: the recovery is still under way, not refused (CI of
	// 2026-12-03 on a loaded node refused it in that window). The cached
	// client still holds the roster from before the request, as a lagging
	// cache did in CI of 2026-12-05: the roster is read past it.
	pm.stop(0)
	cached := r.Client
	r.Client = staleConfigMap(t, cached, beforeRequest)
	reconcileOnce(t, r, c)
	r.Client = cached
	get(t, c, c.Name, c)
	if got := condition(t, c, v1beta1.ConditionEtcdRecovery); got.Status != metav1.ConditionFalse || got.Reason != etcd.ReasonRecovering || !strings.Contains(got.Message, "no member answers while it restarts") {
		t.Errorf("EtcdRecovery while the survivor restarts %s/%s (%s), want False/Recovering", got.Status, got.Reason, got.Message)
	}
	if c.Status.Datastore != nil && c.Status.Datastore.RecoveryRequest != "" {
		t.Errorf("the request under way was recorded as handled (%q) while the survivor restarted", c.Status.Datastore.RecoveryRequest)
	}
	if roster := readRoster(t, c); roster.Recover == nil || roster.Recover.Request != "req-1" || roster.Recover.ID != etcd.FormatID(survivor) {
		t.Fatalf("roster while the survivor restarts %+v, want it to still name server-0 for req-1", roster.Recover)
	}
	pm.start(0, roster.Recover.Request)
	<-pm.running[0].ReadyNotify()
	reconcileUntil(t, r, c, nil, "recovered", func(c *v1beta1.Cluster) bool {
		return c.Status.Datastore.RecoveryRequest == "req-1" && healthyVoters(1)(c)
	})
	if got := condition(t, c, v1beta1.ConditionEtcdRecovery); got.Status != metav1.ConditionTrue || got.Reason != etcd.ReasonRecovered {
		t.Errorf("EtcdRecovery %s/%s, want True/Recovered", got.Status, got.Reason)
	}
	if got := condition(t, c, v1beta1.ConditionDatastoreReady); got.Status != metav1.ConditionTrue {
		t.Errorf("DatastoreReady %s/%s after the recovery", got.Status, got.Reason)
	}
	// The reconcile that found the recovery done kept the request in the
	// roster: had its status write failed, the next one must still see it.
	if roster := readRoster(t, c); roster.Recover == nil || roster.Recover.Request != "req-1" {
		t.Errorf("roster when the recovery was found done %+v, want it to still name req-1 until the status records it", roster)
	}
	reconcileOnce(t, r, c)
	if roster := readRoster(t, c); roster.Recover != nil || len(roster.Members) != 1 || roster.Members[0].ID != etcd.FormatID(survivor) {
		t.Errorf("roster after the recovery %+v, want the survivor alone, no recovery", roster)
	}
	resp, err := kv.Get(context.Background(), "/k3k/before")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "acknowledged" {
		t.Fatalf("the acknowledged write after the recovery: %v %v", resp, err)
	}

	// The handled request, still on the Cluster, is never acted on again.
	survivorRoster := readRoster(t, c)
	for range 2 {
		reconcileOnce(t, r, c)
	}
	if roster := readRoster(t, c); roster.Recover != nil || len(roster.Members) != len(survivorRoster.Members) {
		t.Fatalf("a handled request acted again: roster %+v", roster)
	}

	// Asked again with quorum: refused, and recorded as handled.
	annotate(t, c, "req-2")
	reconcileOnce(t, r, c)
	get(t, c, c.Name, c)
	if c.Status.Datastore.RecoveryRequest != "req-2" {
		t.Errorf("refused request not recorded as handled: %q", c.Status.Datastore.RecoveryRequest)
	}
	if got := condition(t, c, v1beta1.ConditionEtcdRecovery); got.Reason != etcd.ReasonRecoveryRefused {
		t.Errorf("EtcdRecovery %s/%s with quorum, want RecoveryRefused", got.Status, got.Reason)
	}

	// Never silent: Events for each step.
	want := map[string]bool{etcd.ReasonRecovering: false, etcd.ReasonRecovered: false, etcd.ReasonRecoveryRefused: false}
	deadline := time.Now().Add(30 * time.Second)
	for {
		list := &eventsv1.EventList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(c.Namespace)); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if _, ok := want[e.Reason]; ok && e.Regarding.Name == c.Name {
				want[e.Reason] = true
			}
		}
		if want[etcd.ReasonRecovering] && want[etcd.ReasonRecovered] && want[etcd.ReasonRecoveryRefused] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events seen %v, want all", want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// staleConfigMap wraps cl so that getting stale's ConfigMap returns stale, as
// a cache that has not yet seen the writes since; everything else passes.
func staleConfigMap(t *testing.T, cl client.Client, stale *corev1.ConfigMap) client.Client {
	t.Helper()
	ww, ok := cl.(client.WithWatch)
	if !ok {
		t.Fatalf("client %T cannot be wrapped", cl)
	}
	return interceptor.NewClient(ww, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if cm, ok := obj.(*corev1.ConfigMap); ok && key == client.ObjectKeyFromObject(stale) {
				stale.DeepCopyInto(cm)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

func annotate(t *testing.T, c *v1beta1.Cluster, request string) {
	t.Helper()
	get(t, c, c.Name, c)
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[v1beta1.AnnotationEtcdRecover] = request
	if err := k8s.Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}
