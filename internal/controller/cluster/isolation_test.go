package cluster

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/agent/translate"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/resourcelist"
)

func mustList(t *testing.T, s string) corev1.ResourceList {
	t.Helper()
	l, err := resourcelist.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestDesiredQuotaAndLimits(t *testing.T) {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	if DesiredQuota(c, IsolationDefaults{}) != nil || DesiredLimitRange(c, IsolationDefaults{}) != nil {
		t.Fatal("a quota or LimitRange without any setting")
	}
	d := IsolationDefaults{
		QuotaHard:           mustList(t, "pods=50,requests.cpu=8"),
		LimitDefaultRequest: mustList(t, "cpu=50m,memory=64Mi"),
		LimitMax:            mustList(t, "memory=8Gi"),
	}
	c.Spec.Quota = &v1beta1.QuotaConfig{Hard: resources("pods", "5", "services", "3")}
	c.Spec.Limits = &v1beta1.LimitsConfig{DefaultRequest: resources("memory", "128Mi")}
	q := DesiredQuota(c, d)
	if q.Name != "k3k-a-quota" || q.Namespace != "ns" || q.Labels[v1beta1.LabelCluster] != "a" {
		t.Fatalf("quota meta %+v", q.ObjectMeta)
	}
	want := corev1.ResourceList{"pods": resource.MustParse("5"), "services": resource.MustParse("3"), "requests.cpu": resource.MustParse("8")}
	if len(q.Spec.Hard) != len(want) {
		t.Fatalf("hard %v, want %v (the spec replaces defaults name by name)", q.Spec.Hard, want)
	}
	for k, v := range want {
		if got := q.Spec.Hard[k]; got.Cmp(v) != 0 {
			t.Errorf("hard[%s] = %s, want %s", k, got.String(), v.String())
		}
	}
	lr := DesiredLimitRange(c, d)
	item := lr.Spec.Limits[0]
	if lr.Name != "k3k-a-limits" || item.Type != corev1.LimitTypeContainer || item.DefaultRequest.Memory().String() != "128Mi" ||
		item.DefaultRequest.Cpu().String() != "50m" || item.Max.Memory().String() != "8Gi" || item.Default != nil {
		t.Fatalf("LimitRange %+v", lr.Spec)
	}
	// The defaults are not changed by a Cluster's merge.
	if d.QuotaHard.Pods().Value() != 50 {
		t.Fatal("merging changed the defaults")
	}
}

// testTargets are egress targets as the reconcile would observe them: a host
// API server with two IPv4 addresses and one IPv6 address, and an external
// datastore name that resolved to two addresses.
var testTargets = EgressTargets{
	HostAPI: []Endpoint{
		{Addr: netip.MustParseAddr("172.18.0.3"), Port: 6443, Protocol: corev1.ProtocolTCP},
		{Addr: netip.MustParseAddr("172.18.0.2"), Port: 6443, Protocol: corev1.ProtocolTCP},
		{Addr: netip.MustParseAddr("fd00::2"), Port: 6443, Protocol: corev1.ProtocolTCP},
	},
	Datastore: []Endpoint{
		{Addr: netip.MustParseAddr("192.0.2.20"), Port: 5432, Protocol: corev1.ProtocolTCP},
		{Addr: netip.MustParseAddr("192.0.2.21"), Port: 5432, Protocol: corev1.ProtocolTCP},
	},
}

// blocks are ipBlock peers, one per CIDR.
func blocks(cidrs ...string) []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for _, c := range cidrs {
		out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
	}
	return out
}

