package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAgentConfigFromFlags(t *testing.T) {
	base := options{clusterName: "demo", hostNamespace: "tenants", cpu: "4", memory: "8Gi", pods: "50", kubeletPort: 10250, clusterDomain: "cluster.local", podSecurityLevel: "baseline"}
	cases := []struct {
		name    string
		mutate  func(*options)
		wantErr string
	}{
		{"the node is named after the cluster", nil, ""},
		{"a Cluster UID makes the Cluster the owner of host pods", func(o *options) { o.clusterUID = "uid-1" }, ""},
		{"a namespace is required", func(o *options) { o.hostNamespace = "" }, "--host-namespace (or $POD_NAMESPACE) is required"},
		{"capacity must be a quantity", func(o *options) { o.memory = "lots" }, "--capacity-memory"},
		{"the restricted level is passed on", func(o *options) { o.podSecurityLevel = "restricted" }, ""},
		{"an unknown Pod Security level is refused", func(o *options) { o.podSecurityLevel = "lenient" }, "--pod-security-level"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			if tc.mutate != nil {
				tc.mutate(&o)
			}
			cfg, err := agentConfig(o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Translate.NodeName != "k3k-demo-kubelet" || cfg.Node.Name != "k3k-demo-kubelet" || cfg.Translate.HostNamespace != "tenants" {
				t.Errorf("names: %+v %+v", cfg.Translate, cfg.Node)
			}
			if cfg.Translate.PodSecurityLevel != o.podSecurityLevel {
				t.Errorf("pod security level %q, want %q", cfg.Translate.PodSecurityLevel, o.podSecurityLevel)
			}
			if got := cfg.Node.Capacity.Pods().Value(); got != 50 {
				t.Errorf("pods capacity %d", got)
			}
			var owners []string
			for _, r := range cfg.Translate.OwnerReferences {
				owners = append(owners, r.Kind+"/"+r.Name+"/"+string(r.UID))
			}
			var want []string
			if o.clusterUID != "" {
				want = []string{"Cluster/demo/uid-1"}
			}
			if diff := cmp.Diff(want, owners); diff != "" {
				t.Errorf("owners (-want +got):\n%s", diff)
			}
		})
	}
}
