package dnsserver

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// TTL is the time to live, in seconds, of every record Answer makes and of
// its negative answers: Services and endpoints change, and clients cache.
const TTL = 5

// Zones are the DNS domains the server speaks for. Names in either are never
// forwarded: the upstream is the host DNS, and what it knows of them is the
// host's (its Services, other tenants' API Services, the host DNS itself).
type Zones struct {
	// Domain is the virtual cluster's domain, for example cluster.local: its
	// Service names are answered from the Source, every other name in it is
	// NXDOMAIN.
	Domain string
	// HostDomain is the host cluster's domain, for example cluster.local:
	// every name in it that is not also a virtual name is NXDOMAIN. Empty
	// for none.
	HostDomain string
}

// zoneOf is the zone (canonical, fully qualified) that name belongs to, and
// whether that is the virtual one; ok false outside both. Where one zone lies
// inside the other, the longer one owns its names; where both are the same,
// the virtual one.
func (z Zones) zoneOf(name string) (zone string, virtual, ok bool) {
	name = dns.CanonicalName(name)
	for _, c := range []struct {
		domain  string
		virtual bool
	}{{z.Domain, true}, {z.HostDomain, false}} {
		if c.domain == "" {
			continue
		}
		d := dns.CanonicalName(c.domain)
		if inZone(name, d) && len(d) > len(zone) {
			zone, virtual, ok = d, c.virtual, true
		}
	}
	return zone, virtual, ok
}

// inZone reports whether the canonical name is zone or below it. Names read
// off the wire all have one presentation form (only special characters
// escaped), so a suffix comparison is exact.
func inZone(name, zone string) bool {
	return zone == "." || name == zone || strings.HasSuffix(name, "."+zone)
}

// Answer answers req when it asks about a name in one of the zones;
// otherwise forward is true and reply nil: the query belongs upstream (and
// its reply goes through Filter). Names are compared case-insensitively;
// answer records carry the question's name as asked.
//
// The names answered, below a Service <svc>.<ns>.svc.<domain> that src knows:
//
//   - the Service name: A/AAAA of the host copy's ClusterIPs, or of a headless
//     Service's served endpoints; a CNAME for an ExternalName Service, whatever
//     the query type (the client follows it);
//   - <hostname>.<svc>... for a headless endpoint with a hostname, and
//     <dashed-ip>.<svc>... for one without (the SRV targets);
//   - _<port>._<proto>.<svc>... SRV for a named port, with the targets'
//     addresses as additional records.
//
// Every other name of the zones is NXDOMAIN, with the zone's SOA giving the
// short negative TTL: unknown Services, names below a known Service that
// name nothing, pod names, and every name of the host's domain, which a
// tenant has no business resolving (the in-cluster API name comes from a
// hostAliases entry, not from DNS). Three names are empty non-terminals that
// exist in every cluster and answer NODATA (NOERROR, no answer): the
// domain itself (its SOA for SOA), svc.<domain> and <ns>.svc.<domain>;
// denying them could make a caching resolver in a pod deny everything
// below (RFC 8020). A name that exists but has no record of the asked type
// is NODATA too. That includes a ClusterIP Service whose host copy has no
// address yet: NXDOMAIN would be cached by clients, while NODATA is retried
// within seconds.
//
// A PTR query for the ClusterIP of a virtual Service is answered with the
// Service's name when src is a ReverseSource (reverse.go); other reverse
// names are forwarded.
//
// A name of the zones in anything but a single-question Internet-class query
// (another class or opcode, several questions) is REFUSED, never forwarded.
func Answer(z Zones, src Source, req *dns.Msg) (reply *dns.Msg, forward bool) {
	var zone string
	var virtual, ours bool
	for _, q := range req.Question {
		if zone, virtual, ours = z.zoneOf(q.Name); ours {
			break
		}
	}
	if !ours {
		if reply, ok := answerReverse(z, src, req); ok {
			return reply, false
		}
		return nil, true
	}
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 || req.Question[0].Qclass != dns.ClassINET {
		reply := new(dns.Msg)
		reply.SetRcode(req, dns.RcodeRefused)
		return reply, false
	}
	q := req.Question[0]
	if !virtual {
		return result{}.reply(req, zone), false
	}
	rel := strings.TrimSuffix(strings.TrimSuffix(dns.CanonicalName(q.Name), zone), ".")
	var labels []string
	if rel != "" {
		labels = strings.Split(rel, ".")
	}
	n := len(labels)
	switch {
	case n == 0:
		r := result{exists: true}
		if q.Qtype == dns.TypeSOA {
			r.answer.add(zoneSOA(zone))
		}
		return r.reply(req, zone), false
	case n < 3 && labels[n-1] == "svc":
		return result{exists: true}.reply(req, zone), false
	case labels[n-1] != "svc":
		return result{}.reply(req, zone), false
	}
	if r, ok := src.(Readiness); ok && !r.Ready() {
		reply := new(dns.Msg)
		reply.SetRcode(req, dns.RcodeServerFailure)
		return reply, false
	}
	svc, ok := src.Service(labels[n-2], labels[n-3])
	if !ok {
		return result{}.reply(req, zone), false
	}

	name := strings.Join(labels[n-3:], ".") + "." + zone
	var r result
	switch {
	case n == 3:
		r = serviceRecords(svc, q.Name, q.Qtype)
	case n == 4:
		r = endpointRecords(svc, labels[0], q.Name, q.Qtype)
	case n == 5 && strings.HasPrefix(labels[0], "_") && strings.HasPrefix(labels[1], "_"):
		r = srvRecords(svc, name, labels[0][1:], labels[1][1:], q.Name, q.Qtype)
	}
	return r.reply(req, zone), false
}

