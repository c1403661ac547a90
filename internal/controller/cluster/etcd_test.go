package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/etcd/member"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/pki"
)

// These tests run the reconciler against the envtest kube-apiserver and, where
// a member must answer, a real etcd member started in the test process with
// the certificate the controller issued. The controller reaches members by
// their pod DNS names; the test's dialer (Reconciler.EtcdDial) sends those
// names to the member's loopback address, and TLS still checks the names.

// dialTable maps member host:port addresses to loopback listeners; anything
// else is refused at once, as a pod that does not exist would be.
type dialTable struct {
	mu    sync.Mutex
	addrs map[string]string
}

func (d *dialTable) set(from, to string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.addrs == nil {
		d.addrs = map[string]string{}
	}
	d.addrs[from] = to
}

func (d *dialTable) forget(from string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.addrs, from)
}

func (d *dialTable) dial(ctx context.Context, addr string) (net.Conn, error) {
	d.mu.Lock()
	to, ok := d.addrs[addr]
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("dial %s: no such host in this test", addr)
	}
	var dialer net.Dialer
	return dialer.DialContext(ctx, "tcp", to)
}

func newEtcdCluster(ns, name string, servers int32) *v1beta1.Cluster {
	return newCluster(ns, name, func(c *v1beta1.Cluster) {
		c.Spec.Servers = servers
		c.Spec.Datastore.Type = v1beta1.EtcdDatastore
	})
}

func TestEtcdClusterObjects(t *testing.T) {
	r, writes := newReconciler(t)
	r.EtcdDial = (&dialTable{}).dial // no member exists: every dial fails at once
	c := createCluster(t, newEtcdCluster(newNamespace(t), "ha", 3))
	reconcileOnce(t, r, c)
	n := layout.NamesFor(c)

	caSecret := &corev1.Secret{}
	get(t, c, n.EtcdCA, caSecret)
	ca := parseCert(t, caSecret.Data[SecretKeyTLSCert])
	if !ca.IsCA || len(caSecret.Data[SecretKeyTLSKey]) == 0 {
		t.Fatalf("CA Secret does not hold a CA with its key")
	}
	memberSecret := &corev1.Secret{}
	get(t, c, n.EtcdMember, memberSecret)
	if string(memberSecret.Data[SecretKeyCACert]) != string(caSecret.Data[SecretKeyTLSCert]) {
		t.Fatalf("member Secret's ca.crt is not the CA")
	}
	if _, ok := memberSecret.Data[SecretKeyTLSKey]; !ok {
		t.Fatalf("member Secret has no key")
	}
	cert := parseCert(t, memberSecret.Data[SecretKeyTLSCert])
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for i := range MaxServers {
		host := fmt.Sprintf("k3k-ha-server-%d.k3k-ha-server-headless.%s.svc", i, c.Namespace)
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: host, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("member certificate not valid for %s: %v", host, err)
		}
	}
	if len(cert.IPAddresses) != 0 {
		t.Errorf("member certificate names IPs %v; identities are DNS names only", cert.IPAddresses)
	}

	roster := readRoster(t, c)
	if roster.State != etcd.ClusterStateNew || len(roster.Members) != 1 || roster.Members[0].Name != "k3k-ha-server-0" ||
		roster.Members[0].PeerURL != "https://k3k-ha-server-0.k3k-ha-server-headless."+c.Namespace+".svc:2380" {
		t.Fatalf("initial roster %+v, want member 0 alone, bootstrapping", roster)
	}
	if roster.Token != "k3k-"+string(c.UID) {
		t.Errorf("cluster token %q is not derived from the Cluster's UID", roster.Token)
	}

	sts := &appsv1.StatefulSet{}
	get(t, c, n.StatefulSet, sts)
	if *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *sts.Spec.Replicas)
	}
	pod := sts.Spec.Template.Spec
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].Command[1] != "etcd" {
		t.Fatalf("init containers %+v, want the etcd sidecar", pod.InitContainers)
	}
	if !slices.Contains(pod.InitContainers[0].Command, "--peer-url=https://$(POD_NAME).k3k-ha-server-headless."+c.Namespace+".svc:2380") {
		t.Errorf("sidecar command %v does not advertise the pod's DNS name", pod.InitContainers[0].Command)
	}
	cm := &corev1.ConfigMap{}
	get(t, c, n.ServerConfig, cm)
	var k3s map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data[layout.ConfigMapKeyConfig]), &k3s); err != nil {
		t.Fatal(err)
	}
	wantEndpoints := strings.Join([]string{
		"https://k3k-ha-server-0.k3k-ha-server-headless." + c.Namespace + ".svc:2379",
		"https://k3k-ha-server-1.k3k-ha-server-headless." + c.Namespace + ".svc:2379",
		"https://k3k-ha-server-2.k3k-ha-server-headless." + c.Namespace + ".svc:2379",
	}, ",")
	if k3s["datastore-endpoint"] != wantEndpoints || k3s["datastore-cafile"] != layout.EtcdCAPath || k3s["datastore-certfile"] != layout.EtcdCertPath {
		t.Errorf("k3s datastore settings %v %v %v", k3s["datastore-endpoint"], k3s["datastore-cafile"], k3s["datastore-certfile"])
	}

	got := condition(t, c, v1beta1.ConditionDatastoreReady)
	if got.Status != metav1.ConditionFalse || got.Reason != etcd.ReasonClusterUnreachable {
		t.Errorf("DatastoreReady %+v, want False/%s while no member runs", got, etcd.ReasonClusterUnreachable)
	}

	// Steady state: nothing is written, not even the certificates.
	before := writes.count()
	versions := etcdObjectVersions(t, c)
	for range 2 {
		reconcileOnce(t, r, c)
	}
	if w := writes.count() - before; w != 0 {
		t.Fatalf("%d writes over 2 steady-state reconciles of an etcd cluster, want 0", w)
	}
	if after := etcdObjectVersions(t, c); !slices.Equal(after, versions) {
		t.Fatalf("etcd objects changed on a steady-state reconcile: %v -> %v", versions, after)
	}
}

