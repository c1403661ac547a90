package agent_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// These tests run before agent_test.go's (file order) and leave their host
// Services in place, so the later steady-state test also proves that synced
// Services cause no writes. Envtest runs no controller-manager, so the tests
// write the virtual EndpointSlices as the virtual EndpointSlice controller
// would: from the Service's selector and the pods' status.

// runningPod makes a virtual pod, lets the host "kubelet" run its host pod
// with ip, and waits until the virtual pod reports it.
func runningPod(t *testing.T, ns, name, ip string) *corev1.Pod {
	t.Helper()
	createVirtual(t, boundPod(ns, name, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "web"} }))
	hp := waitHostPod(t, ns, name)
	hostKubeletRuns(t, hp.Name, func(s *corev1.PodStatus) { s.PodIP, s.PodIPs = ip, []corev1.PodIP{{IP: ip}} })
	return waitVirtualPhase(t, ns, name, corev1.PodRunning, func(p *corev1.Pod) error {
		if p.Status.PodIP != ip {
			return fmt.Errorf("pod IP %q", p.Status.PodIP)
		}
		return nil
	})
}

// createVirtualService writes a virtual Service and the EndpointSlice the
// virtual EndpointSlice controller would write for it.
func createVirtualService(t *testing.T, svc *corev1.Service, slice *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := virtAdmin.CoreV1().Services(svc.Namespace).Create(ctx(t), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := virtAdmin.DiscoveryV1().EndpointSlices(slice.Namespace).Create(ctx(t), slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// virtualSlice is the EndpointSlice the virtual EndpointSlice controller
// would write for Service svc and pods.
func virtualSlice(ns, name, svc string, pods ...*corev1.Pod) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{p.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(nodeName),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, UID: p.UID},
		})
	}
	return s
}

func webService(ns, name, clusterIP string, typ corev1.ServiceType) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type: typ, ClusterIP: clusterIP, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
}

func hostServiceName(ns, name string) string { return tr.HostName(translate.KindService, ns, name) }
func hostSliceName(ns, name string) string   { return tr.HostName(translate.KindEndpointSlice, ns, name) }

func waitHostService(t *testing.T, ns, name string, check func(*corev1.Service) error) *corev1.Service {
	t.Helper()
	var s *corev1.Service
	eventually(t, "host Service for "+ns+"/"+name, func() (err error) {
		if s, err = hostAdmin.CoreV1().Services(hostNamespace).Get(ctx(t), hostServiceName(ns, name), metav1.GetOptions{}); err != nil {
			return err
		}
		if check != nil {
			return check(s)
		}
		return nil
	})
	return s
}

// waitHostEndpoints waits until the host slice of virtual slice ns/slice
// lists exactly the host pods of pods, with their host IPs.
func waitHostEndpoints(t *testing.T, ns, slice string, pods ...*corev1.Pod) *discoveryv1.EndpointSlice {
	t.Helper()
	var got *discoveryv1.EndpointSlice
	eventually(t, "host EndpointSlice for "+ns+"/"+slice, func() (err error) {
		if got, err = hostAdmin.DiscoveryV1().EndpointSlices(hostNamespace).Get(ctx(t), hostSliceName(ns, slice), metav1.GetOptions{}); err != nil {
			return err
		}
		var want, have []string
		for _, p := range pods {
			want = append(want, hostPodName(ns, p.Name)+"="+p.Status.PodIP)
		}
		for _, e := range got.Endpoints {
			if e.TargetRef == nil || len(e.Addresses) != 1 {
				return fmt.Errorf("endpoint %+v", e)
			}
			have = append(have, e.TargetRef.Name+"="+e.Addresses[0])
		}
		if diff := cmp.Diff(want, have); diff != "" {
			return fmt.Errorf("endpoints (-want +got):\n%s", diff)
		}
		return nil
	})
	return got
}