func TestDesiredNetworkPolicies(t *testing.T) {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	d := IsolationDefaults{EgressCIDRs: []string{"0.0.0.0/0", "192.168.0.0/16"}, EgressExcept: []string{"10.96.0.0/16", "10.244.0.0/16", "fd00::/8"}, ControllerNamespace: "k3k-system"}
	ps := DesiredNetworkPolicies(c, d, testTargets)
	if len(ps) != 3 {
		t.Fatalf("%d policies, want 3", len(ps))
	}
	byName := map[string]*networkingv1.NetworkPolicy{}
	for _, p := range ps {
		byName[p.Name] = p
	}
	both := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	w := byName["k3k-a-workloads"]
	if w == nil || w.Spec.PodSelector.MatchLabels[v1beta1.LabelManagedBy] != "k3k-kubelet" || w.Spec.PodSelector.MatchLabels[v1beta1.LabelCluster] != "a" {
		t.Fatalf("workload policy does not select the agent's pods of cluster a: %+v", w)
	}
	if !slices.Equal(w.Spec.PolicyTypes, both) {
		t.Errorf("workload policy types %v", w.Spec.PolicyTypes)
	}
	// Egress: own workloads (any port), own servers' API port only, own
	// agent's DNS port and node ports only, then the outside blocks without
	// the host networks.
	e := w.Spec.Egress
	if len(e) != 5 || e[0].To[0].PodSelector.MatchLabels[v1beta1.LabelManagedBy] != "k3k-kubelet" || len(e[0].Ports) != 0 {
		t.Fatalf("egress %+v", e)
	}
	if e[1].To[0].PodSelector.MatchLabels[v1beta1.LabelComponent] != v1beta1.ComponentServer || len(e[1].Ports) != 1 || e[1].Ports[0].Port.IntVal != layout.APIPort {
		t.Errorf("egress to the servers %+v, want the API port only", e[1])
	}
	if e[2].To[0].PodSelector.MatchLabels[v1beta1.LabelComponent] != v1beta1.ComponentAgent || len(e[2].Ports) != 2 || e[2].Ports[0].Port.IntVal != layout.AgentDNSPort {
		t.Errorf("egress to the agent %+v, want its DNS port only", e[2])
	}
	if e[3].To[0].PodSelector.MatchLabels[v1beta1.LabelComponent] != v1beta1.ComponentAgent || len(e[3].Ports) != 1 || e[3].Ports[0].Port.IntVal != 30000 || *e[3].Ports[0].EndPort != 32767 {
		t.Errorf("egress to the agent %+v, want its node ports 30000-32767", e[3])
	}
	outside := e[4].To
	if len(outside) != 2 || outside[0].IPBlock.CIDR != "0.0.0.0/0" || !slices.Equal(outside[0].IPBlock.Except, []string{"10.244.0.0/16", "10.96.0.0/16"}) ||
		outside[1].IPBlock.CIDR != "192.168.0.0/16" || len(outside[1].IPBlock.Except) != 0 {
		t.Errorf("egress blocks %+v, want each with only the excepts inside it", outside)
	}
	for _, r := range e {
		for _, p := range r.To {
			if p.IPBlock != nil && p.IPBlock.CIDR != "0.0.0.0/0" && p.IPBlock.CIDR != "192.168.0.0/16" {
				t.Errorf("the workloads may reach %s: the host API and datastore are the servers' and agent's only", p.IPBlock.CIDR)
			}
		}
	}

	s := byName["k3k-a-server"]
	if s == nil || s.Spec.PodSelector.MatchLabels[v1beta1.LabelComponent] != v1beta1.ComponentServer || !slices.Equal(s.Spec.PolicyTypes, both) {
		t.Fatalf("server policy %+v, want Ingress and Egress", s)
	}
	open := map[int32]bool{}
	for _, r := range s.Spec.Ingress {
		for _, p := range r.Ports {
			open[p.Port.IntVal] = true
		}
		if len(r.Ports) == 0 {
			t.Errorf("server ingress rule without ports opens everything: %+v", r)
		}
	}
	for _, closed := range []int32{layout.DatastoreHealthPort, layout.DatastoreMetricsPort, layout.PublisherHealthPort} {
		if open[closed] {
			t.Errorf("server port %d is open to the network", closed)
		}
	}
	if !open[layout.APIPort] || !open[layout.DatastoreClientPort] || !open[layout.DatastorePeerPort] {
		t.Errorf("server ports open %v, want the API and etcd ports", open)
	}
	if got := s.Spec.Ingress[2].From[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName]; got != "k3k-system" {
		t.Errorf("etcd client port open to namespace %q, want the controller's", got)
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	dns := networkingv1.NetworkPolicyEgressRule{Ports: append(policyPorts(udp, 53), policyPorts(tcp, 53)...)}
	hostAPI := networkingv1.NetworkPolicyEgressRule{To: blocks("172.18.0.2/32", "172.18.0.3/32", "fd00::2/128"), Ports: policyPorts(tcp, 6443)}
	wantOutside := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{
		{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.244.0.0/16", "10.96.0.0/16"}}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "192.168.0.0/16"}},
	}}
	wantServer := []networkingv1.NetworkPolicyEgressRule{
		// Every pod of cluster a, whatever made it, on any port.
		{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1beta1.LabelCluster: "a"}}}}},
		dns,
		hostAPI,
		{To: blocks("192.0.2.20/32", "192.0.2.21/32"), Ports: policyPorts(tcp, 5432)},
		wantOutside,
	}
	if diff := cmp.Diff(wantServer, s.Spec.Egress); diff != "" {
		t.Errorf("server egress (-want +got):\n%s", diff)
	}

	a := byName["k3k-a-agent"]
	if a == nil || !slices.Equal(a.Spec.PolicyTypes, both) {
		t.Fatalf("agent policy %+v, want Ingress and Egress", a)
	}
	wantAgent := []networkingv1.NetworkPolicyEgressRule{
		// Its cluster's servers' API port: the virtual API behind the API Service.
		{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: serverLabels(c)}}}, Ports: policyPorts(tcp, layout.APIPort)},
		// Its cluster's workloads, any port: the node ports it relays.
		{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: workloadLabels(c)}}}},
		dns,
		hostAPI,
		wantOutside,
	}
	if diff := cmp.Diff(wantAgent, a.Spec.Egress); diff != "" {
		t.Errorf("agent egress (-want +got):\n%s", diff)
	}
	workloadsOnly := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: workloadLabels(c)}}}
	wantAgentIngress := []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: serverLabels(c)}}, workloadsOnly[0]}, Ports: policyPorts(tcp, layout.AgentKubeletPort)},
		{From: workloadsOnly, Ports: append(policyPorts(udp, layout.AgentDNSPort), policyPorts(tcp, layout.AgentDNSPort)...)},
		// The node ports, to its cluster's workloads alone.
		{From: workloadsOnly, Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(tcp), Port: ptr.To(intstr.FromInt32(30000)), EndPort: ptr.To[int32](32767)}}},
	}
	if diff := cmp.Diff(wantAgentIngress, a.Spec.Ingress); diff != "" {
		t.Errorf("agent ingress (-want +got):\n%s", diff)
	}
	if from := w.Spec.Ingress[0].From; len(from) != 3 || from[2].PodSelector.MatchLabels[v1beta1.LabelComponent] != v1beta1.ComponentAgent || len(w.Spec.Ingress[0].Ports) != 0 {
		t.Errorf("workload ingress %+v, want from the workloads, the servers and the agent", w.Spec.Ingress)
	}

	// Without egress CIDRs the servers and agent reach nothing outside but
	// DNS, the host API and the datastore.
	ps = DesiredNetworkPolicies(c, IsolationDefaults{}, testTargets)
	if diff := cmp.Diff(wantServer[:4], ps[1].Spec.Egress); diff != "" {
		t.Errorf("server egress without egress CIDRs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantAgent[:4], ps[2].Spec.Egress); diff != "" {
		t.Errorf("agent egress without egress CIDRs (-want +got):\n%s", diff)
	}

	// Off by the chart's default, on by the spec; off by the spec.
	if DesiredNetworkPolicies(c, IsolationDefaults{DisableNetworkPolicy: true}, testTargets) != nil {
		t.Error("policies made with the default off")
	}
	c.Spec.NetworkPolicy = &v1beta1.NetworkPolicyConfig{Enabled: ptr.To(true)}
	if len(DesiredNetworkPolicies(c, IsolationDefaults{DisableNetworkPolicy: true}, testTargets)) != 3 {
		t.Error("spec.networkPolicy.enabled true did not win over the default")
	}
	c.Spec.NetworkPolicy.Enabled = ptr.To(false)
	if DesiredNetworkPolicies(c, IsolationDefaults{}, testTargets) != nil {
		t.Error("spec.networkPolicy.enabled false did not turn them off")
	}
}

