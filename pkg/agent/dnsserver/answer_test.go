package dnsserver

import (
	"net/netip"
	"slices"
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

// ServiceAt implements ReverseSource over the ClusterIP Services.
func (f fakeSource) ServiceAt(ip netip.Addr) (namespace, name string, ok bool) {
	for key, svc := range f {
		if svc.Type == TypeClusterIP && slices.Contains(svc.IPs, ip) {
			namespace, name, _ = strings.Cut(key, "/")
			return namespace, name, true
		}
	}
	return "", "", false
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

const (
	soa     = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"
	hostSOA = "host.internal. 5 IN SOA ns.dns.host.internal. hostmaster.host.internal. 1 7200 1800 86400 5"
)

// nxdomain is the authoritative denial of a name in cluster.local.
var nxdomain = reply{Rcode: dns.RcodeNameError, Ns: []string{soa}}

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
		name       string
		domain     string // default cluster.local
		hostDomain string // default cluster.local
		qname      string
		qtype      uint16
		qclass     uint16 // default IN
		opcode     int    // default QUERY
		second     string // a second question's name
		want       reply
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
		{name: "an unknown Service is NXDOMAIN, not forwarded", qname: "nope.shop" + zone, qtype: dns.TypeA, want: nxdomain},
		{name: "the host's DNS Service is NXDOMAIN, not forwarded", qname: "kube-dns.kube-system" + zone, qtype: dns.TypeA, want: nxdomain},
		{name: "another tenant's API Service is NXDOMAIN, not forwarded", qname: "k3k-other-service.tenant-b" + zone, qtype: dns.TypeA, want: nxdomain},
		{name: "SRV of a host Service is NXDOMAIN, not forwarded", qname: "_dns._udp.kube-dns.kube-system" + zone, qtype: dns.TypeSRV, want: nxdomain},
		{name: "a name below a host Service is NXDOMAIN, not forwarded", qname: "etcd-0.k3k-other-server-headless.tenant-b" + zone, qtype: dns.TypeA, want: nxdomain},
		{name: "a pod name is NXDOMAIN, not forwarded", qname: "10-42-0-1.kube-system.pod.cluster.local.", qtype: dns.TypeA, want: nxdomain},
		{name: "any other name of the domain is NXDOMAIN, not forwarded", qname: "ns.dns.cluster.local.", qtype: dns.TypeA, want: nxdomain},
		{name: "a namespace level exists in every cluster: NODATA, not forwarded", qname: "kube-system" + zone, qtype: dns.TypeA, want: reply{Ns: []string{soa}}},
		{name: "the svc level is NODATA", qname: "svc.cluster.local.", qtype: dns.TypeA, want: reply{Ns: []string{soa}}},
		{name: "the domain itself is NODATA for A", qname: "cluster.local.", qtype: dns.TypeA, want: reply{Ns: []string{soa}}},
		{name: "the domain itself answers its SOA", qname: "Cluster.Local.", qtype: dns.TypeSOA, want: reply{Answer: []string{soa}}},
		{name: "a name outside the domain is forwarded", qname: "example.org.", qtype: dns.TypeA, want: reply{Forward: true}},
		{name: "a reverse lookup of no virtual Service is forwarded (its reply is filtered)", qname: "10.0.43.10.in-addr.arpa.", qtype: dns.TypePTR, want: reply{Forward: true}},
		{name: "an IPv6 reverse lookup of no virtual Service is forwarded (its reply is filtered)", qname: "a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", qtype: dns.TypePTR, want: reply{Forward: true}},
		{
			name: "the PTR of a Service's ClusterIP is its name", qname: "7.7.43.10.in-addr.arpa.", qtype: dns.TypePTR,
			want: reply{Answer: []string{"7.7.43.10.in-addr.arpa. 5 IN PTR web.shop.svc.cluster.local."}},
		},
		{
			name: "the PTR of its IPv6 ClusterIP too", qname: "7.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", qtype: dns.TypePTR,
			want: reply{Answer: []string{"7.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa. 5 IN PTR web.shop.svc.cluster.local."}},
		},
		{
			name: "a reverse name is matched whatever its case, and answered as asked", qname: "8.8.43.10.IN-ADDR.Arpa.", qtype: dns.TypePTR,
			want: reply{Answer: []string{"8.8.43.10.IN-ADDR.Arpa. 5 IN PTR v4only.shop.svc.cluster.local."}},
		},
		{
			name: "the PTR names the virtual domain", domain: "k3k.internal", qname: "7.7.43.10.in-addr.arpa.", qtype: dns.TypePTR,
			want: reply{Answer: []string{"7.7.43.10.in-addr.arpa. 5 IN PTR web.shop.svc.k3k.internal."}},
		},
		{name: "another type of a Service's reverse name is forwarded", qname: "7.7.43.10.in-addr.arpa.", qtype: dns.TypeA, want: reply{Forward: true}},
		{name: "a headless endpoint's reverse name is forwarded", qname: "10.0.42.10.in-addr.arpa.", qtype: dns.TypePTR, want: reply{Forward: true}},
		{name: "a partial reverse name is forwarded", qname: "7.43.10.in-addr.arpa.", qtype: dns.TypePTR, want: reply{Forward: true}},
		{name: "a reverse label with a leading zero is no address", qname: "07.7.43.10.in-addr.arpa.", qtype: dns.TypePTR, want: reply{Forward: true}},
		{name: "a domain that merely ends like the cluster domain is forwarded", qname: "web.shop.svc.notcluster.local.", qtype: dns.TypeA, want: reply{Forward: true}},
		{name: "another class of a cluster name is refused, not forwarded", qname: "kube-dns.kube-system" + zone, qtype: dns.TypeA, qclass: dns.ClassCHAOS, want: reply{Rcode: dns.RcodeRefused}},
		{name: "class ANY of a cluster name is refused, not forwarded", qname: "web.shop" + zone, qtype: dns.TypeA, qclass: dns.ClassANY, want: reply{Rcode: dns.RcodeRefused}},
		{name: "another class of an outside name is forwarded", qname: "version.bind.", qtype: dns.TypeTXT, qclass: dns.ClassCHAOS, want: reply{Forward: true}},
		{name: "another opcode about a cluster name is refused, not forwarded", qname: "kube-dns.kube-system" + zone, qtype: dns.TypeSOA, opcode: dns.OpcodeNotify, want: reply{Rcode: dns.RcodeRefused}},
		{name: "a cluster name as a second question is refused, not forwarded", qname: "example.org.", qtype: dns.TypeA, second: "kube-dns.kube-system" + zone, want: reply{Rcode: dns.RcodeRefused}},
		{
			name: "a configured domain replaces cluster.local", domain: "k3k.internal", qname: "web.shop.svc.k3k.internal.", qtype: dns.TypeA,
			want: reply{Answer: []string{"web.shop.svc.k3k.internal. 5 IN A 10.43.7.7"}},
		},
		{
			name: "with another domain, the host's cluster.local is NXDOMAIN with its own SOA, not forwarded", domain: "k3k.internal", qname: "web.shop" + zone, qtype: dns.TypeA,
			want: nxdomain,
		},
		{
			name: "a configured host domain is NXDOMAIN, even the apex", hostDomain: "host.internal", qname: "host.internal.", qtype: dns.TypeSOA,
			want: reply{Rcode: dns.RcodeNameError, Ns: []string{hostSOA}},
		},
		{
			name: "a configured host domain is NXDOMAIN, whatever the virtual cluster has", hostDomain: "host.internal", qname: "web.shop.svc.host.internal.", qtype: dns.TypeA,
			want: reply{Rcode: dns.RcodeNameError, Ns: []string{hostSOA}},
		},
		{
			name: "a virtual domain inside the host's answers its Services", domain: "v.cluster.local", qname: "web.shop.svc.v.cluster.local.", qtype: dns.TypeA,
			want: reply{Answer: []string{"web.shop.svc.v.cluster.local. 5 IN A 10.43.7.7"}},
		},
		{name: "a virtual domain inside the host's leaves the rest of the host's NXDOMAIN", domain: "v.cluster.local", qname: "kube-dns.kube-system" + zone, qtype: dns.TypeA, want: nxdomain},
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
			z := Zones{Domain: tt.domain, HostDomain: tt.hostDomain}
			if z.Domain == "" {
				z.Domain = "cluster.local"
			}
			if z.HostDomain == "" {
				z.HostDomain = "cluster.local"
			}
			req := new(dns.Msg)
			req.SetQuestion(tt.qname, tt.qtype)
			req.Id = 4242
			req.Opcode = tt.opcode
			if tt.qclass != 0 {
				req.Question[0].Qclass = tt.qclass
			}
			if tt.second != "" {
				req.Question = append(req.Question, dns.Question{Name: tt.second, Qtype: dns.TypeA, Qclass: dns.ClassINET})
			}

			resp, forward := Answer(z, testSource, req)
			got := reply{Forward: forward}
			if resp != nil {
				// A refusal is no authoritative statement about the name.
				aa := resp.Rcode != dns.RcodeRefused
				if resp.Id != req.Id || !resp.Response || resp.Authoritative != aa || !cmp.Equal(resp.Question, req.Question[:1]) {
					t.Errorf("header: id %d response %v aa %v question %v; want id 4242, a response, aa %v, the question", resp.Id, resp.Response, resp.Authoritative, resp.Question, aa)
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
		zones       Zones
		qname       string
		wantRcode   int
		wantForward bool
	}{
		// Would be answered: SERVFAIL.
		{Zones{Domain: "cluster.local", HostDomain: "cluster.local"}, "web.shop.svc.cluster.local.", dns.RcodeServerFailure, false},
		// Might exist: SERVFAIL, not an NXDOMAIN clients cache.
		{Zones{Domain: "cluster.local", HostDomain: "cluster.local"}, "nosuch.shop.svc.cluster.local.", dns.RcodeServerFailure, false},
		// Might be a virtual Service too (the two domains are the same):
		// SERVFAIL, and never the host's answer.
		{Zones{Domain: "cluster.local", HostDomain: "cluster.local"}, "kube-dns.kube-system.svc.cluster.local.", dns.RcodeServerFailure, false},
		// The host's alone: NXDOMAIN whatever the caches hold.
		{Zones{Domain: "k3k.internal", HostDomain: "cluster.local"}, "kube-dns.kube-system.svc.cluster.local.", dns.RcodeNameError, false},
		// Not the cluster's: forwarded as always.
		{Zones{Domain: "cluster.local", HostDomain: "cluster.local"}, "example.org.", 0, true},
		// A Service's reverse name: forwarded (and filtered) until it syncs.
		{Zones{Domain: "cluster.local", HostDomain: "cluster.local"}, "7.7.43.10.in-addr.arpa.", 0, true},
	} {
		req := new(dns.Msg)
		qtype := dns.TypeA
		if strings.HasSuffix(tc.qname, ".arpa.") {
			qtype = dns.TypePTR
		}
		req.SetQuestion(tc.qname, qtype)
		got, forward := Answer(tc.zones, src, req)
		if forward != tc.wantForward {
			t.Errorf("%s: forward = %v, want %v", tc.qname, forward, tc.wantForward)
			continue
		}
		if !forward && (got.Rcode != tc.wantRcode || got.Id != req.Id) {
			t.Errorf("%s in %+v: rcode %s id %d, want %s with the query's id", tc.qname, tc.zones, dns.RcodeToString[got.Rcode], got.Id, dns.RcodeToString[tc.wantRcode])
		}
	}
}

func TestFilter(t *testing.T) {
	zones := Zones{Domain: "k3k.internal", HostDomain: "cluster.local"}
	tests := []struct {
		name              string
		qname             string
		qtype             uint16
		answer, ns, extra []string
		rcode             int
		wantKept          bool
	}{
		{
			name: "a PTR naming a host Service is denied", qname: "10.0.43.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"10.0.43.10.in-addr.arpa. 5 IN PTR kube-dns.kube-system.svc.cluster.local."},
		},
		{
			name: "a PTR naming a host pod is denied", qname: "5.0.42.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"5.0.42.10.in-addr.arpa. 5 IN PTR 10-42-0-5.tenant-b.pod.cluster.local."},
		},
		{
			name: "a PTR naming a host endpoint is denied, whatever the case", qname: "5.0.42.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"5.0.42.10.in-addr.arpa. 5 IN PTR Server-0.K3K-Other-Server-Headless.Tenant-B.svc.Cluster.Local."},
		},
		{
			name: "an IPv6 PTR naming a host Service is denied", qname: "a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", qtype: dns.TypePTR,
			answer: []string{"a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa. 5 IN PTR k3k-other-service.tenant-b.svc.cluster.local."},
		},
		{
			name: "a PTR naming a virtual name is denied too", qname: "7.7.43.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"7.7.43.10.in-addr.arpa. 5 IN PTR web.shop.svc.k3k.internal."},
		},
		{
			name: "a host denial carrying the host zone's SOA is denied without it", qname: "9.9.43.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError,
			ns: []string{"43.10.in-addr.arpa. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"},
		},
		{
			name: "a public name aliased into the host domain is denied", qname: "alias.example.org.", qtype: dns.TypeA,
			answer: []string{"alias.example.org. 60 IN CNAME kube-dns.kube-system.svc.cluster.local.", "kube-dns.kube-system.svc.cluster.local. 5 IN A 10.43.0.10"},
		},
		{
			name: "a DNAME into the host domain is denied", qname: "x.alias.example.org.", qtype: dns.TypeA,
			answer: []string{"alias.example.org. 60 IN DNAME svc.cluster.local."},
		},
		{
			name: "an SRV targeting a host name is denied", qname: "_ldap._tcp.example.org.", qtype: dns.TypeSRV,
			answer: []string{"_ldap._tcp.example.org. 60 IN SRV 0 100 389 ldap.corp.svc.cluster.local."},
		},
		{
			name: "an MX naming a host name is denied", qname: "example.org.", qtype: dns.TypeMX,
			answer: []string{"example.org. 60 IN MX 10 mail.corp.svc.cluster.local."},
		},
		{
			name: "an HTTPS record targeting a host name is denied", qname: "example.org.", qtype: dns.TypeHTTPS,
			answer: []string{"example.org. 60 IN HTTPS 1 api.corp.svc.cluster.local. alpn=h2"},
		},
		{
			name: "an NS in the authority section naming a host name is denied", qname: "sub.example.org.", qtype: dns.TypeA,
			ns: []string{"sub.example.org. 60 IN NS ns.dns.cluster.local."},
		},
		{
			name: "a host name as an additional record's owner is denied", qname: "example.org.", qtype: dns.TypeA,
			answer: []string{"example.org. 60 IN A 192.0.2.1"}, extra: []string{"kube-dns.kube-system.svc.cluster.local. 5 IN A 10.43.0.10"},
		},
		{
			name: "a public PTR is kept", qname: "1.2.0.192.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"1.2.0.192.in-addr.arpa. 60 IN PTR host.example.org."}, wantKept: true,
		},
		{
			name: "a public denial with its zone's SOA is kept", qname: "missing.example.org.", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			ns: []string{"example.org. 60 IN SOA ns.example.org. hostmaster.example.org. 1 7200 1800 86400 60"}, wantKept: true,
		},
		{
			name: "a name that merely ends like the cluster domain is kept", qname: "example.org.", qtype: dns.TypeA,
			answer: []string{"example.org. 60 IN CNAME web.notcluster.local.", "web.notcluster.local. 60 IN A 192.0.2.3"}, wantKept: true,
		},
		{
			name: "TXT data is not a name and is kept", qname: "example.org.", qtype: dns.TypeTXT,
			answer: []string{`example.org. 60 IN TXT "see kube-dns.kube-system.svc.cluster.local"`}, wantKept: true,
		},
	}
	rrs := func(ss []string) []dns.RR {
		var out []dns.RR
		for _, s := range ss {
			rr, err := dns.NewRR(s)
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			out = append(out, rr)
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := new(dns.Msg)
			req.SetQuestion(tt.qname, tt.qtype)
			req.Id = 4242
			up := new(dns.Msg)
			up.SetRcode(req, tt.rcode)
			up.RecursionAvailable = true
			up.Answer, up.Ns, up.Extra = rrs(tt.answer), rrs(tt.ns), rrs(tt.extra)
			up.SetEdns0(1232, false) // the OPT record's owner is the root: never a reason to deny

			got := Filter(zones, req, up)
			if tt.wantKept {
				if got != up {
					t.Errorf("reply replaced by %v, want it kept", got)
				}
				return
			}
			if got.Rcode != dns.RcodeNameError || len(got.Answer)+len(got.Ns)+len(got.Extra) != 0 ||
				got.Id != req.Id || !got.Response || !cmp.Equal(got.Question, req.Question) {
				t.Errorf("got %v, want a bare NXDOMAIN for the question", got)
			}
		})
	}
}
