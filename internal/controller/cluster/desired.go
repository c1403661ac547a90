package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// Everything in this file is a pure function of the Cluster and the controller's
// Config: no client, no clock, no randomness (the token is generated in
// controller.go). That is what makes the builders table-testable and a second
// reconcile of an unchanged Cluster a no-op.

// Config is what the controller deploys and the defaults it applies to Clusters
// that leave a choice empty. The Helm chart sets it through flags.
type Config struct {
	// ServerImage is the k3s image repository; the tag is spec.version or
	// DefaultVersion.
	ServerImage string
	// DefaultVersion is the k3s tag used when spec.version is empty.
	DefaultVersion string
	// DatastoreImage runs the datastore sidecar and the kubeconfig publisher.
	DatastoreImage string
	// AgentImage runs the shared-mode agent; empty deploys no agent.
	AgentImage string
	// AgentClusterRole is the ClusterRole holding AgentRules (installed by the
	// chart) that each cluster's agent is bound to in its namespace.
	AgentClusterRole string
	// AllowPrivilegedPods lets Clusters choose spec.podSecurityLevel
	// privileged (the chart's sharedAgent.allowPrivilegedPods); without it
	// such a Cluster's agent holds its pods to baseline.
	AllowPrivilegedPods bool
	// PullPolicy applies to every image the controller deploys.
	PullPolicy corev1.PullPolicy
	// PullSecrets are added to every pod the controller deploys.
	PullSecrets []string
	// DefaultPersistence applies when spec.persistence.type is empty.
	DefaultPersistence v1beta1.PersistenceType
	// DefaultStorageClass applies when spec.persistence.storageClassName is nil.
	DefaultStorageClass string
	// DefaultDatastore applies when spec.datastore.type is empty.
	DefaultDatastore v1beta1.DatastoreType
	// Isolation holds the defaults of spec.quota, spec.limits and
	// spec.networkPolicy (isolation.go).
	Isolation IsolationDefaults
}

// Settings are a Cluster's choices with the controller's defaults applied.
type Settings struct {
	Persistence  v1beta1.PersistenceType
	Datastore    v1beta1.DatastoreType
	StorageClass *string
	StorageSize  resource.Quantity
	ServerImage  string
	Servers      int32
	// ExternalSecret is which keys the external datastore Secret holds, as
	// observed by reconcileExternalSecret (zero without a secretRef).
	ExternalSecret ExternalSecretKeys
}

// InvalidSpecError is a spec that admission accepted but the controller cannot
// realise with its defaults (for example servers: 3 with the default sqlite).
type InvalidSpecError struct{ Message string }

func (e *InvalidSpecError) Error() string { return e.Message }

// Resolve applies cfg's defaults to c and checks what admission could not
// check because it depends on those defaults.
func Resolve(c *v1beta1.Cluster, cfg Config) (Settings, error) {
	s := Settings{
		Persistence:  c.Spec.Persistence.Type,
		Datastore:    c.Spec.Datastore.Type,
		StorageClass: c.Spec.Persistence.StorageClassName,
		Servers:      c.Spec.Servers,
	}
	// A type left unset is resolved once, when the Cluster is created, and
	// recorded in its status; from then on the recorded type holds, so that a
	// changed controller default never switches an existing cluster.
	if s.Persistence == "" {
		s.Persistence = c.Status.PersistenceType
	}
	if s.Persistence == "" {
		s.Persistence = cfg.DefaultPersistence
	}
	if s.Persistence == "" {
		s.Persistence = v1beta1.DynamicPersistence
	}
	if s.Datastore == "" && c.Status.Datastore != nil {
		s.Datastore = c.Status.Datastore.Type
	}
	if s.Datastore == "" {
		s.Datastore = cfg.DefaultDatastore
	}
	if s.Datastore == "" {
		s.Datastore = v1beta1.SQLiteDatastore
	}
	if s.StorageClass == nil && cfg.DefaultStorageClass != "" {
		s.StorageClass = ptr.To(cfg.DefaultStorageClass)
	}
	if s.Servers == 0 {
		s.Servers = 1
	}
	size := c.Spec.Persistence.StorageRequestSize
	if size == "" {
		size = "2Gi"
	}
	q, err := resource.ParseQuantity(size)
	if err != nil {
		return s, &InvalidSpecError{Message: fmt.Sprintf("persistence.storageRequestSize %q is not a quantity", size)}
	}
	s.StorageSize = q
	version := c.Spec.Version
	if version == "" {
		version = cfg.DefaultVersion
	}
	s.ServerImage = cfg.ServerImage + ":" + version
	if s.Datastore == v1beta1.SQLiteDatastore && s.Servers != 1 {
		return s, &InvalidSpecError{Message: fmt.Sprintf(
			"servers: %d needs datastore.type etcd; the datastore in effect is sqlite, which runs exactly 1 server", s.Servers)}
	}
	if s.Datastore == v1beta1.EtcdDatastore && s.Servers%2 == 0 {
		return s, &InvalidSpecError{Message: fmt.Sprintf(
			"servers: %d; the datastore in effect is etcd, which needs an odd number of servers (1, 3, 5 or 7) to keep quorum", s.Servers)}
	}
	return s, nil
}

