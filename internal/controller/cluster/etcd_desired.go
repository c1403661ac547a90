package cluster

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/pki"
)

// The pure half of datastore.type etcd: names, certificates' subjects, the
// roster ConfigMap and the sidecar. The controller half is etcd.go.

// EtcdPeer is server pod ordinal i as an etcd member: its name is the pod name
// and its URLs name the pod by DNS under the headless Service, never by IP.
func EtcdPeer(c *v1beta1.Cluster, i int) etcd.Peer {
	pod := layout.ServerPodName(c, i)
	host := layout.ServerPodHost(c, pod)
	return etcd.Peer{
		Name:      pod,
		PeerURL:   fmt.Sprintf("https://%s:%d", host, layout.DatastorePeerPort),
		ClientURL: fmt.Sprintf("https://%s:%d", host, layout.DatastoreClientPort),
	}
}

// EtcdDesired is the membership the controller wants: server pods 0..servers-1.
// lost maps the pods whose sidecar reported a lost data dir to the member that
// lost it; that member is replaced under the same name.
func EtcdDesired(c *v1beta1.Cluster, servers int32, lost map[string]uint64) etcd.Desired {
	d := etcd.Desired{}
	for i := range int(servers) {
		p := EtcdPeer(c, i)
		p.LostMemberID = lost[p.Name]
		d.Members = append(d.Members, p)
	}
	return d
}

// ServerOrdinal is the ordinal of server pod name, or -1 when name is not one
// of c's server pods.
func ServerOrdinal(c *v1beta1.Cluster, name string) int {
	rest, ok := strings.CutPrefix(name, layout.NamesFor(c).StatefulSet+"-")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || strconv.Itoa(i) != rest {
		return -1
	}
	return i
}

// EtcdMemberDNSNames are the names the shared member certificate carries: every
// ordinal admission allows, so that scaling up never waits for a certificate.
// Only DNS names: a member's address changes with every restart.
func EtcdMemberDNSNames(c *v1beta1.Cluster) []string {
	names := make([]string, 0, MaxServers)
	for i := range MaxServers {
		names = append(names, layout.ServerPodHost(c, layout.ServerPodName(c, i)))
	}
	return names
}

// EtcdMemberCertSpec is the certificate every member serves and dials with; k3s
// and the controller use it as their etcd client certificate too.
func EtcdMemberCertSpec(c *v1beta1.Cluster) pki.CertSpec {
	return pki.MemberSpec(layout.NamesFor(c).StatefulSet, EtcdMemberDNSNames(c)...)
}

// EtcdClusterToken is etcd's initial cluster token: unique per Cluster object,
// so members of two virtual clusters (or of a deleted and re-created one) can
// never join each other.
func EtcdClusterToken(c *v1beta1.Cluster) string {
	return "k3k-" + string(c.UID)
}

// Secret keys of the etcd TLS Secrets (the kubernetes.io/tls layout).
const (
	SecretKeyCACert  = "ca.crt"
	SecretKeyTLSCert = corev1.TLSCertKey
	SecretKeyTLSKey  = corev1.TLSPrivateKeyKey
)

// DesiredEtcdCASecret holds the cluster's etcd CA with its key. It is never
// mounted into a pod: only the controller issues certificates.
func DesiredEtcdCASecret(c *v1beta1.Cluster, ca pki.KeyPair) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).EtcdCA),
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{SecretKeyTLSCert: ca.CertPEM, SecretKeyTLSKey: ca.KeyPEM},
	}
}

// DesiredEtcdMemberSecret is what every server pod mounts: the CA certificate
// (without its key) and the member certificate.
func DesiredEtcdMemberSecret(c *v1beta1.Cluster, caCert []byte, member pki.KeyPair) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).EtcdMember),
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			SecretKeyCACert: caCert, SecretKeyTLSCert: member.CertPEM, SecretKeyTLSKey: member.KeyPEM,
		},
	}
}

// DesiredEtcdRosterConfigMap publishes r for members with an empty data dir.
func DesiredEtcdRosterConfigMap(c *v1beta1.Cluster, r etcd.Roster) (*corev1.ConfigMap, error) {
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding etcd member roster: %w", err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).EtcdRoster),
		Data:       map[string]string{layout.ConfigMapKeyRoster: string(raw)},
	}, nil
}

// etcdEndpoints are the client URLs k3s is given: every desired member's.
func etcdEndpoints(c *v1beta1.Cluster, servers int32) string {
	urls := make([]string, 0, servers)
	for _, p := range EtcdDesired(c, servers, nil).Members {
		urls = append(urls, p.ClientURL)
	}
	return strings.Join(urls, ",")
}

