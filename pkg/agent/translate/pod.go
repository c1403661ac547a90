package translate

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/podsecurity"
)

// UnsupportedError says why a virtual pod cannot run on the host. The agent
// reports it on the virtual pod (phase Failed, reason UnsupportedPod) rather than
// retrying: the pod's spec will not change.
type UnsupportedError struct {
	Reasons []string
}

func (e *UnsupportedError) Error() string {
	return "pod refused by the shared-mode agent: " + strings.Join(e.Reasons, "; ")
}

// HostPod builds the host pod that runs vpod. It returns an *UnsupportedError
// for pods that must not or cannot run on the host.
//
// Refused are what would hand a tenant the host node or another tenant's
// data whatever the Pod Security level (unsupported, and Localhost seccomp
// and AppArmor profiles the host administrator did not allow), and what the cluster's
// Pod Security level forbids, evaluated on the virtual pod as written (its
// annotations and ephemeral containers included) and again on the host pod
// as built, so translation can never add what the level forbids.
func (t *Translator) HostPod(vpod *corev1.Pod) (*corev1.Pod, error) {
	reasons := t.unsupported(&vpod.Spec)
	reasons = append(reasons, t.localhostProfiles(&vpod.ObjectMeta, &vpod.Spec)...)
	reasons = append(reasons, t.pss.Check(&vpod.ObjectMeta, &vpod.Spec)...)
	reasons = append(reasons, t.procMount(&vpod.Spec)...)
	reasons = append(reasons, t.ImageProblems(&vpod.Spec)...)
	reasons = append(reasons, t.userNamespaceProblems(&vpod.Spec)...)
	if len(reasons) > 0 {
		return nil, &UnsupportedError{Reasons: reasons}
	}
	ns := vpod.Namespace
	spec := *vpod.Spec.DeepCopy()
	rename := func(kind Kind, name string) string { return t.HostName(kind, ns, name) }
	identity := t.HostName(KindPodIdentity, ns, vpod.Name)

	// Placement: the virtual scheduler already chose this node; where the host
	// pod runs is the host's decision, within the agent's configured placement.
	spec.NodeName = ""
	spec.NodeSelector = copyMap(t.cfg.HostNodeSelector)
	spec.Tolerations = append([]corev1.Toleration(nil), t.cfg.HostTolerations...)
	spec.Affinity = nil
	spec.TopologySpreadConstraints = nil
	spec.SchedulerName = ""
	// Priority: the host class the administrator mapped the virtual one to,
	// else none; the host's priority admission fills in the value and the
	// preemption policy from the host class.
	spec.PriorityClassName = t.cfg.PriorityClasses[spec.PriorityClassName]
	spec.Priority = nil
	spec.PreemptionPolicy = nil
	spec.SchedulingGates = nil
	// Readiness gates name conditions only the virtual cluster's controllers set;
	// the virtual pod's Ready condition mirrors the host's.
	spec.ReadinessGates = nil
	// RuntimeClass admission on the host computes the overhead again.
	spec.Overhead = nil
	spec.EphemeralContainers = nil

	// Identity: the host pod gets no host credentials; its virtual
	// ServiceAccount token comes through the identity Secret.
	spec.ServiceAccountName = ""
	spec.DeprecatedServiceAccount = ""
	spec.AutomountServiceAccountToken = ptr.To(false)
	// Host Service environment variables describe the host, not the virtual
	// cluster.
	spec.EnableServiceLinks = ptr.To(false)
	if spec.Hostname == "" {
		spec.Hostname = hostnameFor(vpod.Name)
	}
	// A subdomain names a virtual headless Service the host does not have,
	// and the host kubelet would write the pod's FQDN in the host namespace
	// into /etc/hosts. The virtual FQDN goes there instead, at 127.0.1.1 (the
	// pod itself, as Debian names its own host): the pod's address is not
	// known before the kubelet writes the file. Others resolve the name
	// through the headless Service (the agent's DNS).
	if spec.Subdomain != "" && t.cfg.ClusterDomain != "" {
		fqdn := spec.Hostname + "." + spec.Subdomain + "." + ns + ".svc." + t.cfg.ClusterDomain
		spec.HostAliases = append(spec.HostAliases, corev1.HostAlias{IP: OwnFQDNAddress, Hostnames: []string{fqdn}})
	}
	spec.Subdomain = ""
	spec.SetHostnameAsFQDN = nil
	t.rewriteDNS(&spec, ns)
	t.pointAtVirtualAPI(&spec)

	// What the tenant left out gets the safe value, not the host's default
	// (defaults.go); resources first, since the memory volumes are sized
	// from the limits they leave.
	t.seccompDefault(&spec)
	t.userNamespace(&spec)
	t.defaultResources(&spec)
	sizeMemoryVolumes(&spec)
	t.capGracePeriods(&spec)
	t.alwaysPull(&spec)

	for i := range spec.ImagePullSecrets {
		spec.ImagePullSecrets[i].Name = rename(KindSecret, spec.ImagePullSecrets[i].Name)
	}
	for i := range spec.Volumes {
		t.rewriteVolume(&spec.Volumes[i], rename, identity)
	}
	var envErr error
	forEachContainer(&spec, func(c *corev1.Container) {
		if err := t.rewriteEnv(c, vpod, rename); err != nil && envErr == nil {
			envErr = err
		}
	})
	if envErr != nil {
		return nil, &UnsupportedError{Reasons: []string{envErr.Error()}}
	}

	meta := t.hostMeta(KindPod, ns, vpod.Name, string(vpod.UID))
	meta.OwnerReferences = append(meta.OwnerReferences, t.cfg.OwnerReferences...)
	for k, v := range FieldAnnotations(vpod) {
		meta.Annotations[k] = v
	}
	host := &corev1.Pod{ObjectMeta: meta, Spec: spec}
	if reasons := t.pss.Check(&host.ObjectMeta, &host.Spec); len(reasons) > 0 {
		return nil, &UnsupportedError{Reasons: reasons}
	}
	return host, nil
}