// TestEveryPodOfTheClusterCarriesItsLabel: the servers' egress reaches the
// cluster's pods by k3k.io/cluster alone, so the servers, the agent and the
// host pods the agent makes for workloads (pkg/agent/translate) must all
// carry it, and another cluster's pods must not match.
func TestEveryPodOfTheClusterCarriesItsLabel(t *testing.T) {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	tr, err := translate.New(translate.Config{ClusterName: "a", HostNamespace: "ns", NodeName: "k3k-a-kubelet"})
	if err != nil {
		t.Fatal(err)
	}
	vpod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}
	hostPod, err := tr.HostPod(vpod)
	if err != nil {
		t.Fatal(err)
	}
	peer := DesiredNetworkPolicies(c, IsolationDefaults{}, testTargets)[1].Spec.Egress[0].To[0]
	sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
	if err != nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
		t.Fatalf("the servers' first egress peer %+v is not a pod selector of the namespace (%v)", peer, err)
	}
	for what, l := range map[string]map[string]string{
		"a server":              serverLabels(c),
		"the agent":             agentLabels(c),
		"a workload's host pod": hostPod.Labels,
	} {
		if !sel.Matches(labels.Set(l)) {
			t.Errorf("%s (labels %v) is not reached by the servers' egress selector %s", what, l, sel)
		}
	}
	if !labels.SelectorFromSet(workloadLabels(c)).Matches(labels.Set(hostPod.Labels)) {
		t.Errorf("the workload policy's selector %v does not select the agent's host pod (labels %v)", workloadLabels(c), hostPod.Labels)
	}
	other := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}}
	if sel.Matches(labels.Set(serverLabels(other))) {
		t.Error("cluster a's servers may reach cluster b's pods")
	}
}

