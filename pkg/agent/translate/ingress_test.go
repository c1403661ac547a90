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
			TLS:              []networkingv1.IngressTLS{{Hosts: []string{"shop.example.com", "*.eu.shop.example.com"}, SecretName: "shop-tls"}, {Hosts: []string{"api.shop.example.com"}, SecretName: "shop-tls"}},
			Rules: []networkingv1.IngressRule{{
				Host: "shop.example.com",
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &prefix,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}},
				}}}},
			}, {
				Host: "api.shop.example.com",
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &prefix,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "api", Port: networkingv1.ServiceBackendPort{Number: 8080}}},
				}}}},
			}},
		},
	}
}

func TestHostIngressRoutesToHostCopies(t *testing.T) {
	tr := newTranslator(t, func(c *Config) {
		c.IngressClasses = map[string]string{"public": "nginx"}
		c.IngressHosts = []string{"shop.example.com", "*.shop.example.com"}
	})
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
	if got := h.Spec.Rules[1].HTTP.Paths[0].Backend.Service.Name; got != tr.HostName(KindService, "shop", "api") || h.Spec.Rules[1].Host != "api.shop.example.com" {
		t.Errorf("second rule: backend %s host %q", got, h.Spec.Rules[1].Host)
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
	tr := newTranslator(t, func(c *Config) {
		c.IngressClasses = map[string]string{"public": "nginx"}
		c.IngressHosts = []string{"shop.example.com", "*.shop.example.com"}
	})
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
		{"a default backend (every hostname nobody else claims)", func(i *networkingv1.Ingress) {
			i.Spec.DefaultBackend = &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}
		}, "spec.defaultBackend: a default backend would answer for every hostname"},
		{"a rule without a host (a catch-all)", func(i *networkingv1.Ingress) { i.Spec.Rules[1].Host = "" },
			"spec.rules[1]: a rule without a host would answer for every hostname"},
		{"another tenant's hostname", func(i *networkingv1.Ingress) { i.Spec.Rules[0].Host = "bank.example.com" },
			`spec.rules[0].host "bank.example.com" is not a hostname this cluster may claim (allowed: shop.example.com, *.shop.example.com)`},
		{"a suffix that only looks alike", func(i *networkingv1.Ingress) { i.Spec.Rules[1].Host = "evilshop.example.com" },
			`spec.rules[1].host "evilshop.example.com"`},
		{"a wildcard wider than the allowed one", func(i *networkingv1.Ingress) { i.Spec.Rules[1].Host = "*.example.com" },
			`spec.rules[1].host "*.example.com"`},
		{"a TLS entry without hosts (the controller's wildcard)", func(i *networkingv1.Ingress) { i.Spec.TLS[1].Hosts = nil },
			"spec.tls[1]: a TLS entry without hosts would serve its certificate for every hostname"},
		{"a TLS certificate for someone else's name", func(i *networkingv1.Ingress) { i.Spec.TLS[0].Hosts = append(i.Spec.TLS[0].Hosts, "login.example.com") },
			`spec.tls[0].hosts[2] "login.example.com"`},
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

func TestIngressHostAllowed(t *testing.T) {
	patterns := []string{"shop.example.com", "*.tenant.example.com"}
	for host, want := range map[string]bool{
		"shop.example.com":           true,
		"www.shop.example.com":       false, // a name allows only itself
		"a.tenant.example.com":       true,
		"a.b.tenant.example.com":     true, // any depth under the wildcard
		"*.tenant.example.com":       true,
		"*.a.tenant.example.com":     true,
		"tenant.example.com":         false, // the wildcard's suffix itself is not under it
		"xtenant.example.com":        false,
		"a.tenant.example.com.evil.": false,
		"example.com":                false,
		"*.example.com":              false,
		"":                           false,
	} {
		if got := IngressHostAllowed(patterns, host); got != want {
			t.Errorf("IngressHostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
	if IngressHostAllowed(nil, "shop.example.com") {
		t.Error("no patterns allowed a host")
	}
	tr := newTranslator(t, func(c *Config) { c.IngressClasses = map[string]string{"public": "nginx"} })
	if _, err := tr.HostIngress(tenantIngress()); err == nil || !strings.Contains(err.Error(), "none: the Cluster's spec.ingresses.hosts is empty") {
		t.Errorf("with no hosts allowed: %v, want a refusal that names the empty list", err)
	}
}
