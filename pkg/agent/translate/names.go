package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/pkg/agent/podsecurity"
)

// Labels and annotations on every host object the agent makes. The managed-by
// value differs from the controller's ("k3k") on purpose: the controller's cache
// selects its own objects by that label and must not fill up with workload pods.
const (
	LabelManagedBy        = "app.kubernetes.io/managed-by"
	ManagedByValue        = "k3k-kubelet"
	LabelCluster          = "k3k.io/cluster"
	LabelVirtualNamespace = "k3k.io/virtual-namespace"

	AnnotationKind      = "k3k.io/virtual-kind"
	AnnotationName      = "k3k.io/virtual-name"
	AnnotationNamespace = "k3k.io/virtual-namespace"
	AnnotationUID       = "k3k.io/virtual-uid"
)

// Kind says what a host object stands for. It is part of the name hash, so a
// pod's identity Secret never collides with a user Secret of the same name.
type Kind string

// The kinds of host objects.
const (
	KindPod         Kind = "pod"
	KindConfigMap   Kind = "configmap"
	KindSecret      Kind = "secret"
	KindPodIdentity Kind = "pod-identity"
)

// maxNameLength keeps host names valid as DNS labels and label values.
const maxNameLength = 63

// hashLength is how many hex digits of the hash end a host name: 40 bits, so
// that even a namespace with a million synced objects of one kind has a
// collision chance below one in a million.
const hashLength = 10