// result is what one name holds for one query type. exists false is NXDOMAIN.
type result struct {
	exists bool
	answer rrSet
	extra  rrSet
}

func (r result) reply(req *dns.Msg, zone string) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true // names outside the zones are forwarded
	m.Answer, m.Extra = r.answer.rrs, r.extra.rrs
	if !r.exists {
		m.Rcode = dns.RcodeNameError
	}
	if len(m.Answer) == 0 {
		// RFC 2308: the SOA's minimum bounds how long the negative answer is
		// cached.
		m.Ns = []dns.RR{zoneSOA(zone)}
	}
	return m
}

// zoneSOA is the zone's SOA record, whose minimum is the negative TTL.
func zoneSOA(zone string) dns.RR {
	return &dns.SOA{
		Hdr: header(zone, dns.TypeSOA), Ns: "ns.dns." + zone, Mbox: "hostmaster." + zone,
		Serial: 1, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: TTL,
	}
}

func serviceRecords(svc Service, owner string, qtype uint16) result {
	r := result{exists: true}
	switch svc.Type {
	case TypeExternalName:
		if target, ok := externalName(svc); ok {
			r.answer.add(&dns.CNAME{Hdr: header(owner, dns.TypeCNAME), Target: target})
		}
	case TypeClusterIP:
		r.answer.add(addressRecords(owner, qtype, svc.IPs)...)
	case TypeHeadless:
		for _, ep := range served(svc) {
			r.answer.add(addressRecords(owner, qtype, ep.IPs)...)
		}
	}
	return r
}

// endpointRecords answers <label>.<svc>.<ns>.svc.<domain>: a headless
// endpoint, or the empty non-terminal _<proto> above an SRV name.
func endpointRecords(svc Service, label, owner string, qtype uint16) result {
	var r result
	if proto, ok := strings.CutPrefix(label, "_"); ok {
		r.exists = hasPort(svc, func(p Port) bool { return p.Name != "" && strings.EqualFold(string(p.Protocol), proto) })
		return r
	}
	if svc.Type != TypeHeadless {
		return r
	}
	for _, ep := range served(svc) {
		switch {
		case ep.Hostname != "":
			if strings.EqualFold(ep.Hostname, label) {
				r.exists = true
				r.answer.add(addressRecords(owner, qtype, ep.IPs)...)
			}
		default:
			for _, ip := range ep.IPs {
				if dashed(ip) == label {
					r.exists = true
					r.answer.add(addressRecords(owner, qtype, []netip.Addr{ip})...)
				}
			}
		}
	}
	return r
}

