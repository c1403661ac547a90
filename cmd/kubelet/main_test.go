package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/controller/cluster"
)

func TestAgentConfigFromFlags(t *testing.T) {
	base := options{clusterName: "demo", hostNamespace: "tenants", cpu: "4", memory: "8Gi", pods: "50", kubeletPort: 10250, clusterDomain: "cluster.local", podSecurityLevel: "baseline",
		seccompDefault: true, maxTerminationGracePeriodSeconds: 300}
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

// TestClusterSettingsReachTheAgent parses the command line the controller
// gives the agent (cluster.AgentArgs) with the agent's own flags: the
// Cluster's storage classes and Ingress settings arrive in its configuration,
// and a Cluster without them leaves the agent at its defaults.
func TestClusterSettingsReachTheAgent(t *testing.T) {
	parse := func(t *testing.T, c *v1beta1.Cluster) options {
		t.Helper()
		var o options
		cmd := &cobra.Command{}
		bindFlags(cmd, &o)
		if err := cmd.ParseFlags(cluster.AgentArgs(c, cluster.Config{}, cluster.AgentHost{})[1:]); err != nil {
			t.Fatal(err)
		}
		return o
	}
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "tenants", UID: "uid-1"}}
	o := parse(t, c)
	cfg, err := agentConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Translate.StorageClasses) != 0 || cfg.SyncIngresses || len(cfg.Translate.IngressClasses) != 0 || len(cfg.Translate.IngressHosts) != 0 {
		t.Errorf("defaults: classes %v, ingresses %v %v %v", cfg.Translate.StorageClasses, cfg.SyncIngresses, cfg.Translate.IngressClasses, cfg.Translate.IngressHosts)
	}

	c.Spec.StorageClasses = []string{"fast", "archive"}
	c.Spec.Ingresses = &v1beta1.IngressSyncConfig{Enabled: true, Classes: map[string]v1beta1.IngressClassName{"public": "nginx", "internal": "nginx-internal"},
		Hosts: []string{"shop.example.com", "*.tenant.example.com"}}
	if cfg, err = agentConfig(parse(t, c)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"fast", "archive"}, cfg.Translate.StorageClasses); diff != "" {
		t.Errorf("storage classes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"public": "nginx", "internal": "nginx-internal"}, cfg.Translate.IngressClasses); diff != "" || !cfg.SyncIngresses {
		t.Errorf("ingresses %v, classes (-want +got):\n%s", cfg.SyncIngresses, diff)
	}
	if diff := cmp.Diff([]string{"shop.example.com", "*.tenant.example.com"}, cfg.Translate.IngressHosts); diff != "" {
		t.Errorf("ingress hosts (-want +got):\n%s", diff)
	}

	c.Spec.Ingresses.Enabled = false
	if cfg, err = agentConfig(parse(t, c)); err != nil {
		t.Fatal(err)
	}
	if cfg.SyncIngresses || len(cfg.Translate.IngressClasses) != 0 {
		t.Errorf("a disabled switch still syncs: %v %v", cfg.SyncIngresses, cfg.Translate.IngressClasses)
	}
}

// TestHostClusterDomainReachesTheAgent: the host's DNS domain, which the
// agent's DNS server denies to tenants, is cluster.local unless the flag says
// otherwise.
func TestHostClusterDomainReachesTheAgent(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-name=demo", "--host-namespace=tenants"}, "cluster.local"},
		{[]string{"--cluster-name=demo", "--host-namespace=tenants", "--host-cluster-domain=corp.internal"}, "corp.internal"},
	} {
		var o options
		cmd := &cobra.Command{}
		bindFlags(cmd, &o)
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := agentConfig(o)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HostDomain != tc.want {
			t.Errorf("%v: host domain %q, want %q", tc.args, cfg.HostDomain, tc.want)
		}
	}
}

// TestSecureDefaultFlags parses the agent's command line as it would run:
// without flags every host pod gets the secure defaults, and each flag
// changes only its own setting or is refused with its name.
func TestSecureDefaultFlags(t *testing.T) {
	rl := func(pairs ...string) corev1.ResourceList {
		var out corev1.ResourceList
		for i := 0; i < len(pairs); i += 2 {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
		}
		return out
	}
	type want struct {
		disableSeccomp bool
		profiles       []string
		appArmor       []string
		requests       corev1.ResourceList
		limits         corev1.ResourceList
		grace          int64
	}
	defaults := want{requests: rl("cpu", "10m", "memory", "32Mi"), limits: rl("memory", "512Mi"), grace: 300}
	with := func(f func(*want)) want {
		w := defaults
		f(&w)
		return w
	}
	cases := []struct {
		name    string
		args    []string
		want    want
		wantErr string
	}{
		{"without flags every default is on", nil, defaults, ""},
		{"the seccomp default can be turned off", []string{"--seccomp-default=false"}, with(func(w *want) { w.disableSeccomp = true }), ""},
		{"Localhost profiles are allowed by name", []string{"--seccomp-localhost-profiles=profiles/a.json,profiles/b.json"},
			with(func(w *want) { w.profiles = []string{"profiles/a.json", "profiles/b.json"} }), ""},
		{"Localhost AppArmor profiles are allowed by name", []string{"--apparmor-localhost-profiles=k3k-a,k3k-b"},
			with(func(w *want) { w.appArmor = []string{"k3k-a", "k3k-b"} }), ""},
		{"other default requests replace the built-in ones", []string{"--default-requests=cpu=50m, ephemeral-storage=1Gi"},
			with(func(w *want) { w.requests = rl("cpu", "50m", "ephemeral-storage", "1Gi") }), ""},
		{"empty default requests give none", []string{"--default-requests="}, with(func(w *want) { w.requests = nil }), ""},
		{"empty default limits give none", []string{"--default-limits="}, with(func(w *want) { w.limits = nil }), ""},
		{"a cap on the grace period is passed on", []string{"--max-termination-grace-period-seconds=10"}, with(func(w *want) { w.grace = 10 }), ""},
		{"a grace period cap of 0 is refused", []string{"--max-termination-grace-period-seconds=0"}, want{}, "--max-termination-grace-period-seconds: 0: must be at least 1"},
		{"a negative grace period cap is refused", []string{"--max-termination-grace-period-seconds=-5"}, want{}, "--max-termination-grace-period-seconds"},
		{"a default without a quantity is refused", []string{"--default-limits=memory"}, want{}, `--default-limits: "memory": want name=quantity`},
		{"a default that is no quantity is refused", []string{"--default-requests=cpu=lots"}, want{}, `--default-requests: "cpu=lots"`},
		{"a zero default is refused", []string{"--default-limits=memory=0"}, want{}, "must be positive"},
		{"a GPU default is refused", []string{"--default-limits=nvidia.com/gpu=1"}, want{}, `--default-limits: "nvidia.com/gpu=1": only [cpu memory ephemeral-storage] may be defaulted`},
		{"a resource given twice is refused", []string{"--default-requests=cpu=1m,cpu=2m"}, want{}, "cpu given twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o options
			cmd := &cobra.Command{}
			bindFlags(cmd, &o)
			if err := cmd.ParseFlags(append([]string{"--cluster-name=demo", "--host-namespace=tenants"}, tc.args...)); err != nil {
				t.Fatal(err)
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
			c := cfg.Translate
			got := want{c.DisableSeccompDefault, c.SeccompLocalhostProfiles, c.AppArmorLocalhostProfiles, c.DefaultRequests, c.DefaultLimits, c.MaxTerminationGracePeriodSeconds}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
