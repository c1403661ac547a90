package servicesync

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/k3k-io/k3k/pkg/agent/nodeport"
	"github.com/k3k-io/k3k/pkg/agent/syncloop"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// reconcile brings the host copies of one virtual Service in step. requeue
// asks for another pass soon without an error (a cache that has not caught
// up yet, or a host Service that must be made again).
func (r *run) reconcile(ctx context.Context, key string) (requeue bool, err error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return false, nil
	}
	vsvc, err := syncloop.Found(r.vServices.Services(ns).Get(name))
	if err != nil {
		return false, err
	}
	hostNS := r.tr.Config().HostNamespace
	hsvc, err := syncloop.Found(r.hServices.Services(hostNS).Get(r.tr.HostName(translate.KindService, ns, name)))
	if err != nil {
		return false, err
	}
	if hsvc != nil {
		if !r.tr.IsCopyOf(hsvc, translate.KindService, ns, name) {
			logr.FromContextOrDiscard(ctx).Info("host Service does not belong to this virtual Service; leaving it alone", "service", key, "hostService", hsvc.Name)
			return false, nil
		}
	}

	switch {
	case vsvc == nil || !translate.SyncsService(vsvc):
		return r.virtualGone(ctx, ns, name, hsvc)
	case hsvc != nil && hsvc.Annotations[translate.AnnotationUID] != string(vsvc.UID):
		// A new Service under the same name: its ClusterIP may differ, and
		// a host ClusterIP cannot change, so the old copy goes first.
		return true, r.deleteService(ctx, ns, name, hsvc)
	}
	hsvc, err = r.applyService(ctx, vsvc, hsvc)
	if err == nil && hsvc != nil {
		err = r.syncSlices(ctx, ns, name, hsvc)
	}
	r.refused(ctx, vsvc, err)
	if err != nil || hsvc == nil {
		return hsvc == nil, err
	}
	r.checkRouted(ctx, vsvc, hsvc)
	r.serveNodePorts(ctx, vsvc, hsvc)
	r.sayNotExposed(ctx, vsvc)
	return false, nil
}

// sayNotExposed says on a NodePort or LoadBalancer Service, once per type,
// that the host does not expose it: the type is kept in the virtual
// cluster, where a tenant reads it as a promise of an address reachable from
// outside, and a LoadBalancer's stays pending for good. Said rather than
// refused: the node ports work for the virtual cluster's own pods.
func (r *run) sayNotExposed(ctx context.Context, vsvc *corev1.Service) {
	var message string
	switch vsvc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		message = "the host does not expose a virtual cluster's node ports outside it: they are served at the virtual node's address to this cluster's own pods only"
	case corev1.ServiceTypeLoadBalancer:
		message = "no load balancer is provided for a virtual cluster's Services, so this Service gets no external address: reach it inside the cluster at its ClusterIP or node ports (served to this cluster's own pods at the virtual node's address), or from outside through an Ingress where the Cluster allows them"
	default:
		r.inside.Forget(vsvc.Namespace + "/" + vsvc.Name)
		return
	}
	r.warnOnce(ctx, &r.inside, vsvc, translate.ReasonNotExposedOnHost, message)
}

// serveNodePorts relays the Service's node ports to its host copy, and says
// on the Service, once, which could not be opened.
func (r *run) serveNodePorts(ctx context.Context, vsvc, hsvc *corev1.Service) {
	if r.cfg.NodePorts == nil {
		return
	}
	key := vsvc.Namespace + "/" + vsvc.Name
	err := r.cfg.NodePorts.Set(key, nodeport.Targets(vsvc, hsvc.Spec.ClusterIP))
	if err == nil {
		r.unserved.Forget(key)
		return
	}
	message := "the node's address does not serve this Service's node port: " + err.Error()
	r.warnOnce(ctx, &r.unserved, vsvc, translate.ReasonNodePortNotServed, message)
}

// checkRouted says on the virtual Service, once, when its ClusterIP is not its
// host copy's: a workload connecting to that address reaches nothing (or, on
// a host whose Service network is another, whatever the host routes there).
// Recreating the Service may give it a free address; a Cluster whose
// spec.serviceCIDR is not the host's network gets this for every Service.
func (r *run) checkRouted(ctx context.Context, vsvc, hsvc *corev1.Service) {
	key := vsvc.Namespace + "/" + vsvc.Name
	virtualIP, hostIP := vsvc.Spec.ClusterIP, hsvc.Spec.ClusterIP
	if virtualIP == "" || virtualIP == corev1.ClusterIPNone || virtualIP == hostIP {
		r.unrouted.Forget(key)
		return
	}
	message := fmt.Sprintf("ClusterIP %s does not route: the host could not give this Service's copy that address (taken on the host, or outside the host's Service network) and gave it %s; "+
		"the Service's DNS name and environment variables lead there. Recreate the Service to get another address", virtualIP, hostIP)
	r.warnOnce(ctx, &r.unrouted, vsvc, translate.ReasonClusterIPNotRouted, message)
}

