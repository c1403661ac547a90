package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kinds of the host copies of Services and EndpointSlices.
const (
	KindService       Kind = "service"
	KindEndpointSlice Kind = "endpointslice"
)

// Markers on host Services and EndpointSlices.
const (
	// AnnotationService names the virtual Service a host EndpointSlice
	// belongs to (its virtual namespace is AnnotationNamespace).
	AnnotationService = "k3k.io/virtual-service"
	// AnnotationHash fingerprints the desired host object; the sync loop
	// writes only when it changes, so the host's defaulting never looks like
	// a difference.
	AnnotationHash = "k3k.io/desired-hash"
	// EndpointSliceManagedBy is the endpointslice.kubernetes.io/managed-by
	// value of host slices: the host's EndpointSlice controllers leave slices
	// of other managers alone.
	EndpointSliceManagedBy = "k3k-kubelet.k3k.io"
)

// SyncsService reports whether a virtual Service gets a host copy. Not
// synced: default/kubernetes, the virtual API itself, which the host reaches
// through the cluster's own Service k3k-<name>-service; and ExternalName
// Services, which are a DNS alias only the virtual DNS needs to answer and
// which some host ingress controllers would follow to any address.
func SyncsService(v *corev1.Service) bool {
	if v.Namespace == metav1.NamespaceDefault && v.Name == "kubernetes" {
		return false
	}
	return v.Spec.Type != corev1.ServiceTypeExternalName
}

// HostService is the host copy of a virtual Service: same ports, no selector
// (host pods do not carry the virtual pods' labels; the agent writes the
// EndpointSlices itself), always type ClusterIP. NodePort and LoadBalancer
// become ClusterIP because opening host node ports or host load balancers is
// the host administrator's decision, not a tenant's. A headless Service stays
// headless. Otherwise the host copy asks for the virtual ClusterIPs: when the
// virtual cluster's Service CIDR is the host's and the addresses are free on
// the host, the virtual ClusterIP then works from every host pod. The caller
// drops the request (WithoutClusterIP) when the host refuses it. The hash
// annotation and owner references are set here; callers compare the hash.
func (t *Translator) HostService(v *corev1.Service) *corev1.Service {
	h := &corev1.Service{
		ObjectMeta: t.hostMeta(KindService, v.Namespace, v.Name, string(v.UID)),
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			PublishNotReadyAddresses: v.Spec.PublishNotReadyAddresses,
			SessionAffinity:          v.Spec.SessionAffinity,
			SessionAffinityConfig:    v.Spec.SessionAffinityConfig.DeepCopy(),
		},
	}
	h.OwnerReferences = append([]metav1.OwnerReference(nil), t.cfg.OwnerReferences...)
	for _, p := range v.Spec.Ports {
		h.Spec.Ports = append(h.Spec.Ports, corev1.ServicePort{
			Name: p.Name, Protocol: p.Protocol, AppProtocol: p.AppProtocol, Port: p.Port, TargetPort: p.TargetPort,
		})
	}
	if v.Spec.ClusterIP == corev1.ClusterIPNone {
		h.Spec.ClusterIP = corev1.ClusterIPNone
	} else if v.Spec.ClusterIP != "" {
		h.Spec.ClusterIP = v.Spec.ClusterIP
		h.Spec.ClusterIPs = append([]string(nil), v.Spec.ClusterIPs...)
		h.Spec.IPFamilies = append([]corev1.IPFamily(nil), v.Spec.IPFamilies...)
		h.Spec.IPFamilyPolicy = v.Spec.IPFamilyPolicy
	}
	h.Annotations[AnnotationHash] = fingerprint(h.Labels, h.Annotations, h.OwnerReferences, h.Spec)
	return h
}

// WithoutClusterIP is desired without the request for the virtual
// ClusterIPs, for a host that refused them (taken, or outside its range): the
// host allocates its own. The hash stays that of desired, so the fallback is
// not mistaken for a change on the next pass.
func WithoutClusterIP(desired *corev1.Service) *corev1.Service {
	h := desired.DeepCopy()
	if h.Spec.ClusterIP == corev1.ClusterIPNone {
		return h
	}
	h.Spec.ClusterIP, h.Spec.ClusterIPs, h.Spec.IPFamilies, h.Spec.IPFamilyPolicy = "", nil, nil, nil
	return h
}

// HostPods finds the host pods the agent runs; each returns nil for none.
type HostPods struct {
	// ByName is the host pod of the virtual pod namespace/name.
	ByName func(namespace, name string) *corev1.Pod
	// ByIP is the host pod that has ip now, whichever virtual pod it runs.
	ByIP func(ip string) *corev1.Pod
}

