package cluster

import (
	"context"
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The host's Service network, which new shared-mode Clusters take as their
// own (Config.HostServiceCIDR, serviceCIDR). With one network on both sides
// the virtual API server allocates a ClusterIP the host has not handed out
// (almost always: the two allocators pick at random from the same range and
// do not know each other), the agent asks the host for that same address for
// the Service's host copy, and a workload connecting to the ClusterIP it reads
// from its Service reaches the copy. The alternatives were worse: translating
// addresses on the host needs per-pod rules on every node the agent does not
// run on, and recreating each virtual Service at its host copy's address
// changes its UID under the tenant.

// DefaultServiceCIDRName is the ServiceCIDR an API server makes from its
// --service-cluster-ip-range (Kubernetes 1.33 and later).
const DefaultServiceCIDRName = "kubernetes"

// ParseHostServiceCIDR checks a host Service network given by hand: one IPv4
// CIDR, as the virtual cluster's pod network is IPv4.
func ParseHostServiceCIDR(s string) (string, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() || p.Masked() != p {
		return "", fmt.Errorf("%q: want an IPv4 network such as 10.96.0.0/12", s)
	}
	return p.String(), nil
}

// LookupHostServiceCIDR reads the host's Service network from its default
// ServiceCIDR: the first IPv4 CIDR (a dual-stack host lists both families).
// found is false, without an error, when the host has no such object or API
// (before Kubernetes 1.33) or no IPv4 network: new Clusters then keep k3s's
// default, as before.
func LookupHostServiceCIDR(ctx context.Context, r client.Reader) (cidr string, found bool, err error) {
	var sc networkingv1.ServiceCIDR
	err = r.Get(ctx, client.ObjectKey{Name: DefaultServiceCIDRName}, &sc)
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("reading the host's ServiceCIDR %q: %w", DefaultServiceCIDRName, err)
	}
	for _, c := range sc.Spec.CIDRs {
		if cidr, err := ParseHostServiceCIDR(c); err == nil {
			return cidr, true, nil
		}
	}
	return "", false, nil
}