// procMount refuses a procMount other than Default below the privileged
// level even in a user namespace: the standards allow that from 1.35 on
// (hostUsers false), a host of an older version does not, and the agent guard
// refuses it at the host API whatever the host's version.
func (t *Translator) procMount(spec *corev1.PodSpec) []string {
	if t.pss.Level() == podsecurity.Privileged {
		return nil
	}
	var r []string
	visit := func(c *corev1.Container) {
		if sc := c.SecurityContext; sc != nil && sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
			r = append(r, fmt.Sprintf(`Pod Security %q: procMount (container %q must not set securityContext.procMount to %q, also in a user namespace)`,
				t.pss.Level(), c.Name, *sc.ProcMount))
		}
	}
	forEachContainer(spec, visit)
	for i := range spec.EphemeralContainers {
		visit((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	return r
}

// PodSecurityLevel is the level pods are held to.
func (t *Translator) PodSecurityLevel() string { return t.pss.Level() }

// EphemeralStatuses reports the ephemeral containers of vpod (`kubectl
// debug`), which the agent never runs: each waits with reason UnsupportedPod,
// and the message names the Pod Security violations when the container would
// break the cluster's level, so a tenant sees why a privileged debug container
// never started.
func (t *Translator) EphemeralStatuses(vpod *corev1.Pod) []corev1.ContainerStatus {
	if len(vpod.Spec.EphemeralContainers) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, 0, len(vpod.Spec.EphemeralContainers))
	for _, ec := range vpod.Spec.EphemeralContainers {
		// Evaluated alone, so the message is about this container.
		probe := corev1.PodSpec{
			SecurityContext:     vpod.Spec.SecurityContext,
			EphemeralContainers: []corev1.EphemeralContainer{ec},
		}
		msg := "ephemeral containers (kubectl debug) are not run by the shared-mode agent"
		if reasons := t.pss.Check(&vpod.ObjectMeta, &probe); len(reasons) > 0 {
			msg = "refused: " + podsecurity.Describe(reasons) + "; " + msg
		}
		out = append(out, corev1.ContainerStatus{
			Name:  ec.Name,
			Image: ec.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonUnsupported, Message: msg}},
		})
	}
	return out
}

