// Package dnsserver is the shared-mode agent's DNS server: it answers the
// virtual cluster's Service names (<svc>.<ns>.svc.<domain> and the names
// below them) for host pods, denies every other name of the virtual and of the
// host cluster's domain, and forwards the rest to the agent pod's own
// resolvers.
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
// Source to a reply or a decision to forward, and Filter one from an upstream
// reply to what the client may see (both table-tested); ListerSource is the
// Source over client-go listers; Server puts them on a UDP and a TCP socket
// and forwards what Answer does not claim, over the client's transport.
//
// The host's names are not the tenant's. The upstream is the host DNS, which
// would answer kube-dns.kube-system.svc.cluster.local with the host's DNS
// Service, k3k-<other>-service.<ns>.svc.cluster.local with another tenant's
// API Service, and a reverse lookup of a host address with the host Service or
// pod behind it. So no name of either domain is forwarded (Answer makes it
// NXDOMAIN unless it is a virtual name), and a forwarded reply, reverse
// lookups included, that names anything in either domain reaches the client
// as NXDOMAIN (Filter). Nothing in a host pod needs a host name: the in-cluster
// API name (KUBERNETES_SERVICE_HOST, the cluster's API Service) is pinned to
// its address by a hostAliases entry the translator writes, the virtual
// cluster's own Services, default/kubernetes among them, are answered here,
// and the host DNS remains the upstream for every name outside the clusters.
package dnsserver