// EtcdArgs is the etcd sidecar's command line. The pod name comes from the
// downward API ($(POD_NAME) is expanded by the kubelet), so one template
// serves every ordinal.
//
// A quota (s.EtcdQuotaBytes, spec.datastore.etcd.quotaBackendSize) adds
// --quota-backend-bytes; without it the command line is what it has always
// been, so existing members do not restart.
func EtcdArgs(c *v1beta1.Cluster, s Settings) []string {
	host := layout.ServerPodHost(c, "$(POD_NAME)")
	args := []string{
		"/usr/local/bin/datastore", "etcd",
		"--name=$(POD_NAME)",
		"--data-dir=" + layout.EtcdDataDir + "/data",
		"--peer-url=https://" + host + ":" + strconv.Itoa(layout.DatastorePeerPort),
		"--client-url=https://" + host + ":" + strconv.Itoa(layout.DatastoreClientPort),
		"--members-file=" + layout.EtcdRosterPath,
		"--ca-file=" + layout.EtcdCAPath,
		"--cert-file=" + layout.EtcdCertPath,
		"--key-file=" + layout.EtcdKeyPath,
		"--health-address=:" + strconv.Itoa(layout.DatastoreHealthPort),
		"--metrics-address=:" + strconv.Itoa(layout.DatastoreMetricsPort),
	}
	if s.EtcdQuotaBytes > 0 {
		args = append(args, "--quota-backend-bytes="+strconv.FormatInt(s.EtcdQuotaBytes, 10))
	}
	if migrationPod(s) {
		args = append(args, "--migrate-from-sqlite="+layout.DatastoreDataDir)
	}
	return args
}

// etcdSidecar is the etcd member as a native sidecar. Its startup probe holds
// k3s back until the member has joined and votes; a member waiting to be added
// is alive (liveness) but not ready. It writes its termination message on a
// lost data dir (etcd.DataLostReport), which the controller reads.
func etcdSidecar(c *v1beta1.Cluster, s Settings, cfg Config) corev1.Container {
	return corev1.Container{
		Name:            "datastore",
		Image:           cfg.DatastoreImage,
		ImagePullPolicy: cfg.PullPolicy,
		Command:         EtcdArgs(c, s),
		Env:             []corev1.EnvVar{podNameEnv()},
		RestartPolicy:   ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports: []corev1.ContainerPort{
			{Name: "etcd-client", ContainerPort: layout.DatastoreClientPort, Protocol: corev1.ProtocolTCP},
			{Name: "etcd-peer", ContainerPort: layout.DatastorePeerPort, Protocol: corev1.ProtocolTCP},
			{Name: "ds-health", ContainerPort: layout.DatastoreHealthPort, Protocol: corev1.ProtocolTCP},
			{Name: "ds-metrics", ContainerPort: layout.DatastoreMetricsPort, Protocol: corev1.ProtocolTCP},
		},
		// 20 minutes to be added, catch up and be promoted; a restart after
		// that is harmless (the member re-reads the roster).
		StartupProbe:             httpProbe("/readyz", layout.DatastoreHealthPort, 2, 600),
		ReadinessProbe:           httpProbe("/readyz", layout.DatastoreHealthPort, 5, 3),
		LivenessProbe:            httpProbe("/healthz", layout.DatastoreHealthPort, 10, 6),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		VolumeMounts:             etcdSidecarMounts(s),
		SecurityContext:          restrictedContext(true),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
		}},
	}
}

// etcdVolumes are the member certificate and the roster. The roster is
// optional: a member with data starts without it (a deleted ConfigMap must not
// keep a rebooted cluster down).
func etcdVolumes(c *v1beta1.Cluster) []corev1.Volume {
	n := layout.NamesFor(c)
	return []corev1.Volume{
		{Name: layout.EtcdTLSVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: n.EtcdMember, DefaultMode: ptr.To[int32](0o400),
		}}},
		{Name: layout.EtcdRosterVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: n.EtcdRoster}, Optional: ptr.To(true),
		}}},
	}
}

// etcdSidecarMounts are the etcd sidecar's volumes: its data dir (the data
// volume's subPath etcd), the certificates and the roster; in a migration's
// pods also the SQLite directory (subPath datastore), read-only: the sidecar
// loads it and can never write it.
func etcdSidecarMounts(s Settings) []corev1.VolumeMount {
	mounts := []corev1.VolumeMount{
		mount(layout.DataVolume, layout.EtcdDataDir, false, "etcd"),
		mount(layout.EtcdTLSVolume, layout.EtcdTLSDir, true, ""),
		mount(layout.EtcdRosterVolume, layout.EtcdRosterDir, true, ""),
	}
	if migrationPod(s) {
		mounts = append(mounts, mount(layout.DataVolume, layout.DatastoreDataDir, true, "datastore"))
	}
	return mounts
}
