package translate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestHostPodVirtualAPIAddress(t *testing.T) {
	api := APIServer{Host: "k3k-c1-service.tenant.svc", Port: 443, IP: "10.43.7.7"}
	apiEnv := []corev1.EnvVar{
		{Name: EnvServiceHost, Value: "k3k-c1-service.tenant.svc"},
		{Name: EnvServicePort, Value: "443"},
		{Name: EnvServicePortHTTPS, Value: "443"},
	}
	alias := []corev1.HostAlias{{IP: "10.43.7.7", Hostnames: []string{"k3k-c1-service.tenant.svc"}}}
	cases := []struct {
		name        string
		api         APIServer
		env         []corev1.EnvVar
		wantEnv     []corev1.EnvVar
		wantAliases []corev1.HostAlias
	}{
		{"without a configured address the host's stays", APIServer{}, nil, nil, nil},
		{"containers get the virtual API, before their own variables", api,
			[]corev1.EnvVar{{Name: "URL", Value: "https://$(KUBERNETES_SERVICE_HOST)"}},
			append(append([]corev1.EnvVar(nil), apiEnv...), corev1.EnvVar{Name: "URL", Value: "https://$(KUBERNETES_SERVICE_HOST)"}), alias},
		{"a container's own value wins", api,
			[]corev1.EnvVar{{Name: EnvServiceHost, Value: "mine"}},
			[]corev1.EnvVar{apiEnv[1], apiEnv[2], {Name: EnvServiceHost, Value: "mine"}}, alias},
		{"without an IP the name is left to DNS; the port defaults to 443", APIServer{Host: "k3k-c1-service.tenant.svc"}, nil, apiEnv, nil},
		{"an IP literal needs no alias", APIServer{Host: "10.43.7.7", Port: 6443, IP: "10.43.7.7"}, nil,
			[]corev1.EnvVar{{Name: EnvServiceHost, Value: "10.43.7.7"}, {Name: EnvServicePort, Value: "6443"}, {Name: EnvServicePortHTTPS, Value: "6443"}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTranslator(t, func(c *Config) { c.APIServer = tc.api })
			vpod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "default"},
				Spec: corev1.PodSpec{
					InitContainers: []corev1.Container{{Name: "init", Image: "busybox", Env: tc.env}},
					Containers:     []corev1.Container{{Name: "main", Image: "busybox", Env: tc.env}},
				},
			}
			host, err := tr.HostPod(vpod)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range append(host.Spec.InitContainers, host.Spec.Containers...) {
				if diff := cmp.Diff(tc.wantEnv, c.Env); diff != "" {
					t.Errorf("container %s env (-want +got):\n%s", c.Name, diff)
				}
			}
			if diff := cmp.Diff(tc.wantAliases, host.Spec.HostAliases); diff != "" {
				t.Errorf("host aliases (-want +got):\n%s", diff)
			}
		})
	}
}