func TestHostAPIEndpoints(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	slice := func(typ discoveryv1.AddressType, addrs []string, ports ...discoveryv1.EndpointPort) discoveryv1.EndpointSlice {
		s := discoveryv1.EndpointSlice{AddressType: typ, Ports: ports}
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
		}
		return s
	}
	https := discoveryv1.EndpointPort{Name: ptr.To("https"), Port: ptr.To(int32(6443)), Protocol: &tcp}
	got := HostAPIEndpoints([]discoveryv1.EndpointSlice{
		slice(discoveryv1.AddressTypeIPv4, []string{"172.18.0.2", "172.18.0.3"}, https),
		slice(discoveryv1.AddressTypeIPv6, []string{"fd00::2"}, discoveryv1.EndpointPort{Port: ptr.To(int32(443))}),
		// Skipped: a name, an address that is none, a port without a number.
		slice(discoveryv1.AddressTypeFQDN, []string{"api.example"}, https),
		slice(discoveryv1.AddressTypeIPv4, []string{"not-an-ip"}, https),
		slice(discoveryv1.AddressTypeIPv4, []string{"172.18.0.9"}, discoveryv1.EndpointPort{Name: ptr.To("x")}),
		slice(discoveryv1.AddressTypeIPv4, []string{"172.18.0.4"}, discoveryv1.EndpointPort{Port: ptr.To(int32(53)), Protocol: &udp}),
	})
	want := []Endpoint{
		{netip.MustParseAddr("172.18.0.2"), 6443, tcp},
		{netip.MustParseAddr("172.18.0.3"), 6443, tcp},
		{netip.MustParseAddr("fd00::2"), 443, tcp},
		{netip.MustParseAddr("172.18.0.4"), 53, udp},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	// Each address on its own port, /32 and /128, grouped by port.
	rules := endpointRules(got)
	wantRules := []networkingv1.NetworkPolicyEgressRule{
		{To: blocks("172.18.0.4/32"), Ports: policyPorts(udp, 53)},
		{To: blocks("fd00::2/128"), Ports: policyPorts(tcp, 443)},
		{To: blocks("172.18.0.2/32", "172.18.0.3/32"), Ports: policyPorts(tcp, 6443)},
	}
	if diff := cmp.Diff(wantRules, rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	if n := len(endpointRules(nil)); n != 0 {
		t.Errorf("no endpoints made %d rules", n)
	}
}

func TestExternalEndpointHosts(t *testing.T) {
	cases := []struct {
		name, endpoint string
		want           []HostPort
		wantErr        string
	}{
		{"postgres with credentials and a port", "postgres://k3s:s3cr3t@db.example:6432/k3s?sslmode=disable", []HostPort{{"db.example", 6432}}, ""},
		{"postgresql without a port gets 5432, the name lower-cased", "postgresql://k3s:s3cr3t@DB.Example/k3s", []HostPort{{"db.example", 5432}}, ""},
		{"libpq's host list", "postgres://k3s:s3cr3t@10.0.0.5:5433,db2.example/k3s", []HostPort{{"10.0.0.5", 5433}, {"db2.example", 5432}}, ""},
		{"an @ and a : in the password are not the host", "postgres://k3s:s3@cr:3t@db.example/k3s", []HostPort{{"db.example", 5432}}, ""},
		{"IPv6 in brackets, with and without a port", "postgres://k3s:s3cr3t@[fd00::5]:5433,[fd00::6]/k3s", []HostPort{{"fd00::5", 5433}, {"fd00::6", 5432}}, ""},
		{"postgres without credentials, as in the spec", "postgres://db.example:5432/k3s", []HostPort{{"db.example", 5432}}, ""},
		{"postgres on a socket needs nothing", "postgres://k3s:s3cr3t@%2Fvar%2Frun%2Fpostgresql/k3s", nil, ""},
		{"postgres on the default local host needs nothing", "postgres:///k3s", nil, ""},
		{"mysql over tcp", "mysql://k3s:s3cr3t@tcp(db.example:3307)/k3s", []HostPort{{"db.example", 3307}}, ""},
		{"mysql without a port gets 3306", "mysql://k3s:s3cr3t@tcp(192.0.2.7)/k3s?tls=true", []HostPort{{"192.0.2.7", 3306}}, ""},
		{"mysql with a / and an @ in the password", "mysql://k3s:s3/cr@3t@tcp(db.example)/k3s", []HostPort{{"db.example", 3306}}, ""},
		{"mysql on a socket needs nothing", "mysql://k3s:s3cr3t@unix(/run/mysqld/mysqld.sock)/k3s", nil, ""},
		{"mysql without an address is local", "mysql://k3s:s3cr3t@/k3s", nil, ""},
		{"etcd's URL list, the last without a port", "https://etcd-0.example:2379,https://10.0.0.8:2380,http://etcd-2.example", []HostPort{{"etcd-0.example", 2379}, {"10.0.0.8", 2380}, {"etcd-2.example", 2379}}, ""},
		{"nats", "nats://k3s:s3cr3t@nats.example?noEmbed=true", []HostPort{{"nats.example", 4222}}, ""},
		{"a unix socket needs nothing", "unix:///run/kine.sock", nil, ""},
		{"a trailing newline from echo is ignored", "postgres://k3s:s3cr3t@db.example/k3s\n", []HostPort{{"db.example", 5432}}, ""},
		{"no scheme", "k3s:s3cr3t@db.example:5432", nil, "no scheme"},
		{"a scheme that is no datastore", "sqlite://k3s:s3cr3t@/var/lib/state.db", nil, "scheme is none of"},
		{"a port that is no number", "postgres://k3s:s3cr3t@db.example:54x2/k3s", nil, "port is not a number"},
		{"port 0", "postgres://k3s:s3cr3t@db.example:0/k3s", nil, "port is not a number"},
		{"a host that is no name", "postgres://k3s:s3cr3t@db example/k3s", nil, "neither an IP address nor a DNS name"},
		{"a / in the password cuts the URL before the host", "postgres://k3s:s3/cr3t@db.example/k3s", nil, "port is not a number"},
		{"mysql's address not closed", "mysql://k3s:s3cr3t@tcp(db.example:3306/k3s", nil, "not closed"},
		{"mysql over another protocol", "mysql://k3s:s3cr3t@pipe(x)/k3s", nil, "neither tcp nor unix"},
		{"mysql without the database's slash", "mysql://k3s:s3cr3t@tcp(db.example)", nil, "no '/'"},
		{"an etcd list entry without its scheme", "https://etcd-0.example:2379,etcd-1.example:2379", nil, "not an http(s):// URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExternalEndpointHosts(tc.endpoint)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3") || strings.Contains(err.Error(), "k3s:") {
					t.Fatalf("the error %q shows part of the endpoint", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hosts (-want +got):\n%s", diff)
			}
		})
	}
}

