package cluster

import (
	"cmp"
	"errors"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Egress of the server and agent pods (docs/security.md, "NetworkPolicies"):
// pure builders for the addresses outside the Cluster's own pods that they
// must reach. A virtual API server connects wherever a tenant points it (a
// Node's InternalIP, a pod's status IP, hand-written Endpoints, a webhook or
// APIService URL), so the policies allow those addresses by address and
// port, nothing else. reconcileIsolation observes them (isolation_reconcile.go).

// The host API server's Service, whose EndpointSlices name its real
// addresses. A NetworkPolicy sees a connection after the Service's DNAT,
// so its ClusterIP alone would not match.
const (
	hostAPIServiceNamespace = metav1.NamespaceDefault
	hostAPIServiceName      = "kubernetes"
)

// dnsPort is where the host's DNS answers, whether it runs in pods, on the
// host network or node-locally.
const dnsPort = 53

// Endpoint is one address and port a policy lets a pod connect to.
type Endpoint struct {
	Addr     netip.Addr
	Port     int32
	Protocol corev1.Protocol
}

// EgressTargets are the addresses outside the Cluster's pods its servers and
// agent must reach, as the reconcile observed them.
type EgressTargets struct {
	// HostAPI are the host API server's endpoints (HostAPIEndpoints): the
	// servers' kubeconfig publisher and datastore sidecar, and the agent,
	// use the host API.
	HostAPI []Endpoint
	// Datastore are the resolved addresses of an external datastore
	// (ExternalEndpointHosts); the servers only.
	Datastore []Endpoint
}

// HostAPIEndpoints are the addresses and ports the EndpointSlices of the host
// API's Service list. Slices of FQDNs, unparsable addresses and ports
// without a number are skipped; an endpoint's conditions are not looked at
// (an address the host API server publishes is one of its own either way).
func HostAPIEndpoints(slices []discoveryv1.EndpointSlice) []Endpoint {
	var out []Endpoint
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				for _, p := range s.Ports {
					if p.Port == nil {
						continue
					}
					proto := corev1.ProtocolTCP
					if p.Protocol != nil {
						proto = *p.Protocol
					}
					out = append(out, Endpoint{Addr: addr.Unmap(), Port: *p.Port, Protocol: proto})
				}
			}
		}
	}
	return out
}

// HostPort is a host (a DNS name or an IP address) and a TCP port that an
// external datastore endpoint names.
type HostPort struct {
	Host string
	Port int32
}

// The ports kine and k3s use when an endpoint leaves them out.
const (
	postgresPort = 5432
	mysqlPort    = 3306
	etcdPort     = 2379
	natsPort     = 4222
)

// ExternalEndpointHosts parses an external datastore endpoint, in the forms
// k3s and kine accept, into the hosts and ports k3s connects to:
//
//	postgres://user:pass@host:port/db (also postgresql://, and libpq's
//	    host1:port1,host2:port2 list)     default port 5432
//	mysql://user:pass@tcp(host:port)/db  default port 3306
//	https://host:2379,https://host2:2379 (etcd; also http://)
//	nats://user:pass@host:port           default port 4222
//	unix://…, or a database on a socket  nothing: it is inside the pod
//
// The endpoint carries credentials, so an error never quotes it or any part
// of it: it only says which part has the wrong form.
func ExternalEndpointHosts(endpoint string) ([]HostPort, error) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(endpoint), "://")
	if !ok {
		return nil, errors.New("the datastore endpoint has no scheme (postgres://, mysql://, http(s)://, nats://)")
	}
	var (
		out []HostPort
		err error
	)
	switch strings.ToLower(scheme) {
	case "unix":
		return nil, nil
	case "postgres", "postgresql":
		out, err = authorityHosts(rest, postgresPort)
	case "nats":
		out, err = authorityHosts(rest, natsPort)
	case "mysql":
		out, err = mysqlHosts(rest)
	case "http", "https":
		// etcd: a list of URLs; the first one's scheme was cut above.
		for i, u := range strings.Split(rest, ",") {
			u = strings.TrimSpace(u)
			if i > 0 {
				s, r, ok := strings.Cut(u, "://")
				if !ok || (s != "http" && s != "https") {
					return nil, errors.New("an etcd endpoint in the datastore endpoint's list is not an http(s):// URL")
				}
				u = r
			}
			hosts, err := authorityHosts(u, etcdPort)
			if err != nil {
				return nil, err
			}
			out = append(out, hosts...)
		}
	default:
		return nil, errors.New("the datastore endpoint's scheme is none of postgres, postgresql, mysql, http, https, nats and unix")
	}
	if err != nil {
		return nil, err
	}
	return slices.Compact(out), nil
}