// Config is what the translation depends on besides the virtual objects.
type Config struct {
	// ClusterName is the virtual cluster's name (the Cluster object's name).
	ClusterName string
	// HostNamespace is where host objects are made.
	HostNamespace string
	// NodeName is the virtual node the agent registers; downward API
	// spec.nodeName resolves to it.
	NodeName string
	// ClusterDNS, when set, is the nameserver pods with dnsPolicy ClusterFirst
	// use (the virtual cluster's DNS Service as reachable from the host). When
	// empty, pods keep the host's DNS.
	ClusterDNS string
	// ClusterDomain is the virtual cluster's DNS domain. Default cluster.local.
	ClusterDomain string
	// APIServer, when its Host is set, is the virtual API address containers
	// get as KUBERNETES_SERVICE_HOST/PORT instead of the host's.
	APIServer APIServer
	// HostNodeSelector and HostTolerations place host pods on host nodes.
	HostNodeSelector map[string]string
	HostTolerations  []corev1.Toleration
	// OwnerReferences are set on every host pod, typically the Cluster, so the
	// host's garbage collector removes the workloads with the cluster.
	OwnerReferences []metav1.OwnerReference
	// PodSecurityLevel is the Pod Security Standards level every pod must
	// meet (package podsecurity): baseline (the default), restricted or
	// privileged.
	PodSecurityLevel string
	// StorageClasses are the storage classes a PersistentVolumeClaim or a
	// generic ephemeral volume may name. A claim without a class (the host's
	// default) is always allowed; the class "" never is.
	StorageClasses []string
	// DefaultStorageClass is the name of the host's default storage class,
	// when the controller found one: claims may name it as well, and the
	// virtual cluster's copy of it is its default (VirtualStorageClasses), so
	// a claim without a class gets its name from the virtual API server.
	DefaultStorageClass string
	// ExpandableStorageClasses are the classes (of StorageClasses and
	// DefaultStorageClass) whose host class allows volume expansion: their
	// virtual copies do too, so the virtual API server lets a claim grow.
	ExpandableStorageClasses []string
	// PriorityClasses maps the priority classes a virtual pod may name to
	// host PriorityClasses, the host administrator's choice: a host pod's
	// priority decides which pods the host's scheduler preempts, other
	// tenants' included, so the tenant never names a host class itself. A
	// pod naming a class not in the map runs at the host's default
	// priority (PriorityClassProblem says so).
	PriorityClasses map[string]string
	// IngressClasses maps the ingress classes a virtual Ingress may name to
	// host IngressClasses. An Ingress without a class gets the host's
	// default; one naming a class not in the map is refused.
	IngressClasses map[string]string
	// IngressHosts are the hostnames a virtual Ingress may claim: a name, or
	// *.suffix for every name under suffix (IngressHostAllowed). Empty: none,
	// so no Ingress is copied.
	IngressHosts []string

	// DisableSeccompDefault leaves a pod without a pod-level seccomp profile
	// as it is. By default such a host pod gets RuntimeDefault: a container
	// without a profile runs with none on the host (Seccomp: 0), and
	// unshare(CLONE_NEWUSER) then opens user namespaces, the door to kernel
	// bugs. Containers that name their own profile keep it.
	DisableSeccompDefault bool
	// SeccompLocalhostProfiles are the localhostProfile values a Localhost
	// seccomp profile may name (pod or container level, or the legacy
	// annotations). Any other is refused: a Localhost profile is a file on
	// the host node, which the host administrator writes, not the tenant.
	// None by default.
	SeccompLocalhostProfiles []string
	// AppArmorLocalhostProfiles are the localhostProfile values a Localhost
	// AppArmor profile may name (pod or container level, or the deprecated
	// annotation): a profile loaded on the host node by its administrator,
	// which may confine less than the runtime's default. Any other is
	// refused. None by default.
	AppArmorLocalhostProfiles []string
	// DefaultRequests are given to every container (init, sidecar, regular)
	// that requests none of a resource, unless the container sets its own
	// limit of it (the API server then copies the limit into the request)
	// and never above the container's limit; resources the pod sets at pod
	// level are left to it (defaultResources). Nil gives none.
	DefaultRequests corev1.ResourceList
	// DefaultLimits are given to every container that sets no limit of a
	// resource: a pod that sets nothing would otherwise have no memory bound
	// on the host. Nil gives none.
	DefaultLimits corev1.ResourceList
	// MaxTerminationGracePeriodSeconds caps the host pod's
	// terminationGracePeriodSeconds (and the probe-level ones), and every
	// host pod deletion (package podsync): a pod that ignores SIGTERM with a
	// grace period of a year would otherwise run on, Terminating, long after
	// its virtual pod and namespace are gone. Zero means
	// DefaultMaxTerminationGracePeriodSeconds, so no Config is without a
	// cap; negative is refused.
	MaxTerminationGracePeriodSeconds int64
	// AlwaysPullImages gives every host container and image volume the pull
	// policy Always (images.go): without it a tenant runs whatever private
	// image the node has cached, pulled with another tenant's credentials.
	// Off in a host whose images are only ever loaded into the nodes.
	AlwaysPullImages bool
	// AllowRegistryAddresses lets images name their registry by address (an
	// IP, localhost, a one-label name), which are refused by default: the
	// node would connect there to pull (images.go).
	AllowRegistryAddresses bool
	// UserNamespaces runs every host pod in a user namespace of its own
	// (hostUsers: false), so root in a tenant container is an unprivileged
	// user on the node and a kernel bug reached through the container's
	// capabilities (nf_tables, overlayfs, mounts) acts on nothing the node
	// owns. Only where every node's runtime supports it (containerd 2.0 or
	// newer, runc 1.2, idmapped mounts): a kubelet refuses such a pod
	// otherwise. Below the privileged level a pod may not opt out
	// (userNamespaceProblems).
	UserNamespaces bool
}

// DefaultMaxTerminationGracePeriodSeconds is the grace period cap of a
// Config that sets none, and the agent's flag default.
const DefaultMaxTerminationGracePeriodSeconds int64 = 300

