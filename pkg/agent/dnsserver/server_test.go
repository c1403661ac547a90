package dnsserver

import (
	"context"
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

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/k3k-io/k3k/internal/testenv"
)

// deadUpstream is an address where nothing listens any more.
func deadUpstream(t *testing.T) string {
	pc, ln := testenv.ListenUDPAndTCP(t)
	addr := pc.LocalAddr().String()
	pc.Close()
	ln.Close()
	return addr
}

// upstream is a tiny DNS server standing for the host DNS, which knows the
// host's names: it answers example.org differently per transport, so a test
// sees which one was used; host Services in the cluster domain; reverse
// lookups of host addresses with host names and of a public address with a
// public name; a public alias into the cluster domain, followed as CoreDNS
// follows it; reverse denials with the host zone's SOA, as CoreDNS's; and
// NXDOMAIN for the rest. It records the names it was asked.
type upstream struct {
	addr  string
	mu    sync.Mutex
	asked []string
}

// saw reports whether the upstream was asked name.
func (u *upstream) saw(name string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Contains(u.asked, name)
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	pc, ln := testenv.ListenUDPAndTCP(t)
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		_, tcp := w.RemoteAddr().(*net.TCPAddr)
		q := req.Question[0]
		u.mu.Lock()
		u.asked = append(u.asked, q.Name)
		u.mu.Unlock()
		switch {
		case q.Name == "example.org." && q.Qtype == dns.TypeA && tcp:
			m.Answer = append(m.Answer, mustRR(t, "example.org. 60 IN A 192.0.2.2"))
		case q.Name == "example.org." && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, mustRR(t, "example.org. 60 IN A 192.0.2.1"))
		case q.Name == "other.tenant.svc.cluster.local." && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, mustRR(t, "other.tenant.svc.cluster.local. 30 IN A 10.43.0.99"))
		case q.Name == "kube-dns.kube-system.svc.cluster.local." && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, mustRR(t, "kube-dns.kube-system.svc.cluster.local. 5 IN A 10.43.0.10"))
		case q.Name == "k3k-other-service.tenant-b.svc.cluster.local." && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, mustRR(t, "k3k-other-service.tenant-b.svc.cluster.local. 5 IN A 10.43.0.77"))
		case q.Name == "10.0.43.10.in-addr.arpa." && q.Qtype == dns.TypePTR:
			m.Answer = append(m.Answer, mustRR(t, "10.0.43.10.in-addr.arpa. 5 IN PTR kube-dns.kube-system.svc.cluster.local."))
		case q.Name == "5.0.42.10.in-addr.arpa." && q.Qtype == dns.TypePTR:
			m.Answer = append(m.Answer, mustRR(t, "5.0.42.10.in-addr.arpa. 5 IN PTR 10-42-0-5.tenant-b.pod.cluster.local."))
		case q.Name == ip6Host && q.Qtype == dns.TypePTR:
			m.Answer = append(m.Answer, mustRR(t, ip6Host+" 5 IN PTR k3k-other-service.tenant-b.svc.cluster.local."))
		case q.Name == "1.2.0.192.in-addr.arpa." && q.Qtype == dns.TypePTR:
			m.Answer = append(m.Answer, mustRR(t, "1.2.0.192.in-addr.arpa. 60 IN PTR host.example.org."))
		case q.Name == "alias.example.org." && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer,
				mustRR(t, "alias.example.org. 60 IN CNAME kube-dns.kube-system.svc.cluster.local."),
				mustRR(t, "kube-dns.kube-system.svc.cluster.local. 5 IN A 10.43.0.10"))
		case strings.HasSuffix(q.Name, ".in-addr.arpa."):
			m.Rcode = dns.RcodeNameError
			m.Ns = append(m.Ns, mustRR(t, "10.in-addr.arpa. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"))
		default:
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	u.addr = pc.LocalAddr().String()
	return u
}

// ip6Host is the reverse name of fd00::a, a host Service's address.
const ip6Host = "a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa."

func mustRR(t *testing.T, s string) dns.RR {
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return rr
}