// warnOnce records a Warning Event on vsvc unless said already holds
// message for this Service.
func (r *run) warnOnce(ctx context.Context, said *syncloop.Said, vsvc *corev1.Service, reason, message string) {
	if !said.First(vsvc.Namespace+"/"+vsvc.Name, vsvc.UID, message) {
		return
	}
	syncloop.Warning{
		Object: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Service", Namespace: vsvc.Namespace, Name: vsvc.Name, UID: vsvc.UID, ResourceVersion: vsvc.ResourceVersion,
		},
		Component: "k3k-kubelet", Node: r.tr.Config().NodeName,
		Reason: reason, Message: message, At: time.Now(),
	}.Record(ctx, r.virtual)
}

// refused says on the virtual Service, once per message, when the host
// refused a copy it needs (its Service, or an EndpointSlice: the
// namespace's ResourceQuota on services or EndpointSlices is full, an
// admission policy), and forgets it once the copies are written. The tenant
// cannot see the host's answer otherwise; the copy is retried either way.
func (r *run) refused(ctx context.Context, vsvc *corev1.Service, err error) {
	key := vsvc.Namespace + "/" + vsvc.Name
	if err == nil {
		r.said.Forget(key)
		return
	}
	if !apierrors.IsForbidden(err) {
		return
	}
	message := "the host refused a copy this Service needs (it is retried): " + err.Error()
	r.warnOnce(ctx, &r.said, vsvc, translate.ReasonCopyForbidden, message)
}

// virtualGone deletes the host copies of a virtual Service that is gone or no
// longer synced, once the virtual API server itself says so.
func (r *run) virtualGone(ctx context.Context, ns, name string, hsvc *corev1.Service) (bool, error) {
	r.said.Forget(ns + "/" + name)
	r.unrouted.Forget(ns + "/" + name)
	r.unserved.Forget(ns + "/" + name)
	r.inside.Forget(ns + "/" + name)
	if r.cfg.NodePorts != nil {
		_ = r.cfg.NodePorts.Set(ns+"/"+name, nil) // closing never fails
	}
	if hsvc == nil {
		return false, r.deleteSlices(ctx, ns, name, nil)
	}
	live, err := r.virtual.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && translate.SyncsService(live) && string(live.UID) == hsvc.Annotations[translate.AnnotationUID]:
		return true, nil // our cache lags behind
	case err == nil, apierrors.IsNotFound(err):
	default:
		return false, fmt.Errorf("confirming virtual Service is gone: %w", err)
	}
	return false, r.deleteService(ctx, ns, name, hsvc)
}

// deleteService deletes a host Service and its slices. The host's garbage
// collector would remove the slices through their owner reference too; doing
// it here keeps them from outliving the Service where it is slow or absent.
func (r *run) deleteService(ctx context.Context, ns, name string, hsvc *corev1.Service) error {
	if err := r.deleteSlices(ctx, ns, name, nil); err != nil {
		return err
	}
	err := r.cfg.Host.CoreV1().Services(hsvc.Namespace).Delete(ctx, hsvc.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &hsvc.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting host Service: %w", err)
	}
	return nil
}

// applyService creates the host Service or updates what the agent owns of it
// when the desired hash changed. It returns the host Service, or nil when the
// host cache has yet to see one that exists.
func (r *run) applyService(ctx context.Context, vsvc, hsvc *corev1.Service) (*corev1.Service, error) {
	desired := r.tr.HostService(vsvc)
	c := r.cfg.Host.CoreV1().Services(desired.Namespace)
	if hsvc == nil {
		created, err := c.Create(ctx, desired, metav1.CreateOptions{})
		if apierrors.IsInvalid(err) && desired.Spec.ClusterIP != "" && desired.Spec.ClusterIP != corev1.ClusterIPNone {
			// The virtual ClusterIP is taken on the host or outside its
			// range: the host allocates one, reachable by the host name only.
			logr.FromContextOrDiscard(ctx).V(1).Info("virtual ClusterIP not available on the host; the host allocates one",
				"service", vsvc.Namespace+"/"+vsvc.Name, "clusterIP", desired.Spec.ClusterIP)
			created, err = c.Create(ctx, translate.WithoutClusterIP(desired), metav1.CreateOptions{})
		}
		if apierrors.IsAlreadyExists(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("creating host Service: %w", err)
		}
		return created, nil
	}
	if hsvc.Annotations[translate.AnnotationHash] == desired.Annotations[translate.AnnotationHash] {
		return hsvc, nil
	}
	// ClusterIPs and IP families are immutable and stay as allocated.
	u := hsvc.DeepCopy()
	u.Labels, u.Annotations, u.OwnerReferences = desired.Labels, desired.Annotations, desired.OwnerReferences
	u.Spec.Type = desired.Spec.Type
	u.Spec.Selector = nil
	u.Spec.Ports = desired.Spec.Ports
	u.Spec.PublishNotReadyAddresses = desired.Spec.PublishNotReadyAddresses
	u.Spec.SessionAffinity = desired.Spec.SessionAffinity
	u.Spec.SessionAffinityConfig = desired.Spec.SessionAffinityConfig
	updated, err := c.Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("updating host Service: %w", err)
	}
	return updated, nil
}

