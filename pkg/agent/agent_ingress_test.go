package agent_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/ingresssync"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

func ingress(ns, name string, mutate ...func(*networkingv1.Ingress)) *networkingv1.Ingress {
	prefix := networkingv1.PathTypePrefix
	i := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptr.To(virtualIngressClass),
			TLS:              []networkingv1.IngressTLS{{Hosts: []string{"shop.example.com"}, SecretName: "shop-tls"}},
			Rules: []networkingv1.IngressRule{{
				Host: "shop.example.com",
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &prefix,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}},
				}}}},
			}},
		},
	}
	for _, m := range mutate {
		m(i)
	}
	return i
}

// TestAgentIngress: with the Cluster's switch on (main_test.go), a virtual
// Ingress becomes a host Ingress of the mapped class routing to the host copy
// of the virtual Service, with its TLS Secret copied and owned by it and no
// annotation of the tenant's; the host's load balancer address shows on the
// virtual Ingress; a changed certificate follows; steady state writes
// nothing; Ingresses with an unmapped class or a resource backend get a
// Warning Event and no host copy; deleting the virtual Ingress deletes the
// host one. envtest has no ingress controller: the test writes the host
// Ingress's status as one would. The end-to-end host cluster has no ingress
// controller either, so this is the highest level Ingresses are tested at.
func TestAgentIngress(t *testing.T) {
	c := ctx(t)
	const ns = "ing"
	virtualNamespace(t, ns)
	if _, err := virtAdmin.CoreV1().Services(ns).Create(c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tls := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shop-tls", Namespace: ns}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("cert-1"), "tls.key": []byte("key-1")}}
	if _, err := virtAdmin.CoreV1().Secrets(ns).Create(c, tls, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := virtAdmin.NetworkingV1().Ingresses(ns).Create(c, ingress(ns, "shop", func(i *networkingv1.Ingress) {
		i.Annotations = map[string]string{"nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers \"X: y\";"}
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	hostSvc := tr.HostName(translate.KindService, ns, "web")
	hostName := tr.HostName(translate.KindIngress, ns, "shop")
	var h *networkingv1.Ingress
	eventually(t, "host Ingress", func() (err error) {
		h, err = hostAdmin.NetworkingV1().Ingresses(hostNamespace).Get(c, hostName, metav1.GetOptions{})
		return err
	})
	if ptr.Deref(h.Spec.IngressClassName, "") != hostIngressClass {
		t.Errorf("host class %v, want %s", h.Spec.IngressClassName, hostIngressClass)
	}
	if b := h.Spec.Rules[0].HTTP.Paths[0].Backend.Service; b == nil || b.Name != hostSvc || b.Port.Name != "http" {
		t.Errorf("host backend %+v, want the host Service copy %s", b, hostSvc)
	}
	for k := range h.Annotations {
		if !strings.HasPrefix(k, "k3k.io/") {
			t.Errorf("annotation %q reached the host Ingress", k)
		}
	}
	eventually(t, "the host Service the Ingress routes to", func() error {
		_, err := hostAdmin.CoreV1().Services(hostNamespace).Get(c, hostSvc, metav1.GetOptions{})
		return err
	})
	secretName := h.Spec.TLS[0].SecretName
	if secretName != tr.HostName(translate.KindIngressTLS, ns, "shop-tls") {
		t.Errorf("TLS secret %s", secretName)
	}
	checkSecret := func(want string) {
		t.Helper()
		eventually(t, "host TLS Secret with "+want, func() error {
			s, err := hostAdmin.CoreV1().Secrets(hostNamespace).Get(c, secretName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if string(s.Data["tls.crt"]) != want || s.Type != corev1.SecretTypeTLS {
				return fmt.Errorf("type %s crt %q", s.Type, s.Data["tls.crt"])
			}
			if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != h.UID {
				return fmt.Errorf("owners %v, want the host Ingress", s.OwnerReferences)
			}
			return nil
		})
	}
	checkSecret("cert-1")

	// The host's ingress controller publishes its address.
	h.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "192.0.2.10"}}
	if _, err := hostAdmin.NetworkingV1().Ingresses(hostNamespace).UpdateStatus(c, h, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the host address on the virtual Ingress", func() error {
		v, err := virtAdmin.NetworkingV1().Ingresses(ns).Get(c, "shop", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(v.Status.LoadBalancer.Ingress) != 1 || v.Status.LoadBalancer.Ingress[0].IP != "192.0.2.10" {
			return fmt.Errorf("status %+v", v.Status)
		}
		return nil
	})

	tls.Data["tls.crt"] = []byte("cert-2")
	if _, err := virtAdmin.CoreV1().Secrets(ns).Update(c, tls, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkSecret("cert-2")
	expectQuietResyncs(t, theAgent.IngressReconciled, ns+"/shop")

	refused := []struct{ name, want string }{
		{"unmapped", `ingress class "internal-admin" is not one the host administrator mapped`},
		{"resource", "spec.defaultBackend.resource"},
		{"bank", `spec.rules[0].host "bank.example.com" is not a hostname this cluster may claim`},
		{"catchall", "spec.defaultBackend: a default backend would answer for every hostname"},
	}
	// Another tenant's (or the host's own) site, and a default backend
	// that takes every name nobody claimed: both are an attacker's first
	// moves against a shared ingress controller.
	if _, err := virtAdmin.NetworkingV1().Ingresses(ns).Create(c, ingress(ns, "bank", func(i *networkingv1.Ingress) {
		i.Spec.Rules[0].Host = "bank.example.com"
		i.Spec.TLS = nil
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := virtAdmin.NetworkingV1().Ingresses(ns).Create(c, ingress(ns, "catchall", func(i *networkingv1.Ingress) {
		i.Spec.DefaultBackend = &i.Spec.Rules[0].HTTP.Paths[0].Backend
		i.Spec.Rules = nil
		i.Spec.TLS = nil
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := virtAdmin.NetworkingV1().Ingresses(ns).Create(c, ingress(ns, "unmapped", func(i *networkingv1.Ingress) {
		i.Spec.IngressClassName = ptr.To("internal-admin")
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := virtAdmin.NetworkingV1().Ingresses(ns).Create(c, ingress(ns, "resource", func(i *networkingv1.Ingress) {
		i.Spec.Rules = nil
		i.Spec.DefaultBackend = &networkingv1.IngressBackend{Resource: &corev1.TypedLocalObjectReference{Kind: "Secret", Name: "k3k-c1-token"}}
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			eventually(t, "a Warning Event on Ingress "+r.name, func() error {
				evs, err := virtAdmin.CoreV1().Events(ns).List(c, metav1.ListOptions{FieldSelector: "involvedObject.name=" + r.name + ",involvedObject.kind=Ingress"})
				if err != nil {
					return err
				}
				for _, e := range evs.Items {
					if e.Type == corev1.EventTypeWarning && e.Reason == ingresssync.ReasonUnsupported && strings.Contains(e.Message, r.want) {
						return nil
					}
				}
				return fmt.Errorf("events %v", evs.Items)
			})
			waitPasses(t, theAgent.IngressReconciled, ns+"/"+r.name, 2)
			if _, err := hostAdmin.NetworkingV1().Ingresses(hostNamespace).Get(c, tr.HostName(translate.KindIngress, ns, r.name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("host Ingress: %v, want NotFound", err)
			}
		})
	}

	if err := virtAdmin.NetworkingV1().Ingresses(ns).Delete(c, "shop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "host Ingress", func() error {
		_, err := hostAdmin.NetworkingV1().Ingresses(hostNamespace).Get(c, hostName, metav1.GetOptions{})
		return err
	})
}