// unsupported lists what in spec the agent refuses at every Pod Security
// level. Host namespaces, hostPath and host ports would hand a tenant the host
// node; probe and lifecycle hosts make the host kubelet connect wherever the
// tenant says (the node's own kubelet port, a cloud metadata address); a
// runtime class picks a host runtime handler the host administrator did not
// offer the tenant; an ephemeral volume template may only ask for storage
// (ephemeralVolume). The others need host objects the agent does not sync.
// Privileged containers, capabilities, seccomp, AppArmor, SELinux, /proc and
// sysctls are the Pod Security level's (podsecurity).
func (t *Translator) unsupported(spec *corev1.PodSpec) []string {
	var r []string
	if spec.HostNetwork {
		r = append(r, "hostNetwork")
	}
	if spec.HostPID {
		r = append(r, "hostPID")
	}
	if spec.HostIPC {
		r = append(r, "hostIPC")
	}
	if spec.RuntimeClassName != nil && *spec.RuntimeClassName != "" {
		r = append(r, fmt.Sprintf("runtimeClassName %q: runtime classes are the host administrator's", *spec.RuntimeClassName))
	}
	if len(spec.ResourceClaims) > 0 {
		r = append(r, "resourceClaims")
	}
	for _, v := range spec.Volumes {
		switch {
		case v.EmptyDir != nil, v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Image != nil:
		case v.Ephemeral != nil:
			r = append(r, t.ephemeralVolume(v.Name, v.Ephemeral)...)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ClusterTrustBundle != nil || s.PodCertificate != nil {
					r = append(r, fmt.Sprintf("volume %q: clusterTrustBundle and podCertificate projections", v.Name))
				}
			}
		case v.PersistentVolumeClaim != nil:
			// Renamed to the claim's host copy (package volumesync makes it).
		case v.HostPath != nil:
			r = append(r, fmt.Sprintf("volume %q: hostPath", v.Name))
		default:
			r = append(r, fmt.Sprintf("volume %q: only emptyDir, configMap, secret, downwardAPI, projected, ephemeral, persistentVolumeClaim and image volumes are supported", v.Name))
		}
	}
	visit := func(c *corev1.Container) {
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				r = append(r, fmt.Sprintf("container %q: hostPort %d", c.Name, p.HostPort))
			}
		}
		for _, h := range hostHandlers(c) {
			r = append(r, fmt.Sprintf("container %q: %s host %q: the host kubelet would connect there for the pod", c.Name, h.field, h.host))
		}
	}
	forEachContainer(spec, visit)
	for i := range spec.EphemeralContainers {
		visit((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	return r
}

type hostHandler struct{ field, host string }

// hostHandlers lists the probe and lifecycle handlers of c that name a host.
func hostHandlers(c *corev1.Container) []hostHandler {
	var out []hostHandler
	probe := func(field string, p *corev1.Probe) {
		if p == nil {
			return
		}
		if p.HTTPGet != nil && p.HTTPGet.Host != "" {
			out = append(out, hostHandler{field + ".httpGet", p.HTTPGet.Host})
		}
		if p.TCPSocket != nil && p.TCPSocket.Host != "" {
			out = append(out, hostHandler{field + ".tcpSocket", p.TCPSocket.Host})
		}
	}
	probe("livenessProbe", c.LivenessProbe)
	probe("readinessProbe", c.ReadinessProbe)
	probe("startupProbe", c.StartupProbe)
	if l := c.Lifecycle; l != nil {
		for field, h := range map[string]*corev1.LifecycleHandler{"lifecycle.postStart": l.PostStart, "lifecycle.preStop": l.PreStop} {
			if h == nil {
				continue
			}
			if h.HTTPGet != nil && h.HTTPGet.Host != "" {
				out = append(out, hostHandler{field + ".httpGet", h.HTTPGet.Host})
			}
			if h.TCPSocket != nil && h.TCPSocket.Host != "" {
				out = append(out, hostHandler{field + ".tcpSocket", h.TCPSocket.Host})
			}
		}
	}
	return out
}

// ephemeralVolume lists what a generic ephemeral volume asks beyond storage.
// The host's ephemeral volume controller makes a claim from the template in
// the cluster's host namespace: a volumeName would bind it to an existing
// volume (another tenant's data, the server's), a dataSource or
// dataSourceRef would clone one (the server's claim is in the same
// namespace), a selector would pick a volume by its labels, and template
// labels or annotations could make the claim look like the controller's own.
// Only access modes, size, volume mode and an allowed storage class remain.
func (t *Translator) ephemeralVolume(name string, e *corev1.EphemeralVolumeSource) []string {
	var r []string
	bad := func(field string) {
		r = append(r, fmt.Sprintf("volume %q: ephemeral.volumeClaimTemplate.%s", name, field))
	}
	tpl := e.VolumeClaimTemplate
	if tpl == nil {
		return []string{fmt.Sprintf("volume %q: ephemeral without volumeClaimTemplate", name)}
	}
	if len(tpl.Labels) > 0 {
		bad("metadata.labels")
	}
	if len(tpl.Annotations) > 0 {
		bad("metadata.annotations")
	}
	s := tpl.Spec
	if s.VolumeName != "" {
		bad("spec.volumeName")
	}
	if s.DataSource != nil {
		bad("spec.dataSource")
	}
	if s.DataSourceRef != nil {
		bad("spec.dataSourceRef")
	}
	if s.Selector != nil {
		bad("spec.selector")
	}
	if s.VolumeAttributesClassName != nil {
		bad("spec.volumeAttributesClassName")
	}
	if p := t.storageClassProblem(s.StorageClassName); p != "" {
		r = append(r, fmt.Sprintf("volume %q: %s", name, p))
	}
	return r
}

func allowedClasses(c []string) string {
	if len(c) == 0 {
		return "only the host's default class"
	}
	return "the host's default class, " + strings.Join(c, ", ")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hostEphemeral is the template the host gets: storage only (see
// ephemeralVolume for what is refused).
func hostEphemeral(e *corev1.EphemeralVolumeSource) *corev1.EphemeralVolumeSource {
	s := e.VolumeClaimTemplate.Spec
	out := corev1.PersistentVolumeClaimSpec{
		AccessModes:      s.AccessModes,
		VolumeMode:       s.VolumeMode,
		StorageClassName: s.StorageClassName,
	}
	if q, ok := s.Resources.Requests[corev1.ResourceStorage]; ok {
		out.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: q}
	}
	if q, ok := s.Resources.Limits[corev1.ResourceStorage]; ok {
		out.Resources.Limits = corev1.ResourceList{corev1.ResourceStorage: q}
	}
	return &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: out}}
}

// rewriteVolume renames ConfigMap and Secret references and turns downward API
// field references and ServiceAccount tokens into projections of the identity
// Secret.
func (t *Translator) rewriteVolume(v *corev1.Volume, rename func(Kind, string) string, identity string) {
	switch {
	case v.Ephemeral != nil:
		v.Ephemeral = hostEphemeral(v.Ephemeral)
	case v.PersistentVolumeClaim != nil:
		v.PersistentVolumeClaim.ClaimName = rename(KindClaim, v.PersistentVolumeClaim.ClaimName)
	case v.ConfigMap != nil:
		v.ConfigMap.Name = rename(KindConfigMap, v.ConfigMap.Name)
	case v.Secret != nil:
		v.Secret.SecretName = rename(KindSecret, v.Secret.SecretName)
	case v.DownwardAPI != nil:
		d := v.DownwardAPI
		if !hasFieldRef(d.Items) {
			return
		}
		v.DownwardAPI = nil
		v.Projected = &corev1.ProjectedVolumeSource{
			DefaultMode: d.DefaultMode,
			Sources:     splitDownward(d.Items, identity),
		}
	case v.Projected != nil:
		var sources []corev1.VolumeProjection
		for _, s := range v.Projected.Sources {
			switch {
			case s.ConfigMap != nil:
				s.ConfigMap.Name = rename(KindConfigMap, s.ConfigMap.Name)
				sources = append(sources, s)
			case s.Secret != nil:
				s.Secret.Name = rename(KindSecret, s.Secret.Name)
				sources = append(sources, s)
			case s.DownwardAPI != nil:
				sources = append(sources, splitDownward(s.DownwardAPI.Items, identity)...)
			case s.ServiceAccountToken != nil:
				sources = append(sources, corev1.VolumeProjection{Secret: &corev1.SecretProjection{
					LocalObjectReference: corev1.LocalObjectReference{Name: identity},
					Items:                []corev1.KeyToPath{{Key: tokenKey(tokenSpec(s.ServiceAccountToken)), Path: s.ServiceAccountToken.Path}},
				}})
			default:
				sources = append(sources, s)
			}
		}
		v.Projected.Sources = sources
	}
}

func hasFieldRef(items []corev1.DownwardAPIVolumeFile) bool {
	for _, it := range items {
		if it.FieldRef != nil {
			return true
		}
	}
	return false
}

// splitDownward keeps resource field items as a downward API projection (the
// host's values are the virtual pod's: same containers, same resources) and
// turns field items into items of the identity Secret.
func splitDownward(items []corev1.DownwardAPIVolumeFile, identity string) []corev1.VolumeProjection {
	var resources []corev1.DownwardAPIVolumeFile
	var fields []corev1.KeyToPath
	for _, it := range items {
		if it.FieldRef != nil {
			fields = append(fields, corev1.KeyToPath{Key: fieldKey(it.FieldRef.FieldPath), Path: it.Path, Mode: it.Mode})
		} else {
			resources = append(resources, it)
		}
	}
	var out []corev1.VolumeProjection
	if len(resources) > 0 {
		out = append(out, corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{Items: resources}})
	}
	if len(fields) > 0 {
		out = append(out, corev1.VolumeProjection{Secret: &corev1.SecretProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: identity},
			Items:                fields,
		}})
	}
	return out
}

