package cluster

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// The shared-mode agent (cmd/kubelet): pure builders for its Deployment, its
// identity on the host and its condition. Like desired.go, nothing here touches
// a client.

func agentLabels(c *v1beta1.Cluster) map[string]string {
	l := commonLabels(c)
	l[v1beta1.LabelComponent] = v1beta1.ComponentAgent
	return l
}

// DesiredAgentDNSService is the nameserver of the virtual cluster's pods: a
// ClusterIP Service in front of the agent's DNS server (pkg/agent/dnsserver),
// which answers the virtual Service names and forwards the rest to the host
// DNS. Pods get its ClusterIP, which outlives agent pods; the agent reads it
// at start (--dns-service).
func DesiredAgentDNSService(c *v1beta1.Cluster) *corev1.Service {
	port := func(proto corev1.Protocol) corev1.ServicePort {
		return corev1.ServicePort{Name: "dns-" + strings.ToLower(string(proto)), Protocol: proto, Port: 53, TargetPort: intstr.FromInt32(layout.AgentDNSPort)}
	}
	return &corev1.Service{
		ObjectMeta: objectMeta(c, layout.AgentDNSName(c.Name)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: agentLabels(c),
			Ports:    []corev1.ServicePort{port(corev1.ProtocolUDP), port(corev1.ProtocolTCP)},
		},
	}
}

// DesiredAgentServiceAccount is the agent's identity on the host.
func DesiredAgentServiceAccount(c *v1beta1.Cluster) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: objectMeta(c, layout.AgentName(c.Name))}
}

// AgentRules are what the agent may do in the cluster's host namespace, and no
// more. They live in a ClusterRole the Helm chart installs
// (templates/agent-clusterrole.yaml, generated from DesiredAgentClusterRole by
// hack/agentguard, so make verify catches drift) and are granted in one
// namespace by the RoleBinding the controller makes: the controller needs only
// "bind" on that one ClusterRole, never pod creation rights of its own. What
// RBAC can and cannot express shapes them:
//
//   - RBAC has no label selectors. A rule that allows list or watch on Secrets
//     returns every Secret in the namespace, the cluster token and the admin
//     kubeconfig included. So the agent gets no get, list or watch on Secrets
//     at all: it writes its copies blind (create, and unconditional update) and
//     remembers what it wrote; the host garbage collector removes them through
//     their owner references to the host pods.
//   - resourceNames cannot restrict create (the name is not part of the
//     authorization of a create in general), and the agent's names are derived
//     from virtual objects, so they cannot be listed in advance anyway.
//   - update without get can still overwrite any Secret by name, whoever may
//     create pods in a namespace can mount any Secret of it, and pods/exec
//     reaches every pod of the namespace, the server pods included. No Role
//     can prevent that; the agent guard (DesiredAgentGuard, an admission
//     policy the chart installs) does: an agent may write, exec into or mount
//     only objects named by its translation (ending in its 10-digit hash,
//     which no controller-made name does).
//
// ConfigMaps get the same treatment as Secrets, so the server's configuration
// ConfigMap cannot be read through the agent either. Pods: the informer needs
// get, list and watch; create and delete run workloads; update carries image
// changes; pods/log answers `kubectl logs` in the virtual cluster;
// pods/exec, pods/attach and pods/portforward (create for a SPDY upgrade,
// which is a POST, get for a websocket one) answer `kubectl exec/attach/port-forward`, limited by the guard to
// the agent's own pods. No pods/status (the host kubelet writes it), no
// access outside the namespace.
//
// Services and EndpointSlices (discovery.k8s.io): the host copies of the
// virtual cluster's Services, without selectors, with slices the agent writes
// from the host pods it runs. Neither holds a secret, so the agent watches
// them like pods; it also reads the cluster's API Service once at start, to
// point the virtual pods' in-cluster clients at it. Update and delete by name
// would also reach the cluster's own API Service; the guard refuses that. No core Endpoints (nothing reads them
// for selectorless Services once slices exist) and no services/status (no
// load balancers are made).
//
// PersistentVolumeClaims: the host copies of the virtual cluster's claims
// (pkg/agent/volumesync), watched like pods (a claim holds no secret);
// update passes expansions on. Delete by name would also reach the server's
// own claims, and create could select, name or clone a host volume; the guard
// refuses both.
//
// Ingresses (networking.k8s.io): the host copies of the virtual cluster's
// Ingresses when the Cluster enables them, watched like Services; no
// ingresses/status (the host's ingress controller writes it). The guard
// holds their backends and TLS Secrets to the agent's own copies.
//
// Events: read only, to show what the host says about the agent's pods on
// the virtual pods (pkg/agent/eventsync). RBAC cannot narrow a list to the
// Events about some pods, so the agent can read every Event of the
// namespace, the servers' and the controller's included; they hold no secret,
// and the agent already reads the pods they mostly describe. It writes none.
func AgentRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach", "pods/portforward"}, Verbs: []string{"get", "create"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"create", "update"}},
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "watch"}},
	}
}

