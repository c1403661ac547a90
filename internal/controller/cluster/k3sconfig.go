package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// The k3s configuration file of a Cluster's servers and its fingerprint on
// the pod template. Pure, like desired.go.

// TLSSANs are every name the API server is reached by: the Service under each
// of its DNS forms, the ingress host, then the user's extra names.
func TLSSANs(c *v1beta1.Cluster) []string {
	svc := layout.NamesFor(c).Service
	sans := []string{
		svc,
		svc + "." + c.Namespace,
		svc + "." + c.Namespace + ".svc",
		svc + "." + c.Namespace + ".svc.cluster.local",
	}
	if c.Spec.Expose != nil && c.Spec.Expose.Ingress != nil {
		sans = append(sans, c.Spec.Expose.Ingress.Host)
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(sans)+len(c.Spec.TLSSANs))
	for _, s := range append(sans, c.Spec.TLSSANs...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// k3sConfig is the part of `k3s server`'s configuration file k3k generates. Field
// names are k3s's config keys.
type k3sConfig struct {
	DataDir             string   `json:"data-dir"`
	DatastoreEndpoint   string   `json:"datastore-endpoint,omitempty"`
	DatastoreCAFile     string   `json:"datastore-cafile,omitempty"`
	DatastoreCertFile   string   `json:"datastore-certfile,omitempty"`
	DatastoreKeyFile    string   `json:"datastore-keyfile,omitempty"`
	DisableAgent        bool     `json:"disable-agent"`
	WriteKubeconfig     string   `json:"write-kubeconfig"`
	WriteKubeconfigMode string   `json:"write-kubeconfig-mode"`
	TLSSAN              []string `json:"tls-san"`
	TokenFile           string   `json:"token-file"`
	HTTPSListenPort     int      `json:"https-listen-port"`
	ClusterCIDR         string   `json:"cluster-cidr,omitempty"`
	ServiceCIDR         string   `json:"service-cidr,omitempty"`
	ClusterDNS          string   `json:"cluster-dns,omitempty"`
	Disable             []string `json:"disable"`
	EgressSelectorMode  string   `json:"egress-selector-mode"`
	// DisableCloudController: see disabledComponents.
	DisableCloudController bool     `json:"disable-cloud-controller"`
	KubeAPIServerArg       []string `json:"kube-apiserver-arg,omitempty"`
}

// disabledComponents are the packaged components k3s must not deploy in a
// virtual cluster:
//   - servicelb, traefik, local-storage: they need real nodes (host ports, a
//     host path); the host cluster provides load balancing, ingress and volumes;
//   - metrics-server: there is no kubelet summary API to scrape;
//   - coredns: the shared-mode agent answers the pods' DNS itself
//     (pkg/agent/dnsserver, Service k3k-<name>-dns) and points every virtual pod
//     at it, so a CoreDNS Deployment would only be copied to the host to answer
//     nobody (see docs/agent.md, "DNS").
//
// k3s's cloud controller is turned off too (disable-cloud-controller): with
// servicelb disabled it only maps the k3s.io/* address annotations a k3s agent
// sets onto its Node's addresses, and fails every minute for the shared-mode
// agent's Node, whose addresses the agent writes itself (its pod IP, which the
// API server dials for logs and exec). Off, k3s does not run the cloud
// controller at all: no log noise, no leader-election writes, and nobody else
// rewrites the agent's addresses.
var disabledComponents = []string{"servicelb", "traefik", "metrics-server", "local-storage", "coredns"}

// apiServerArgs are the kube-apiserver flags every server gets.
// enable-aggregator-routing makes the apiserver call admission webhooks and
// aggregated APIs (APIServices) that name a Service on one of the Service's
// endpoint addresses instead of its ClusterIP: a virtual ClusterIP exists only
// inside the virtual cluster, while the endpoints are the host pods the agent
// runs, which the server pod reaches directly (egress-selector-mode disabled:
// no agent tunnel, the apiserver dials from its own pod).
var apiServerArgs = []string{"enable-aggregator-routing=true"}

// ServerConfigFile is the k3s configuration file of a Cluster's servers,
// with its fingerprint on the pod template.
type ServerConfigFile struct {
	// Data is the file, the server ConfigMap's config.yaml.
	Data []byte
	// Hash goes on the pod template (AnnotationConfigHash), so a change rolls
	// the servers. With etcd the list of member endpoints is left out (the
	// file is hashed as for one member): scaling changes it, and rolling every
	// server on each scale step would cost quorum margin for nothing, since
	// k3s's etcd client fails over to whichever listed member answers and a
	// restarted server reads the current list.
	Hash string
}

// fileServiceCIDR is the service-cidr the configuration file names: the one
// in effect, left out when it is k3s's default and the spec does not name it,
// so that the file (and its hash) of a Cluster made before the Service network
// was chosen by the controller stays byte for byte the same.
func fileServiceCIDR(c *v1beta1.Cluster, s Settings) string {
	if c.Spec.ServiceCIDR == "" && s.ServiceCIDR == K3sDefaultServiceCIDR {
		return ""
	}
	return s.ServiceCIDR
}

// ServerConfig renders the k3s configuration file for c's servers and its
// hash, the one place both come from; a reconcile renders it once and passes
// it down. User serverArgs are not here: they go on the command line, after
// it, so they win.
func ServerConfig(c *v1beta1.Cluster, s Settings) (ServerConfigFile, error) {
	cfg := k3sConfig{
		DataDir:             layout.K3sDataDir,
		DisableAgent:        true,
		WriteKubeconfig:     layout.KubeconfigPath,
		WriteKubeconfigMode: "0600",
		TLSSAN:              TLSSANs(c),
		TokenFile:           layout.TokenPath,
		HTTPSListenPort:     layout.APIPort,
		ClusterCIDR:         c.Spec.ClusterCIDR,
		ServiceCIDR:         fileServiceCIDR(c, s),
		ClusterDNS:          c.Spec.ClusterDNS,
		Disable:             append([]string(nil), disabledComponents...),
		EgressSelectorMode:  "disabled",
		// DisableCloudController: see disabledComponents.
		DisableCloudController: true,
		KubeAPIServerArg:       apiServerArgs,
	}
	switch s.Datastore {
	case v1beta1.SQLiteDatastore:
		cfg.DatastoreEndpoint = fmt.Sprintf("http://127.0.0.1:%d", layout.DatastoreClientPort)
	case v1beta1.EtcdDatastore:
		cfg.DatastoreEndpoint = etcdEndpoints(c, 1) // as hashed; the file lists every member
		cfg.DatastoreCAFile, cfg.DatastoreCertFile, cfg.DatastoreKeyFile = layout.EtcdCAPath, layout.EtcdCertPath, layout.EtcdKeyPath
	case v1beta1.ExternalDatastore:
		externalDatastoreConfig(&cfg, c, s)
	}
	hashed, err := yaml.Marshal(cfg)
	if err != nil {
		return ServerConfigFile{}, fmt.Errorf("rendering k3s config: %w", err)
	}
	data := hashed
	if s.Datastore == v1beta1.EtcdDatastore && s.Servers != 1 {
		cfg.DatastoreEndpoint = etcdEndpoints(c, s.Servers)
		if data, err = yaml.Marshal(cfg); err != nil {
			return ServerConfigFile{}, fmt.Errorf("rendering k3s config: %w", err)
		}
	}
	return ServerConfigFile{Data: data, Hash: ConfigHash(hashed)}, nil
}

// ConfigHash fingerprints a rendered k3s configuration.
func ConfigHash(config []byte) string {
	sum := sha256.Sum256(config)
	return hex.EncodeToString(sum[:8])
}

// DesiredServerConfigMap holds the generated k3s configuration file.
func DesiredServerConfigMap(c *v1beta1.Cluster, config []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).ServerConfig),
		Data:       map[string]string{layout.ConfigMapKeyConfig: string(config)},
	}
}
