package dnsserver

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// Source is what Answer asks about a virtual Service, once per query.
// Implementations read caches and must be safe for concurrent use; ok is false
// when the virtual cluster has no such Service, and the name is then
// NXDOMAIN.
type Source interface {
	Service(namespace, name string) (svc Service, ok bool)
}

// Readiness is implemented by a Source that can be incomplete, such as one
// over informer caches that have not synced yet. While it is not ready, every
// query for a Service-shaped name (<x>.<y>.svc.<domain> and below) is answered
// SERVFAIL, which clients retry, rather than NXDOMAIN, which they cache for a
// name that may well exist.
type Readiness interface {
	Ready() bool
}

// Type says how a virtual Service's name is answered.
type Type int

// The Service types, as DNS sees them. NodePort and LoadBalancer Services are
// TypeClusterIP: their host copies are plain ClusterIP Services.
const (
	TypeClusterIP Type = iota + 1
	TypeHeadless
	TypeExternalName
)

// Service is one virtual Service as DNS sees it.
type Service struct {
	Type Type
	// IPs are, for TypeClusterIP, the host copy's ClusterIPs: the addresses
	// that route from host pods. Empty while the host copy does not exist or
	// has no address yet.
	IPs []netip.Addr
	// ExternalName is the alias target of a TypeExternalName Service.
	ExternalName string
	// Ports are the Service's ports; named ones get SRV records (for
	// TypeClusterIP and TypeExternalName; a headless Service's SRV records
	// use the endpoints' own ports).
	Ports []Port
	// PublishNotReadyAddresses makes a headless Service answer endpoints that
	// are not ready.
	PublishNotReadyAddresses bool
	// Endpoints are a headless Service's endpoints, from all its
	// EndpointSlices.
	Endpoints []Endpoint
}

// Port is a Service or endpoint port.
type Port struct {
	Name     string
	Protocol corev1.Protocol
	Port     int32
}

// Endpoint is one endpoint of a headless Service.
type Endpoint struct {
	// Hostname, when set (StatefulSet pods), names the endpoint:
	// <hostname>.<svc>.<ns>.svc.<domain>.
	Hostname string
	IPs      []netip.Addr
	Ready    bool
	// Ports are the EndpointSlice's ports: what a client of a headless
	// Service connects to (the target port, which may differ from the
	// Service's port).
	Ports []Port
}