// DesiredAgentClusterRole is the ClusterRole holding AgentRules, as the chart
// installs it; tests and users without the chart create it from here.
func DesiredAgentClusterRole(name string) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue}},
		Rules:      AgentRules(),
	}
}

// DesiredAgentRoleBinding grants the agent ClusterRole (clusterRole, the
// controller's --agent-cluster-role) to DesiredAgentServiceAccount in the
// cluster's namespace only.
func DesiredAgentRoleBinding(c *v1beta1.Cluster, clusterRole string) *rbacv1.RoleBinding {
	name := layout.AgentName(c.Name)
	return &rbacv1.RoleBinding{
		ObjectMeta: objectMeta(c, name),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: c.Namespace}},
	}
}

// AgentHost is what the controller read of the host for an agent's command
// line.
type AgentHost struct {
	// UserNamespaces is the decision of userNamespacesCondition.
	UserNamespaces bool
	// StorageClasses are the host's StorageClasses (none unless
	// Config.readsStorageClasses).
	StorageClasses []storagev1.StorageClass
}

// AgentArgs is the agent's command line. The Cluster's UID makes the Cluster
// the owner of every host pod, so they go with it. The API Service is how the
// virtual cluster's pods reach their API from the host (the host kubelet
// would point them at the host's); the DNS Service is their nameserver.
//
// The Pod Security level is the Cluster's (AgentPodSecurityLevel); the agent
// guard holds the agent to the same level at the host API. The storage
// classes claims may name are the Cluster's spec.storageClasses, described
// by the host's classes (storageClassArgs); Ingresses are copied with
// spec.ingresses; spec.maxTerminationGracePeriodSeconds caps the workloads'
// grace periods. The host administrator's AgentDefaults follow the
// Cluster's flags; host says what the controller read of the host.
func AgentArgs(c *v1beta1.Cluster, cfg Config, host AgentHost) []string {
	args := []string{
		layout.AgentBinary,
		"--cluster-name=" + c.Name,
		"--cluster-uid=" + string(c.UID),
		"--host-namespace=" + c.Namespace,
		"--node-name=" + layout.AgentName(c.Name),
		"--api-server-service=" + layout.NamesFor(c).Service,
		"--dns-service=" + layout.AgentDNSName(c.Name),
		"--dns-port=" + strconv.Itoa(layout.AgentDNSPort),
		"--credentials-dir=" + layout.AgentCredentialsDir,
		"--health-address=:" + strconv.Itoa(layout.AgentHealthPort),
		"--kubelet-port=" + strconv.Itoa(layout.AgentKubeletPort),
		"--pod-security-level=" + string(AgentPodSecurityLevel(c, cfg)),
	}
	// Only when set, so the Deployment of a Cluster without the field does
	// not change (and restart its agent) on upgrade.
	if len(c.Spec.StorageClasses) > 0 {
		args = append(args, "--storage-classes="+strings.Join(c.Spec.StorageClasses, ","))
	}
	if ing := c.Spec.Ingresses; ing != nil && ing.Enabled {
		args = append(args, "--sync-ingresses")
		if len(ing.Classes) > 0 {
			args = append(args, "--ingress-classes="+pairsFlag(ing.Classes))
		}
		if len(ing.Hosts) > 0 {
			args = append(args, "--ingress-hosts="+strings.Join(ing.Hosts, ","))
		}
	}
	if n := c.Spec.MaxTerminationGracePeriodSeconds; n != nil {
		args = append(args, "--max-termination-grace-period-seconds="+strconv.FormatInt(*n, 10))
	}
	if cfg.readsStorageClasses() {
		args = append(args, storageClassArgs(c.Spec.StorageClasses, host.StorageClasses)...)
	}
	if host.UserNamespaces {
		args = append(args, "--user-namespaces")
	}
	return append(args, agentDefaultsArgs(cfg.Agent)...)
}

