package dnsserver

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// ListerSource is the Source over the agent's informer caches. Listers hold
// no errors but NotFound, so any lister error reads as "no such object".
type ListerSource struct {
	// Services and EndpointSlices list the virtual cluster's objects. The
	// slices of a Service are found by their kubernetes.io/service-name label
	// within its namespace (the informers' default namespace index).
	Services       corelisters.ServiceLister
	EndpointSlices discoverylisters.EndpointSliceLister
	// HostServices lists HostNamespace, where the host copies live.
	HostServices  corelisters.ServiceLister
	HostNamespace string
	// HostServiceName names the host Service whose ClusterIPs answer a
	// virtual ClusterIP Service: its host copy, or, for a Service the agent
	// does not copy (default/kubernetes), whatever host Service stands for it.
	HostServiceName func(namespace, name string) string
}

// Service implements Source.
func (s *ListerSource) Service(namespace, name string) (Service, bool) {
	v, err := s.Services.Services(namespace).Get(name)
	if err != nil {
		return Service{}, false
	}
	out := Service{PublishNotReadyAddresses: v.Spec.PublishNotReadyAddresses}
	for _, p := range v.Spec.Ports {
		out.Ports = append(out.Ports, Port{Name: p.Name, Protocol: protocol(&p.Protocol), Port: p.Port})
	}
	switch {
	case v.Spec.Type == corev1.ServiceTypeExternalName:
		out.Type, out.ExternalName = TypeExternalName, v.Spec.ExternalName
	case v.Spec.ClusterIP == corev1.ClusterIPNone:
		out.Type, out.Endpoints = TypeHeadless, s.endpoints(namespace, name)
	default:
		out.Type, out.IPs = TypeClusterIP, s.hostClusterIPs(namespace, name)
	}
	return out, true
}

// ServiceAt implements ReverseSource: the virtual ClusterIP Service whose
// host copy has ip. The virtual Services are walked (a tenant's quota bounds
// them), in no particular order: one address is one host Service's.
func (s *ListerSource) ServiceAt(ip netip.Addr) (namespace, name string, ok bool) {
	list, err := s.Services.List(labels.Everything())
	if err != nil {
		return "", "", false
	}
	ip = ip.Unmap()
	for _, v := range list {
		if v.Spec.Type == corev1.ServiceTypeExternalName || v.Spec.ClusterIP == corev1.ClusterIPNone || v.Spec.ClusterIP == "" {
			continue
		}
		if slices.Contains(s.hostClusterIPs(v.Namespace, v.Name), ip) {
			return v.Namespace, v.Name, true
		}
	}
	return "", "", false
}

// hostClusterIPs are the ClusterIPs of the virtual Service's host Service;
// none while it is missing or headless.
func (s *ListerSource) hostClusterIPs(namespace, name string) []netip.Addr {
	h, err := s.HostServices.Services(s.HostNamespace).Get(s.HostServiceName(namespace, name))
	if err != nil {
		return nil
	}
	ips := h.Spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{h.Spec.ClusterIP}
	}
	return parseAddrs(ips)
}

// endpoints are the endpoints of all the Service's slices, in slice name
// order so that answers are stable. FQDN slices are skipped: DNS cannot
// answer an address record with a name.
func (s *ListerSource) endpoints(namespace, name string) []Endpoint {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name})
	list, err := s.EndpointSlices.EndpointSlices(namespace).List(sel)
	if err != nil {
		return nil
	}
	slices.SortFunc(list, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	var eps []Endpoint
	for _, sl := range list {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		var ports []Port
		for _, p := range sl.Ports {
			if p.Port == nil {
				continue
			}
			ports = append(ports, Port{Name: deref(p.Name), Protocol: protocol(p.Protocol), Port: *p.Port})
		}
		for _, e := range sl.Endpoints {
			eps = append(eps, Endpoint{
				Hostname: deref(e.Hostname),
				IPs:      parseAddrs(e.Addresses),
				// The API reads a missing condition as ready.
				Ready: e.Conditions.Ready == nil || *e.Conditions.Ready,
				Ports: ports,
			})
		}
	}
	return eps
}

// protocol defaults to TCP, as the API does.
func protocol(p *corev1.Protocol) corev1.Protocol {
	if p == nil || *p == "" {
		return corev1.ProtocolTCP
	}
	return *p
}

func parseAddrs(ss []string) []netip.Addr {
	var ips []netip.Addr
	for _, s := range ss {
		if ip, err := netip.ParseAddr(s); err == nil {
			ips = append(ips, ip)
		}
	}
	return ips
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