// isolationConfig is testConfig with quota and limit defaults.
func isolationConfig(t *testing.T) Config {
	cfg := testConfig
	cfg.Isolation = IsolationDefaults{
		QuotaHard:           mustList(t, "pods=20,requests.cpu=4,requests.memory=8Gi"),
		LimitDefaultRequest: mustList(t, "cpu=50m,memory=64Mi"),
		LimitMax:            mustList(t, "memory=8Gi"),
		EgressCIDRs:         []string{"0.0.0.0/0"},
		EgressExcept:        []string{"10.244.0.0/16", "10.96.0.0/16"},
		ControllerNamespace: "k3k-system",
	}
	return cfg
}

// TestIsolationObjectsAreAppliedAndKept runs the reconciler against the real
// kube-apiserver (which validates every object): the quota, LimitRange and
// policies are made, a steady state writes nothing, a spec change reaches
// them, and turning the policies off removes them.
func TestIsolationObjectsAreAppliedAndKept(t *testing.T) {
	ctx := context.Background()
	r, writes := newReconciler(t)
	r.Config = isolationConfig(t)
	c := createCluster(t, newCluster(newNamespace(t), "fenced"))
	reconcileOnce(t, r, c)
	reconcileOnce(t, r, c)
	n := IsolationNamesFor(c)
	objs := map[string]interface {
		GetResourceVersion() string
	}{}
	q, lr := &corev1.ResourceQuota{}, &corev1.LimitRange{}
	get(t, c, n.Quota, q)
	get(t, c, n.LimitRange, lr)
	objs["quota"], objs["limits"] = q, lr
	for _, name := range []string{n.WorkloadPolicy, n.ServerPolicy, n.AgentPolicy} {
		p := &networkingv1.NetworkPolicy{}
		get(t, c, name, p)
		objs[name] = p
		if !metav1.IsControlledBy(p, c) {
			t.Errorf("NetworkPolicy %s is not owned by the Cluster", name)
		}
	}
	if q.Spec.Hard.Pods().Value() != 20 || lr.Spec.Limits[0].DefaultRequest.Cpu().String() != "50m" {
		t.Fatalf("quota %v, limits %v: defaults not applied", q.Spec.Hard, lr.Spec.Limits)
	}
	// The servers and the agent reach the host API at the addresses the
	// test API server publishes for itself in Service default/kubernetes.
	hostAPI := testHostAPIRules(t)
	for _, name := range []string{n.ServerPolicy, n.AgentPolicy} {
		p := objs[name].(*networkingv1.NetworkPolicy)
		if !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			t.Errorf("NetworkPolicy %s does not restrict egress", name)
		}
		found := 0
		for _, r := range p.Spec.Egress {
			for _, want := range hostAPI {
				if cmp.Equal(r, want) {
					found++
				}
			}
		}
		if found != len(hostAPI) {
			t.Errorf("NetworkPolicy %s egress %+v lacks the host API rules %+v", name, p.Spec.Egress, hostAPI)
		}
	}

	// Steady state: no writes, no changed resourceVersions.
	before := map[string]string{}
	for k, o := range objs {
		before[k] = o.GetResourceVersion()
	}
	start := writes.count()
	reconcileOnce(t, r, c)
	reconcileOnce(t, r, c)
	if d := writes.count() - start; d != 0 {
		t.Fatalf("%d writes in two steady-state reconciles", d)
	}
	q2 := &corev1.ResourceQuota{}
	get(t, c, n.Quota, q2)
	if q2.ResourceVersion != before["quota"] {
		t.Fatal("the quota was written in a steady state")
	}

	// A spec change reaches the quota; turning the policies off removes them.
	live := &v1beta1.Cluster{}
	get(t, c, c.Name, live)
	live.Spec.Quota = &v1beta1.QuotaConfig{Hard: resources("pods", "3")}
	live.Spec.NetworkPolicy = &v1beta1.NetworkPolicyConfig{Enabled: ptr.To(false)}
	if err := k8s.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, live)
	get(t, c, n.Quota, q2)
	if q2.Spec.Hard.Pods().Value() != 3 || q2.Spec.Hard.Name("requests.cpu", resource.DecimalSI).Value() != 4 {
		t.Fatalf("quota after the change %v, want pods 3 over the default requests.cpu 4", q2.Spec.Hard)
	}
	for _, name := range []string{n.WorkloadPolicy, n.ServerPolicy, n.AgentPolicy} {
		err := k8s.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &networkingv1.NetworkPolicy{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("NetworkPolicy %s still there after spec.networkPolicy.enabled false (err %v)", name, err)
		}
	}
	start = writes.count()
	reconcileOnce(t, r, live)
	if d := writes.count() - start; d != 0 {
		t.Fatalf("%d writes in a steady state with the policies off", d)
	}
}