// srvRecords answers _<port>._<proto>.<name>. A ClusterIP Service has one
// target, its own name; a headless Service one per served endpoint, on the
// endpoint's port; an ExternalName Service its external name.
func srvRecords(svc Service, name, port, proto, owner string, qtype uint16) result {
	match := func(p Port) bool {
		return p.Name != "" && strings.EqualFold(p.Name, port) && strings.EqualFold(string(p.Protocol), proto)
	}
	r := result{exists: hasPort(svc, match)}
	if !r.exists || qtype != dns.TypeSRV {
		return r
	}
	target := func(host string, p Port, ips []netip.Addr) {
		r.answer.add(&dns.SRV{Hdr: header(owner, dns.TypeSRV), Port: uint16(p.Port), Target: host})
		r.extra.add(addressRecords(host, dns.TypeA, ips)...)
		r.extra.add(addressRecords(host, dns.TypeAAAA, ips)...)
	}
	switch svc.Type {
	case TypeClusterIP:
		if p, ok := find(svc.Ports, match); ok && len(svc.IPs) > 0 {
			target(name, p, svc.IPs)
		}
	case TypeExternalName:
		if p, ok := find(svc.Ports, match); ok {
			if host, ok := externalName(svc); ok {
				target(host, p, nil)
			}
		}
	case TypeHeadless:
		for _, ep := range served(svc) {
			p, ok := find(ep.Ports, match)
			if !ok {
				continue
			}
			if ep.Hostname != "" {
				target(strings.ToLower(ep.Hostname)+"."+name, p, ep.IPs)
				continue
			}
			for _, ip := range ep.IPs {
				target(dashed(ip)+"."+name, p, []netip.Addr{ip})
			}
		}
	}
	// Equal weights: clients pick among the targets at random.
	for _, rr := range r.answer.rrs {
		rr.(*dns.SRV).Weight = uint16(max(1, 100/len(r.answer.rrs)))
	}
	return r
}

// externalName is the alias target of an ExternalName Service, if it is a
// domain name.
func externalName(svc Service) (string, bool) {
	target := dns.Fqdn(svc.ExternalName)
	if _, ok := dns.IsDomainName(target); !ok || svc.ExternalName == "" {
		return "", false
	}
	return target, true
}

// served are the endpoints a headless Service answers.
func served(svc Service) []Endpoint {
	var eps []Endpoint
	for _, ep := range svc.Endpoints {
		if ep.Ready || svc.PublishNotReadyAddresses {
			eps = append(eps, ep)
		}
	}
	return eps
}

// hasPort reports whether the Service or one of its served endpoints has a
// port that match accepts.
func hasPort(svc Service, match func(Port) bool) bool {
	if _, ok := find(svc.Ports, match); ok {
		return true
	}
	for _, ep := range served(svc) {
		if _, ok := find(ep.Ports, match); ok {
			return true
		}
	}
	return false
}

func find(ports []Port, match func(Port) bool) (Port, bool) {
	for _, p := range ports {
		if match(p) {
			return p, true
		}
	}
	return Port{}, false
}

// addressRecords are the A or AAAA records (by qtype) of the addresses of
// that family; nil for any other type.
func addressRecords(owner string, qtype uint16, ips []netip.Addr) []dns.RR {
	var rrs []dns.RR
	for _, ip := range ips {
		ip = ip.Unmap()
		switch {
		case qtype == dns.TypeA && ip.Is4():
			rrs = append(rrs, &dns.A{Hdr: header(owner, dns.TypeA), A: ip.AsSlice()})
		case qtype == dns.TypeAAAA && ip.Is6():
			rrs = append(rrs, &dns.AAAA{Hdr: header(owner, dns.TypeAAAA), AAAA: ip.AsSlice()})
		}
	}
	return rrs
}

// dashed is the DNS label of an endpoint without hostname, as CoreDNS makes
// it: 10-0-0-1, fd00--1.
func dashed(ip netip.Addr) string {
	return strings.NewReplacer(".", "-", ":", "-").Replace(ip.Unmap().WithZone("").String())
}

func header(name string, rrtype uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: rrtype, Class: dns.ClassINET, Ttl: TTL}
}

// rrSet keeps records in order without duplicates: one address can appear in
// several EndpointSlices (one per family, or while slices are replaced).
type rrSet struct {
	rrs  []dns.RR
	seen map[string]bool
}

func (s *rrSet) add(rrs ...dns.RR) {
	for _, rr := range rrs {
		k := rr.String()
		if s.seen[k] {
			continue
		}
		if s.seen == nil {
			s.seen = map[string]bool{}
		}
		s.seen[k] = true
		s.rrs = append(s.rrs, rr)
	}
}
