package kubeconfig_test

import (
	"bytes"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/k3k-io/k3k/pkg/kubeconfig"
)

// TestMarshalAs checks the named rendering the CLI hands users and merges: one
// cluster, user and context under the given name, current, with the rewritten
// server and the original credentials, read alike by Parse and by client-go,
// and the same through APIConfig.
func TestMarshalAs(t *testing.T) {
	c := newCredentials(t)
	k, err := kubeconfig.Parse(k3sKubeconfig(t, c.serverCA.Cert, c.admin))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		as   string
		to   kubeconfig.Endpoint
	}{
		{"the default name is what Marshal writes", kubeconfig.DefaultName, kubeconfig.Endpoint{URL: "https://k3k-demo-service.tenants.svc:443"}},
		{"a CLI context name keeps the server it is given", "k3k-tenants-demo", kubeconfig.Endpoint{URL: "https://127.0.0.1:40123"}},
		{"a TLS server name travels with the server", "k3k-tenants-demo", kubeconfig.Endpoint{URL: "https://10.0.0.7:443", TLSServerName: "k3k-demo-service.tenants.svc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rk, err := k.Rewrite(tt.to)
			if err != nil {
				t.Fatal(err)
			}
			out, err := rk.MarshalAs(tt.as)
			if err != nil {
				t.Fatal(err)
			}
			if err := kubeconfig.Validate(out, time.Now()); err != nil {
				t.Fatalf("output does not validate: %v", err)
			}
			loaded, err := clientcmd.Load(out)
			if err != nil {
				t.Fatalf("client-go cannot load the output: %v", err)
			}
			// client-go's reading of the output and APIConfig are the same type.
			for what, cfg := range map[string]*clientcmdapi.Config{"MarshalAs": loaded, "APIConfig": rk.APIConfig(tt.as)} {
				cl, user := cfg.Clusters[tt.as], cfg.AuthInfos[tt.as]
				if cfg.CurrentContext != tt.as || len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 || len(cfg.Contexts) != 1 || cl == nil || user == nil {
					t.Fatalf("%s: current context %q with %d clusters, %d users, %d contexts; want %q with one of each",
						what, cfg.CurrentContext, len(cfg.Clusters), len(cfg.AuthInfos), len(cfg.Contexts), tt.as)
				}
				if kc := cfg.Contexts[tt.as]; kc.Cluster != tt.as || kc.AuthInfo != tt.as {
					t.Errorf("%s: context names cluster %q and user %q", what, kc.Cluster, kc.AuthInfo)
				}
				if cl.Server != tt.to.URL || cl.TLSServerName != tt.to.TLSServerName {
					t.Errorf("%s: server %q, tls-server-name %q; want %q, %q", what, cl.Server, cl.TLSServerName, tt.to.URL, tt.to.TLSServerName)
				}
				if !bytes.Equal(cl.CertificateAuthorityData, c.serverCA.Cert) || !bytes.Equal(user.ClientCertificateData, c.admin.Cert) || !bytes.Equal(user.ClientKeyData, c.admin.Key) {
					t.Errorf("%s: the CA or client credentials changed", what)
				}
			}
		})
	}
	if k.Server != k3sServer {
		t.Errorf("Rewrite changed the kubeconfig it was called on: server %q", k.Server)
	}
	if _, err := k.Rewrite(kubeconfig.Endpoint{URL: "http://k3k-demo-service.tenants.svc:80"}); err == nil {
		t.Error("Rewrite to an http endpoint succeeded")
	}
}

// TestMarshalIsMarshalAsDefault pins that the canonical rendering the publisher
// writes is the named one under the k3s names, so Rewrite's output is unchanged.
func TestMarshalIsMarshalAsDefault(t *testing.T) {
	c := newCredentials(t)
	k, err := kubeconfig.Parse(k3sKubeconfig(t, c.serverCA.Cert, c.admin))
	if err != nil {
		t.Fatal(err)
	}
	a, err := k.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.MarshalAs(kubeconfig.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("Marshal and MarshalAs(DefaultName) differ:\n%s\nvs\n%s", a, b)
	}
}
