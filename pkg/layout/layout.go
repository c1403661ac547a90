// Package layout names what one Cluster becomes on the host: its objects, the
// volumes, paths and ports inside its server and agent pods, and the keys of
// its Secrets. It is the contract between the controller that builds those
// pods, the binaries that run in them (cmd/datastore, cmd/kubelet) and the CLI
// that reads them, so each takes its names and defaults from here instead of
// repeating them. It imports only the API types.
package layout

import (
	"fmt"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// Volumes, paths and ports inside a server pod: the contract between the
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
	// DatastorePodDir is the sqlite sidecar's directory that lives as long as
	// the pod (a subPath of the tmp emptyDir): a marker there tells the
	// sidecar's first start in a pod, when no k3s can hold k3s's bootstrap
	// lock and a lock left by a server that died is removed, from a restart
	// beside a running k3s.
	DatastorePodDir = "/run/k3k-datastore"

	APIPort              = 6443
	ServicePort          = 443
	DatastoreClientPort  = 2379
	DatastorePeerPort    = 2380
	DatastoreHealthPort  = 2381
	DatastoreMetricsPort = 2382
	PublisherHealthPort  = 2383

	// SecretKeyToken is the key of the token in the token Secret.
	SecretKeyToken = "token"
	// SecretKeyKubeconfig is the key of the kubeconfig in the kubeconfig
	// Secret. The CLI, users and agents all read this key.
	SecretKeyKubeconfig = "kubeconfig.yaml"
	// ConfigMapKeyConfig is the key of the k3s config in the server ConfigMap.
	ConfigMapKeyConfig = "config.yaml"
	// ConfigMapKeyRoster is the key of the etcd member roster (JSON).
	ConfigMapKeyRoster = "members.json"
)

// Keys of the external datastore Secret, and what the server pod makes of it.
const (
	ExternalKeyEndpoint = "endpoint"
	ExternalKeyCA       = "ca.crt"
	ExternalKeyCert     = "tls.crt"
	ExternalKeyKey      = "tls.key"

	// ExternalCheckContainer is the init container that checks the datastore.
	ExternalCheckContainer = "datastore-check"
	// ExternalEndpointEnv carries the endpoint to k3s and to the check.
	ExternalEndpointEnv = "K3S_DATASTORE_ENDPOINT"
	// K3sDBGuardVolume is the empty read-only directory at k3s's SQLite file,
	// K3sSQLitePath.
	K3sDBGuardVolume = "k3s-db-guard"
	K3sSQLitePath    = K3sDataDir + "/server/db/state.db"
)

// Volumes, paths, ports and the user of the agent pod: the contract between
// the controller's builders and cmd/kubelet.
const (
	AgentCredentialsVolume = "credentials"
	AgentCredentialsDir    = "/var/lib/k3k/credentials"
	AgentHealthPort        = 10248
	AgentKubeletPort       = 10250
	// AgentDNSPort is where the agent answers DNS (UDP and TCP); its DNS
	// Service maps port 53 to it, so the agent needs no privilege to bind.
	AgentDNSPort = 5353
	// NodePortMin and NodePortMax bound the node ports a virtual API server
	// allocates (kube-apiserver's default --service-node-port-range), which
	// the agent serves at its address (pkg/agent/nodeport).
	NodePortMin, NodePortMax = 30000, 32767
	AgentBinary              = "/usr/local/bin/kubelet"
	// AgentUID is the non-root user the agent runs as: it needs no file it
	// does not get through a volume.
	AgentUID = 65532
)

// Names of the host objects one Cluster becomes.
type Names struct {
	Token, Kubeconfig, ServerConfig, Service, Headless, StatefulSet, ServiceAccount, Ingress string
	// etcd only: the CA (never mounted into a pod), the member certificate
	// every server pod mounts, and the member roster.
	EtcdCA, EtcdMember, EtcdRoster string
}

// prefix starts the name of every host object made for cluster.
func prefix(cluster string) string { return "k3k-" + cluster }

// NamesFor returns the names of the objects made for c. The token Secret is the
// user's when spec.tokenSecretRef is set.
func NamesFor(c *v1beta1.Cluster) Names {
	p := prefix(c.Name)
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

// AgentName names the agent's Deployment, ServiceAccount, Role and
// RoleBinding, and the node it registers in the virtual cluster. It takes the
// Cluster's name: the agent knows no more than that (--cluster-name).
func AgentName(cluster string) string { return prefix(cluster) + "-kubelet" }

// AgentDNSName names the Service in front of the agent's DNS server.
func AgentDNSName(cluster string) string { return prefix(cluster) + "-dns" }

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

// The backup CronJob's pod (spec.backup): the contract between the
// controller's builder and `datastore backup`.
const (
	// BackupVolume is the claim named by spec.backup.claimName, mounted at
	// BackupDir.
	BackupVolume = "backup"
	BackupDir    = "/var/lib/k3k/backup"
	// BackupContainer runs `datastore backup`; its termination message is
	// the run's result (snapshotter.Result).
	BackupContainer = "backup"
	// BackupUID is the non-root user the backup runs as; the claim is made
	// writable for it through fsGroup, so the snapshots it writes (mode 0600)
	// are readable by a pod that runs as this user or group.
	BackupUID = 65532
)

// BackupName names the backup CronJob, its ServiceAccount, Role and
// RoleBinding. 41 characters of a Cluster's name make 52, a CronJob's limit.
func BackupName(cluster string) string { return prefix(cluster) + "-backup" }

// The restore Job's pod (spec.restoreFrom): the contract between the
// controller's builder and `datastore restore-from-file`.
const (
	// RestoreVolume is the claim named by spec.restoreFrom.claimName,
	// mounted read-only at RestoreDir.
	RestoreVolume = "snapshots"
	RestoreDir    = "/var/lib/k3k/restore"
	// RestoreTmpVolume is an emptyDir at RestoreTmpDir, where the checked
	// data waits while it is streamed (the root file system is read-only).
	RestoreTmpVolume = "tmp"
	RestoreTmpDir    = "/tmp"
	// RestoreContainer runs `datastore restore-from-file`; its termination
	// message is the run's result (never the token).
	RestoreContainer = "restore"
)

// RestoreName names the restore Job, its ServiceAccount, Role and
// RoleBinding.
func RestoreName(cluster string) string { return prefix(cluster) + "-restore" }
