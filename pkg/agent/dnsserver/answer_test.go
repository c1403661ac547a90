package dnsserver

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// fakeSource is a Source over a map keyed "namespace/name".
type fakeSource map[string]Service

func (f fakeSource) Service(namespace, name string) (Service, bool) {
	s, ok := f[namespace+"/"+name]
	return s, ok
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

var pg = []Port{{Name: "pg", Protocol: "TCP", Port: 5432}}

// dbEndpoints are a headless Service's endpoints as two slices (IPv4, IPv6)
// deliver them: db-0 in both, 10.42.0.12 twice (a slice being replaced).
var dbEndpoints = []Endpoint{
	{Hostname: "db-0", IPs: addrs("10.42.0.10"), Ready: true, Ports: pg},
	{Hostname: "db-1", IPs: addrs("10.42.0.11"), Ready: false, Ports: pg},
	{IPs: addrs("10.42.0.12"), Ready: true, Ports: pg},
	{Hostname: "db-0", IPs: addrs("fd00::10"), Ready: true, Ports: pg},
	{IPs: addrs("10.42.0.12"), Ready: true, Ports: pg},
}

var testSource = fakeSource{
	"shop/web": {Type: TypeClusterIP, IPs: addrs("10.43.7.7", "fd00::7"), Ports: []Port{
		{Name: "http", Protocol: "TCP", Port: 80}, {Name: "dns", Protocol: "UDP", Port: 53}, {Protocol: "TCP", Port: 8080},
	}},
	"shop/v4only":  {Type: TypeClusterIP, IPs: addrs("10.43.8.8"), Ports: []Port{{Name: "http", Protocol: "TCP", Port: 80}}},
	"shop/pending": {Type: TypeClusterIP, Ports: []Port{{Name: "http", Protocol: "TCP", Port: 80}}},
	// The Service's port (15432) differs from the endpoints' (5432): SRV
	// records of a headless Service must carry the endpoints'.
	"shop/db":    {Type: TypeHeadless, Ports: []Port{{Name: "pg", Protocol: "TCP", Port: 15432}}, Endpoints: dbEndpoints},
	"shop/dbnr":  {Type: TypeHeadless, PublishNotReadyAddresses: true, Endpoints: dbEndpoints},
	"shop/empty": {Type: TypeHeadless, Ports: pg},
	"shop/ext":   {Type: TypeExternalName, ExternalName: "example.org", Ports: []Port{{Name: "https", Protocol: "TCP", Port: 443}}},
}

const soa = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"

// reply is what a test compares: records as single-spaced strings.
type reply struct {
	Forward           bool
	Rcode             int
	Answer, Ns, Extra []string
}

func render(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, strings.Join(strings.Fields(rr.String()), " "))
	}
	return out
}

