package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/agent/translate"
	"github.com/k3k-io/k3k/pkg/layout"
)

// agentClient is a client acting as cluster c's agent.
func agentClient(c *v1beta1.Cluster) kubernetes.Interface {
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + c.Namespace + ":" + layout.AgentName(c.Name),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + c.Namespace, "system:authenticated"},
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

// hostIngress is a host Ingress as an agent makes one, claiming hosts (the
// first on its rule, all of them on its TLS entry).
func hostIngress(name string, hosts ...string) *networkingv1.Ingress {
	prefix := networkingv1.PathTypePrefix
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkingv1.IngressSpec{
			Rules: []networkingv1.IngressRule{{Host: hosts[0], IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &prefix,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web-shop-0a1b2c3d4e", Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}}}},
			TLS: []networkingv1.IngressTLS{{Hosts: hosts, SecretName: "tls-shop-0a1b2c3d4e"}},
		},
	}
}

const hostsRefusal = "may claim only the hostnames its Cluster allows"

// TestAgentIngressGuard sends real Ingress writes as agents to a
// kube-apiserver with the Ingress hosts guard: an agent may claim the names
// its own Cluster allows (exact or under a wildcard) and nothing else, in a
// rule or a TLS entry, on create and on update; a second Cluster in the same
// namespace allows its agent its own names without widening the first's;
// a Cluster that allows nothing lets its agent claim nothing. The agent's
// own refusal of the same Ingresses is translate.IngressHostAllowed, and
// the guard must agree with it on every host tried here.
func TestAgentIngressGuard(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	patterns := []string{"shop.example.com", "*.shop.example.com"}
	c := sampleCluster()
	c.Namespace = ns
	c.Spec.Ingresses = &v1beta1.IngressSyncConfig{Enabled: true, Hosts: patterns}
	other := sampleCluster()
	other.Name, other.Namespace = "bank", ns
	other.Spec.Ingresses = &v1beta1.IngressSyncConfig{Enabled: true, Hosts: []string{"bank.example.com"}}
	none := sampleCluster()
	none.Name, none.Namespace = "quiet", ns

	role := DesiredAgentClusterRole("k3k-agent-ingress-" + ns)
	policy, binding := DesiredAgentIngressGuard("k3k-agent-ingress-hosts-" + ns)
	binding.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}
	objs := []client.Object{role, policy, binding}
	for _, cl := range []*v1beta1.Cluster{c, other, none} {
		objs = append(objs, cl, DesiredAgentServiceAccount(cl), DesiredAgentRoleBinding(cl, role.Name))
	}
	for _, obj := range objs {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, obj := range []client.Object{role, policy, binding} {
			_ = k8s.Delete(context.Background(), obj)
		}
	})
	agent := agentClient(c)

	// Policies and their params load asynchronously: wait until the guard
	// refuses another tenant's name.
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		name := fmt.Sprintf("probe-%d-shop-0a1b2c3d4e", i)
		_, err := agent.NetworkingV1().Ingresses(ns).Create(ctx, hostIngress(name, "bank.example.com"), metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), hostsRefusal) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guard never refused another tenant's hostname; last answer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	for i, tc := range []struct {
		hosts []string
		why   string
	}{
		{[]string{"shop.example.com"}, "a name the Cluster allows"},
		{[]string{"api.shop.example.com"}, "a name under its wildcard"},
		{[]string{"*.eu.shop.example.com"}, "a wildcard under its wildcard"},
		{[]string{"bank.example.com"}, "another cluster's name"},
		{[]string{"shop.example.com", "login.example.com"}, "a TLS certificate for a name it may not claim"},
		{[]string{"evilshop.example.com"}, "a name that only ends alike"},
		{[]string{"*.example.com"}, "a wildcard wider than its own"},
		{[]string{"example.com"}, "the parent domain"},
	} {
		t.Run(tc.why, func(t *testing.T) {
			want := translate.IngressHostAllowed(patterns, tc.hosts[0]) && (len(tc.hosts) < 2 || translate.IngressHostAllowed(patterns, tc.hosts[1]))
			_, err := agent.NetworkingV1().Ingresses(ns).Create(ctx, hostIngress(fmt.Sprintf("case-%d-shop-0a1b2c3d4e", i), tc.hosts...), metav1.CreateOptions{})
			switch {
			case want && err != nil:
				t.Errorf("%v refused, but the agent allows it: %v", tc.hosts, err)
			case !want && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), hostsRefusal) ||
				!strings.Contains(err.Error(), "for cluster "+c.Name) || !strings.Contains(err.Error(), "shop.example.com, *.shop.example.com")):
				t.Errorf("%v: got %v, want Forbidden for cluster %s naming the allowed hosts", tc.hosts, err, c.Name)
			}
		})
	}

	t.Run("an allowed Ingress updated to another tenant's name", func(t *testing.T) {
		i, err := agent.NetworkingV1().Ingresses(ns).Get(ctx, "case-0-shop-0a1b2c3d4e", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		i.Spec.Rules[0].Host = "bank.example.com"
		i.Spec.TLS = nil
		if _, err := agent.NetworkingV1().Ingresses(ns).Update(ctx, i, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), hostsRefusal) {
			t.Errorf("got %v, want Forbidden", err)
		}
	})

	t.Run("the other cluster's agent claims its own name, not this one's", func(t *testing.T) {
		bank := agentClient(other)
		if _, err := bank.NetworkingV1().Ingresses(ns).Create(ctx, hostIngress("own-bank-0a1b2c3d4e", "bank.example.com"), metav1.CreateOptions{}); err != nil {
			t.Errorf("its own name refused: %v", err)
		}
		_, err := bank.NetworkingV1().Ingresses(ns).Create(ctx, hostIngress("steal-bank-0a1b2c3d4e", "shop.example.com"), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "for cluster bank") {
			t.Errorf("got %v, want Forbidden for cluster bank", err)
		}
	})

	t.Run("a cluster that allows no hostname", func(t *testing.T) {
		_, err := agentClient(none).NetworkingV1().Ingresses(ns).Create(ctx, hostIngress("any-quiet-0a1b2c3d4e", "quiet.example.com"), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "(spec.ingresses.hosts: none)") {
			t.Errorf("got %v, want Forbidden saying no hostname is allowed", err)
		}
	})
}
