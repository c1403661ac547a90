package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// These admission cases are the inputs that used to pass the CRD and then
// break a host object (a certificate, a claim, a DNS setting), the isolation
// fields of a Cluster, and what a Cluster's creator may not reach through
// the spec (docs/security.md). Each is tried against the real kube-apiserver.

func resources(kv ...string) map[corev1.ResourceName]resource.Quantity {
	out := map[corev1.ResourceName]resource.Quantity{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func TestAdmissionRefusesWhatBreaksHostObjects(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		spec   func(*v1beta1.Cluster)
		wantIn string
	}{
		{"a TLS SAN with a space is refused", func(c *v1beta1.Cluster) { c.Spec.TLSSANs = []string{"k3k.example.com", "not a host"} }, "tlsSANs: every entry must be a DNS name"},
		{"a TLS SAN with a URL is refused", func(c *v1beta1.Cluster) { c.Spec.TLSSANs = []string{"https://k3k.example.com"} }, "tlsSANs: every entry must be a DNS name"},
		{"a TLS SAN in upper case is refused", func(c *v1beta1.Cluster) { c.Spec.TLSSANs = []string{"K3K.Example.com"} }, "tlsSANs: every entry must be a DNS name"},
		{"a TLS SAN with a label over 63 characters is refused", func(c *v1beta1.Cluster) {
			c.Spec.TLSSANs = []string{strings.Repeat("a", 64) + ".example.com"}
		}, "tlsSANs: every entry must be a DNS name"},
		{"a TLS SAN that is half an IP address is refused", func(c *v1beta1.Cluster) { c.Spec.TLSSANs = []string{"10.0.0.1/24"} }, "tlsSANs: every entry must be a DNS name"},
		{"a negative storage size is refused", func(c *v1beta1.Cluster) { c.Spec.Persistence.StorageRequestSize = "-1Gi" }, "persistence.storageRequestSize must be greater than zero"},
		{"a zero storage size is refused", func(c *v1beta1.Cluster) { c.Spec.Persistence.StorageRequestSize = "0" }, "persistence.storageRequestSize must be greater than zero"},
		{"a storage size with ephemeral persistence is refused", func(c *v1beta1.Cluster) {
			c.Spec.Persistence.Type = v1beta1.EphemeralPersistence
			c.Spec.Persistence.StorageRequestSize = "5Gi"
		}, "persistence.storageRequestSize cannot be set with persistence.type ephemeral"},
		{"a cluster DNS outside the service CIDR is refused", func(c *v1beta1.Cluster) {
			c.Spec.ServiceCIDR = "10.43.0.0/16"
			c.Spec.ClusterDNS = "10.44.0.10"
		}, "clusterDNS must be an address inside serviceCIDR"},
		{"an IPv6 cluster DNS in an IPv4 service CIDR is refused", func(c *v1beta1.Cluster) {
			c.Spec.ServiceCIDR = "10.43.0.0/16"
			c.Spec.ClusterDNS = "fd00::10"
		}, "clusterDNS must be an address inside serviceCIDR"},
		// The trust model: a creator names Secrets only where k3k asks for one.
		{"a server env from a Secret is refused", func(c *v1beta1.Cluster) {
			c.Spec.ServerEnvs = []v1beta1.ServerEnvVar{{Name: "HTTP_PROXY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "someone-elses"}, Key: "password",
			}}}}
		}, "serverEnvs: valueFrom may only use fieldRef or resourceFieldRef"},
		{"a server env value that expands another variable is refused", func(c *v1beta1.Cluster) {
			c.Spec.ServerEnvs = []v1beta1.ServerEnvVar{{Name: "HTTP_PROXY", Value: "http://$(K3S_DATASTORE_ENDPOINT)@proxy:3128"}}
		}, "serverEnvs: values may not contain $("},
		{"a server argument that expands a variable is refused", func(c *v1beta1.Cluster) {
			c.Spec.ServerArgs = []string{"--node-label=leak=$(K3S_DATASTORE_ENDPOINT)"}
		}, "serverArgs may not contain $("},
		{"an ingress snippet annotation is refused", func(c *v1beta1.Cluster) {
			c.Spec.Expose = &v1beta1.ExposeConfig{Ingress: &v1beta1.IngressConfig{Host: "k3k.example.com", Annotations: map[string]string{
				"nginx.ingress.kubernetes.io/server-snippet": "location / { return 200; }",
			}}}
		}, "expose.ingress.annotations: snippet annotations are not allowed"},
		// Isolation fields that the host would refuse.
		{"a quota on an unknown resource is refused", func(c *v1beta1.Cluster) {
			c.Spec.Quota = &v1beta1.QuotaConfig{Hard: resources("bananas", "3")}
		}, "quota.hard: keys must be ResourceQuota resource names"},
		{"a negative quota is refused", func(c *v1beta1.Cluster) {
			c.Spec.Quota = &v1beta1.QuotaConfig{Hard: resources("pods", "-1")}
		}, "quota.hard: values may not be negative"},
		{"a default request above the default limit is refused", func(c *v1beta1.Cluster) {
			c.Spec.Limits = &v1beta1.LimitsConfig{DefaultRequest: resources("memory", "1Gi"), Default: resources("memory", "512Mi")}
		}, "limits: defaultRequest may not exceed default"},
		{"a default limit above the maximum is refused", func(c *v1beta1.Cluster) {
			c.Spec.Limits = &v1beta1.LimitsConfig{Default: resources("cpu", "2"), Max: resources("cpu", "1")}
		}, "limits: default may not exceed max"},
		{"a limit on pods in a container LimitRange is refused", func(c *v1beta1.Cluster) {
			c.Spec.Limits = &v1beta1.LimitsConfig{Max: resources("pods", "1")}
		}, "limits.max: keys must be cpu, memory, ephemeral-storage or an extended resource"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(ns, fmt.Sprintf("bad-%d", i), tc.spec)
			err := k8s.Create(context.Background(), c)
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", tc.wantIn)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("error does not name the problem:\n got: %v\nwant: ...%s...", err, tc.wantIn)
			}
		})
	}
}