// bigSource adds a headless Service with 100 ready endpoints: more A records
// than fit in 512 bytes.
func bigSource() (fakeSource, []string) {
	src := fakeSource{}
	for k, v := range testSource {
		src[k] = v
	}
	var eps []Endpoint
	var want []string
	for i := 1; i <= 100; i++ {
		ip := fmt.Sprintf("10.42.1.%d", i)
		eps = append(eps, Endpoint{IPs: addrs(ip), Ready: true})
		want = append(want, "big.shop.svc.cluster.local. 5 IN A "+ip)
	}
	src["shop/big"] = Service{Type: TypeHeadless, Endpoints: eps}
	slices.Sort(want)
	return src, want
}

// loopbackSockets are a UDP and a TCP socket on free loopback ports.
func loopbackSockets(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return pc, ln
}

// testServer serves src on fresh sockets with the given upstreams and
// returns the UDP and TCP addresses. Cleanup stops it and checks that Serve
// returned nil.
func testServer(t *testing.T, upstreams ...string) (udpAddr, tcpAddr string) {
	t.Helper()
	return testServerWith(t, Config{Upstreams: upstreams})
}

// testServerWith is testServer with cfg's domains and upstreams.
func testServerWith(t *testing.T, cfg Config) (udpAddr, tcpAddr string) {
	t.Helper()
	cfg.Source, _ = bigSource()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, ln := loopbackSockets(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v after the context ended, want nil", err)
		}
	})
	return pc.LocalAddr().String(), ln.Addr().String()
}

func query(t *testing.T, network, addr, name string, qtype uint16, edns uint16) *dns.Msg {
	t.Helper()
	req := new(dns.Msg)
	req.SetQuestion(name, qtype)
	req.Id = 4242
	if edns != 0 {
		req.SetEdns0(edns, false)
	}
	c := &dns.Client{Net: network, Timeout: 10 * time.Second}
	resp, _, err := c.Exchange(req, addr)
	if err != nil {
		t.Fatalf("%s query %s: %v", network, name, err)
	}
	if resp.Id != 4242 {
		t.Errorf("reply id %d, want the query's 4242", resp.Id)
	}
	return resp
}

// addr picks the server address of a transport.
func pick(network, udp, tcp string) string {
	if network == "tcp" {
		return tcp
	}
	return udp
}

func TestServeAnswersVirtualNames(t *testing.T) {
	udp, tcp := testServer(t, startUpstream(t).addr)
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			resp := query(t, network, pick(network, udp, tcp), "WEB.Shop.svc.Cluster.Local.", dns.TypeA, 0)
			want := []string{"WEB.Shop.svc.Cluster.Local. 5 IN A 10.43.7.7"}
			if d := cmp.Diff(want, render(resp.Answer)); d != "" || resp.Rcode != dns.RcodeSuccess || !resp.Authoritative {
				t.Errorf("rcode %d aa %v, answer (-want +got):\n%s", resp.Rcode, resp.Authoritative, d)
			}
		})
	}
}

func TestServeForwardsOverTheClientsTransport(t *testing.T) {
	udp, tcp := testServer(t, startUpstream(t).addr)
	tests := []struct {
		name, network, qname string
		wantRcode            int
		want                 []string
	}{
		{"an outside name over UDP goes upstream over UDP", "udp", "example.org.", dns.RcodeSuccess, []string{"example.org. 60 IN A 192.0.2.1"}},
		{"an outside name over TCP goes upstream over TCP", "tcp", "example.org.", dns.RcodeSuccess, []string{"example.org. 60 IN A 192.0.2.2"}},
		{"the upstream's NXDOMAIN comes back over UDP", "udp", "missing.example.org.", dns.RcodeNameError, nil},
		{"the upstream's NXDOMAIN comes back over TCP", "tcp", "missing.example.org.", dns.RcodeNameError, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := query(t, tt.network, pick(tt.network, udp, tcp), tt.qname, dns.TypeA, 0)
			if d := cmp.Diff(tt.want, render(resp.Answer)); d != "" || resp.Rcode != tt.wantRcode {
				t.Errorf("rcode %s, want %s; answer (-want +got):\n%s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tt.wantRcode], d)
			}
		})
	}
}

