package agent_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/internal/testenv"
)

// TestAgentAnswersVirtualServiceNames runs the agent's DNS server on the
// suite's agent: the virtual names answer what routes on the host (the host
// copy's ClusterIP, the headless Service's pod IPs), default/kubernetes the
// cluster's API Service, and a name outside the virtual cluster goes to the
// upstream (here a DNS server of the test that answers one fixed address).
func TestAgentAnswersVirtualServiceNames(t *testing.T) {
	c := ctx(t)
	upstream := startUpstream(t, "example.org.", "192.0.2.80")
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(c)
	served := make(chan error, 1)
	go func() { served <- theAgent.ServeDNS(serveCtx, pc, ln, []string{upstream}) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("DNS server: %v", err)
		}
	}()

	const ns = "dns"
	virtualNamespace(t, ns)
	db0 := runningPod(t, ns, "db-0", "10.244.3.10")
	// A ClusterIP Service: its virtual ClusterIP is whatever the virtual
	// cluster allocated; the answer must be the host copy's.
	createVirtualService(t, webService(ns, "web", "", corev1.ServiceTypeClusterIP), virtualSlice(ns, "web-abc", "web", db0))
	hostWeb := waitHostService(t, ns, "web", nil)
	headless := webService(ns, "db", corev1.ClusterIPNone, corev1.ServiceTypeClusterIP)
	headless.Spec.Ports = []corev1.ServicePort{{Name: "pg", Port: 5432, TargetPort: intstr.FromInt32(5432)}}
	slice := virtualSlice(ns, "db-abc", "db", db0)
	slice.Endpoints[0].Hostname = &db0.Name
	slice.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Port: ptr.To(int32(5432)), Protocol: ptr.To(corev1.ProtocolTCP)}}
	createVirtualService(t, headless, slice)

	query := func(network, name string, qtype uint16) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		addr := pc.LocalAddr().String()
		if network == "tcp" {
			addr = ln.Addr().String()
		}
		r, _, err := (&dns.Client{Net: network}).Exchange(m, addr)
		return r, err
	}
	answers := func(r *dns.Msg) []string {
		var out []string
		for _, rr := range r.Answer {
			switch a := rr.(type) {
			case *dns.A:
				out = append(out, a.A.String())
			case *dns.SRV:
				out = append(out, a.Target)
			case *dns.PTR:
				out = append(out, a.Ptr)
			}
		}
		slices.Sort(out)
		return out
	}
	cases := []struct {
		name  string
		qtype uint16
		want  []string
	}{
		{"web.dns.svc.cluster.local.", dns.TypeA, []string{hostWeb.Spec.ClusterIP}},
		{"db.dns.svc.cluster.local.", dns.TypeA, []string{"10.244.3.10"}},
		{"db-0.db.dns.svc.cluster.local.", dns.TypeA, []string{"10.244.3.10"}},
		{"_pg._tcp.db.dns.svc.cluster.local.", dns.TypeSRV, []string{"db-0.db.dns.svc.cluster.local."}},
		{"kubernetes.default.svc.cluster.local.", dns.TypeA, []string{virtualAPIService.IP}},
		{reverseName(t, hostWeb.Spec.ClusterIP), dns.TypePTR, []string{"web.dns.svc.cluster.local."}},
		{"example.org.", dns.TypeA, []string{"192.0.2.80"}},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tc := range cases {
			t.Run(network+" "+tc.name, func(t *testing.T) {
				// The headless Service's slice reaches the cache shortly
				// after its creation.
				eventually(t, tc.name, func() error {
					r, err := query(network, tc.name, tc.qtype)
					if err != nil {
						return err
					}
					if got := answers(r); !slices.Equal(got, tc.want) {
						return fmt.Errorf("rcode %s, answers %v, want %v", dns.RcodeToString[r.Rcode], got, tc.want)
					}
					return nil
				})
			})
		}
	}
	t.Run("a virtual Service deleted is no longer answered", func(t *testing.T) {
		if err := virtAdmin.CoreV1().Services(ns).Delete(c, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "web gone from DNS", func() error {
			r, err := query("udp", "web.dns.svc.cluster.local.", dns.TypeA)
			if err != nil {
				return err
			}
			// Denied by the agent itself: a name of the cluster domain is
			// never forwarded.
			if r.Rcode != dns.RcodeNameError {
				return fmt.Errorf("rcode %s, answers %v", dns.RcodeToString[r.Rcode], answers(r))
			}
			return nil
		})
	})
}

// reverseName is ip's in-addr.arpa name.
func reverseName(t *testing.T, ip string) string {
	t.Helper()
	name, err := dns.ReverseAddr(ip)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// startUpstream serves name → ip and NXDOMAIN for everything else over UDP
// and TCP on one loopback port, as the host DNS would.
func startUpstream(t *testing.T, name, ip string) string {
	t.Helper()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		r := new(dns.Msg)
		r.SetReply(req)
		if q := req.Question[0]; q.Name == name && q.Qtype == dns.TypeA {
			rr, _ := dns.NewRR(name + " 30 IN A " + ip)
			r.Answer = append(r.Answer, rr)
		} else {
			r.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(r)
	})
	pc, ln := testenv.ListenUDPAndTCP(t)
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		go func() { _ = srv.ActivateAndServe() }()
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return pc.LocalAddr().String()
}