func TestServiceSyncedToTheHost(t *testing.T) {
	c := ctx(t)
	const ns = "svc"
	virtualNamespace(t, ns)
	web0 := runningPod(t, ns, "web-0", "10.244.2.10")
	web1 := runningPod(t, ns, "web-1", "10.244.2.11")

	// A NodePort Service with a ClusterIP that is free on the host: the host
	// copy has the same ClusterIP, no selector, no node port. The addresses
	// named here are in the static band of the API servers' 10.0.0.0/24
	// (.1 to .16), which dynamic allocation leaves alone while the rest has
	// room: in the dynamic band, another test's Service took 10.0.0.50 first
	// in a warm CI run.
	createVirtualService(t, webService(ns, "web", "10.0.0.13", corev1.ServiceTypeNodePort), virtualSlice(ns, "web-a", "web", web0, web1))
	hs := waitHostService(t, ns, "web", nil)
	if hs.Spec.ClusterIP != "10.0.0.13" || hs.Spec.Type != corev1.ServiceTypeClusterIP || hs.Spec.Selector != nil {
		t.Errorf("host Service: clusterIP %s type %s selector %v; want the virtual ClusterIP, ClusterIP, no selector", hs.Spec.ClusterIP, hs.Spec.Type, hs.Spec.Selector)
	}
	if len(hs.Spec.Ports) != 1 || hs.Spec.Ports[0].Port != 80 || hs.Spec.Ports[0].TargetPort != intstr.FromString("http") || hs.Spec.Ports[0].NodePort != 0 {
		t.Errorf("host Service ports %+v", hs.Spec.Ports)
	}
	if k, ok := tr.VirtualKeyOf(hs); !ok || k.Kind != translate.KindService || k.Namespace != ns || k.Name != "web" {
		t.Errorf("host Service does not point back: %+v %v", k, ok)
	}
	if len(hs.OwnerReferences) != 1 || hs.OwnerReferences[0].Kind != "Cluster" {
		t.Errorf("host Service owners %v, want the Cluster", hs.OwnerReferences)
	}
	slice := waitHostEndpoints(t, ns, "web-a", web0, web1)
	if slice.Labels[discoveryv1.LabelServiceName] != hs.Name || slice.Labels[discoveryv1.LabelManagedBy] != translate.EndpointSliceManagedBy {
		t.Errorf("host slice labels %v", slice.Labels)
	}
	if len(slice.OwnerReferences) != 1 || slice.OwnerReferences[0].UID != hs.UID {
		t.Errorf("host slice owners %v, want the host Service", slice.OwnerReferences)
	}

	// A ClusterIP taken on the host: the host allocates another one.
	taken, err := hostAdmin.CoreV1().Services(metav1.NamespaceDefault).Create(c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "squatter"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.0.0.14", Ports: []corev1.ServicePort{{Port: 1}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := virtAdmin.CoreV1().Services(ns).Create(c, webService(ns, "api", taken.Spec.ClusterIP, corev1.ServiceTypeClusterIP), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	api := waitHostService(t, ns, "api", func(s *corev1.Service) error {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == taken.Spec.ClusterIP {
			return fmt.Errorf("clusterIP %q", s.Spec.ClusterIP)
		}
		return nil
	})
	// The tenant is told its ClusterIP does not route, and where its copy
	// is; once, however often the Service is reconciled.
	notRouted := func(e corev1.Event) bool {
		return e.Type == corev1.EventTypeWarning && e.Reason == translate.ReasonClusterIPNotRouted &&
			strings.Contains(e.Message, "ClusterIP "+taken.Spec.ClusterIP+" does not route") && strings.Contains(e.Message, "gave it "+api.Spec.ClusterIP+";")
	}
	eventually(t, "a ClusterIPNotRouted Event on the Service", func() error {
		if n, err := countVirtualEvents(c, ns, "api", notRouted); err != nil || n != 1 {
			return fmt.Errorf("%d Events (%v)", n, err)
		}
		return nil
	})
	if n, err := countVirtualEvents(c, ns, "web", func(e corev1.Event) bool { return e.Reason == translate.ReasonClusterIPNotRouted }); err != nil || n != 0 {
		t.Errorf("%d ClusterIPNotRouted Events on a Service whose copy has its ClusterIP (%v)", n, err)
	}
	// The NodePort Service is told, once, that the host does not expose
	// it; the ClusterIP one is not.
	notExposed := func(e corev1.Event) bool {
		return e.Type == corev1.EventTypeWarning && e.Reason == translate.ReasonNotExposedOnHost && strings.Contains(e.Message, "node ports")
	}
	eventually(t, "a NotExposedOnHost Event on the NodePort Service", func() error {
		if n, err := countVirtualEvents(c, ns, "web", notExposed); err != nil || n != 1 {
			return fmt.Errorf("%d Events (%v)", n, err)
		}
		return nil
	})
	if n, err := countVirtualEvents(c, ns, "api", func(e corev1.Event) bool { return e.Reason == translate.ReasonNotExposedOnHost }); err != nil || n != 0 {
		t.Errorf("%d NotExposedOnHost Events on a ClusterIP Service (%v)", n, err)
	}

	// Not synced: ExternalName, and the virtual API's own Service.
	if _, err := virtAdmin.CoreV1().Services(ns).Create(c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "external"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A hand-written endpoint that names no pod of the agent is not copied;
	// one without a targetRef at the address of a pod the agent runs is, as
	// that pod's (a Service without selector, endpoints written by hand).
	rogue := virtualSlice(ns, "web-b", "web", web0)
	rogue.Endpoints = append(rogue.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}}, discoveryv1.Endpoint{Addresses: []string{web1.Status.PodIP}})
	if _, err := virtAdmin.DiscoveryV1().EndpointSlices(ns).Create(c, rogue, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHostEndpoints(t, ns, "web-b", web0, web1)

	// Updates follow: a new port, an endpoint removed.
	eventually(t, "port added to the virtual Service", func() error {
		v, err := virtAdmin.CoreV1().Services(ns).Get(c, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		v.Spec.Ports = append(v.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP})
		_, err = virtAdmin.CoreV1().Services(ns).Update(c, v, metav1.UpdateOptions{})
		return err
	})
	waitHostService(t, ns, "web", func(s *corev1.Service) error {
		if len(s.Spec.Ports) != 2 || s.Spec.Ports[1].Port != 9090 {
			return fmt.Errorf("ports %+v", s.Spec.Ports)
		}
		if s.UID != hs.UID || s.Spec.ClusterIP != hs.Spec.ClusterIP {
			return errors.New("the host Service was replaced rather than updated")
		}
		return nil
	})
	eventually(t, "endpoint removed from the virtual slice", func() error {
		v, err := virtAdmin.DiscoveryV1().EndpointSlices(ns).Get(c, "web-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		v.Endpoints = v.Endpoints[:1]
		_, err = virtAdmin.DiscoveryV1().EndpointSlices(ns).Update(c, v, metav1.UpdateOptions{})
		return err
	})
	waitHostEndpoints(t, ns, "web-a", web0)

	// A host slice deleted behind the agent's back is written again.
	if err := hostAdmin.DiscoveryV1().EndpointSlices(hostNamespace).Delete(c, hostSliceName(ns, "web-b"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHostEndpoints(t, ns, "web-b", web0, web1)

	// The address-only endpoint follows its pod: a new IP is copied.
	hostKubeletRuns(t, hostPodName(ns, "web-1"), func(s *corev1.PodStatus) {
		s.PodIP, s.PodIPs = "10.244.2.21", []corev1.PodIP{{IP: "10.244.2.21"}}
	})
	eventually(t, "the hand-written endpoint following web-1's new address", func() error {
		v, err := virtAdmin.DiscoveryV1().EndpointSlices(ns).Get(c, "web-b", metav1.GetOptions{})
		if err != nil {
			return err
		}
		v.Endpoints[len(v.Endpoints)-1].Addresses = []string{"10.244.2.21"}
		_, err = virtAdmin.DiscoveryV1().EndpointSlices(ns).Update(c, v, metav1.UpdateOptions{})
		return err
	})
	web1.Status.PodIP = "10.244.2.21"
	waitHostEndpoints(t, ns, "web-b", web0, web1)

	// Deletion: a virtual slice, then the Service with its remaining slice.
	if err := virtAdmin.DiscoveryV1().EndpointSlices(ns).Delete(c, "web-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "host slice web-b", func() error {
		_, err := hostAdmin.DiscoveryV1().EndpointSlices(hostNamespace).Get(c, hostSliceName(ns, "web-b"), metav1.GetOptions{})
		return err
	})
	if err := virtAdmin.CoreV1().Services(ns).Delete(c, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "host Service api", func() error {
		_, err := hostAdmin.CoreV1().Services(hostNamespace).Get(c, hostServiceName(ns, "api"), metav1.GetOptions{})
		return err
	})
	if _, err := hostAdmin.CoreV1().Services(hostNamespace).Get(c, hostServiceName(ns, "external"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ExternalName Service synced: %v", err)
	}
	if _, err := hostAdmin.CoreV1().Services(hostNamespace).Get(c, hostServiceName("default", "kubernetes"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the virtual kubernetes Service synced: %v", err)
	}
	if err := virtAdmin.CoreV1().Services(ns).Delete(c, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "host Service web", func() error {
		_, err := hostAdmin.CoreV1().Services(hostNamespace).Get(c, hostServiceName(ns, "web"), metav1.GetOptions{})
		return err
	})
	waitGone(t, "host slice web-a", func() error {
		_, err := hostAdmin.DiscoveryV1().EndpointSlices(hostNamespace).Get(c, hostSliceName(ns, "web-a"), metav1.GetOptions{})
		return err
	})
}

// TestServiceSteadyStateWritesNothing lets a synced Service be reconciled
// again (resync) with nothing changed: no write may reach either API server,
// apart from the node's heartbeat.
func TestServiceSteadyStateWritesNothing(t *testing.T) {
	const ns = "svc-quiet"
	virtualNamespace(t, ns)
	app := runningPod(t, ns, "app", "10.244.3.10")
	createVirtualService(t, webService(ns, "app", "", corev1.ServiceTypeClusterIP), virtualSlice(ns, "app-a", "app", app))
	waitHostService(t, ns, "app", nil)
	waitHostEndpoints(t, ns, "app-a", app)
	expectQuietResyncs(t, theAgent.ServiceReconciled, ns+"/app")
}

// TestServiceSyncSurvivesVirtualAPIServerRestart stops the virtual apiserver
// and starts it again on the same datastore: host Services stay as they are
// meanwhile, and changes made after the restart are synced.
func TestServiceSyncSurvivesVirtualAPIServerRestart(t *testing.T) {
	c := ctx(t)
	const ns = "svc-restart"
	virtualNamespace(t, ns)
	db := runningPod(t, ns, "db", "10.244.4.10")
	createVirtualService(t, webService(ns, "db", "", corev1.ServiceTypeClusterIP), virtualSlice(ns, "db-a", "db", db))
	hs := waitHostService(t, ns, "db", nil)
	waitHostEndpoints(t, ns, "db-a", db)

	stopVirtual(t)
	restartVirtual(t, "virtual-services")
	eventually(t, "agent ready again", theAgent.Ready)

	if s, err := hostAdmin.CoreV1().Services(hostNamespace).Get(c, hs.Name, metav1.GetOptions{}); err != nil || s.UID != hs.UID {
		t.Fatalf("host Service replaced or deleted across the restart: %v", err)
	}
	// Changes after the restart are synced: a new Service, and a changed one.
	cache := runningPod(t, ns, "cache", "10.244.4.11")
	createVirtualService(t, webService(ns, "cache", "", corev1.ServiceTypeClusterIP), virtualSlice(ns, "cache-a", "cache", cache))
	waitHostService(t, ns, "cache", nil)
	waitHostEndpoints(t, ns, "cache-a", cache)
	eventually(t, "second endpoint added to db", func() error {
		v, err := virtAdmin.DiscoveryV1().EndpointSlices(ns).Get(c, "db-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		v.Endpoints = virtualSlice(ns, "db-a", "db", db, cache).Endpoints
		_, err = virtAdmin.DiscoveryV1().EndpointSlices(ns).Update(c, v, metav1.UpdateOptions{})
		return err
	})
	waitHostEndpoints(t, ns, "db-a", db, cache)
}

// TestPodsGetTheirNamespacesServiceVariables: a pod created right after a
// Service of its namespace gets that Service's variables at its host copy's
// address (the one the agent's DNS answers), in the kubelet's form, and none
// of another namespace's; a pod with enableServiceLinks false gets none.
func TestPodsGetTheirNamespacesServiceVariables(t *testing.T) {
	const ns, other = "links", "links-other"
	virtualNamespace(t, ns)
	virtualNamespace(t, other)
	createVirtualService(t, webService(ns, "redis-master", "", corev1.ServiceTypeClusterIP), virtualSlice(ns, "redis-master-x", "redis-master"))
	createVirtualService(t, webService(other, "elsewhere", "", corev1.ServiceTypeClusterIP), virtualSlice(other, "elsewhere-x", "elsewhere"))
	// At once, before the agent has copied the Service.
	createVirtual(t, boundPod(ns, "linked"))
	createVirtual(t, boundPod(ns, "unlinked", func(p *corev1.Pod) { p.Spec.EnableServiceLinks = ptr.To(false) }))

	hsvc := waitHostService(t, ns, "redis-master", func(s *corev1.Service) error {
		if s.Spec.ClusterIP == "" {
			return errors.New("no ClusterIP yet")
		}
		return nil
	})
	env := func(name string) map[string]string {
		out := map[string]string{}
		for _, e := range waitHostPod(t, ns, name).Spec.Containers[0].Env {
			out[e.Name] = e.Value
		}
		return out
	}
	linked := env("linked")
	ip := hsvc.Spec.ClusterIP
	for k, want := range map[string]string{
		"REDIS_MASTER_SERVICE_HOST":      ip,
		"REDIS_MASTER_SERVICE_PORT":      "80",
		"REDIS_MASTER_SERVICE_PORT_HTTP": "80",
		"REDIS_MASTER_PORT":              "tcp://" + ip + ":80",
		"REDIS_MASTER_PORT_80_TCP_ADDR":  ip,
	} {
		if got, ok := linked[k]; !ok || got != want {
			t.Errorf("linked pod: %s = %q (set %v), want %q", k, got, ok, want)
		}
	}
	if _, ok := linked["ELSEWHERE_SERVICE_HOST"]; ok {
		t.Error("linked pod got another namespace's Service")
	}
	for k := range env("unlinked") {
		if strings.HasPrefix(k, "REDIS_MASTER_") {
			t.Errorf("a pod with enableServiceLinks false got %s", k)
		}
	}
}
