package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/k3k-io/k3k/pkg/agent/translate"
)

func TestVirtualAPIServerFromTheAPIService(t *testing.T) {
	svc := func(clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "k3k-demo-service", Namespace: "tenants"},
			Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, Ports: ports},
		}
	}
	cases := []struct {
		name string
		svc  *corev1.Service
		want translate.APIServer
	}{
		{"the https port and the ClusterIP", svc("10.43.5.5", corev1.ServicePort{Name: "metrics", Port: 9000}, corev1.ServicePort{Name: "https", Port: 443}),
			translate.APIServer{Host: "k3k-demo-service.tenants.svc", Port: 443, IP: "10.43.5.5"}},
		{"the first port when none is named https", svc("10.43.5.5", corev1.ServicePort{Port: 6443}),
			translate.APIServer{Host: "k3k-demo-service.tenants.svc", Port: 6443, IP: "10.43.5.5"}},
		{"a headless Service gives no address to pin", svc(corev1.ClusterIPNone, corev1.ServicePort{Name: "https", Port: 443}),
			translate.APIServer{Host: "k3k-demo-service.tenants.svc", Port: 443}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := virtualAPIServer(context.Background(), fake.NewClientset(tc.svc), "tenants", "k3k-demo-service")
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	t.Run("a missing Service is waited for until the context ends", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := virtualAPIServer(ctx, fake.NewClientset(), "tenants", "k3k-demo-service"); err == nil {
			t.Error("no error for a Service that does not exist")
		}
	})
}

func TestDNSServiceClusterIP(t *testing.T) {
	svc := func(clusterIP string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "k3k-demo-dns", Namespace: "tenants"}, Spec: corev1.ServiceSpec{ClusterIP: clusterIP}}
	}
	got, err := serviceClusterIP(context.Background(), fake.NewClientset(svc("10.43.0.53")), "tenants", "k3k-demo-dns")
	if err != nil || got != "10.43.0.53" {
		t.Errorf("got %q, %v; want the ClusterIP", got, err)
	}
	for name, c := range map[string]*fake.Clientset{
		"a headless Service is no nameserver": fake.NewClientset(svc(corev1.ClusterIPNone)),
		"a missing Service is waited for":     fake.NewClientset(),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if ip, err := serviceClusterIP(ctx, c, "tenants", "k3k-demo-dns"); err == nil {
				t.Errorf("got %q without an error", ip)
			}
		})
	}
}