// Translator holds a checked Config.
type Translator struct {
	cfg Config
	pss *podsecurity.Evaluator
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Translator, error) {
	if cfg.ClusterName == "" || cfg.HostNamespace == "" || cfg.NodeName == "" {
		return nil, errors.New("translate: cluster name, host namespace and node name are required")
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	if cfg.PodSecurityLevel == "" {
		cfg.PodSecurityLevel = podsecurity.Baseline
	}
	switch {
	case cfg.MaxTerminationGracePeriodSeconds == 0:
		cfg.MaxTerminationGracePeriodSeconds = DefaultMaxTerminationGracePeriodSeconds
	case cfg.MaxTerminationGracePeriodSeconds < 0:
		return nil, fmt.Errorf("translate: max termination grace period %d s: must be positive", cfg.MaxTerminationGracePeriodSeconds)
	}
	// Copied, so a caller changing its lists cannot change the defaults of
	// a Translator already in use.
	cfg.DefaultRequests = cfg.DefaultRequests.DeepCopy()
	cfg.DefaultLimits = cfg.DefaultLimits.DeepCopy()
	pss, err := podsecurity.New(cfg.PodSecurityLevel)
	if err != nil {
		return nil, fmt.Errorf("translate: %w", err)
	}
	return &Translator{cfg: cfg, pss: pss}, nil
}

// Config returns the configuration in effect.
func (t *Translator) Config() Config { return t.cfg }

// HostName is the host name of the virtual object (kind, namespace, name).
func (t *Translator) HostName(kind Kind, namespace, name string) string {
	sum := sha256.Sum256([]byte(t.cfg.ClusterName + "\x00" + string(kind) + "\x00" + namespace + "\x00" + name))
	suffix := hex.EncodeToString(sum[:])[:hashLength]
	prefix := sanitize(name + "-" + namespace)
	if room := maxNameLength - 1 - hashLength; len(prefix) > room {
		prefix = strings.TrimRight(prefix[:room], "-")
	}
	if prefix == "" {
		return suffix
	}
	return prefix + "-" + suffix
}

// sanitize lowercases s and replaces every character that may not appear in a
// DNS label by '-', then trims dashes at both ends.
func sanitize(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-")
}

// hostMeta is the metadata every host object carries.
func (t *Translator) hostMeta(kind Kind, namespace, name string, uid string) metav1.ObjectMeta {
	ann := map[string]string{
		AnnotationKind:      string(kind),
		AnnotationNamespace: namespace,
		AnnotationName:      name,
	}
	if uid != "" {
		ann[AnnotationUID] = uid
	}
	return metav1.ObjectMeta{
		Name:      t.HostName(kind, namespace, name),
		Namespace: t.cfg.HostNamespace,
		Labels: map[string]string{
			LabelManagedBy:        ManagedByValue,
			LabelCluster:          t.cfg.ClusterName,
			LabelVirtualNamespace: namespace,
		},
		Annotations: ann,
	}
}

// HostSelector selects the host objects of this cluster's agent.
func (t *Translator) HostSelector() string {
	return LabelManagedBy + "=" + ManagedByValue + "," + LabelCluster + "=" + t.cfg.ClusterName
}

// VirtualKey says which virtual object a host object stands for.
type VirtualKey struct {
	Kind            Kind
	Namespace, Name string
	UID             string
}

// VirtualKeyOf reads the virtual identity of a host object made by this
// cluster's agent; ok is false for anything else, including another cluster's
// objects and objects whose name does not match their annotations (a host name
// the agent did not derive).
func (t *Translator) VirtualKeyOf(obj metav1.Object) (VirtualKey, bool) {
	l, a := obj.GetLabels(), obj.GetAnnotations()
	if l[LabelManagedBy] != ManagedByValue || l[LabelCluster] != t.cfg.ClusterName {
		return VirtualKey{}, false
	}
	k := VirtualKey{Kind: Kind(a[AnnotationKind]), Namespace: a[AnnotationNamespace], Name: a[AnnotationName], UID: a[AnnotationUID]}
	if k.Kind == "" || k.Name == "" || obj.GetName() != t.HostName(k.Kind, k.Namespace, k.Name) {
		return VirtualKey{}, false
	}
	return k, true
}

// IsCopyOf reports whether obj is this agent's host copy of the virtual
// object kind namespace/name: what every reconcile checks of the host object
// it found under that object's host name before it touches it.
func (t *Translator) IsCopyOf(obj metav1.Object, kind Kind, namespace, name string) bool {
	k, ok := t.VirtualKeyOf(obj)
	return ok && k.Kind == kind && k.Namespace == namespace && k.Name == name
}
