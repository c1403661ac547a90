package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// reconcileIsolation applies c's ResourceQuota, LimitRange and
// NetworkPolicies (isolation.go) through the hash-guarded ensure, and removes
// the ones the spec or the defaults turned off. It runs before the servers and
// the agent are made, so their pods are admitted under the LimitRange from
// the start. The objects are owned, so a change or a deletion brings the
// Cluster back, and so does a change of the host API's EndpointSlices
// (SetupWithManager); it requeues after datastoreResolveInterval only while
// an external datastore is named by a DNS name, to follow its addresses.
func (r *Reconciler) reconcileIsolation(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	d := r.Config.Isolation
	n := IsolationNamesFor(c)
	if q := DesiredQuota(c, d); q != nil {
		if err := ensure(ctx, r.Client, c, q, func(live, d *corev1.ResourceQuota) { live.Spec = d.Spec }); err != nil {
			return ctrl.Result{}, err
		}
	} else if err := r.removeOwned(ctx, c, n.Quota, &corev1.ResourceQuota{}); err != nil {
		return ctrl.Result{}, err
	}
	if lr := DesiredLimitRange(c, d); lr != nil {
		if err := ensure(ctx, r.Client, c, lr, func(live, d *corev1.LimitRange) { live.Spec = d.Spec }); err != nil {
			return ctrl.Result{}, err
		}
	} else if err := r.removeOwned(ctx, c, n.LimitRange, &corev1.LimitRange{}); err != nil {
		return ctrl.Result{}, err
	}
	if !NetworkPolicyEnabled(c, d) {
		for _, name := range []string{n.WorkloadPolicy, n.ServerPolicy, n.AgentPolicy} {
			if err := r.removeOwned(ctx, c, name, &networkingv1.NetworkPolicy{}); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, nil
	}
	targets, named, err := r.observeEgress(ctx, c, o)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, p := range DesiredNetworkPolicies(c, d, targets) {
		if err := ensure(ctx, r.Client, c, p, func(live, d *networkingv1.NetworkPolicy) { live.Spec = d.Spec }); err != nil {
			return ctrl.Result{}, err
		}
	}
	if named {
		return ctrl.Result{RequeueAfter: datastoreResolveInterval}, nil
	}
	return ctrl.Result{}, nil
}

// lookupTimeout bounds the resolution of one external datastore host name.
const lookupTimeout = 3 * time.Second

// datastoreResolveInterval is how often a Cluster whose external datastore
// is named by a DNS name is reconciled to resolve it again: a name's
// addresses change without any event the controller could watch.
const datastoreResolveInterval = 5 * time.Minute

// observeEgress reads what the server and agent policies allow besides the
// Cluster's own pods: the host API server's endpoints (its Service's
// EndpointSlices, through the cache) and the addresses of an external
// datastore (resolved here, a read like any other). named says that a
// datastore host was a DNS name.
//
// When the host API's endpoints cannot be read, or none are listed, it
// fails rather than let the policies be written without them: that would
// cut a running server's kubeconfig publisher and datastore sidecar, and the
// agent, off the host API. The reconcile's error puts the reason on the
// Cluster's Ready condition and leaves the policies in place as they are.
// An external datastore host that does not resolve fails it in the same way:
// its servers would lose their datastore.
func (r *Reconciler) observeEgress(ctx context.Context, c *v1beta1.Cluster, o *observation) (t EgressTargets, named bool, err error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := r.Client.List(ctx, list, client.InNamespace(hostAPIServiceNamespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: hostAPIServiceName}); err != nil {
		return t, false, fmt.Errorf("reading the host API server's endpoints (the EndpointSlices of Service %s/%s), which the server and agent NetworkPolicies allow: %w",
			hostAPIServiceNamespace, hostAPIServiceName, err)
	}
	if t.HostAPI = HostAPIEndpoints(list.Items); len(t.HostAPI) == 0 {
		return t, false, fmt.Errorf("no address of the host API server in the EndpointSlices of Service %s/%s: the server and agent NetworkPolicies are not written without it, or they would cut the servers and the agent off the host API",
			hostAPIServiceNamespace, hostAPIServiceName)
	}
	hosts, err := externalDatastoreHosts(c, o)
	if err != nil {
		return t, false, err
	}
	for _, h := range hosts {
		addrs, isName, err := r.resolve(ctx, c, h.Host)
		if err != nil {
			return t, false, fmt.Errorf("the external datastore's host %s (port %d) does not resolve, so its servers' NetworkPolicy cannot allow it: %w", h.Host, h.Port, err)
		}
		named = named || isName
		for _, a := range addrs {
			t.Datastore = append(t.Datastore, Endpoint{Addr: a, Port: h.Port, Protocol: corev1.ProtocolTCP})
		}
	}
	return t, named, nil
}

// externalDatastoreHosts are the hosts k3s connects to for datastore.type
// external: those of the endpoint in the Secret when it holds one (parsed by
// reconcileExternalSecret, which runs before this step), else of
// spec.datastore.external.endpoint, which is also what holds while the
// Secret is missing or incomplete (its servers are held as they are).
func externalDatastoreHosts(c *v1beta1.Cluster, o *observation) ([]HostPort, error) {
	ext := c.Spec.Datastore.External
	if o.settings.Datastore != v1beta1.ExternalDatastore || ext == nil {
		return nil, nil
	}
	if p := o.externalHosts; p != nil {
		if p.err != nil {
			return nil, fmt.Errorf("the endpoint in Secret %s: %w", ext.SecretRef.Name, p.err)
		}
		return p.hosts, nil
	}
	hosts, err := ExternalEndpointHosts(ext.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("spec.datastore.external.endpoint: %w", err)
	}
	return hosts, nil
}

// resolve returns the addresses of host; isName says it was a DNS name. A
// name of one label is looked up first in the Cluster's namespace, as the
// server pod's resolver (search list <namespace>.svc.<domain> first) finds
// it, then as it is.
func (r *Reconciler) resolve(ctx context.Context, c *v1beta1.Cluster, host string) (addrs []netip.Addr, isName bool, err error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, false, nil
	}
	lookup := r.LookupHost
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	names := []string{host}
	if !strings.Contains(host, ".") {
		names = []string{host + "." + c.Namespace + ".svc." + r.Config.Agent.hostClusterDomain() + ".", host}
	}
	for _, name := range names {
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		found, lerr := lookup(lctx, name)
		cancel()
		if lerr == nil && len(found) > 0 {
			for _, a := range found {
				addrs = append(addrs, a.Unmap())
			}
			return addrs, true, nil
		}
		if err = lerr; err == nil {
			err = fmt.Errorf("%s has no address", name)
		}
	}
	return nil, true, err
}

// removeOwned deletes the named object of c's namespace when c controls it;
// an object someone else made under that name is left alone.
func (r *Reconciler) removeOwned(ctx context.Context, c *v1beta1.Cluster, name string, obj client.Object) error {
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting %T %s: %w", obj, name, err)
	}
	if !metav1.IsControlledBy(obj, c) {
		return nil
	}
	if err := r.Client.Delete(ctx, obj, client.Preconditions{UID: ptrUID(obj)}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %T %s: %w", obj, name, err)
	}
	return nil
}

func ptrUID(obj client.Object) *types.UID {
	uid := obj.GetUID()
	return &uid
}
