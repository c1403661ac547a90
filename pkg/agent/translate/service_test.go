package translate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func virtualService(mutate ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "svc-uid", Labels: map[string]string{"app": "web"}},
		Spec: corev1.ServiceSpec{
			Type:            corev1.ServiceTypeClusterIP,
			Selector:        map[string]string{"app": "web"},
			ClusterIP:       "10.43.0.20",
			ClusterIPs:      []string{"10.43.0.20"},
			IPFamilies:      []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:  ptr.To(corev1.IPFamilyPolicySingleStack),
			SessionAffinity: corev1.ServiceAffinityNone,
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http"), NodePort: 30080,
			}},
		},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func TestSyncsService(t *testing.T) {
	cases := []struct {
		name string
		svc  *corev1.Service
		want bool
	}{
		{"a ClusterIP Service is synced", virtualService(), true},
		{"a headless Service is synced", virtualService(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }), true},
		{"a LoadBalancer Service is synced (as ClusterIP)", virtualService(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }), true},
		{"an ExternalName Service is left to the virtual DNS", virtualService(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }), false},
		{"the virtual API's own Service is not synced", virtualService(func(s *corev1.Service) { s.Namespace, s.Name = "default", "kubernetes" }), false},
		{"a Service named kubernetes elsewhere is synced", virtualService(func(s *corev1.Service) { s.Name = "kubernetes" }), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := SyncsService(tc.svc); got != tc.want {
				t.Errorf("SyncsService = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHostService(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "k3k.io/v1beta1", Kind: "Cluster", Name: "c1", UID: "cluster-uid"}
	tr := newTranslator(t, func(c *Config) { c.OwnerReferences = []metav1.OwnerReference{owner} })
	cases := []struct {
		name   string
		svc    *corev1.Service
		expect func(*corev1.ServiceSpec)
	}{
		{"a ClusterIP Service asks for the virtual ClusterIP and loses its selector", virtualService(), nil},
		{"a NodePort Service opens no host node port", virtualService(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), nil},
		{"a LoadBalancer Service gets no host load balancer", virtualService(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}), nil},
		{"a headless Service stays headless", virtualService(func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
			s.Spec.PublishNotReadyAddresses = true
		}), func(s *corev1.ServiceSpec) {
			s.ClusterIP, s.ClusterIPs = corev1.ClusterIPNone, nil
			s.IPFamilies, s.IPFamilyPolicy = nil, nil
			s.PublishNotReadyAddresses = true
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tr.HostService(tc.svc)
			want := corev1.ServiceSpec{
				Type:            corev1.ServiceTypeClusterIP,
				ClusterIP:       "10.43.0.20",
				ClusterIPs:      []string{"10.43.0.20"},
				IPFamilies:      []corev1.IPFamily{corev1.IPv4Protocol},
				IPFamilyPolicy:  ptr.To(corev1.IPFamilyPolicySingleStack),
				SessionAffinity: corev1.ServiceAffinityNone,
				Ports:           []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http")}},
			}
			if tc.expect != nil {
				tc.expect(&want)
			}
			if diff := cmp.Diff(want, got.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
			if got.Name != tr.HostName(KindService, "shop", "web") || got.Namespace != "tenant" {
				t.Errorf("host Service %s/%s", got.Namespace, got.Name)
			}
			if k, ok := tr.VirtualKeyOf(got); !ok || k != (VirtualKey{Kind: KindService, Namespace: "shop", Name: "web", UID: "svc-uid"}) {
				t.Errorf("does not point back at the virtual Service: %+v %v", k, ok)
			}
			if got.Labels["app"] != "" {
				t.Errorf("user labels copied: %v", got.Labels)
			}
			if diff := cmp.Diff([]metav1.OwnerReference{owner}, got.OwnerReferences); diff != "" {
				t.Errorf("owners (-want +got):\n%s", diff)
			}
			if got.Annotations[AnnotationHash] == "" {
				t.Error("no hash annotation")
			}
		})
	}
}

func TestHostServiceHashFollowsChanges(t *testing.T) {
	tr := newTranslator(t)
	base := tr.HostService(virtualService()).Annotations[AnnotationHash]
	if again := tr.HostService(virtualService()).Annotations[AnnotationHash]; again != base {
		t.Errorf("the same Service hashes differently: %s, %s", base, again)
	}
	changed := tr.HostService(virtualService(func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 })).Annotations[AnnotationHash]
	if changed == base {
		t.Error("a port change does not change the hash")
	}
	fallback := WithoutClusterIP(tr.HostService(virtualService()))
	if fallback.Spec.ClusterIP != "" || fallback.Spec.ClusterIPs != nil || fallback.Annotations[AnnotationHash] != base {
		t.Errorf("fallback: clusterIP %q %v hash %s, want none and the hash of the desired Service", fallback.Spec.ClusterIP, fallback.Spec.ClusterIPs, fallback.Annotations[AnnotationHash])
	}
	headless := tr.HostService(virtualService(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }))
	if WithoutClusterIP(headless).Spec.ClusterIP != corev1.ClusterIPNone {
		t.Error("the fallback made a headless Service a ClusterIP Service")
	}
}