func TestAnswer(t *testing.T) {
	const zone = ".svc.cluster.local."
	tests := []struct {
		name   string
		domain string // default cluster.local
		qname  string
		qtype  uint16
		qclass uint16 // default IN
		want   reply
	}{
		{
			name: "a ClusterIP Service answers its host copy's IPv4 address", qname: "web.shop" + zone, qtype: dns.TypeA,
			want: reply{Answer: []string{"web.shop.svc.cluster.local. 5 IN A 10.43.7.7"}},
		},
		{
			name: "AAAA answers only the IPv6 address", qname: "web.shop" + zone, qtype: dns.TypeAAAA,
			want: reply{Answer: []string{"web.shop.svc.cluster.local. 5 IN AAAA fd00::7"}},
		},
		{
			name: "a family the Service lacks is NODATA", qname: "v4only.shop" + zone, qtype: dns.TypeAAAA,
			want: reply{Ns: []string{soa}},
		},
		{
			name: "a Service whose host copy has no address yet is NODATA, not forwarded", qname: "pending.shop" + zone, qtype: dns.TypeA,
			want: reply{Ns: []string{soa}},
		},
		{
			name: "names are case-insensitive and answered as asked", qname: "WEB.Shop.svc.Cluster.Local.", qtype: dns.TypeA,
			want: reply{Answer: []string{"WEB.Shop.svc.Cluster.Local. 5 IN A 10.43.7.7"}},
		},
		{name: "an unknown Service is forwarded", qname: "nope.shop" + zone, qtype: dns.TypeA, want: reply{Forward: true}},
		{name: "a host Service's name is forwarded", qname: "other.tenant" + zone, qtype: dns.TypeA, want: reply{Forward: true}},
		{name: "a namespace name is forwarded", qname: "shop" + zone, qtype: dns.TypeA, want: reply{Forward: true}},
		{name: "a pod name is forwarded", qname: "10-42-0-1.shop.pod.cluster.local.", qtype: dns.TypeA, want: reply{Forward: true}},
		{name: "a name outside the domain is forwarded", qname: "example.org.", qtype: dns.TypeA, want: reply{Forward: true}},
		{name: "a domain that merely ends like the cluster domain is forwarded", qname: "web.shop.svc.notcluster.local.", qtype: dns.TypeA, want: reply{Forward: true}},
		{name: "another class is forwarded", qname: "web.shop" + zone, qtype: dns.TypeA, qclass: dns.ClassCHAOS, want: reply{Forward: true}},
		{
			name: "a configured domain replaces cluster.local", domain: "k3k.internal", qname: "web.shop.svc.k3k.internal.", qtype: dns.TypeA,
			want: reply{Answer: []string{"web.shop.svc.k3k.internal. 5 IN A 10.43.7.7"}},
		},
		{name: "with another domain, cluster.local is forwarded", domain: "k3k.internal", qname: "web.shop" + zone, qtype: dns.TypeA, want: reply{Forward: true}},
		{
			name: "a headless Service answers its ready endpoints, each address once", qname: "db.shop" + zone, qtype: dns.TypeA,
			want: reply{Answer: []string{"db.shop.svc.cluster.local. 5 IN A 10.42.0.10", "db.shop.svc.cluster.local. 5 IN A 10.42.0.12"}},
		},
		{
			name: "a headless Service answers AAAA from its IPv6 endpoints", qname: "db.shop" + zone, qtype: dns.TypeAAAA,
			want: reply{Answer: []string{"db.shop.svc.cluster.local. 5 IN AAAA fd00::10"}},
		},
		{
			name: "publishNotReadyAddresses answers endpoints that are not ready", qname: "dbnr.shop" + zone, qtype: dns.TypeA,
			want: reply{Answer: []string{
				"dbnr.shop.svc.cluster.local. 5 IN A 10.42.0.10", "dbnr.shop.svc.cluster.local. 5 IN A 10.42.0.11", "dbnr.shop.svc.cluster.local. 5 IN A 10.42.0.12",
			}},
		},
		{name: "a headless Service without endpoints is NODATA", qname: "empty.shop" + zone, qtype: dns.TypeA, want: reply{Ns: []string{soa}}},
		{
			name: "an endpoint hostname answers its address", qname: "db-0.db.shop" + zone, qtype: dns.TypeA,
			want: reply{Answer: []string{"db-0.db.shop.svc.cluster.local. 5 IN A 10.42.0.10"}},
		},
		{
			name: "an endpoint hostname answers its address from another slice", qname: "db-0.db.shop" + zone, qtype: dns.TypeAAAA,
			want: reply{Answer: []string{"db-0.db.shop.svc.cluster.local. 5 IN AAAA fd00::10"}},
		},
		{
			name: "an endpoint without hostname answers under its dashed address", qname: "10-42-0-12.db.shop" + zone, qtype: dns.TypeA,
			want: reply{Answer: []string{"10-42-0-12.db.shop.svc.cluster.local. 5 IN A 10.42.0.12"}},
		},
		{name: "a not-ready endpoint's hostname is NXDOMAIN", qname: "db-1.db.shop" + zone, qtype: dns.TypeA, want: reply{Rcode: dns.RcodeNameError, Ns: []string{soa}}},
		{
			name: "publishNotReadyAddresses answers a not-ready endpoint's hostname", qname: "db-1.dbnr.shop" + zone, qtype: dns.TypeA,
			want: reply{Answer: []string{"db-1.dbnr.shop.svc.cluster.local. 5 IN A 10.42.0.11"}},
		},
		{name: "an unknown name below a known Service is NXDOMAIN", qname: "nope.web.shop" + zone, qtype: dns.TypeA, want: reply{Rcode: dns.RcodeNameError, Ns: []string{soa}}},
		{name: "a deeper name below a known Service is NXDOMAIN", qname: "a.b.c.web.shop" + zone, qtype: dns.TypeA, want: reply{Rcode: dns.RcodeNameError, Ns: []string{soa}}},
		{
			name: "SRV of a ClusterIP port targets the Service, with its addresses as additional records", qname: "_http._tcp.web.shop" + zone, qtype: dns.TypeSRV,
			want: reply{
				Answer: []string{"_http._tcp.web.shop.svc.cluster.local. 5 IN SRV 0 100 80 web.shop.svc.cluster.local."},
				Extra:  []string{"web.shop.svc.cluster.local. 5 IN A 10.43.7.7", "web.shop.svc.cluster.local. 5 IN AAAA fd00::7"},
			},
		},
		{
			name: "SRV of a UDP port", qname: "_dns._udp.web.shop" + zone, qtype: dns.TypeSRV,
			want: reply{
				Answer: []string{"_dns._udp.web.shop.svc.cluster.local. 5 IN SRV 0 100 53 web.shop.svc.cluster.local."},
				Extra:  []string{"web.shop.svc.cluster.local. 5 IN A 10.43.7.7", "web.shop.svc.cluster.local. 5 IN AAAA fd00::7"},
			},
		},
		{
			name: "SRV of a headless port has one record per endpoint, on the endpoint's port", qname: "_pg._tcp.db.shop" + zone, qtype: dns.TypeSRV,
			want: reply{
				Answer: []string{
					"_pg._tcp.db.shop.svc.cluster.local. 5 IN SRV 0 50 5432 db-0.db.shop.svc.cluster.local.",
					"_pg._tcp.db.shop.svc.cluster.local. 5 IN SRV 0 50 5432 10-42-0-12.db.shop.svc.cluster.local.",
				},
				Extra: []string{
					"db-0.db.shop.svc.cluster.local. 5 IN A 10.42.0.10",
					"10-42-0-12.db.shop.svc.cluster.local. 5 IN A 10.42.0.12",
					"db-0.db.shop.svc.cluster.local. 5 IN AAAA fd00::10",
				},
			},
		},
		{name: "SRV of a Service without host address is NODATA", qname: "_http._tcp.pending.shop" + zone, qtype: dns.TypeSRV, want: reply{Ns: []string{soa}}},
		{name: "SRV of a port the Service lacks is NXDOMAIN", qname: "_nope._tcp.web.shop" + zone, qtype: dns.TypeSRV, want: reply{Rcode: dns.RcodeNameError, Ns: []string{soa}}},
		{name: "SRV of a port under another protocol is NXDOMAIN", qname: "_http._udp.web.shop" + zone, qtype: dns.TypeSRV, want: reply{Rcode: dns.RcodeNameError, Ns: []string{soa}}},
		{name: "an SRV name asked for A is NODATA", qname: "_http._tcp.web.shop" + zone, qtype: dns.TypeA, want: reply{Ns: []string{soa}}},
		{name: "the protocol level above an SRV name exists, without records", qname: "_tcp.web.shop" + zone, qtype: dns.TypeA, want: reply{Ns: []string{soa}}},
		{name: "a protocol level without ports is NXDOMAIN", qname: "_sctp.web.shop" + zone, qtype: dns.TypeA, want: reply{Rcode: dns.RcodeNameError, Ns: []string{soa}}},
		{
			name: "an ExternalName Service answers a CNAME whatever the type", qname: "ext.shop" + zone, qtype: dns.TypeA,
			want: reply{Answer: []string{"ext.shop.svc.cluster.local. 5 IN CNAME example.org."}},
		},
		{
			name: "SRV of an ExternalName port targets the external name", qname: "_https._tcp.ext.shop" + zone, qtype: dns.TypeSRV,
			want: reply{Answer: []string{"_https._tcp.ext.shop.svc.cluster.local. 5 IN SRV 0 100 443 example.org."}},
		},
		{name: "MX of a known Service is NODATA", qname: "web.shop" + zone, qtype: dns.TypeMX, want: reply{Ns: []string{soa}}},
		{name: "TXT of a known Service is NODATA", qname: "web.shop" + zone, qtype: dns.TypeTXT, want: reply{Ns: []string{soa}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			domain := tt.domain
			if domain == "" {
				domain = "cluster.local"
			}
			req := new(dns.Msg)
			req.SetQuestion(tt.qname, tt.qtype)
			req.Id = 4242
			if tt.qclass != 0 {
				req.Question[0].Qclass = tt.qclass
			}

			resp, forward := Answer(domain, testSource, req)
			got := reply{Forward: forward}
			if resp != nil {
				if resp.Id != req.Id || !resp.Response || !resp.Authoritative || !cmp.Equal(resp.Question, req.Question) {
					t.Errorf("header: id %d response %v aa %v question %v; want id 4242, a response, authoritative, the question", resp.Id, resp.Response, resp.Authoritative, resp.Question)
				}
				got.Rcode, got.Answer, got.Ns, got.Extra = resp.Rcode, render(resp.Answer), render(resp.Ns), render(resp.Extra)
			} else if !forward {
				t.Fatal("no reply and no forward")
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("reply (-want +got):\n%s", d)
			}
		})
	}
}

// notReady is a Source whose caches are not complete.
type notReady struct{ fakeSource }

func (notReady) Ready() bool { return false }

func TestAnswerWhileTheSourceIsNotReady(t *testing.T) {
	src := notReady{testSource}
	for _, tc := range []struct {
		qname       string
		wantForward bool
	}{
		{"web.shop.svc.cluster.local.", false},    // would be answered: SERVFAIL
		{"nosuch.shop.svc.cluster.local.", false}, // might exist: SERVFAIL, not NXDOMAIN from the host
		{"example.org.", true},                    // not the cluster's: forwarded as always
	} {
		req := new(dns.Msg)
		req.SetQuestion(tc.qname, dns.TypeA)
		got, forward := Answer("cluster.local", src, req)
		if forward != tc.wantForward {
			t.Errorf("%s: forward = %v, want %v", tc.qname, forward, tc.wantForward)
			continue
		}
		if !forward && (got.Rcode != dns.RcodeServerFailure || got.Id != req.Id) {
			t.Errorf("%s: rcode %s id %d, want SERVFAIL with the query's id", tc.qname, dns.RcodeToString[got.Rcode], got.Id)
		}
	}
}
