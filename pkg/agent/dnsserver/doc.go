// Package dnsserver is the shared-mode agent's DNS server: it answers the
// virtual cluster's Service names (<svc>.<ns>.svc.<domain> and the names
// below them) for host pods, and forwards every other query to the agent
// pod's own resolvers.
//
// Why the agent answers rather than the host DNS or the virtual CoreDNS: the
// host DNS has one view for all pods, so it cannot map a tenant's namespace
// "shop" without clashing with a host namespace or another tenant of that name;
// and the virtual cluster's CoreDNS would answer virtual ClusterIPs, which only
// route on the host when the two Service CIDRs agree. The agent already holds
// the virtual Services, their EndpointSlices and the host copies in informer
// caches, so it answers a ClusterIP Service with its host copy's ClusterIP (the
// address that routes) and a headless Service with its endpoints.
//
// The package has three layers: Answer is a pure function from a query and a
// Source to a reply or a decision to forward (table-tested); ListerSource is
// the Source over client-go listers; Server puts both on a UDP and a TCP
// socket and forwards what Answer does not claim, over the client's transport.
//
// Names in the domain that do not name a virtual Service are forwarded too:
// host pods keep resolving host Services (x.<host ns>.svc.<domain>) as before
// they were pointed at this server.
package dnsserver