func TestHostEndpointSlice(t *testing.T) {
	tr := newTranslator(t)
	other := newTranslator(t, func(c *Config) { c.ClusterName = "c2" })
	hostPod := func(tr *Translator, ns, name, uid string, ips ...string) *corev1.Pod {
		hp, err := tr.HostPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("virtual-" + uid)}})
		if err != nil {
			t.Fatal(err)
		}
		hp.UID = types.UID("host-" + uid)
		hp.Spec.NodeName = "host-node-1"
		for _, ip := range ips {
			hp.Status.PodIPs = append(hp.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return hp
	}
	pods := map[string]*corev1.Pod{
		"shop/web-0":  hostPod(tr, "shop", "web-0", "0", "10.244.1.7", "fd00::7"),
		"shop/web-1":  hostPod(tr, "shop", "web-1", "1", "10.244.1.8"),
		"shop/idle":   hostPod(tr, "shop", "idle", "2"),
		"shop/stolen": hostPod(other, "shop", "stolen", "3", "10.244.9.9"),
	}
	pods["shop/done"] = hostPod(tr, "shop", "done", "5", "10.244.1.60")
	pods["shop/done"].Status.Phase = corev1.PodSucceeded
	lookup := HostPods{
		ByName: func(ns, name string) *corev1.Pod { return pods[ns+"/"+name] },
		// As the agent's index would, were the other cluster's pod in it.
		ByIP: func(ip string) *corev1.Pod {
			for _, p := range pods {
				for _, pip := range p.Status.PodIPs {
					if pip.IP == ip {
						return p
					}
				}
			}
			return nil
		},
	}
	podRef := func(name, uid string) *corev1.ObjectReference {
		return &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: name, UID: types.UID("virtual-" + uid)}
	}
	ready := discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
	v := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-abcde", Namespace: "shop", UID: "slice-uid", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.7"}, Conditions: ready, Hostname: ptr.To("web-0"), NodeName: ptr.To("k3k-c1-kubelet"), Zone: ptr.To("virtual"), TargetRef: podRef("web-0", "0")},
			{Addresses: []string{"10.244.1.99"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}, TargetRef: podRef("web-1", "1")},
			{Addresses: []string{"192.168.0.1"}, Conditions: ready},
			{Addresses: []string{"10.244.1.50"}, Conditions: ready, TargetRef: podRef("gone", "4")},
			{Addresses: []string{"10.244.1.7"}, Conditions: ready, TargetRef: podRef("web-0", "old-incarnation")},
			{Addresses: []string{"10.244.9.9"}, Conditions: ready, TargetRef: podRef("stolen", "3")},
			{Addresses: []string{"10.244.1.9"}, Conditions: ready, TargetRef: podRef("idle", "2")},
			{Addresses: []string{"10.0.0.1"}, Conditions: ready, TargetRef: &corev1.ObjectReference{Kind: "Node", Name: "web-0"}},
			// Written by hand for a Service without selector: by address.
			{Addresses: []string{"10.244.1.8"}, Conditions: ready, Hostname: ptr.To("by-address")},
			{Addresses: []string{"10.244.9.9"}, Conditions: ready},
			{Addresses: []string{"10.244.1.60"}, Conditions: ready},
		},
	}
	hostSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: tr.HostName(KindService, "shop", "web"), UID: "host-svc-uid"}}
	got := tr.HostEndpointSlice(v, "web", hostSvc, lookup)

	want := []discoveryv1.Endpoint{
		{
			Addresses: []string{"10.244.1.7"}, Conditions: ready, Hostname: ptr.To("web-0"), NodeName: ptr.To("host-node-1"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "tenant", Name: pods["shop/web-0"].Name, UID: "host-0"},
		},
		{
			Addresses: []string{"10.244.1.8"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}, NodeName: ptr.To("host-node-1"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "tenant", Name: pods["shop/web-1"].Name, UID: "host-1"},
		},
		{
			Addresses: []string{"10.244.1.8"}, Conditions: ready, Hostname: ptr.To("by-address"), NodeName: ptr.To("host-node-1"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "tenant", Name: pods["shop/web-1"].Name, UID: "host-1"},
		},
	}
	t.Run("endpoints are the host pods of the virtual pods the agent runs, and nothing else", func(t *testing.T) {
		if diff := cmp.Diff(want, got.Endpoints); diff != "" {
			t.Errorf("endpoints (-want +got):\n%s", diff)
		}
	})
	t.Run("the slice belongs to the host Service and points back", func(t *testing.T) {
		if got.Name != tr.HostName(KindEndpointSlice, "shop", "web-abcde") || got.Namespace != "tenant" {
			t.Errorf("name %s/%s", got.Namespace, got.Name)
		}
		if got.Labels[discoveryv1.LabelServiceName] != hostSvc.Name || got.Labels[discoveryv1.LabelManagedBy] != EndpointSliceManagedBy {
			t.Errorf("labels %v", got.Labels)
		}
		if got.Annotations[AnnotationService] != "web" {
			t.Errorf("annotations %v", got.Annotations)
		}
		if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "host-svc-uid" || got.OwnerReferences[0].Kind != "Service" {
			t.Errorf("owners %v", got.OwnerReferences)
		}
		if k, ok := tr.VirtualKeyOf(got); !ok || k.Kind != KindEndpointSlice || k.Name != "web-abcde" {
			t.Errorf("virtual key %+v %v", k, ok)
		}
		if diff := cmp.Diff(v.Ports, got.Ports); diff != "" {
			t.Errorf("ports (-want +got):\n%s", diff)
		}
	})
	t.Run("an IPv6 slice takes the host pods' IPv6 addresses", func(t *testing.T) {
		v6 := v.DeepCopy()
		v6.AddressType = discoveryv1.AddressTypeIPv6
		got := tr.HostEndpointSlice(v6, "web", hostSvc, lookup)
		if len(got.Endpoints) != 1 || cmp.Diff([]string{"fd00::7"}, got.Endpoints[0].Addresses) != "" {
			t.Errorf("endpoints %+v", got.Endpoints)
		}
	})
	t.Run("a changed host pod IP changes the hash", func(t *testing.T) {
		before := got.Annotations[AnnotationHash]
		pods["shop/web-1"].Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.10"}}
		if after := tr.HostEndpointSlice(v, "web", hostSvc, lookup).Annotations[AnnotationHash]; after == before {
			t.Error("hash unchanged")
		}
	})
}