// agentDefaultsArgs are the flags of the host administrator's agent
// defaults: none for the zero value (the agent's built-in defaults), so
// that, as above, an upgrade of the controller leaves the Deployments of
// existing agents alone.
func agentDefaultsArgs(d AgentDefaults) []string {
	var args []string
	if d.DisableSeccompDefault {
		args = append(args, "--seccomp-default=false")
	}
	if len(d.SeccompLocalhostProfiles) > 0 {
		args = append(args, "--seccomp-localhost-profiles="+strings.Join(d.SeccompLocalhostProfiles, ","))
	}
	if len(d.AppArmorLocalhostProfiles) > 0 {
		args = append(args, "--apparmor-localhost-profiles="+strings.Join(d.AppArmorLocalhostProfiles, ","))
	}
	if len(d.DefaultRequests) > 0 {
		args = append(args, "--default-requests="+resourceListFlag(d.DefaultRequests))
	}
	if len(d.DefaultLimits) > 0 {
		args = append(args, "--default-limits="+resourceListFlag(d.DefaultLimits))
	}
	if d.DisableAlwaysPullImages {
		args = append(args, "--always-pull-images=false")
	}
	if len(d.PriorityClasses) > 0 {
		args = append(args, "--priority-classes="+pairsFlag(d.PriorityClasses))
	}
	if d.DisableStorageClassCopies {
		args = append(args, "--storage-class-copies=false")
	}
	if d.AllowRegistryAddresses {
		args = append(args, "--allow-registry-addresses")
	}
	if d.HostClusterDomain != "" && d.HostClusterDomain != DefaultHostClusterDomain {
		args = append(args, "--host-cluster-domain="+d.HostClusterDomain)
	}
	return args
}

// pairsFlag renders m as a k=v,k=v flag value, the pairs sorted, so the same
// map always gives the same command line (and Deployment).
func pairsFlag[V ~string](m map[string]V) string {
	pairs := make([]string, 0, len(m))
	for k, v := range m {
		pairs = append(pairs, k+"="+string(v))
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// resourceListFlag is l as name=quantity,… sorted by name, so the same list
// always gives the same command line (and Deployment).
func resourceListFlag(l corev1.ResourceList) string {
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, string(name))
	}
	sort.Strings(names)
	pairs := make([]string, 0, len(names))
	for _, name := range names {
		q := l[corev1.ResourceName(name)]
		pairs = append(pairs, name+"="+q.String())
	}
	return strings.Join(pairs, ",")
}

