package cluster

import (
	"fmt"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
)

// Labels every object made for a Cluster carries; server pods add the component.
const (
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	ManagedByValue  = "k3k"
	LabelCluster    = "k3k.io/cluster"
	LabelComponent  = "k3k.io/component"
	ComponentServer = "server"

	// AnnotationInputHash records the hash of the desired object the controller
	// last wrote, so an unchanged Cluster causes no writes (see apply.go).
	AnnotationInputHash = "k3k.io/input-hash"
	// AnnotationConfigHash on the pod template rolls the servers when their
	// generated k3s configuration changes.
	AnnotationConfigHash = "k3k.io/config-hash"
)

// Paths and ports inside a server pod. They are the contract between the
// reconciler, the datastore binary and the k3s container.
const (
	DataVolume            = "data"
	KubeconfigVolume      = "kubeconfig"
	TokenVolume           = "token"
	ConfigVolume          = "config"
	TmpVolume             = "tmp"
	DatastoreSecretVolume = "datastore-secret"
	EtcdTLSVolume         = "etcd-tls"
	EtcdRosterVolume      = "etcd-roster"

	K3sDataDir         = "/var/lib/rancher/k3s"
	DatastoreDataDir   = "/var/lib/k3k/datastore"
	KubeconfigDir      = "/var/lib/k3k/kubeconfig"
	KubeconfigPath     = KubeconfigDir + "/kubeconfig.yaml"
	TokenDir           = "/etc/k3k/token"
	TokenPath          = TokenDir + "/token"
	ConfigDir          = "/etc/k3k/config" // not /etc/rancher/k3s: k3s links k3s.yaml there, so it must stay writable
	ConfigPath         = ConfigDir + "/config.yaml"
	DatastoreSecretDir = "/etc/k3k/datastore"
	ServerTokenPath    = K3sDataDir + "/server/token"
	// EtcdDataDir is on the data volume, beside k3s's own directory.
	EtcdDataDir    = "/var/lib/k3k/etcd"
	EtcdTLSDir     = "/etc/k3k/etcd-tls"
	EtcdCAPath     = EtcdTLSDir + "/ca.crt"
	EtcdCertPath   = EtcdTLSDir + "/tls.crt"
	EtcdKeyPath    = EtcdTLSDir + "/tls.key"
	EtcdRosterDir  = "/etc/k3k/etcd-roster"
	EtcdRosterPath = EtcdRosterDir + "/" + ConfigMapKeyRoster

	APIPort              = 6443
	ServicePort          = 443
	DatastoreClientPort  = 2379
	DatastorePeerPort    = 2380
	DatastoreHealthPort  = 2381
	DatastoreMetricsPort = 2382
	PublisherHealthPort  = 2383

	// SecretKeyToken is the key of the token in the token Secret.
	SecretKeyToken = "token"
	// SecretKeyKubeconfig is the key of the kubeconfig in the kubeconfig Secret.
	SecretKeyKubeconfig = kubeconfig.SecretKey
	// ConfigMapKeyConfig is the key of the k3s config in the server ConfigMap.
	ConfigMapKeyConfig = "config.yaml"
	// ConfigMapKeyRoster is the key of the etcd member roster (JSON).
	ConfigMapKeyRoster = "members.json"

	// FinalizerEtcdMember holds an etcd server pod until its member has been
	// removed from the cluster, or may stay (see etcd.CanReleasePod).
	FinalizerEtcdMember = "k3k.io/etcd-member"
	// MaxServers is the most servers admission allows; the member certificate
	// names every ordinal below it, so scaling never waits for a new certificate.
	MaxServers = 7
)

// Names of the host objects one Cluster becomes.
type Names struct {
	Token, Kubeconfig, ServerConfig, Service, Headless, StatefulSet, ServiceAccount, Ingress string
	// etcd only: the CA (never mounted into a pod), the member certificate
	// every server pod mounts, and the member roster.
	EtcdCA, EtcdMember, EtcdRoster string
}

// NamesFor returns the names of the objects made for c. The token Secret is the
// user's when spec.tokenSecretRef is set.
func NamesFor(c *v1beta1.Cluster) Names {
	p := "k3k-" + c.Name
	n := Names{
		Token:          p + "-token",
		Kubeconfig:     p + "-kubeconfig",
		ServerConfig:   p + "-server-config",
		Service:        p + "-service",
		Headless:       p + "-server-headless",
		StatefulSet:    p + "-server",
		ServiceAccount: p + "-server",
		Ingress:        p + "-ingress",
		EtcdCA:         p + "-etcd-ca",
		EtcdMember:     p + "-etcd-member",
		EtcdRoster:     p + "-etcd-members",
	}
	if c.Spec.TokenSecretRef != nil {
		n.Token = c.Spec.TokenSecretRef.Name
	}
	return n
}

// ServiceHost is the in-cluster DNS name of the API Service.
func ServiceHost(c *v1beta1.Cluster) string {
	return fmt.Sprintf("%s.%s.svc", NamesFor(c).Service, c.Namespace)
}

// Endpoint is the in-cluster URL of the virtual API server; the published
// kubeconfig points at it.
func Endpoint(c *v1beta1.Cluster) string {
	return fmt.Sprintf("https://%s:%d", ServiceHost(c), ServicePort)
}

// ServerPodName is the name of the server pod with ordinal i.
func ServerPodName(c *v1beta1.Cluster, i int) string {
	return fmt.Sprintf("%s-%d", NamesFor(c).StatefulSet, i)
}

// ServerPodHost is the DNS name of a server pod under the headless Service: the
// etcd identity of its member, stable across restarts and IP changes.
func ServerPodHost(c *v1beta1.Cluster, pod string) string {
	return fmt.Sprintf("%s.%s.%s.svc", pod, NamesFor(c).Headless, c.Namespace)
}