// authorityHosts reads the authority of a URL without its scheme,
// [userinfo@]host[:port][,host[:port]…], up to the first '/', '?' or '#' as a
// URL parser does. No host (a socket, or the default localhost) is nothing
// to reach outside the pod.
func authorityHosts(rest string, defaultPort int32) ([]HostPort, error) {
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = rest[at+1:]
	}
	var out []HostPort
	for _, hp := range strings.Split(rest, ",") {
		if hp == "" || strings.HasPrefix(strings.ToLower(hp), "%2f") {
			// libpq: a host that is a path (URL-encoded) is a socket
			// directory.
			continue
		}
		h, err := parseHostPort(hp, defaultPort)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// mysqlHosts reads a go-sql-driver DSN, [user[:pass]@][net[(addr)]]/db[?…],
// the way its ParseDSN does (the last '/', then the last '@' before it):
// protocol tcp (the default, also tcp4 and tcp6) at addr, by default
// 127.0.0.1:3306 inside the pod; unix is a socket inside the pod.
func mysqlHosts(dsn string) ([]HostPort, error) {
	slash := strings.LastIndex(dsn, "/")
	if slash < 0 {
		return nil, errors.New("the mysql datastore endpoint has no '/' before the database name (user:pass@tcp(host:port)/db)")
	}
	prefix := dsn[:slash]
	if at := strings.LastIndex(prefix, "@"); at >= 0 {
		prefix = prefix[at+1:]
	}
	proto, addr := prefix, ""
	if open := strings.Index(prefix, "("); open >= 0 {
		if !strings.HasSuffix(prefix, ")") {
			return nil, errors.New("the mysql datastore endpoint's address is not closed by ')' (tcp(host:port))")
		}
		proto, addr = prefix[:open], prefix[open+1:len(prefix)-1]
	}
	switch proto {
	case "unix":
		return nil, nil
	case "", "tcp", "tcp4", "tcp6":
	default:
		return nil, errors.New("the mysql datastore endpoint's protocol is neither tcp nor unix")
	}
	if addr == "" {
		return nil, nil
	}
	h, err := parseHostPort(addr, mysqlPort)
	if err != nil {
		return nil, err
	}
	return []HostPort{h}, nil
}

// hostName is what a datastore host may look like when it is not an IP
// address: a DNS name, optionally ending in a dot.
var hostName = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?$`)

// parseHostPort reads host, host:port, [v6], [v6]:port or a bare IPv6
// address.
func parseHostPort(hp string, defaultPort int32) (HostPort, error) {
	host, port := hp, defaultPort
	if a, err := netip.ParseAddr(strings.Trim(hp, "[]")); err == nil && a.Zone() == "" {
		return HostPort{Host: a.Unmap().String(), Port: defaultPort}, nil
	}
	if h, p, err := net.SplitHostPort(hp); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return HostPort{}, errors.New("a datastore port is not a number between 1 and 65535")
		}
		host, port = h, int32(n)
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Zone() == "" {
		return HostPort{Host: a.Unmap().String(), Port: port}, nil
	}
	if !hostName.MatchString(host) || len(host) > 254 {
		return HostPort{}, errors.New("a datastore host is neither an IP address nor a DNS name")
	}
	return HostPort{Host: strings.ToLower(host), Port: port}, nil
}

// endpointRules allow eps and nothing else: one rule per port and protocol,
// each to the single addresses (/32, /128) on that port, sorted so that the
// same endpoints always make the same policy.
func endpointRules(eps []Endpoint) []networkingv1.NetworkPolicyEgressRule {
	type portKey struct {
		port  int32
		proto corev1.Protocol
	}
	byPort := map[portKey][]string{}
	for _, e := range eps {
		k := portKey{e.Port, e.Protocol}
		byPort[k] = append(byPort[k], netip.PrefixFrom(e.Addr, e.Addr.BitLen()).String())
	}
	keys := make([]portKey, 0, len(byPort))
	for k := range byPort {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b portKey) int {
		return cmp.Or(cmp.Compare(a.port, b.port), cmp.Compare(a.proto, b.proto))
	})
	out := make([]networkingv1.NetworkPolicyEgressRule, 0, len(keys))
	for _, k := range keys {
		cidrs := byPort[k]
		slices.Sort(cidrs)
		cidrs = slices.Compact(cidrs)
		rule := networkingv1.NetworkPolicyEgressRule{Ports: policyPorts(k.proto, k.port)}
		for _, c := range cidrs {
			rule.To = append(rule.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
		}
		out = append(out, rule)
	}
	return out
}

// dnsRule allows the DNS port, UDP and TCP, to any address: the host's DNS
// may be pods, host-network pods or a node-local cache, and a DNS port is no
// useful target for a proxy.
func dnsRule() networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{
		{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(dnsPort))},
		{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(dnsPort))},
	}}
}
