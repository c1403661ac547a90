package kubeconfig

import (
	"bytes"
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The errors below classify why a kubeconfig cannot be used. Every error returned by
// this package wraps exactly one of them, so callers choose a condition reason with
// errors.Is and show err.Error() as its message.
var (
	// ErrEmpty means there is no kubeconfig yet; k3s has not written it, or the
	// Secret is a placeholder. It is a reason to wait, not a fault.
	ErrEmpty = errors.New("kubeconfig is empty")
	// ErrMalformed means the document is not a usable kubeconfig: not YAML, missing
	// pieces, or PEM and certificates that do not parse. A half-written file is
	// malformed until k3s finishes writing it.
	ErrMalformed = errors.New("kubeconfig is malformed")
	// ErrExpired means a certificate is not valid at the time of the check (expired,
	// or not yet valid).
	ErrExpired = errors.New("kubeconfig certificate is not within its validity period")
	// ErrKeyMismatch means the client key does not belong to the client certificate.
	ErrKeyMismatch = errors.New("kubeconfig client key does not match its certificate")
)

// Kubeconfig is the part of a kubeconfig that k3k uses: the current context's
// server, its CA and its client certificate, all embedded. It deliberately has no
// room for file references or tokens: the kubeconfig is moved between pods, so
// everything must travel inside it, and k3s embeds everything.
type Kubeconfig struct {
	// Server is the API address, https://127.0.0.1:6443 as k3s writes it.
	Server string
	// TLSServerName, when set, is the name the serving certificate is verified
	// against instead of Server's host.
	TLSServerName string
	// CAData is the PEM bundle that signs the server's serving certificate.
	CAData []byte
	// CertData is the PEM client certificate, possibly followed by its chain.
	CertData []byte
	// KeyData is the PEM private key of CertData.
	KeyData []byte
}

// String describes k without any of its key material, so that a Kubeconfig
// accidentally passed to a logger or fmt verb leaks nothing.
func (k Kubeconfig) String() string {
	return fmt.Sprintf("kubeconfig for %s", k.Server)
}

// GoString redacts like String, for %#v.
func (k Kubeconfig) GoString() string { return k.String() }

// Parse reads a kubeconfig and extracts its current context. It checks the
// document's structure only; Validate also checks the certificates.
//
// When current-context is empty and there is exactly one context, that context is
// used, as kubectl would not but as a hand-edited single-context file means.
func Parse(data []byte) (*Kubeconfig, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, ErrEmpty
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		// The decoder's message may quote the input, which may be key material.
		return nil, fmt.Errorf("%w: not a kubeconfig document", ErrMalformed)
	}
	name := cfg.CurrentContext
	if name == "" && len(cfg.Contexts) == 1 {
		for n := range cfg.Contexts {
			name = n
		}
	}
	if name == "" {
		return nil, fmt.Errorf("%w: no current context", ErrMalformed)
	}
	kctx, ok := cfg.Contexts[name]
	if !ok || kctx == nil {
		return nil, fmt.Errorf("%w: current context %q is not defined", ErrMalformed, name)
	}
	cluster, ok := cfg.Clusters[kctx.Cluster]
	if !ok || cluster == nil {
		return nil, fmt.Errorf("%w: cluster %q of context %q is not defined", ErrMalformed, kctx.Cluster, name)
	}
	user, ok := cfg.AuthInfos[kctx.AuthInfo]
	if !ok || user == nil {
		return nil, fmt.Errorf("%w: user %q of context %q is not defined", ErrMalformed, kctx.AuthInfo, name)
	}
	switch {
	case cluster.Server == "":
		return nil, fmt.Errorf("%w: cluster %q has no server", ErrMalformed, kctx.Cluster)
	case len(cluster.CertificateAuthorityData) == 0:
		return nil, fmt.Errorf("%w: cluster %q has no embedded certificate-authority-data", ErrMalformed, kctx.Cluster)
	case len(user.ClientCertificateData) == 0:
		return nil, fmt.Errorf("%w: user %q has no embedded client-certificate-data", ErrMalformed, kctx.AuthInfo)
	case len(user.ClientKeyData) == 0:
		return nil, fmt.Errorf("%w: user %q has no embedded client-key-data", ErrMalformed, kctx.AuthInfo)
	}
	return &Kubeconfig{
		Server:        cluster.Server,
		TLSServerName: cluster.TLSServerName,
		CAData:        cluster.CertificateAuthorityData,
		CertData:      user.ClientCertificateData,
		KeyData:       user.ClientKeyData,
	}, nil
}

// RESTConfig is a client configuration that uses k's server and credentials. The
// caller owns the result and may adjust it (timeouts, rate limits, user agent).
func (k *Kubeconfig) RESTConfig() *rest.Config {
	return &rest.Config{
		Host: k.Server,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: k.TLSServerName,
			CAData:     bytes.Clone(k.CAData),
			CertData:   bytes.Clone(k.CertData),
			KeyData:    bytes.Clone(k.KeyData),
		},
	}
}

// APIConfig is k as client-go's kubeconfig type, with one cluster, user and
// context named name, current: what a caller merges into a kubeconfig file with
// clientcmd (the CLI's --merge). It holds the same fields MarshalAs(name) writes.
func (k *Kubeconfig) APIConfig(name string) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   k.Server,
		TLSServerName:            k.TLSServerName,
		CertificateAuthorityData: bytes.Clone(k.CAData),
	}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{
		ClientCertificateData: bytes.Clone(k.CertData),
		ClientKeyData:         bytes.Clone(k.KeyData),
	}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	return cfg
}