// commonLabels returns the labels every object of c carries.
func commonLabels(c *v1beta1.Cluster) map[string]string {
	return map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue, v1beta1.LabelCluster: c.Name}
}

// serverLabels select c's server pods.
func serverLabels(c *v1beta1.Cluster) map[string]string {
	l := commonLabels(c)
	l[v1beta1.LabelComponent] = v1beta1.ComponentServer
	return l
}

func objectMeta(c *v1beta1.Cluster, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: commonLabels(c)}
}

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

// ServerConfig renders the k3s configuration file for c's servers. User
// serverArgs are not here: they go on the command line, after it, so they win.
func ServerConfig(c *v1beta1.Cluster, s Settings) ([]byte, error) {
	cfg := k3sConfig{
		DataDir:             layout.K3sDataDir,
		DisableAgent:        true,
		WriteKubeconfig:     layout.KubeconfigPath,
		WriteKubeconfigMode: "0600",
		TLSSAN:              TLSSANs(c),
		TokenFile:           layout.TokenPath,
		HTTPSListenPort:     layout.APIPort,
		ClusterCIDR:         c.Spec.ClusterCIDR,
		ServiceCIDR:         c.Spec.ServiceCIDR,
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
		cfg.DatastoreEndpoint = etcdEndpoints(c, s.Servers)
		cfg.DatastoreCAFile, cfg.DatastoreCertFile, cfg.DatastoreKeyFile = layout.EtcdCAPath, layout.EtcdCertPath, layout.EtcdKeyPath
	case v1beta1.ExternalDatastore:
		externalDatastoreConfig(&cfg, c, s)
	}
	return yaml.Marshal(cfg)
}

// DesiredServerConfigMap holds the generated k3s configuration file.
func DesiredServerConfigMap(c *v1beta1.Cluster, config []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).ServerConfig),
		Data:       map[string]string{layout.ConfigMapKeyConfig: string(config)},
	}
}

// DesiredTokenSecret is the generated token Secret holding token.
func DesiredTokenSecret(c *v1beta1.Cluster, token string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).Token),
		Type:       corev1.SecretTypeOpaque,
	}
	if token != "" {
		s.Data = map[string][]byte{layout.SecretKeyToken: []byte(token)}
	}
	return s
}

// DesiredKubeconfigSecret is the empty Secret the publisher fills. The
// controller creates it so the server pod never needs the create verb.
func DesiredKubeconfigSecret(c *v1beta1.Cluster) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).Kubeconfig),
		Type:       corev1.SecretTypeOpaque,
	}
}

// DesiredService is the API Service, shaped by spec.expose.
func DesiredService(c *v1beta1.Cluster) *corev1.Service {
	port := corev1.ServicePort{
		Name: "https", Protocol: corev1.ProtocolTCP, Port: layout.ServicePort,
		TargetPort: intstr.FromInt32(layout.APIPort),
	}
	svc := &corev1.Service{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).Service),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: serverLabels(c),
		},
	}
	if e := c.Spec.Expose; e != nil {
		switch {
		case e.NodePort != nil:
			svc.Spec.Type = corev1.ServiceTypeNodePort
			if e.NodePort.ServerPort != nil {
				port.NodePort = *e.NodePort.ServerPort
			}
		case e.LoadBalancer != nil:
			svc.Spec.Type = corev1.ServiceTypeLoadBalancer
			if e.LoadBalancer.ServerPort != nil {
				port.Port = *e.LoadBalancer.ServerPort
			}
		}
	}
	svc.Spec.Ports = []corev1.ServicePort{port}
	return svc
}

// DesiredHeadlessService gives every server pod a stable DNS name. It publishes
// not-ready addresses so etcd peers can find each other while they start.
func DesiredHeadlessService(c *v1beta1.Cluster) *corev1.Service {
	tcp := func(name string, p int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: p, TargetPort: intstr.FromInt32(p)}
	}
	return &corev1.Service{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).Headless),
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 serverLabels(c),
			Ports: []corev1.ServicePort{
				tcp("https", layout.APIPort), tcp("etcd-client", layout.DatastoreClientPort), tcp("etcd-peer", layout.DatastorePeerPort),
			},
		},
	}
}