// TestIsolationLeavesOthersObjectsAlone: a NetworkPolicy of the same name that
// the Cluster does not own is not deleted when the Cluster turns its off.
func TestIsolationLeavesOthersObjectsAlone(t *testing.T) {
	ctx := context.Background()
	r, _ := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "neighbour", func(c *v1beta1.Cluster) {
		c.Spec.NetworkPolicy = &v1beta1.NetworkPolicyConfig{Enabled: ptr.To(false)}
	}))
	theirs := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: IsolationNamesFor(c).WorkloadPolicy}}
	if err := k8s.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: theirs.Name}, &networkingv1.NetworkPolicy{}); err != nil {
		t.Fatalf("someone else's NetworkPolicy was removed: %v", err)
	}
}

// testHostAPIRules are the egress rules of the test API server's own
// endpoints, read from its EndpointSlices (it publishes them, as every
// kube-apiserver does, at its advertise address).
func testHostAPIRules(t *testing.T) []networkingv1.NetworkPolicyEgressRule {
	t.Helper()
	list := &discoveryv1.EndpointSliceList{}
	if err := k8s.List(context.Background(), list, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	eps := HostAPIEndpoints(list.Items)
	if len(eps) == 0 {
		t.Fatalf("the test API server publishes no address in the EndpointSlices of Service default/kubernetes: %+v", list.Items)
	}
	t.Logf("the test API server's endpoints: %v", eps)
	return endpointRules(eps)
}

// TestIsolationWaitsForTheHostAPIEndpoints: without the host API's
// endpoints the reconcile fails, says why on Ready, and leaves the policies
// as they were instead of cutting the servers and the agent off the host API.
func TestIsolationWaitsForTheHostAPIEndpoints(t *testing.T) {
	ctx := context.Background()
	r, writes := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "blind"))
	reconcileOnce(t, r, c)
	before := map[string]string{}
	n := IsolationNamesFor(c)
	for _, name := range []string{n.WorkloadPolicy, n.ServerPolicy, n.AgentPolicy} {
		p := &networkingv1.NetworkPolicy{}
		get(t, c, name, p)
		before[name] = p.ResourceVersion
	}

	counted, ok := r.Client.(client.WithWatch)
	if !ok {
		t.Fatalf("the test client %T has no watch", r.Client)
	}
	// The EndpointSlices come back empty, as when they cannot be seen.
	r.Client = interceptor.NewClient(counted, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*discoveryv1.EndpointSliceList); ok {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
	// A spec change that would rewrite the policies.
	live := &v1beta1.Cluster{}
	get(t, c, c.Name, live)
	live.Spec.Quota = &v1beta1.QuotaConfig{Hard: resources("pods", "7")}
	if err := k8s.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	start := writes.count()
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
	if err == nil || !strings.Contains(err.Error(), "no address of the host API server") {
		t.Fatalf("reconcile error %v, want one saying the host API's addresses are unknown", err)
	}
	for name, rv := range before {
		p := &networkingv1.NetworkPolicy{}
		get(t, c, name, p)
		if p.ResourceVersion != rv {
			t.Errorf("NetworkPolicy %s was written without the host API's endpoints", name)
		}
	}
	if got := condition(t, c, v1beta1.ConditionReady); got.Reason != v1beta1.ReasonReconcileError || !strings.Contains(got.Message, `"isolation"`) || !strings.Contains(got.Message, "host API") {
		t.Errorf("Ready %+v, want the isolation step's failure", got)
	}
	if writes.count()-start > 2 {
		t.Errorf("%d writes; want at most the quota and the status", writes.count()-start)
	}
}