// rewriteEnv renames ConfigMap and Secret references and resolves field
// references that would read the host pod's metadata to the virtual pod's
// values. Status fields (pod and host IPs) stay references: the host values are
// the ones the virtual pod reports.
func (t *Translator) rewriteEnv(c *corev1.Container, vpod *corev1.Pod, rename func(Kind, string) string) error {
	for i := range c.EnvFrom {
		e := &c.EnvFrom[i]
		if e.ConfigMapRef != nil {
			e.ConfigMapRef.Name = rename(KindConfigMap, e.ConfigMapRef.Name)
		}
		if e.SecretRef != nil {
			e.SecretRef.Name = rename(KindSecret, e.SecretRef.Name)
		}
	}
	for i := range c.Env {
		e := &c.Env[i]
		vf := e.ValueFrom
		switch {
		case vf == nil:
		case vf.ConfigMapKeyRef != nil:
			vf.ConfigMapKeyRef.Name = rename(KindConfigMap, vf.ConfigMapKeyRef.Name)
		case vf.SecretKeyRef != nil:
			vf.SecretKeyRef.Name = rename(KindSecret, vf.SecretKeyRef.Name)
		case vf.FieldRef != nil && labelOrAnnotation(vf.FieldRef.FieldPath):
			// Read from the host pod's annotation that carries it
			// (fieldenv.go), so a change reaches the next start.
			vf.FieldRef = &corev1.ObjectFieldSelector{APIVersion: vf.FieldRef.APIVersion,
				FieldPath: "metadata.annotations['" + fieldAnnotation(vf.FieldRef.FieldPath) + "']"}
		case vf.FieldRef != nil && !strings.HasPrefix(vf.FieldRef.FieldPath, "status."):
			v, err := t.FieldValue(vpod, vf.FieldRef.FieldPath)
			if err != nil {
				return fmt.Errorf("container %q env %q: %w", c.Name, e.Name, err)
			}
			e.Value, e.ValueFrom = v, nil
		}
	}
	return nil
}