// DesiredIngress routes spec.expose.ingress.host to the API Service, or is nil.
func DesiredIngress(c *v1beta1.Cluster) *networkingv1.Ingress {
	if c.Spec.Expose == nil || c.Spec.Expose.Ingress == nil {
		return nil
	}
	in := c.Spec.Expose.Ingress
	pathType := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).Ingress),
		Spec: networkingv1.IngressSpec{
			IngressClassName: in.IngressClassName,
			Rules: []networkingv1.IngressRule{{
				Host: in.Host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path: "/", PathType: &pathType,
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: layout.NamesFor(c).Service, Port: networkingv1.ServiceBackendPort{Number: layout.ServicePort},
						}},
					}},
				}},
			}},
		},
	}
	if len(in.Annotations) > 0 {
		ing.Annotations = map[string]string{}
		for k, v := range in.Annotations {
			ing.Annotations[k] = v
		}
	}
	return ing
}

// DesiredServiceAccount is the server pod's identity on the host.
func DesiredServiceAccount(c *v1beta1.Cluster) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: objectMeta(c, layout.NamesFor(c).ServiceAccount)}
}

// DesiredRole lets the server pod read and update exactly two Secrets: the
// kubeconfig it publishes and the token it may restore. No create, no list, no
// other Secret.
func DesiredRole(c *v1beta1.Cluster) *rbacv1.Role {
	n := layout.NamesFor(c)
	return &rbacv1.Role{
		ObjectMeta: objectMeta(c, n.ServiceAccount),
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"secrets"},
			ResourceNames: []string{n.Kubeconfig, n.Token},
			Verbs:         []string{"get", "update", "patch"},
		}},
	}
}

// DesiredRoleBinding binds DesiredRole to DesiredServiceAccount.
func DesiredRoleBinding(c *v1beta1.Cluster) *rbacv1.RoleBinding {
	n := layout.NamesFor(c)
	return &rbacv1.RoleBinding{
		ObjectMeta: objectMeta(c, n.ServiceAccount),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: n.ServiceAccount},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: n.ServiceAccount, Namespace: c.Namespace}},
	}
}

// DatastoreArgs is the sidecar's command line for the sqlite datastore.
func DatastoreArgs() []string {
	return []string{
		"/usr/local/bin/datastore", "sqlite",
		"--data-dir=" + layout.DatastoreDataDir,
		"--listen-address=127.0.0.1:" + strconv.Itoa(layout.DatastoreClientPort),
		"--health-address=:" + strconv.Itoa(layout.DatastoreHealthPort),
		"--metrics-address=:" + strconv.Itoa(layout.DatastoreMetricsPort),
		"--pod-dir=" + layout.DatastorePodDir,
	}
}

// PublisherArgs is the kubeconfig publisher's command line.
func PublisherArgs(c *v1beta1.Cluster) []string {
	n := layout.NamesFor(c)
	return []string{
		"/usr/local/bin/datastore", "publish-kubeconfig",
		"--kubeconfig-path=" + layout.KubeconfigPath,
		"--server-url=" + layout.Endpoint(c),
		"--namespace=" + c.Namespace,
		"--secret-name=" + n.Kubeconfig,
		"--token-path=" + layout.ServerTokenPath,
		"--token-secret-name=" + n.Token,
		"--health-address=:" + strconv.Itoa(layout.PublisherHealthPort),
		"--identity=$(POD_NAME)",
	}
}

// ServerArgs is the k3s container's command line: the generated config file,
// then the user's serverArgs, which k3s lets override it.
func ServerArgs(c *v1beta1.Cluster) []string {
	args := []string{"/bin/k3s", "server", "--config=" + layout.ConfigPath}
	return append(args, c.Spec.ServerArgs...)
}

// restrictedContext drops every capability and privilege escalation and keeps
// the root filesystem read-only. The containers run as uid 0 without
// capabilities: the files k3s writes on the shared volume are root-owned with
// mode 0600 and hostPath-backed volumes ignore fsGroup, so a non-root uid could
// not read the token it must restore.
func restrictedContext(readOnlyRoot bool) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(readOnlyRoot),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func httpProbe(path string, port int32, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTP,
		}},
		PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 2,
	}
}

func mount(volume, path string, readOnly bool, subPath string) corev1.VolumeMount {
	return corev1.VolumeMount{Name: volume, MountPath: path, ReadOnly: readOnly, SubPath: subPath}
}