// TestServerPolicyFollowsTheExternalDatastore: with datastore.type external
// the servers' policy allows the addresses the endpoint's host resolves to,
// on its port: the spec's endpoint until the Secret holds one, then the
// Secret's. A host that does not resolve fails the reconcile with its name,
// never the endpoint's credentials, and leaves the policy as it was.
func TestServerPolicyFollowsTheExternalDatastore(t *testing.T) {
	ctx := context.Background()
	r, writes := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "extpol", func(c *v1beta1.Cluster) {
		c.Spec.Datastore = v1beta1.DatastoreConfig{Type: v1beta1.ExternalDatastore, External: &v1beta1.ExternalDatastoreConfig{
			Endpoint: "postgres://spec-db.example:5432/k3s", SecretRef: &corev1.LocalObjectReference{Name: "db"},
		}}
	}))
	datastoreRule := func() []networkingv1.NetworkPolicyPeer {
		t.Helper()
		p := &networkingv1.NetworkPolicy{}
		get(t, c, IsolationNamesFor(c).ServerPolicy, p)
		var out []networkingv1.NetworkPolicyPeer
		for _, r := range p.Spec.Egress {
			if len(r.Ports) == 1 && (r.Ports[0].Port.IntVal == 5432 || r.Ports[0].Port.IntVal == 6432) {
				out = append(out, r.To...)
			}
		}
		return out
	}
	reconcileOnce(t, r, c)
	if diff := cmp.Diff(blocks("192.0.2.10/32"), datastoreRule()); diff != "" {
		t.Errorf("datastore peers from the spec's endpoint (-want +got):\n%s", diff)
	}

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "db"},
		Data: map[string][]byte{"endpoint": []byte("postgres://k3s:s3cr3t@secret-db.example:6432/k3s")}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if res := reconcileOnce(t, r, c); res.RequeueAfter != datastoreResolveInterval {
		t.Errorf("result %+v: a datastore named by DNS must be resolved again after %s", res, datastoreResolveInterval)
	}
	if diff := cmp.Diff(blocks("192.0.2.20/32", "2001:db8::20/128"), datastoreRule()); diff != "" {
		t.Errorf("datastore peers from the Secret's endpoint (-want +got):\n%s", diff)
	}
	start := writes.count()
	reconcileOnce(t, r, c)
	if d := writes.count() - start; d != 0 {
		t.Errorf("%d writes in a steady state", d)
	}

	secret.Data["endpoint"] = []byte("postgres://k3s:s3cr3t@nowhere.invalid:6432/k3s")
	if err := k8s.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
	if err == nil || !strings.Contains(err.Error(), "nowhere.invalid (port 6432) does not resolve") {
		t.Fatalf("reconcile error %v, want one naming the host that does not resolve", err)
	}
	ready := condition(t, c, v1beta1.ConditionReady)
	if !strings.Contains(ready.Message, "nowhere.invalid") || strings.Contains(ready.Message, "s3cr3t") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("Ready %q, error %q: want the host named, the password never", ready.Message, err)
	}
	if diff := cmp.Diff(blocks("192.0.2.20/32", "2001:db8::20/128"), datastoreRule()); diff != "" {
		t.Errorf("the policy changed after a failed resolution (-want +got):\n%s", diff)
	}
}