// TestAdmissionAcceptsGoodHostInputs is the other side of each rule above, so
// none of them refuses everything.
func TestAdmissionAcceptsGoodHostInputs(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name string
		spec func(*v1beta1.Cluster)
	}{
		{"DNS names, a wildcard and IP addresses as TLS SANs", func(c *v1beta1.Cluster) {
			c.Spec.TLSSANs = []string{"k3k.example.com", "*.apps.example.com", "localhost", "10.0.0.1", "fd00::1"}
		}},
		{"a positive storage size with dynamic persistence", func(c *v1beta1.Cluster) {
			c.Spec.Persistence.Type = v1beta1.DynamicPersistence
			c.Spec.Persistence.StorageRequestSize = "5Gi"
		}},
		{"ephemeral persistence without a size", func(c *v1beta1.Cluster) { c.Spec.Persistence.Type = v1beta1.EphemeralPersistence }},
		{"a cluster DNS inside the service CIDR", func(c *v1beta1.Cluster) {
			c.Spec.ServiceCIDR = "10.43.0.0/16"
			c.Spec.ClusterDNS = "10.43.0.10"
		}},
		{"server envs from a value and a field", func(c *v1beta1.Cluster) {
			c.Spec.ServerEnvs = []v1beta1.ServerEnvVar{
				{Name: "HTTP_PROXY", Value: "http://proxy.example.com:3128"},
				{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
			}
		}},
		{"ingress annotations without snippets", func(c *v1beta1.Cluster) {
			c.Spec.Expose = &v1beta1.ExposeConfig{Ingress: &v1beta1.IngressConfig{Host: "k3k.example.com", Annotations: map[string]string{
				"nginx.ingress.kubernetes.io/ssl-passthrough": "true",
			}}}
		}},
		{"a quota, limits and the network policy switch", func(c *v1beta1.Cluster) {
			c.Spec.Quota = &v1beta1.QuotaConfig{Hard: resources("pods", "10", "requests.cpu", "4", "limits.memory", "8Gi", "count/deployments.apps", "5", "requests.storage", "20Gi")}
			c.Spec.Limits = &v1beta1.LimitsConfig{DefaultRequest: resources("cpu", "100m", "memory", "128Mi"), Default: resources("memory", "512Mi"), Max: resources("cpu", "2", "memory", "4Gi")}
			c.Spec.NetworkPolicy = &v1beta1.NetworkPolicyConfig{Enabled: new(bool)}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := k8s.Create(context.Background(), newCluster(ns, fmt.Sprintf("good-%d", i), tc.spec)); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

// TestStorageSizeMayOnlyGrowFromTheDefault: a Cluster created without a size
// has 2Gi (the controller's default), so setting a smaller one later is a
// shrink.
func TestStorageSizeMayOnlyGrowFromTheDefault(t *testing.T) {
	ctx := context.Background()
	c := newCluster(newNamespace(t), "grow", func(c *v1beta1.Cluster) { c.Spec.Persistence.Type = v1beta1.DynamicPersistence })
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Spec.Persistence.StorageRequestSize = "1Gi"
	if err := k8s.Update(ctx, c); err == nil || !strings.Contains(err.Error(), "persistence.storageRequestSize may only grow") {
		t.Fatalf("shrinking below the default: got %v, want the may-only-grow error", err)
	}
	c.Spec.Persistence.StorageRequestSize = "4Gi"
	if err := k8s.Update(ctx, c); err != nil {
		t.Fatalf("growing from the default: %v", err)
	}
}