// HostEndpointSlice is the host copy of a virtual EndpointSlice of the
// virtual Service service, for the host Service hostService (owner). Each
// endpoint is translated to a host pod the agent runs: through its targetRef
// (the virtual pod's host pod), or, for an endpoint without one (a slice
// written by hand for a Service without selector), through its address (the
// host pod that has it now). The addresses are that host pod's IPs of the
// slice's family. The virtual addresses are the same IPs (the agent mirrors
// host pod IPs back), but reading them from the host pod means a tenant
// cannot point a host Service at an arbitrary address by writing a virtual
// EndpointSlice by hand: endpoints that lead to no pod the agent runs are
// dropped. Zones and hints are dropped (they describe virtual topology);
// nodeName becomes the host node.
func (t *Translator) HostEndpointSlice(v *discoveryv1.EndpointSlice, service string, hostService *corev1.Service, pods HostPods) *discoveryv1.EndpointSlice {
	h := &discoveryv1.EndpointSlice{
		ObjectMeta:  t.hostMeta(KindEndpointSlice, v.Namespace, v.Name, string(v.UID)),
		AddressType: v.AddressType,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	h.Labels[discoveryv1.LabelServiceName] = hostService.Name
	h.Labels[discoveryv1.LabelManagedBy] = EndpointSliceManagedBy
	h.Annotations[AnnotationService] = service
	h.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: hostService.Name, UID: hostService.UID}}
	for _, p := range v.Ports {
		h.Ports = append(h.Ports, *p.DeepCopy())
	}
	for _, e := range v.Endpoints {
		if out, ok := t.hostEndpoint(v, e, pods); ok {
			h.Endpoints = append(h.Endpoints, out)
		}
	}
	h.Annotations[AnnotationHash] = fingerprint(h.Labels, h.Annotations, h.OwnerReferences, h.AddressType, h.Endpoints, h.Ports)
	return h
}

func (t *Translator) hostEndpoint(v *discoveryv1.EndpointSlice, e discoveryv1.Endpoint, pods HostPods) (discoveryv1.Endpoint, bool) {
	hp := t.endpointPod(v, e, pods)
	if hp == nil {
		return discoveryv1.Endpoint{}, false
	}
	var addrs []string
	for _, ip := range hp.Status.PodIPs {
		if familyOf(ip.IP) == v.AddressType {
			addrs = append(addrs, ip.IP)
		}
	}
	if len(addrs) == 0 {
		return discoveryv1.Endpoint{}, false
	}
	out := discoveryv1.Endpoint{
		Addresses:  addrs,
		Conditions: *e.Conditions.DeepCopy(),
		Hostname:   e.Hostname,
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: hp.Namespace, Name: hp.Name, UID: hp.UID},
	}
	if hp.Spec.NodeName != "" {
		out.NodeName = &hp.Spec.NodeName
	}
	return out, true
}

// endpointPod is the host pod the agent runs that endpoint e stands for, or
// nil: the targetRef's virtual pod (of that incarnation, when it names a
// UID), or without a targetRef the pod whose host pod has the endpoint's
// first address (the one consumers use) now. A targetRef to anything but a
// pod leads nowhere.
func (t *Translator) endpointPod(v *discoveryv1.EndpointSlice, e discoveryv1.Endpoint, pods HostPods) *corev1.Pod {
	ref := e.TargetRef
	if ref == nil {
		if len(e.Addresses) == 0 || pods.ByIP == nil {
			return nil
		}
		// A pod that has finished may still list an address the node has
		// given to another pod since, perhaps another tenant's.
		hp := pods.ByIP(e.Addresses[0])
		if hp == nil || hp.Status.Phase == corev1.PodSucceeded || hp.Status.Phase == corev1.PodFailed {
			return nil
		}
		if k, ok := t.VirtualKeyOf(hp); !ok || k.Kind != KindPod {
			return nil
		}
		return hp
	}
	if ref.Kind != "Pod" || (ref.APIVersion != "" && ref.APIVersion != "v1") {
		return nil
	}
	ns := ref.Namespace
	if ns == "" {
		ns = v.Namespace
	}
	hp := pods.ByName(ns, ref.Name)
	if hp == nil {
		return nil
	}
	k, ok := t.VirtualKeyOf(hp)
	if !ok || k.Kind != KindPod || k.Namespace != ns || k.Name != ref.Name || (ref.UID != "" && k.UID != string(ref.UID)) {
		return nil
	}
	return hp
}

// familyOf is the EndpointSlice address type of an IP literal.
func familyOf(ip string) discoveryv1.AddressType {
	for _, c := range ip {
		if c == ':' {
			return discoveryv1.AddressTypeIPv6
		}
	}
	return discoveryv1.AddressTypeIPv4
}

// fingerprint hashes what the agent decides about a host object. Marshalling
// cannot fail for these API types; a failure would yield the empty hash,
// which only causes one extra write.
func fingerprint(parts ...any) string {
	b, _ := json.Marshal(parts)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