// TestEveryClusterFollowsTheHostAPI: a change of the host API's
// EndpointSlices brings back every Cluster; other slices bring none.
func TestEveryClusterFollowsTheHostAPI(t *testing.T) {
	r, _ := newReconciler(t)
	a := createCluster(t, newCluster(newNamespace(t), "one"))
	b := createCluster(t, newCluster(newNamespace(t), "two"))
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}}}
	reqs := r.everyCluster(context.Background(), slice)
	for _, c := range []*v1beta1.Cluster{a, b} {
		if !slices.Contains(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)}) {
			t.Errorf("Cluster %s/%s not requeued by a change of the host API's endpoints", c.Namespace, c.Name)
		}
	}
	other := slice.DeepCopy()
	other.Namespace = a.Namespace
	if reqs := r.everyCluster(context.Background(), other); len(reqs) != 0 {
		t.Errorf("a slice of another Service requeued %d Clusters", len(reqs))
	}
}

// TestResolveLooksUpAOneLabelNameInTheClustersNamespace: a server pod's
// resolver finds db as db.<namespace>.svc.<domain> first; the controller,
// in another namespace, must too, and falls back to the name as it is.
func TestResolveLooksUpAOneLabelNameInTheClustersNamespace(t *testing.T) {
	var asked []string
	known := map[string]string{"db.tenants.svc.corp.internal.": "10.0.0.7", "db2": "192.0.2.30", "db.example": "::ffff:192.0.2.31"}
	r := &Reconciler{Config: Config{Agent: AgentDefaults{HostClusterDomain: "corp.internal"}}, LookupHost: func(_ context.Context, host string) ([]netip.Addr, error) {
		asked = append(asked, host)
		if a, ok := known[host]; ok {
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}}
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "a"}}
	cases := []struct {
		host    string
		want    string
		isName  bool
		asked   []string
		wantErr bool
	}{
		{"192.0.2.5", "192.0.2.5", false, nil, false},
		{"db", "10.0.0.7", true, []string{"db.tenants.svc.corp.internal."}, false},
		{"db2", "192.0.2.30", true, []string{"db2.tenants.svc.corp.internal.", "db2"}, false},
		{"db.example", "192.0.2.31", true, []string{"db.example"}, false},
		{"gone", "", true, []string{"gone.tenants.svc.corp.internal.", "gone"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.host, func(t *testing.T) {
			asked = nil
			addrs, isName, err := r.resolve(context.Background(), c, tc.host)
			if tc.wantErr != (err != nil) || isName != tc.isName || !slices.Equal(asked, tc.asked) {
				t.Fatalf("resolve(%s) = %v, %v, %v after asking %v; want %s, %v, asking %v", tc.host, addrs, isName, err, asked, tc.want, tc.isName, tc.asked)
			}
			if !tc.wantErr && (len(addrs) != 1 || addrs[0].String() != tc.want) {
				t.Fatalf("resolve(%s) = %v, want %s", tc.host, addrs, tc.want)
			}
		})
	}
}