// etcdObjectVersions are the resourceVersions of the CA, member and roster
// objects and of the StatefulSet.
func etcdObjectVersions(t *testing.T, c *v1beta1.Cluster) []string {
	t.Helper()
	n := layout.NamesFor(c)
	var out []string
	for name, obj := range map[string]client.Object{n.EtcdCA: &corev1.Secret{}, n.EtcdMember: &corev1.Secret{}, n.EtcdRoster: &corev1.ConfigMap{}, n.StatefulSet: &appsv1.StatefulSet{}} {
		get(t, c, name, obj)
		out = append(out, name+"@"+obj.GetResourceVersion())
	}
	slices.Sort(out)
	return out
}

func TestEtcdMemberCertificateIsIssuedAgainOnlyWhenNeeded(t *testing.T) {
	r, _ := newReconciler(t)
	r.EtcdDial = (&dialTable{}).dial
	c := createCluster(t, newEtcdCluster(newNamespace(t), "rot", 1))
	reconcileOnce(t, r, c)
	n := layout.NamesFor(c)
	first := &corev1.Secret{}
	get(t, c, n.EtcdMember, first)

	// Close to expiry (the clock moves past the renewal window): issued again,
	// under the same CA.
	r.Now = func() time.Time { return time.Now().Add(340 * 24 * time.Hour) }
	reconcileOnce(t, r, c)
	second := &corev1.Secret{}
	get(t, c, n.EtcdMember, second)
	if string(second.Data[SecretKeyTLSCert]) == string(first.Data[SecretKeyTLSCert]) {
		t.Fatalf("a certificate close to expiry was not issued again")
	}
	if string(second.Data[SecretKeyCACert]) != string(first.Data[SecretKeyCACert]) {
		t.Fatalf("the CA changed on renewal")
	}

	// An unreadable CA is reported and left alone.
	caSecret := &corev1.Secret{}
	get(t, c, n.EtcdCA, caSecret)
	caSecret.Data[SecretKeyTLSKey] = []byte("not a key")
	if err := k8s.Update(context.Background(), caSecret); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	get(t, c, n.EtcdCA, caSecret)
	if string(caSecret.Data[SecretKeyTLSKey]) != "not a key" {
		t.Fatalf("the controller overwrote a CA Secret it could not read")
	}
	if got := condition(t, c, v1beta1.ConditionDatastoreReady); got.Reason != v1beta1.ReasonEtcdCAUnusable || !strings.Contains(got.Message, n.EtcdCA) {
		t.Fatalf("DatastoreReady %+v, want %s naming the Secret", got, v1beta1.ReasonEtcdCAUnusable)
	}
}

