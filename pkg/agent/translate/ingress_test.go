package translate

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func tenantIngress() *networkingv1.Ingress {
	prefix := networkingv1.PathTypePrefix
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "shop", UID: "ing-uid",
			Labels: map[string]string{"app": "web"},
			// ingress-nginx runs snippets in the controller that serves every namespace.
			Annotations: map[string]string{"nginx.ingress.kubernetes.io/server-snippet": "location / { proxy_pass http://10.0.0.1; }"},
		},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptr.To("public"),
			DefaultBackend:   &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "fallback", Port: networkingv1.ServiceBackendPort{Number: 80}}},
			TLS:              []networkingv1.IngressTLS{{Hosts: []string{"shop.example.com"}, SecretName: "shop-tls"}, {SecretName: "shop-tls"}},
			Rules: []networkingv1.IngressRule{{
				Host: "shop.example.com",
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &prefix,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}},
				}}}},
			}},
		},
	}
}

func TestHostIngressRoutesToHostCopies(t *testing.T) {
	tr := newTranslator(t, func(c *Config) { c.IngressClasses = map[string]string{"public": "nginx"} })
	h, err := tr.HostIngress(tenantIngress())
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != tr.HostName(KindIngress, "shop", "web") || h.Namespace != "tenant" {
		t.Errorf("name %s/%s", h.Namespace, h.Name)
	}
	if ptr.Deref(h.Spec.IngressClassName, "") != "nginx" {
		t.Errorf("class %v, want the mapped host class", h.Spec.IngressClassName)
	}
	for k := range h.Annotations {
		if !strings.HasPrefix(k, "k3k.io/") {
			t.Errorf("annotation %q reached the host", k)
		}
	}
	if h.Labels["app"] != "" {
		t.Errorf("labels %v", h.Labels)
	}
	if got := h.Spec.DefaultBackend.Service.Name; got != tr.HostName(KindService, "shop", "fallback") {
		t.Errorf("default backend %s", got)
	}
	b := h.Spec.Rules[0].HTTP.Paths[0].Backend.Service
	if b.Name != tr.HostName(KindService, "shop", "web") || b.Port.Name != "http" || h.Spec.Rules[0].Host != "shop.example.com" {
		t.Errorf("rule backend %+v host %q", b, h.Spec.Rules[0].Host)
	}
	if got := h.Spec.TLS[0].SecretName; got != tr.HostName(KindIngressTLS, "shop", "shop-tls") || got == tr.HostName(KindSecret, "shop", "shop-tls") {
		t.Errorf("TLS secret %s, want the ingress-tls copy (not the pods' copy)", got)
	}
	if got := IngressSecrets(tenantIngress()); len(got) != 1 || got[0] != "shop-tls" {
		t.Errorf("IngressSecrets = %v", got)
	}
	s := tr.HostIngressSecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shop-tls", Namespace: "shop", UID: "s"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}})
	if s.Name != h.Spec.TLS[0].SecretName || s.Type != corev1.SecretTypeTLS || string(s.Data["tls.key"]) != "k" {
		t.Errorf("TLS copy %s %s %v", s.Name, s.Type, s.Data)
	}
	unclassed := tenantIngress()
	unclassed.Spec.IngressClassName = nil
	if h, err := tr.HostIngress(unclassed); err != nil || h.Spec.IngressClassName != nil {
		t.Errorf("an Ingress without a class: %v, %v; want the host's default class", h, err)
	}
}

func TestHostIngressRefusesAttacks(t *testing.T) {
	tr := newTranslator(t, func(c *Config) { c.IngressClasses = map[string]string{"public": "nginx"} })
	cases := []struct {
		name   string
		mutate func(*networkingv1.Ingress)
		want   string
	}{
		{"a class the host administrator did not map", func(i *networkingv1.Ingress) { i.Spec.IngressClassName = ptr.To("internal-admin") },
			`ingress class "internal-admin" is not one the host administrator mapped (public → nginx)`},
		{"a resource backend naming the cluster token", func(i *networkingv1.Ingress) {
			i.Spec.DefaultBackend = &networkingv1.IngressBackend{Resource: &corev1.TypedLocalObjectReference{Kind: "Secret", Name: "k3k-c1-token"}}
		}, "spec.defaultBackend.resource"},
		{"a resource backend on a path", func(i *networkingv1.Ingress) {
			i.Spec.Rules[0].HTTP.Paths[0].Backend = networkingv1.IngressBackend{Resource: &corev1.TypedLocalObjectReference{APIGroup: ptr.To("example.com"), Kind: "Bucket", Name: "b"}}
		}, "spec.rules[0].http.paths[0].backend.resource"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			i := tenantIngress()
			tc.mutate(i)
			h, err := tr.HostIngress(i)
			var ue *UnsupportedError
			if !errors.As(err, &ue) || h != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, %v; want an *UnsupportedError mentioning %q", h, err, tc.want)
			}
		})
	}
}
