package kubeconfig

import (
	"fmt"
	"net/url"

	"sigs.k8s.io/yaml"
)

// Endpoint is where clients outside the server pod reach the API server.
type Endpoint struct {
	// URL replaces the server address k3s wrote, e.g. ServiceURL(cluster, namespace).
	// Its host must be among the names of the server's serving certificate (k3s
	// --tls-san), or TLSServerName must be.
	URL string
	// TLSServerName, when set, is the name clients verify the serving certificate
	// against instead of URL's host. It is needed only when URL's host is not among
	// the certificate's names, e.g. a ClusterIP or a node address; the Service name
	// is, so the publisher normally leaves this empty.
	TLSServerName string
}

// Validate checks that e's URL is an absolute https URL.
func (e Endpoint) Validate() error {
	u, err := url.Parse(e.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("endpoint %q is not an https URL", e.URL)
	}
	return nil
}

// Rewrite parses a kubeconfig as k3s writes it and renders it for to: same CA,
// same client certificate and key, server replaced. It checks structure only; call
// Validate first to refuse expired or mismatched credentials.
//
// The output is canonical: one cluster, user and context named "default" (the names
// k3s uses), fields in a fixed order, nothing else carried over. So the same input
// and endpoint always give byte-identical output, Rewrite of its own output is that
// output again, and the result does not depend on how client-go happens to
// serialize kubeconfigs in the version we build with; a publisher comparing bytes
// therefore never rewrites an unchanged Secret, even across upgrades.
func Rewrite(data []byte, to Endpoint) ([]byte, error) {
	k, err := Parse(data)
	if err != nil {
		return nil, err
	}
	out, err := k.Rewrite(to)
	if err != nil {
		return nil, err
	}
	return out.Marshal()
}

// Rewrite is k pointed at to: a copy with the server and TLS server name
// replaced, the CA and client credentials kept. k is not changed. It is the
// function Rewrite for a caller that has parsed the kubeconfig already.
func (k *Kubeconfig) Rewrite(to Endpoint) (*Kubeconfig, error) {
	if err := to.Validate(); err != nil {
		return nil, fmt.Errorf("rewriting kubeconfig: %w", err)
	}
	out := *k
	out.Server = to.URL
	out.TLSServerName = to.TLSServerName
	return &out, nil
}

// DefaultName is what Marshal names the one cluster, user and context it
// writes: the names k3s uses.
const DefaultName = "default"

// Marshal renders k canonically; see Rewrite. It is MarshalAs(DefaultName).
func (k *Kubeconfig) Marshal() ([]byte, error) {
	return k.MarshalAs(DefaultName)
}

// MarshalAs renders k canonically like Marshal, with its cluster, user and
// context all named name, so that kubeconfigs of several clusters can sit in
// one file (the CLI names them k3k-NAMESPACE-NAME).
func (k *Kubeconfig) MarshalAs(name string) ([]byte, error) {
	doc := document{
		APIVersion: "v1",
		Kind:       "Config",
		Clusters: []namedCluster{{Name: name, Cluster: cluster{
			Server:                   k.Server,
			TLSServerName:            k.TLSServerName,
			CertificateAuthorityData: k.CAData,
		}}},
		Users: []namedUser{{Name: name, User: user{
			ClientCertificateData: k.CertData,
			ClientKeyData:         k.KeyData,
		}}},
		Contexts:       []namedContext{{Name: name, Context: kcontext{Cluster: name, User: name}}},
		CurrentContext: name,
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("rendering kubeconfig: %w", err)
	}
	return out, nil
}

// document is the kubeconfig v1 schema, reduced to what Marshal writes. It is our own
// type, not clientcmd's, so that its serialization is fixed by this file.
type document struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []namedCluster `json:"clusters"`
	Users          []namedUser    `json:"users"`
	Contexts       []namedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
}

type namedCluster struct {
	Name    string  `json:"name"`
	Cluster cluster `json:"cluster"`
}

type cluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name,omitempty"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
}

type namedUser struct {
	Name string `json:"name"`
	User user   `json:"user"`
}

type user struct {
	ClientCertificateData []byte `json:"client-certificate-data"`
	ClientKeyData         []byte `json:"client-key-data"`
}

type namedContext struct {
	Name    string   `json:"name"`
	Context kcontext `json:"context"`
}

type kcontext struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}
