package dnsserver

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// indexer is what an informer holds: objects by key, with the namespace
// index the listers use.
func indexer(t *testing.T, objs ...metav1.Object) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

func service(ns, name string, spec corev1.ServiceSpec) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func slice(ns, name, svc string, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: at, Ports: ports, Endpoints: eps,
	}
}

func TestListerSource(t *testing.T) {
	pgPort := []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](5432)}}
	virtual := []metav1.Object{
		service("shop", "web", corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.5", ClusterIPs: []string{"10.96.0.5"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "alt", Port: 8080}},
		}),
		service("shop", "np", corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.6"}),
		service("shop", "pending", corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.7"}),
		service("shop", "db", corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{{Name: "pg", Protocol: corev1.ProtocolTCP, Port: 15432}},
		}),
		service("shop", "ext", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.org"}),
		// Listed in reverse name order: the source sorts by slice name.
		slice("shop", "db-b", "db", discoveryv1.AddressTypeIPv6, pgPort,
			discoveryv1.Endpoint{Addresses: []string{"fd00::10"}, Hostname: ptr.To("db-0"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}),
		slice("shop", "db-a", "db", discoveryv1.AddressTypeIPv4, pgPort,
			discoveryv1.Endpoint{Addresses: []string{"10.42.0.10"}, Hostname: ptr.To("db-0")},
			discoveryv1.Endpoint{Addresses: []string{"10.42.0.12", "not-an-ip"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}),
		slice("shop", "db-fqdn", "db", discoveryv1.AddressTypeFQDN, pgPort, discoveryv1.Endpoint{Addresses: []string{"db.example.org"}}),
		slice("shop", "other-a", "other", discoveryv1.AddressTypeIPv4, pgPort, discoveryv1.Endpoint{Addresses: []string{"10.42.9.9"}}),
		slice("elsewhere", "db-a", "db", discoveryv1.AddressTypeIPv4, pgPort, discoveryv1.Endpoint{Addresses: []string{"10.42.8.8"}}),
	}
	hostName := func(ns, name string) string { return name + "-" + ns + "-h" }
	host := []metav1.Object{
		service("tenant", "web-shop-h", corev1.ServiceSpec{ClusterIP: "10.43.7.7", ClusterIPs: []string{"10.43.7.7", "fd00::7"}}),
		service("tenant", "np-shop-h", corev1.ServiceSpec{ClusterIP: "10.43.9.9"}),
		// The right name in the wrong namespace is not the host copy.
		service("elsewhere", "pending-shop-h", corev1.ServiceSpec{ClusterIP: "10.43.1.1", ClusterIPs: []string{"10.43.1.1"}}),
	}
	vIdx, hIdx := indexer(t, virtual...), indexer(t, host...)
	src := &ListerSource{
		Services:        corelisters.NewServiceLister(vIdx),
		EndpointSlices:  discoverylisters.NewEndpointSliceLister(vIdx),
		HostServices:    corelisters.NewServiceLister(hIdx),
		HostNamespace:   "tenant",
		HostServiceName: hostName,
	}

	tests := []struct {
		name    string
		ns, svc string
		want    Service
		wantOK  bool
	}{
		{
			name: "a ClusterIP Service has its host copy's ClusterIPs, not its own", ns: "shop", svc: "web", wantOK: true,
			want: Service{Type: TypeClusterIP, IPs: addrs("10.43.7.7", "fd00::7"), Ports: []Port{
				{Name: "http", Protocol: "TCP", Port: 80}, {Name: "alt", Protocol: "TCP", Port: 8080},
			}},
		},
		{
			name: "a NodePort Service is a ClusterIP one, and a host copy with only clusterIP set counts", ns: "shop", svc: "np", wantOK: true,
			want: Service{Type: TypeClusterIP, IPs: addrs("10.43.9.9")},
		},
		{
			name: "a Service without host copy in the host namespace has no address", ns: "shop", svc: "pending", wantOK: true,
			want: Service{Type: TypeClusterIP},
		},
		{
			name: "a headless Service has the endpoints of its own IP slices, in slice name order", ns: "shop", svc: "db", wantOK: true,
			want: Service{
				Type: TypeHeadless, PublishNotReadyAddresses: true,
				Ports: []Port{{Name: "pg", Protocol: "TCP", Port: 15432}},
				Endpoints: []Endpoint{
					{Hostname: "db-0", IPs: addrs("10.42.0.10"), Ready: true, Ports: pg},
					{IPs: addrs("10.42.0.12"), Ready: false, Ports: pg},
					{Hostname: "db-0", IPs: addrs("fd00::10"), Ready: true, Ports: pg},
				},
			},
		},
		{
			name: "an ExternalName Service has its external name", ns: "shop", svc: "ext", wantOK: true,
			want: Service{Type: TypeExternalName, ExternalName: "example.org"},
		},
		{name: "an unknown Service is not found", ns: "shop", svc: "nope"},
		{name: "a Service of another namespace is not found", ns: "elsewhere", svc: "web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := src.Service(tt.ns, tt.svc)
			if ok != tt.wantOK {
				t.Fatalf("found %v, want %v", ok, tt.wantOK)
			}
			if d := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); d != "" {
				t.Errorf("service (-want +got):\n%s", d)
			}
		})
	}
}