// TestServeKeepsHostNamesFromTenants asks, over both transports, what a
// tenant pod would ask to learn the host's names, of an upstream that knows
// them all: names of the cluster domain are denied without asking the
// upstream, and forwarded replies that name anything in it are denied.
func TestServeKeepsHostNamesFromTenants(t *testing.T) {
	up := startUpstream(t)
	udp, tcp := testServer(t, up.addr)
	tests := []struct {
		name, qname   string
		qtype         uint16
		wantRcode     int
		want          []string
		wantForwarded bool
	}{
		{"the host's DNS Service is denied, not asked upstream", "kube-dns.kube-system.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, false},
		{"another tenant's API Service is denied, not asked upstream", "k3k-other-service.tenant-b.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, false},
		{"a host Service in the cluster domain is denied, not asked upstream", "other.tenant.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, false},
		{"a reverse lookup of a host Service's address is denied", "10.0.43.10.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, nil, true},
		{"a reverse lookup of a host pod's address is denied", "5.0.42.10.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, nil, true},
		{"an IPv6 reverse lookup of a host Service's address is denied", ip6Host, dns.TypePTR, dns.RcodeNameError, nil, true},
		{"a reverse lookup the host denies comes back without the host zone's SOA", "99.99.43.10.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, nil, true},
		{"a public name aliased into the cluster domain is denied", "alias.example.org.", dns.TypeA, dns.RcodeNameError, nil, true},
		{"a reverse lookup of a public address is answered", "1.2.0.192.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, []string{"1.2.0.192.in-addr.arpa. 60 IN PTR host.example.org."}, true},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			t.Run(network+" "+tt.name, func(t *testing.T) {
				resp := query(t, network, pick(network, udp, tcp), tt.qname, tt.qtype, 0)
				if d := cmp.Diff(tt.want, render(resp.Answer)); d != "" || resp.Rcode != tt.wantRcode {
					t.Errorf("rcode %s, want %s; answer (-want +got):\n%s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tt.wantRcode], d)
				}
				switch {
				case tt.wantRcode != dns.RcodeNameError:
				case !tt.wantForwarded:
					// The agent's own denial: its SOA, authoritative.
					if d := cmp.Diff([]string{soa}, render(resp.Ns)); d != "" || !resp.Authoritative || len(resp.Extra) != 0 {
						t.Errorf("denial: aa %v, extra %v, authority (-want +got):\n%s", resp.Authoritative, resp.Extra, d)
					}
				case len(resp.Ns)+len(resp.Extra) != 0:
					t.Errorf("denied upstream reply still carries %v %v", resp.Ns, resp.Extra)
				}
				if got := up.saw(tt.qname); got != tt.wantForwarded {
					t.Errorf("upstream asked %v, want %v", got, tt.wantForwarded)
				}
			})
		}
	}
}

// TestServeDeniesAnotherHostDomain runs a virtual cluster whose domain is not
// the host's: the host's domain (here the upstream's cluster.local) is denied
// all the same, and the virtual one answers its Services.
func TestServeDeniesAnotherHostDomain(t *testing.T) {
	up := startUpstream(t)
	udp, _ := testServerWith(t, Config{Domain: "k3k.internal", HostDomain: "cluster.local", Upstreams: []string{up.addr}})
	resp := query(t, "udp", udp, "kube-dns.kube-system.svc.cluster.local.", dns.TypeA, 0)
	if resp.Rcode != dns.RcodeNameError || len(resp.Answer) != 0 || up.saw("kube-dns.kube-system.svc.cluster.local.") {
		t.Errorf("host name: rcode %s answer %v, upstream asked %v; want NXDOMAIN without asking", dns.RcodeToString[resp.Rcode], resp.Answer, up.saw("kube-dns.kube-system.svc.cluster.local."))
	}
	if want := "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"; len(resp.Ns) != 1 || render(resp.Ns)[0] != want {
		t.Errorf("host name: authority %v, want the host zone's SOA", render(resp.Ns))
	}
	resp = query(t, "udp", udp, "web.shop.svc.k3k.internal.", dns.TypeA, 0)
	if d := cmp.Diff([]string{"web.shop.svc.k3k.internal. 5 IN A 10.43.7.7"}, render(resp.Answer)); d != "" {
		t.Errorf("virtual name (-want +got):\n%s", d)
	}
}

func TestServeTriesUpstreamsInTurn(t *testing.T) {
	udp, tcp := testServer(t, deadUpstream(t), startUpstream(t).addr)
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			resp := query(t, network, pick(network, udp, tcp), "example.org.", dns.TypeA, 0)
			if len(resp.Answer) != 1 || resp.Rcode != dns.RcodeSuccess {
				t.Errorf("rcode %s answer %v, want the second upstream's answer", dns.RcodeToString[resp.Rcode], resp.Answer)
			}
		})
	}
}

func TestServeFailsWhenNoUpstreamAnswers(t *testing.T) {
	udp, tcp := testServer(t, deadUpstream(t))
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			resp := query(t, network, pick(network, udp, tcp), "example.org.", dns.TypeA, 0)
			if resp.Rcode != dns.RcodeServerFailure || len(resp.Answer) != 0 {
				t.Errorf("rcode %s answer %v, want SERVFAIL and no answer", dns.RcodeToString[resp.Rcode], resp.Answer)
			}
		})
	}
	// Names of the virtual cluster do not need an upstream.
	if resp := query(t, "udp", udp, "web.shop.svc.cluster.local.", dns.TypeA, 0); len(resp.Answer) != 1 {
		t.Errorf("virtual name without upstream: answer %v, want one record", resp.Answer)
	}
}

