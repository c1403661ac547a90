package cluster

import (
	"context"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestHostServiceNetworkReadFromTheAPIServer reads the default ServiceCIDR of
// the suite's real kube-apiserver, made from its --service-cluster-ip-range.
func TestHostServiceNetworkReadFromTheAPIServer(t *testing.T) {
	ctx := context.Background()
	var sc networkingv1.ServiceCIDR
	if err := k8s.Get(ctx, client.ObjectKey{Name: DefaultServiceCIDRName}, &sc); err != nil {
		t.Fatalf("the API server has no default ServiceCIDR: %v", err)
	}
	got, found, err := LookupHostServiceCIDR(ctx, k8s)
	if err != nil || !found {
		t.Fatalf("lookup: %q found %v, error %v", got, found, err)
	}
	if got != sc.Spec.CIDRs[0] {
		t.Fatalf("host Service network %q, want the API server's %q", got, sc.Spec.CIDRs[0])
	}
}

// TestHostServiceNetworkChoice: the first IPv4 network of a dual-stack host;
// none (new Clusters keep k3s's default) without the object or an IPv4 one.
func TestHostServiceNetworkChoice(t *testing.T) {
	s := runtime.NewScheme()
	if err := networkingv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		cidrs []string
		want  string
	}{
		{"dual stack, IPv6 first", []string{"fd00:10:96::/108", "10.96.0.0/12"}, "10.96.0.0/12"},
		{"IPv6 only", []string{"fd00:10:96::/108"}, ""},
		{"no object", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(s)
			if tc.cidrs != nil {
				b = b.WithObjects(&networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: DefaultServiceCIDRName}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: tc.cidrs}})
			}
			got, found, err := LookupHostServiceCIDR(context.Background(), b.Build())
			if err != nil || got != tc.want || found != (tc.want != "") {
				t.Fatalf("got %q found %v error %v, want %q", got, found, err, tc.want)
			}
		})
	}
}