// runningMember is one real etcd member of a test Cluster.
type runningMember struct {
	m     *member.Member
	peer  etcd.Peer
	table *dialTable
}

// startMember starts server pod ordinal i's member on loopback with the
// certificate and roster the controller published, and points the pod's DNS
// name at it.
func startMember(t *testing.T, c *v1beta1.Cluster, table *dialTable, i int, dataDir string) *runningMember {
	t.Helper()
	n := layout.NamesFor(c)
	secret := &corev1.Secret{}
	get(t, c, n.EtcdMember, secret)
	dir := t.TempDir()
	files := map[string]string{}
	for _, key := range []string{SecretKeyCACert, SecretKeyTLSCert, SecretKeyTLSKey} {
		files[key] = filepath.Join(dir, key)
		if err := os.WriteFile(files[key], secret.Data[key], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clientLn, peerLn := freeAddr(t), freeAddr(t)
	peer := EtcdPeer(c, i)
	m, err := member.Start(context.Background(), member.Config{
		Name: peer.Name, DataDir: dataDir, PeerURL: peer.PeerURL, ClientURL: peer.ClientURL,
		ListenPeerAddress: peerLn, ListenClientAddress: clientLn,
		CAFile: files[SecretKeyCACert], CertFile: files[SecretKeyTLSCert], KeyFile: files[SecretKeyTLSKey],
		Roster: readRoster(t, c), TickMs: 50, ElectionMs: 500, Logger: zap.NewNop(), UnsafeNoFsync: true,
	})
	if err != nil {
		t.Fatalf("starting member %s: %v", peer.Name, err)
	}
	select {
	case <-m.ReadyNotify():
	case err := <-m.Failed():
		t.Fatalf("member %s failed: %v", peer.Name, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("member %s not ready after 60s", peer.Name)
	}
	table.set(strings.TrimPrefix(peer.ClientURL, "https://"), clientLn)
	rm := &runningMember{m: m, peer: peer, table: table}
	t.Cleanup(rm.stop)
	return rm
}

func (rm *runningMember) stop() {
	if rm.m == nil {
		return
	}
	rm.table.forget(strings.TrimPrefix(rm.peer.ClientURL, "https://"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = rm.m.Close(ctx)
	rm.m = nil
}

// createServerPod creates what the StatefulSet controller would (envtest runs
// none): server pod ordinal i, optionally with the etcd finalizer already set.
func createServerPod(t *testing.T, c *v1beta1.Cluster, i int, finalizer bool) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: layout.ServerPodName(c, i), Labels: serverLabels(c)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "k3s", Image: "k3s"}}},
	}
	if finalizer {
		pod.Finalizers = []string{v1beta1.FinalizerEtcdMember}
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

func deletePod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if err := k8s.Delete(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// podState is "gone", "held" (deleted, finalizer still set), "live" or
// "live+finalizer".
func podState(t *testing.T, c *v1beta1.Cluster, name string) string {
	t.Helper()
	pod := &corev1.Pod{}
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: c.Namespace, Name: name}, pod)
	switch {
	case apierrors.IsNotFound(err):
		return "gone"
	case err != nil:
		t.Fatal(err)
	case !pod.DeletionTimestamp.IsZero():
		return "held"
	case slices.Contains(pod.Finalizers, v1beta1.FinalizerEtcdMember):
		return "live+finalizer"
	}
	return "live"
}

func TestEtcdMembersAndPodFinalizersAgainstARealMember(t *testing.T) {
	r, writes := newReconciler(t)
	table := &dialTable{}
	r.EtcdDial = table.dial
	c := createCluster(t, newEtcdCluster(newNamespace(t), "fin", 1))
	reconcileOnce(t, r, c)
	n := layout.NamesFor(c)
	m0 := startMember(t, c, table, 0, t.TempDir())
	createServerPod(t, c, 0, false)

	// The member answers: listed in the status, the roster is published from
	// what was observed, the pod gets its finalizer.
	reconcileOnce(t, r, c)
	get(t, c, c.Name, c)
	members := c.Status.Datastore.Members
	if len(members) != 1 || members[0].Name != "k3k-fin-server-0" || !members[0].Healthy || !members[0].Leader || members[0].Learner {
		t.Fatalf("status members %+v, want server-0 healthy and leading", members)
	}
	if q := c.Status.Datastore.Quorum; q == nil || q.Voters != 1 || q.HealthyVoters != 1 || q.Needed != 1 {
		t.Fatalf("status quorum %+v", q)
	}
	for typ, want := range map[string]string{v1beta1.ConditionDatastoreReady: v1beta1.ReasonQuorumHealthy, v1beta1.ConditionEtcdMembership: etcd.ReasonInSync, etcd.ConditionHealthy: etcd.ReasonHealthy} {
		if got := condition(t, c, typ); got.Reason != want || got.Status != metav1.ConditionTrue {
			t.Errorf("%s %s/%s (%s), want True/%s", typ, got.Status, got.Reason, got.Message, want)
		}
	}
	if roster := readRoster(t, c); roster.State != etcd.ClusterStateExisting || len(roster.Members) != 1 || !roster.Members[0].Started ||
		roster.Members[0].ID != etcd.FormatID(m0.m.ID()) {
		t.Fatalf("roster after observing %+v, want member 0 existing with its ID", roster)
	}
	if s := podState(t, c, "k3k-fin-server-0"); s != "live+finalizer" {
		t.Fatalf("server pod 0 is %s, want it to carry the finalizer", s)
	}
	// The pod was told of the roster now published (its kubelet syncs it and
	// rewrites the mounted roster at once).
	rosterCM, pod := &corev1.ConfigMap{}, &corev1.Pod{}
	get(t, c, n.EtcdRoster, rosterCM)
	get(t, c, "k3k-fin-server-0", pod)
	if want := rosterCM.Annotations[AnnotationInputHash]; want == "" || pod.Annotations[AnnotationRosterHash] != want {
		t.Fatalf("server pod 0 has roster hash %q, want the roster's %q", pod.Annotations[AnnotationRosterHash], want)
	}

	// Steady state with a live member: zero writes.
	before := writes.count()
	for range 2 {
		reconcileOnce(t, r, c)
	}
	if w := writes.count() - before; w != 0 {
		t.Fatalf("%d writes over 2 steady-state reconciles with a healthy member, want 0", w)
	}

	// A pod that stays a desired member (a restart or reschedule) is let go
	// at once.
	pod0 := &corev1.Pod{}
	get(t, c, "k3k-fin-server-0", pod0)
	deletePod(t, pod0)
	reconcileOnce(t, r, c)
	if s := podState(t, c, "k3k-fin-server-0"); s != "gone" {
		t.Fatalf("a desired member's pod is %s after deletion, want gone (MemberStays)", s)
	}
	createServerPod(t, c, 0, false)
	reconcileOnce(t, r, c)

	// A pod above spec.servers whose member is still listed is held until the
	// member is removed; the StatefulSet keeps it meanwhile.
	cl := etcd.NewClient(etcd.ClientConfig{TLS: testClientTLS(t, c), DialContext: table.dial})
	defer cl.Close()
	if err := cl.AddLearner(context.Background(), EtcdPeer(c, 0).ClientURL, EtcdPeer(c, 1).PeerURL); err != nil {
		t.Fatalf("adding a learner for pod 1: %v", err)
	}
	pod1 := createServerPod(t, c, 1, true)
	deletePod(t, pod1)
	reconcileOnce(t, r, c)
	if s := podState(t, c, "k3k-fin-server-1"); s != "held" {
		t.Fatalf("pod 1 is %s while its member was listed, want held", s)
	}
	if got := condition(t, c, v1beta1.ConditionEtcdMembership); !strings.Contains(got.Message, "k3k-fin-server-1: "+etcd.ReasonRemoveMemberFirst) {
		t.Errorf("EtcdMembership %s/%s does not say pod 1 waits for its member's removal", got.Reason, got.Message)
	}
	sts := &appsv1.StatefulSet{}
	get(t, c, n.StatefulSet, sts)
	if *sts.Spec.Replicas != 2 {
		t.Errorf("replicas %d while member 1 is listed, want 2 (its pod goes only after the member)", *sts.Spec.Replicas)
	}
	list, err := cl.MemberList(context.Background(), EtcdPeer(c, 0).ClientURL, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("members after the reconcile: %+v, want the learner removed", list)
	}
	reconcileOnce(t, r, c)
	if s := podState(t, c, "k3k-fin-server-1"); s != "gone" {
		t.Fatalf("pod 1 is %s after its member was removed, want gone", s)
	}
	get(t, c, n.StatefulSet, sts)
	if *sts.Spec.Replicas != 1 {
		t.Errorf("replicas %d after the member was removed, want 1", *sts.Spec.Replicas)
	}

	// Every member down: nothing can be removed, so holding the pod could
	// only deadlock the recovery; it is let go.
	m0.stop()
	get(t, c, "k3k-fin-server-0", pod0)
	deletePod(t, pod0)
	reconcileOnce(t, r, c)
	if s := podState(t, c, "k3k-fin-server-0"); s != "gone" {
		t.Fatalf("pod 0 is %s with every member down, want gone (ClusterDown)", s)
	}
	if got := condition(t, c, v1beta1.ConditionDatastoreReady); got.Status != metav1.ConditionFalse || got.Reason != etcd.ReasonClusterUnreachable {
		t.Errorf("DatastoreReady %s/%s with every member down", got.Status, got.Reason)
	}
}

func TestEtcdPodsAreReleasedWhenTheClusterIsDeleted(t *testing.T) {
	r, _ := newReconciler(t)
	table := &dialTable{}
	r.EtcdDial = table.dial
	c := createCluster(t, newEtcdCluster(newNamespace(t), "gone", 3))
	reconcileOnce(t, r, c)
	startMember(t, c, table, 0, t.TempDir())
	for i := range 3 {
		createServerPod(t, c, i, true)
	}
	if err := k8s.Delete(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c) // the Cluster is gone: no finalizer on it
	for i := range 3 {
		pod := &corev1.Pod{}
		get(t, c, layout.ServerPodName(c, i), pod)
		if slices.Contains(pod.Finalizers, v1beta1.FinalizerEtcdMember) {
			t.Errorf("pod %s still carries the etcd finalizer after its Cluster was deleted", pod.Name)
		}
	}
}

func TestEtcdRosterIsNeverRepublishedAsNewForAClusterWithData(t *testing.T) {
	r, _ := newReconciler(t)
	r.EtcdDial = (&dialTable{}).dial
	c := createCluster(t, newEtcdCluster(newNamespace(t), "keep", 3))
	reconcileOnce(t, r, c)
	makeReady(t, c) // the kubeconfig is published: the servers hold data
	cm := &corev1.ConfigMap{}
	get(t, c, layout.NamesFor(c).EtcdRoster, cm)
	if err := k8s.Delete(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).EtcdRoster}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("a roster was published for a cluster with data while no member answered (err %v); a \"new\" roster could bootstrap a second cluster", err)
	}
	if got := condition(t, c, v1beta1.ConditionEtcdMembership); got.Status != metav1.ConditionFalse || !strings.Contains(got.Message, layout.NamesFor(c).EtcdRoster) {
		t.Errorf("EtcdMembership %s/%s does not report the missing roster", got.Reason, got.Message)
	}
}

func readRoster(t *testing.T, c *v1beta1.Cluster) etcd.Roster {
	t.Helper()
	cm := &corev1.ConfigMap{}
	get(t, c, layout.NamesFor(c).EtcdRoster, cm)
	path := filepath.Join(t.TempDir(), "members.json")
	if err := os.WriteFile(path, []byte(cm.Data[layout.ConfigMapKeyRoster]), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := etcd.ReadRoster(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func parseCert(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		t.Fatal(errors.New("no PEM block"))
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func testClientTLS(t *testing.T, c *v1beta1.Cluster) *tls.Config {
	t.Helper()
	s := &corev1.Secret{}
	get(t, c, layout.NamesFor(c).EtcdMember, s)
	cfg, err := clientTLS(s.Data[SecretKeyCACert], pki.KeyPair{CertPEM: s.Data[SecretKeyTLSCert], KeyPEM: s.Data[SecretKeyTLSKey]})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return testenv.FreeAddr(t, "127.0.0.1")
}
