package dnsserver

import (
	"reflect"

	"github.com/miekg/dns"
)

// Filter is what the client gets of an upstream reply to req: reply itself,
// or NXDOMAIN when any record of its answer, authority or additional section
// names something in the zones, as its owner or in its data (a PTR, CNAME,
// DNAME, SRV, NS, MX, SOA target, …). The upstream is the host DNS: a reverse
// lookup of a host address answers with a host Service or pod name, a
// negative answer carries the host zone's SOA, and a public name can alias
// into the cluster domain, where the host DNS would go on to answer with a
// host Service. Dropping only the offending records would still tell the
// tenant that the address or alias exists; NXDOMAIN tells nothing.
func Filter(z Zones, req, reply *dns.Msg) *dns.Msg {
	for _, section := range [][]dns.RR{reply.Answer, reply.Ns, reply.Extra} {
		for _, rr := range section {
			if names(rr, func(name string) bool { _, _, ours := z.zoneOf(name); return ours }) {
				m := new(dns.Msg)
				m.SetRcode(req, dns.RcodeNameError)
				m.RecursionAvailable = true
				return m
			}
		}
	}
	return reply
}

// domainNameTags are the struct tags miekg/dns gives record fields that hold
// domain names (the last two only when the gateway is a name).
var domainNameTags = map[string]bool{"domain-name": true, "cdomain-name": true, "ipsechost": true, "amtrelayhost": true}

// names reports whether match accepts the owner name of rr or a domain name
// in its data. The fields are found by their tags, so every record type the
// library knows is covered, not only the ones a host DNS is expected to
// send. The OPT pseudo-record's owner is the root and its data no name; a
// record of a type the library does not know has opaque data, of which only
// the owner is checked.
func names(rr dns.RR, match func(string) bool) bool {
	if rr.Header().Rrtype == dns.TypeOPT {
		return false
	}
	if match(rr.Header().Name) {
		return true
	}
	v := reflect.ValueOf(rr)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	return dataNames(v.Elem(), match)
}

// dataNames reports whether match accepts a domain name field of the record
// struct v, looking into embedded structs (HTTPS is an SVCB).
func dataNames(v reflect.Value, match func(string) bool) bool {
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if sf.Anonymous && f.Kind() == reflect.Struct {
			if dataNames(f, match) {
				return true
			}
			continue
		}
		if !domainNameTags[sf.Tag.Get("dns")] {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			if f.String() != "" && match(f.String()) {
				return true
			}
		case reflect.Slice:
			if f.Type().Elem().Kind() != reflect.String {
				continue
			}
			for j := range f.Len() {
				if s := f.Index(j).String(); s != "" && match(s) {
					return true
				}
			}
		}
	}
	return false
}