// AgentPodSecurityLevel is the level the agent holds the Cluster's pods to:
// spec.podSecurityLevel, baseline when empty, and baseline for privileged
// unless the host administrator allowed it (Config.AllowPrivilegedPods).
func AgentPodSecurityLevel(c *v1beta1.Cluster, cfg Config) v1beta1.PodSecurityLevel {
	switch l := c.Spec.PodSecurityLevel; {
	case l == v1beta1.PodSecurityRestricted:
		return l
	case l == v1beta1.PodSecurityPrivileged && cfg.AllowPrivilegedPods:
		return l
	default:
		return v1beta1.PodSecurityBaseline
	}
}

// DesiredAgentDeployment runs one agent. One replica with the Recreate
// strategy: two agents registering the same node would fight over its Lease
// and over the host pods, so the old one is gone before the new one starts.
func DesiredAgentDeployment(c *v1beta1.Cluster, cfg Config, host AgentHost) *appsv1.Deployment {
	n := layout.NamesFor(c)
	var pullSecrets []corev1.LocalObjectReference
	for _, name := range cfg.PullSecrets {
		pullSecrets = append(pullSecrets, corev1.LocalObjectReference{Name: name})
	}
	probe := func(path string) *corev1.Probe { return httpProbe(path, layout.AgentHealthPort, 10, 3) }
	return &appsv1.Deployment{
		ObjectMeta: objectMeta(c, layout.AgentName(c.Name)),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: agentLabels(c)},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: agentLabels(c)},
				Spec: corev1.PodSpec{
					ServiceAccountName:           layout.AgentName(c.Name),
					AutomountServiceAccountToken: ptr.To(true),
					EnableServiceLinks:           ptr.To(false),
					NodeSelector:                 c.Spec.NodeSelector,
					ImagePullSecrets:             pullSecrets,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To(int64(layout.AgentUID)),
						RunAsGroup:     ptr.To(int64(layout.AgentUID)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            "kubelet",
						Image:           cfg.AgentImage,
						ImagePullPolicy: cfg.PullPolicy,
						Command:         AgentArgs(c, cfg, host),
						Env: []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"},
						}}},
						Ports: []corev1.ContainerPort{
							{Name: "health", ContainerPort: layout.AgentHealthPort, Protocol: corev1.ProtocolTCP},
							{Name: "kubelet", ContainerPort: layout.AgentKubeletPort, Protocol: corev1.ProtocolTCP},
							{Name: "dns-udp", ContainerPort: layout.AgentDNSPort, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: layout.AgentDNSPort, Protocol: corev1.ProtocolTCP},
						},
						ReadinessProbe:  probe("/readyz"),
						LivenessProbe:   probe("/healthz"),
						SecurityContext: restrictedContext(true),
						VolumeMounts:    []corev1.VolumeMount{mount(layout.AgentCredentialsVolume, layout.AgentCredentialsDir, true, "")},
					}},
					Volumes: []corev1.Volume{{Name: layout.AgentCredentialsVolume, VolumeSource: corev1.VolumeSource{
						Secret: &corev1.SecretVolumeSource{
							SecretName: n.Kubeconfig,
							Items:      []corev1.KeyToPath{{Key: layout.SecretKeyKubeconfig, Path: layout.SecretKeyKubeconfig}},
						},
					}}},
				},
			},
		},
	}
}

// agentsCondition derives AgentsReady from the agent Deployment as observed
// (nil when it does not exist). The agent's readiness probe passes only while
// its node Lease is current and its pod caches of both clusters are synced, so
// a ready replica means the virtual cluster has a working node.
func agentsCondition(d *appsv1.Deployment) condResult {
	if d == nil {
		return condResult{false, v1beta1.ReasonAgentsStarting, "the agent Deployment does not exist yet"}
	}
	current := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas >= 1
	msg := fmt.Sprintf("%d/1 agents ready", d.Status.ReadyReplicas)
	if current && d.Status.ReadyReplicas >= 1 {
		return condResult{true, v1beta1.ReasonAgentsReady, msg}
	}
	if !current {
		msg += ", rollout in progress"
	}
	return condResult{false, v1beta1.ReasonAgentsStarting, msg}
}