// datastoreSidecar is the sqlite datastore as a native sidecar: an init
// container that keeps running, whose startup probe holds back k3s until the
// datastore answers.
func datastoreSidecar(cfg Config) corev1.Container {
	return corev1.Container{
		Name:            "datastore",
		Image:           cfg.DatastoreImage,
		ImagePullPolicy: cfg.PullPolicy,
		Command:         DatastoreArgs(),
		RestartPolicy:   ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports: []corev1.ContainerPort{
			{Name: "ds-health", ContainerPort: layout.DatastoreHealthPort, Protocol: corev1.ProtocolTCP},
			{Name: "ds-metrics", ContainerPort: layout.DatastoreMetricsPort, Protocol: corev1.ProtocolTCP},
		},
		StartupProbe:   httpProbe("/readyz", layout.DatastoreHealthPort, 1, 300),
		ReadinessProbe: httpProbe("/readyz", layout.DatastoreHealthPort, 5, 3),
		LivenessProbe:  httpProbe("/healthz", layout.DatastoreHealthPort, 10, 6),
		VolumeMounts: []corev1.VolumeMount{
			mount(layout.DataVolume, layout.DatastoreDataDir, false, "datastore"),
			mount(layout.TmpVolume, layout.DatastorePodDir, false, "datastore"),
		},
		SecurityContext: restrictedContext(true),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
		}},
	}
}

// serverContainer runs `k3s server`.
func serverContainer(c *v1beta1.Cluster, s Settings, cfg Config) corev1.Container {
	tcpProbe := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(layout.APIPort)}},
			PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 2,
		}
	}
	ctr := corev1.Container{
		Name:            "k3s",
		Image:           s.ServerImage,
		ImagePullPolicy: cfg.PullPolicy,
		Command:         ServerArgs(c),
		Env:             serverEnv(c),
		Ports:           []corev1.ContainerPort{{Name: "https", ContainerPort: layout.APIPort, Protocol: corev1.ProtocolTCP}},
		StartupProbe:    tcpProbe(1, 600),
		ReadinessProbe:  serverReadinessProbe(),
		LivenessProbe:   tcpProbe(10, 6),
		VolumeMounts: []corev1.VolumeMount{
			mount(layout.DataVolume, layout.K3sDataDir, false, "k3s"),
			mount(layout.ConfigVolume, layout.ConfigDir, true, ""),
			mount(layout.KubeconfigVolume, layout.KubeconfigDir, false, ""),
			mount(layout.TokenVolume, layout.TokenDir, true, ""),
			mount(layout.TmpVolume, "/tmp", false, ""),
		},
		SecurityContext: restrictedContext(false),
	}
	if c.Spec.ServerResources != nil {
		ctr.Resources = *c.Spec.ServerResources.DeepCopy()
	}
	return ctr
}

// serverEnv is spec.serverEnvs as the k3s container's environment.
func serverEnv(c *v1beta1.Cluster) []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, e := range c.Spec.ServerEnvs {
		env = append(env, e.EnvVar())
	}
	return env
}

// serverReadinessProbe makes the server pod Ready, and so an endpoint of the
// API Service, only while its API answers /readyz. k3s opens port 6443 and
// writes its kubeconfig seconds before its API serves, so a TCP probe would
// route clients to a server that refuses them; and k3s turns anonymous auth
// off, so the kubelet cannot ask /readyz itself (401). The publisher asks it
// with the admin kubeconfig k3s wrote and answers on its health port. Startup
// and liveness stay on the cheap TCP check: a slow API makes the pod unready,
// it never gets the container restarted.
func serverReadinessProbe() *corev1.Probe {
	p := httpProbe("/readyz", layout.PublisherHealthPort, 1, 3)
	p.TimeoutSeconds = 4 // the publisher's own request to /readyz times out after 3s
	return p
}

// publisherContainer copies the kubeconfig k3s writes into the kubeconfig
// Secret and restores the token Secret from the server's own copy.
func publisherContainer(c *v1beta1.Cluster, cfg Config) corev1.Container {
	return corev1.Container{
		Name:            "kubeconfig-publisher",
		Image:           cfg.DatastoreImage,
		ImagePullPolicy: cfg.PullPolicy,
		Command:         PublisherArgs(c),
		Env:             []corev1.EnvVar{podNameEnv()},
		Ports:           []corev1.ContainerPort{{Name: "pub-health", ContainerPort: layout.PublisherHealthPort, Protocol: corev1.ProtocolTCP}},
		LivenessProbe:   httpProbe("/healthz", layout.PublisherHealthPort, 10, 6),
		VolumeMounts: []corev1.VolumeMount{
			mount(layout.KubeconfigVolume, layout.KubeconfigDir, true, ""),
			mount(layout.DataVolume, layout.K3sDataDir, true, "k3s"),
		},
		SecurityContext: restrictedContext(true),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
		}},
	}
}

