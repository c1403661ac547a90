package dnsserver

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// ReverseSource is implemented by a Source that can say which virtual
// Service a ClusterIP belongs to: the one whose host copy has it (with one
// Service network on both sides, the virtual ClusterIP too). Answer then
// answers PTR queries for those addresses, as a cluster's DNS does; every
// other reverse name is forwarded, and the filter keeps host names out of
// the reply.
type ReverseSource interface {
	ServiceAt(ip netip.Addr) (namespace, name string, ok bool)
}

// answerReverse answers a PTR query about the ClusterIP of a virtual Service:
// <svc>.<ns>.svc.<domain>. ok is false for everything else, which is
// forwarded as before: other query shapes, addresses of no virtual Service,
// a Source that cannot tell (or has not synced yet).
func answerReverse(z Zones, src Source, req *dns.Msg) (reply *dns.Msg, ok bool) {
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		return nil, false
	}
	q := req.Question[0]
	if q.Qtype != dns.TypePTR || q.Qclass != dns.ClassINET || z.Domain == "" {
		return nil, false
	}
	rs, isReverse := src.(ReverseSource)
	if !isReverse {
		return nil, false
	}
	if r, canTell := src.(Readiness); canTell && !r.Ready() {
		return nil, false
	}
	ip, parsed := reverseAddr(q.Name)
	if !parsed {
		return nil, false
	}
	ns, name, found := rs.ServiceAt(ip)
	if !found {
		return nil, false
	}
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	m.Answer = []dns.RR{&dns.PTR{Hdr: header(q.Name, dns.TypePTR), Ptr: name + "." + ns + ".svc." + dns.Fqdn(z.Domain)}}
	return m, true
}

// reverseAddr is the address a reverse name stands for: four decimal labels
// below in-addr.arpa, or 32 hex nibbles below ip6.arpa, least significant
// first. Anything else (a partial name, a classless delegation label, an
// octet with a leading zero) is no address.
func reverseAddr(name string) (netip.Addr, bool) {
	name = strings.TrimSuffix(dns.CanonicalName(name), ".")
	var text string
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa"); ok {
		labels := strings.Split(rest, ".")
		if len(labels) != 4 {
			return netip.Addr{}, false
		}
		slices.Reverse(labels)
		text = strings.Join(labels, ".")
	} else if rest, ok := strings.CutSuffix(name, ".ip6.arpa"); ok {
		labels := strings.Split(rest, ".")
		if len(labels) != 32 {
			return netip.Addr{}, false
		}
		slices.Reverse(labels)
		var b strings.Builder
		for i, l := range labels {
			if len(l) != 1 {
				return netip.Addr{}, false
			}
			if i > 0 && i%4 == 0 {
				b.WriteByte(':')
			}
			b.WriteString(l)
		}
		text = b.String()
	}
	ip, err := netip.ParseAddr(text)
	if err != nil || ip.Zone() != "" || (ip.Is4() != strings.HasSuffix(name, ".in-addr.arpa")) {
		return netip.Addr{}, false
	}
	return ip, true
}