func TestServeTruncatesLargeUDPReplies(t *testing.T) {
	udp, tcp := testServer(t, startUpstream(t).addr)
	_, want := bigSource()

	resp := query(t, "udp", udp, "big.shop.svc.cluster.local.", dns.TypeA, 0)
	if !resp.Truncated || len(resp.Answer) == 0 || len(resp.Answer) >= 100 {
		t.Errorf("UDP without EDNS: truncated %v with %d records, want TC set and some of the 100", resp.Truncated, len(resp.Answer))
	}

	resp = query(t, "tcp", tcp, "big.shop.svc.cluster.local.", dns.TypeA, 0)
	got := render(resp.Answer)
	slices.Sort(got)
	if d := cmp.Diff(want, got); d != "" || resp.Truncated {
		t.Errorf("TCP: truncated %v, answer (-want +got):\n%s", resp.Truncated, d)
	}

	// A client announcing a larger buffer gets everything over UDP.
	resp = query(t, "udp", udp, "big.shop.svc.cluster.local.", dns.TypeA, 4096)
	got = render(resp.Answer)
	slices.Sort(got)
	if d := cmp.Diff(want, got); d != "" || resp.Truncated || resp.IsEdns0() == nil {
		t.Errorf("UDP with EDNS 4096: truncated %v, edns %v, answer (-want +got):\n%s", resp.Truncated, resp.IsEdns0() != nil, d)
	}
}

func TestServeStopsWhenTheContextEnds(t *testing.T) {
	s, err := New(Config{Source: testSource, Upstreams: []string{deadUpstream(t)}})
	if err != nil {
		t.Fatal(err)
	}
	pc, ln := loopbackSockets(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, ln) }()
	query(t, "tcp", ln.Addr().String(), "web.shop.svc.cluster.local.", dns.TypeA, 0) // serving

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v, want nil", err)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("TCP listener still accepts after Serve returned")
	}
	if _, err := pc.WriteTo([]byte{0}, pc.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("UDP socket: write error %v, want it closed", err)
	}
}

func TestNewRequiresSourceUpstreamsAndDomains(t *testing.T) {
	if _, err := New(Config{Upstreams: []string{"127.0.0.1:53"}}); err == nil {
		t.Error("no source: no error")
	}
	if _, err := New(Config{Source: testSource}); err == nil {
		t.Error("no upstream: no error")
	}
	// The root as a domain would deny every name and forward none.
	if _, err := New(Config{Source: testSource, Upstreams: []string{"127.0.0.1:53"}, HostDomain: "."}); err == nil {
		t.Error("the root as host domain: no error")
	}
	if _, err := New(Config{Source: testSource, Upstreams: []string{"127.0.0.1:53"}, Domain: "."}); err == nil {
		t.Error("the root as domain: no error")
	}
}

func TestUpstreamsFromResolvConf(t *testing.T) {
	tests := []struct {
		name, conf string
		want       []string
		wantErr    bool
	}{
		{
			name: "nameservers become host:53, IPv6 bracketed, other lines ignored",
			conf: "search tenant.svc.cluster.local svc.cluster.local\nnameserver 10.43.0.10\nnameserver fd00::a\noptions ndots:5\n",
			want: []string{"10.43.0.10:53", "[fd00::a]:53"},
		},
		{name: "a file without nameserver is an error", conf: "search example.org\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "resolv.conf")
			if err := os.WriteFile(path, []byte(tt.conf), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := UpstreamsFromResolvConf(path)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("upstreams (-want +got):\n%s", d)
			}
		})
	}
	if _, err := UpstreamsFromResolvConf(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file: no error")
	}
}