// podNameEnv is POD_NAME from the downward API: a server's identity as an etcd
// member and as a kubeconfig publisher.
func podNameEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
	}}
}

// ConfigHash fingerprints the generated k3s configuration; it goes on the pod
// template so a change rolls the servers.
func ConfigHash(config []byte) string {
	sum := sha256.Sum256(config)
	return hex.EncodeToString(sum[:8])
}

// TemplateConfigHash is the ConfigHash put on the pod template. With etcd the
// list of member endpoints is left out: scaling changes it, and rolling every
// server on each scale step would cost quorum margin for nothing, since k3s's
// etcd client fails over to whichever listed member answers and a restarted
// server reads the current list.
func TemplateConfigHash(c *v1beta1.Cluster, s Settings) (string, error) {
	if s.Datastore == v1beta1.EtcdDatastore {
		s.Servers = 1
	}
	config, err := ServerConfig(c, s)
	if err != nil {
		return "", err
	}
	return ConfigHash(config), nil
}

// DesiredStatefulSet is the server StatefulSet running replicas pods (spec.servers,
// or more while etcd members are being removed; see StatefulSetReplicas).
// configHash is TemplateConfigHash's output.
func DesiredStatefulSet(c *v1beta1.Cluster, s Settings, cfg Config, replicas int32, configHash string) *appsv1.StatefulSet {
	n := layout.NamesFor(c)
	podLabels := serverLabels(c)
	volumes := []corev1.Volume{
		{Name: layout.ConfigVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: n.ServerConfig},
		}}},
		{Name: layout.KubeconfigVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: layout.TmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		// Optional, so a server whose token Secret was deleted still starts and
		// its publisher can restore the Secret from the server's own copy.
		{Name: layout.TokenVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: n.Token, Optional: ptr.To(true),
			Items: []corev1.KeyToPath{{Key: layout.SecretKeyToken, Path: layout.SecretKeyToken}},
		}}},
	}
	var claims []corev1.PersistentVolumeClaim
	if s.Persistence == v1beta1.EphemeralPersistence {
		volumes = append(volumes, corev1.Volume{Name: layout.DataVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	} else {
		claims = []corev1.PersistentVolumeClaim{{
			ObjectMeta: metav1.ObjectMeta{Name: layout.DataVolume, Labels: serverLabels(c)},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: s.StorageClass,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: s.StorageSize,
				}},
			},
		}}
	}
	var initContainers []corev1.Container
	server := serverContainer(c, s, cfg)
	switch s.Datastore {
	case v1beta1.SQLiteDatastore:
		initContainers = append(initContainers, datastoreSidecar(cfg))
	case v1beta1.EtcdDatastore:
		initContainers = append(initContainers, etcdSidecar(c, cfg))
		volumes = append(volumes, etcdVolumes(c)...)
		server.VolumeMounts = append(server.VolumeMounts, mount(layout.EtcdTLSVolume, layout.EtcdTLSDir, true, ""))
	case v1beta1.ExternalDatastore:
		check, extVolumes := externalServerPod(c, s, cfg, &server)
		initContainers = append(initContainers, check...)
		volumes = append(volumes, extVolumes...)
	}
	sort.Slice(volumes, func(i, j int) bool { return volumes[i].Name < volumes[j].Name })
	var pullSecrets []corev1.LocalObjectReference
	for _, name := range cfg.PullSecrets {
		pullSecrets = append(pullSecrets, corev1.LocalObjectReference{Name: name})
	}
	retention := appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	if c.Spec.Persistence.WhenDeleted == v1beta1.RetainVolumes {
		retention = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}

	return &appsv1.StatefulSet{
		ObjectMeta: objectMeta(c, n.StatefulSet),
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			ServiceName:         n.Headless,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: serverLabels(c)},
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: retention,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			VolumeClaimTemplates: claims,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      podLabels,
					Annotations: map[string]string{AnnotationConfigHash: configHash},
				},
				Spec: corev1.PodSpec{
					ServiceAccountName:           n.ServiceAccount,
					AutomountServiceAccountToken: ptr.To(true),
					EnableServiceLinks:           ptr.To(false),
					NodeSelector:                 c.Spec.NodeSelector,
					ImagePullSecrets:             pullSecrets,
					SecurityContext: &corev1.PodSecurityContext{
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					InitContainers: initContainers,
					Containers:     []corev1.Container{server, publisherContainer(c, cfg)},
					Volumes:        volumes,
				},
			},
		},
	}
}