// syncSlices writes one host EndpointSlice per virtual EndpointSlice of the
// virtual Service and deletes host slices that no longer have one.
func (r *run) syncSlices(ctx context.Context, ns, name string, hsvc *corev1.Service) error {
	virtual, err := r.vSlices.EndpointSlices(ns).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name}))
	if err != nil {
		return err
	}
	hostNS := r.tr.Config().HostNamespace
	pods := translate.HostPods{
		ByName: func(podNS, podName string) *corev1.Pod {
			p, err := r.hPods.Pods(hostNS).Get(r.tr.HostName(translate.KindPod, podNS, podName))
			if err != nil {
				return nil
			}
			return p
		},
		ByIP: func(ip string) *corev1.Pod {
			// One address is one running pod's at a time; a finished pod
			// may still list it.
			found, _ := r.hPodsByIP.ByIndex(ipIndex, ip)
			var finished *corev1.Pod
			for _, o := range found {
				p, ok := o.(*corev1.Pod)
				switch {
				case !ok:
				case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
					finished = p
				default:
					return p
				}
			}
			return finished // the translator drops it
		},
	}
	keep := map[string]bool{}
	for _, v := range virtual {
		desired := r.tr.HostEndpointSlice(v, name, hsvc, pods)
		keep[desired.Name] = true
		if err := r.applySlice(ctx, desired); err != nil {
			return err
		}
	}
	return r.deleteSlices(ctx, ns, name, keep)
}

// applySlice creates or updates one host EndpointSlice when its hash differs.
func (r *run) applySlice(ctx context.Context, desired *discoveryv1.EndpointSlice) error {
	c := r.cfg.Host.DiscoveryV1().EndpointSlices(desired.Namespace)
	live, err := r.hSlices.EndpointSlices(desired.Namespace).Get(desired.Name)
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Create(ctx, desired, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating host EndpointSlice: %w", err)
		}
		return nil
	case err != nil:
		return err
	case live.Annotations[translate.AnnotationHash] == desired.Annotations[translate.AnnotationHash]:
		return nil
	case live.AddressType != desired.AddressType:
		// The address type is immutable: a virtual slice replaced under the
		// same name with another family replaces the host slice.
		if err := c.Delete(ctx, live.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &live.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing host EndpointSlice: %w", err)
		}
		return nil // the deletion event brings the key back
	}
	u := live.DeepCopy()
	u.Labels, u.Annotations, u.OwnerReferences = desired.Labels, desired.Annotations, desired.OwnerReferences
	u.Endpoints, u.Ports = desired.Endpoints, desired.Ports
	if _, err := c.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating host EndpointSlice: %w", err)
	}
	return nil
}

// deleteSlices deletes the host slices of virtual Service ns/name whose names
// are not in keep.
func (r *run) deleteSlices(ctx context.Context, ns, name string, keep map[string]bool) error {
	hostNS := r.tr.Config().HostNamespace
	sel := labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName:    r.tr.HostName(translate.KindService, ns, name),
		translate.LabelVirtualNamespace: ns,
	})
	live, err := r.hSlices.EndpointSlices(hostNS).List(sel)
	if err != nil {
		return err
	}
	for _, s := range live {
		k, ok := r.tr.VirtualKeyOf(s)
		if !ok || k.Kind != translate.KindEndpointSlice || keep[s.Name] || s.DeletionTimestamp != nil {
			continue
		}
		err := r.cfg.Host.DiscoveryV1().EndpointSlices(hostNS).Delete(ctx, s.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &s.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting host EndpointSlice: %w", err)
		}
	}
	return nil
}