// rewriteDNS points ClusterFirst pods at the virtual cluster's DNS when one is
// configured, with the search path the virtual kubelet would have written.
func (t *Translator) rewriteDNS(spec *corev1.PodSpec, namespace string) {
	if t.cfg.ClusterDNS == "" {
		return
	}
	switch spec.DNSPolicy {
	case "", corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet:
	default:
		return
	}
	d := t.cfg.ClusterDomain
	cfg := &corev1.PodDNSConfig{
		Nameservers: []string{t.cfg.ClusterDNS},
		Searches:    []string{namespace + ".svc." + d, "svc." + d, d},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("5")}},
	}
	if user := spec.DNSConfig; user != nil {
		cfg.Nameservers = append(cfg.Nameservers, user.Nameservers...)
		cfg.Searches = append(cfg.Searches, user.Searches...)
		cfg.Options = append(cfg.Options, user.Options...)
	}
	spec.DNSPolicy = corev1.DNSNone
	spec.DNSConfig = cfg
}

// OwnFQDNAddress is where a pod's /etc/hosts puts its own virtual FQDN
// (hostname.subdomain.namespace.svc.domain).
const OwnFQDNAddress = "127.0.1.1"

// hostnameFor makes a pod name usable as a hostname (a DNS label), as kubelet
// does by truncating.
func hostnameFor(name string) string {
	h := sanitize(name)
	if len(h) > maxNameLength {
		h = strings.TrimRight(h[:maxNameLength], "-")
	}
	return h
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ActiveDeadlinePatch returns vpod's activeDeadlineSeconds when the host pod
// should take it: a running pod's deadline may be set or shortened (never
// lengthened or removed), and a pod past it is failed by its kubelet, which
// for a virtual pod is the host's. Nil when the host pod has it already.
func ActiveDeadlinePatch(vpod, host *corev1.Pod) *int64 {
	v, h := vpod.Spec.ActiveDeadlineSeconds, host.Spec.ActiveDeadlineSeconds
	if v == nil || (h != nil && *v >= *h) {
		return nil
	}
	return ptr.To(*v)
}

// ImagePatch returns the container images of vpod that differ from host's, by
// container name. Images are, with the deadline (ActiveDeadlinePatch), the
// part of a running pod's spec users change in place; the agent patches them
// onto the host pod.
func ImagePatch(vpod, host *corev1.Pod) map[string]string {
	want := map[string]string{}
	for _, c := range append(append([]corev1.Container(nil), vpod.Spec.InitContainers...), vpod.Spec.Containers...) {
		want[c.Name] = c.Image
	}
	diff := map[string]string{}
	for _, c := range append(append([]corev1.Container(nil), host.Spec.InitContainers...), host.Spec.Containers...) {
		if img, ok := want[c.Name]; ok && img != c.Image {
			diff[c.Name] = img
		}
	}
	return diff
}

// StartedContainers names the containers (init containers first) that
// started between status prev and next: their start time (running, or
// terminated since, for a container that ran too briefly to be seen
// running) is set and new. That is what a kubelet reports with a "Started"
// event.
func StartedContainers(prev, next corev1.PodStatus) []string {
	var out []string
	for _, lists := range [][2][]corev1.ContainerStatus{
		{prev.InitContainerStatuses, next.InitContainerStatuses},
		{prev.ContainerStatuses, next.ContainerStatuses},
	} {
		before := map[string]metav1.Time{}
		for _, c := range lists[0] {
			before[c.Name] = startedAt(c.State)
		}
		for _, c := range lists[1] {
			at := startedAt(c.State)
			if old := before[c.Name]; !at.IsZero() && !old.Equal(&at) {
				out = append(out, c.Name)
			}
		}
	}
	return out
}

// startedAt is when the container of state s last started; zero when it
// has not.
func startedAt(s corev1.ContainerState) metav1.Time {
	switch {
	case s.Running != nil:
		return s.Running.StartedAt
	case s.Terminated != nil:
		return s.Terminated.StartedAt
	}
	return metav1.Time{}
}

// PriorityClassNote says why a pod's priority class is not the host pod's:
// it names a class the host administrator mapped to no host class
// (Config.PriorityClasses), so the host pod runs at the host's default
// priority. Empty when the pod names none or a mapped one.
func (t *Translator) PriorityClassNote(vpod *corev1.Pod) string {
	c := vpod.Spec.PriorityClassName
	if c == "" {
		return ""
	}
	if _, ok := t.cfg.PriorityClasses[c]; ok {
		return ""
	}
	mapped := make([]string, 0, len(t.cfg.PriorityClasses))
	for k := range t.cfg.PriorityClasses {
		mapped = append(mapped, k)
	}
	sort.Strings(mapped)
	allowed := "none is"
	if len(mapped) > 0 {
		allowed = strings.Join(mapped, ", ") + " are"
	}
	return fmt.Sprintf("priority class %q has no host class: the pod runs on the host at the host's default priority (of the virtual cluster's classes, %s mapped to host classes by the host administrator)", c, allowed)
}
