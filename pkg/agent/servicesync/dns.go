package servicesync

import (
	"net/netip"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/k3k-io/k3k/pkg/agent/dnsserver"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// dnsSource answers the agent's DNS server from the caches of the newest run
// whose caches synced. A run that ends (credentials changed, virtual API
// gone) leaves its caches in place until the next one has synced, so names
// keep resolving through a server restart; before the first sync the source
// is not ready and the DNS server answers SERVFAIL rather than letting the
// host DNS deny a virtual name.
type dnsSource struct {
	tr  *translate.Translator
	cur atomic.Pointer[dnsserver.ListerSource]
}

// DNSSource is the Source of the agent's DNS server (pkg/agent/dnsserver).
func (s *Syncer) DNSSource() dnsserver.Source { return &s.dns }

// Ready implements dnsserver.Readiness.
func (d *dnsSource) Ready() bool { return d.cur.Load() != nil }

// Service implements dnsserver.Source. The virtual API's own Service
// (default/kubernetes) has no host copy; it answers with the cluster's API
// Service, the address the agent also gives pods as KUBERNETES_SERVICE_HOST.
func (d *dnsSource) Service(namespace, name string) (dnsserver.Service, bool) {
	if namespace == metav1.NamespaceDefault && name == "kubernetes" {
		if api := d.tr.Config().APIServer; api.IP != "" {
			if ip, err := netip.ParseAddr(api.IP); err == nil {
				return dnsserver.Service{Type: dnsserver.TypeClusterIP, IPs: []netip.Addr{ip},
					Ports: []dnsserver.Port{{Name: "https", Protocol: corev1.ProtocolTCP, Port: api.Port}}}, true
			}
		}
	}
	src := d.cur.Load()
	if src == nil {
		return dnsserver.Service{}, false
	}
	return src.Service(namespace, name)
}

// ServiceAt implements dnsserver.ReverseSource.
func (d *dnsSource) ServiceAt(ip netip.Addr) (namespace, name string, ok bool) {
	src := d.cur.Load()
	if src == nil {
		return "", "", false
	}
	return src.ServiceAt(ip)
}

// publishDNS makes r's caches the DNS source; the loop calls it once they
// have synced.
func (r *run) publishDNS() {
	r.dns.cur.Store(&dnsserver.ListerSource{
		Services:       r.vServices,
		EndpointSlices: r.vSlices,
		HostServices:   r.hServices,
		HostNamespace:  r.tr.Config().HostNamespace,
		HostServiceName: func(namespace, name string) string {
			return r.tr.HostName(translate.KindService, namespace, name)
		},
	})
}

// ServiceLinks are the Services of namespace that a pod's service variables
// name (translate.ServiceLinkEnv): those with a ClusterIP, at their host
// copies' addresses, the ones the agent's DNS answers. complete is false
// while the caches have not synced or a Service's host copy has no address
// yet, so that a pod created right after a Service can wait for it, as its
// variables would otherwise miss it. The virtual API's own Service is left
// to the variables the translator writes (KUBERNETES_SERVICE_HOST).
func (s *Syncer) ServiceLinks(namespace string) (links []translate.ServiceLink, complete bool) {
	src := s.dns.cur.Load()
	if src == nil {
		return nil, false
	}
	svcs, err := src.Services.Services(namespace).List(labels.Everything())
	if err != nil {
		return nil, false
	}
	complete = true
	for _, v := range svcs {
		if v.Spec.Type == corev1.ServiceTypeExternalName || v.Spec.ClusterIP == corev1.ClusterIPNone || v.Spec.ClusterIP == "" ||
			(namespace == metav1.NamespaceDefault && v.Name == "kubernetes") {
			continue
		}
		h, ok := src.Service(namespace, v.Name)
		if !ok || len(h.IPs) == 0 {
			complete = false
			continue
		}
		links = append(links, translate.ServiceLink{Name: v.Name, IP: h.IPs[0].String(), Ports: v.Spec.Ports})
	}
	return links, complete
}
