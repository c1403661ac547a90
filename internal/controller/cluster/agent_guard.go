package cluster

import (
	"encoding/json"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// The agent guard: an admission policy that holds every shared-mode agent to
// the objects it makes itself.
//
// AgentRules has to grant the agent pod creation, Secret updates, Service
// writes and pods/exec in the cluster's host namespace, where the cluster's
// server pods, token, kubeconfig and API Service also live. RBAC cannot say
// "only your own objects": whoever may create pods there may mount the token
// Secret, whoever may exec there may exec into the server pod. The guard says
// it: for requests made by an agent ServiceAccount, every object written (and
// every pod exec'd, attached or port-forwarded) must have a name the agent's
// translation makes (ending in a 10-digit hex hash, pkg/agent/translate), and
// a pod may reference only such ConfigMaps, Secrets and claims, no host
// namespaces, no privileged containers, no host ports and no ServiceAccount
// token. The agent itself never asks for more (it refuses such virtual pods),
// so the guard changes nothing for a working agent and stops a subverted one.
//
// It is installed by the Helm chart (templates/agent-guard.yaml, generated
// from this file by `make generate`); requests of anyone but an agent are not
// looked at.

// agentDefaultMaxGrace is the agent's cap on grace periods where the Cluster
// sets none (translate.DefaultMaxTerminationGracePeriodSeconds; the guard's
// tests check the two agree).
const agentDefaultMaxGrace int64 = 300

// agentUserPattern matches the username of every agent ServiceAccount,
// system:serviceaccount:<namespace>:k3k-<cluster>-kubelet (AgentName).
const agentUserPattern = `^system:serviceaccount:[^:]+:k3k-[^:]+-kubelet$`

// ownName is the CEL regular expression of names the agent derives.
const ownName = `'-[0-9a-f]{10}$'`

// PodDefaults are what every agent gives the pods it makes, by the
// install-wide settings it runs with (AgentDefaults: the controller's
// --agent-* flags, the chart's sharedAgent values; pkg/agent/translate,
// defaults.go and images.go). The guard holds the agents' pods to them too,
// so that a subverted agent cannot hand the host a pod without the defaults
// a working one gives every workload.
type PodDefaults struct {
	// SeccompDefault: every pod carries a pod-level seccomp profile
	// (RuntimeDefault where the tenant named none; --agent-seccomp-default).
	SeccompDefault bool
	// SeccompLocalhostProfiles are the Localhost seccomp profiles a pod may
	// name (--agent-seccomp-localhost-profiles); none when empty.
	SeccompLocalhostProfiles []string
	// AppArmorLocalhostProfiles are the Localhost AppArmor profiles a pod
	// may name (--agent-apparmor-localhost-profiles); none when empty.
	AppArmorLocalhostProfiles []string
	// MemoryLimit: the default limits name memory, so every container has a
	// memory limit (or the pod one) and every Memory emptyDir a size.
	MemoryLimit bool
	// AlwaysPullImages: every container and image volume pulls Always.
	AlwaysPullImages bool
	// AllowRegistryAddresses: images may name their registry by address.
	AllowRegistryAddresses bool
}

// AgentPodDefaults are the agent's own flag defaults, and the chart's.
var AgentPodDefaults = PodDefaults{SeccompDefault: true, MemoryLimit: true, AlwaysPullImages: true}

// PodDefaultsOf are the defaults an agent translating with c applies.
func PodDefaultsOf(c translate.Config) PodDefaults {
	_, memory := c.DefaultLimits[corev1.ResourceMemory]
	return PodDefaults{
		SeccompDefault:            !c.DisableSeccompDefault,
		SeccompLocalhostProfiles:  c.SeccompLocalhostProfiles,
		AppArmorLocalhostProfiles: c.AppArmorLocalhostProfiles,
		MemoryLimit:               memory,
		AlwaysPullImages:          c.AlwaysPullImages,
		AllowRegistryAddresses:    c.AllowRegistryAddresses,
	}
}

// PodDefaultsCEL are PodDefaults as CEL literals, the form the policy
// takes them in: the chart renders them from its values (hack/agentguard),
// everyone else from PodDefaults.CEL.
type PodDefaultsCEL struct {
	// Booleans: "true" or "false".
	SeccompDefault, MemoryLimit, AlwaysPullImages, AllowRegistryAddresses string
	// Lists of strings.
	SeccompLocalhostProfiles, AppArmorLocalhostProfiles string
}

// CEL is d as CEL literals. The profiles are written as JSON, which is a
// CEL list literal, byte for byte what the chart renders (toJson).
func (d PodDefaults) CEL() PodDefaultsCEL {
	list := func(l []string) string {
		b, err := json.Marshal(append([]string{}, l...))
		if err != nil {
			panic(err) // a list of strings always marshals
		}
		return string(b)
	}
	return PodDefaultsCEL{
		SeccompDefault:            strconv.FormatBool(d.SeccompDefault),
		MemoryLimit:               strconv.FormatBool(d.MemoryLimit),
		AlwaysPullImages:          strconv.FormatBool(d.AlwaysPullImages),
		AllowRegistryAddresses:    strconv.FormatBool(d.AllowRegistryAddresses),
		SeccompLocalhostProfiles:  list(d.SeccompLocalhostProfiles),
		AppArmorLocalhostProfiles: list(d.AppArmorLocalhostProfiles),
	}
}

// DesiredAgentGuard is the policy and its binding, both named name, holding
// the agents' pods to defaults d.
func DesiredAgentGuard(name string, d PodDefaultsCEL) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	writes := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
	rule := func(group string, ops []admissionregistrationv1.OperationType, resources ...string) admissionregistrationv1.NamedRuleWithOperations {
		return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: ops,
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: resources, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}}
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				// exec, attach and port-forward are CONNECTs of pods' subresources.
				rule("", append(writes, admissionregistrationv1.Connect), "pods", "pods/exec", "pods/attach", "pods/portforward", "configmaps", "secrets", "services", "persistentvolumeclaims"),
				rule("discovery.k8s.io", writes, "endpointslices"),
				rule("networking.k8s.io", writes, "ingresses"),
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "made-by-a-k3k-agent",
				Expression: "request.userInfo.username.matches('" + agentUserPattern + "')",
			}},
			Variables:   agentGuardVariables(),
			Validations: append(agentGuardValidations(), agentDefaultsValidations(d)...),
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}

func agentGuardVariables() []admissionregistrationv1.Variable {
	return []admissionregistrationv1.Variable{
		// A pod being created or updated (not a subresource, not a delete).
		// A field the request does not carry is absent, not empty: has().
		{Name: "pod", Expression: "request.resource.resource == 'pods' && !has(request.subResource) && object != null"},
		{Name: "containers", Expression: "variables.pod ? object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : []) : []"},
		// A claim being created or updated.
		{Name: "claim", Expression: "request.resource.resource == 'persistentvolumeclaims' && !has(request.subResource) && object != null"},
		// An Ingress being created or updated.
		{Name: "ingress", Expression: "request.resource.resource == 'ingresses' && !has(request.subResource) && object != null"},
	}
}

// own is CEL true when ref (a reference with a name field) names an object
// of the agent's.
func own(ref string) string {
	return "(has(" + ref + ".name) && " + ref + ".name.matches(" + ownName + "))"
}

// ownBackend is CEL true when Ingress backend b routes to a Service the
// agent copied and names no other resource.
func ownBackend(b string) string {
	return "(!has(" + b + ".resource) && (!has(" + b + ".service) || " + b + ".service.name.matches(" + ownName + ")))"
}

// noHandlerHost is CEL true when container c's probes and lifecycle
// handlers name no host.
var noHandlerHost = func() string {
	var parts []string
	for _, h := range []string{"c.livenessProbe", "c.readinessProbe", "c.startupProbe", "c.lifecycle.postStart", "c.lifecycle.preStop"} {
		guard := "has(" + h + ")"
		if strings.HasPrefix(h, "c.lifecycle.") {
			guard = "has(c.lifecycle) && " + guard
		}
		for _, a := range []string{".httpGet", ".tcpSocket"} {
			parts = append(parts, "!("+guard+" && has("+h+a+") && has("+h+a+".host) && "+h+a+".host != '')")
		}
	}
	return "(" + strings.Join(parts, " && ") + ")"
}()

// storageOnly is CEL true when ephemeral volume v asks for nothing but
// storage (see translate.ephemeralVolume for why each field is refused).
const storageOnly = "(has(v.ephemeral.volumeClaimTemplate) && " +
	"(!has(v.ephemeral.volumeClaimTemplate.metadata) || ((!has(v.ephemeral.volumeClaimTemplate.metadata.labels) || size(v.ephemeral.volumeClaimTemplate.metadata.labels) == 0) && " +
	"(!has(v.ephemeral.volumeClaimTemplate.metadata.annotations) || size(v.ephemeral.volumeClaimTemplate.metadata.annotations) == 0))) && " +
	"!has(v.ephemeral.volumeClaimTemplate.spec.volumeName) && !has(v.ephemeral.volumeClaimTemplate.spec.dataSource) && " +
	"!has(v.ephemeral.volumeClaimTemplate.spec.dataSourceRef) && !has(v.ephemeral.volumeClaimTemplate.spec.selector) && " +
	"!has(v.ephemeral.volumeClaimTemplate.spec.volumeAttributesClassName) && " +
	"(!has(v.ephemeral.volumeClaimTemplate.spec.storageClassName) || v.ephemeral.volumeClaimTemplate.spec.storageClassName != ''))"

// claimStorageOnly is CEL true when the claim object asks for nothing but
// storage (see translate.ClaimProblems). The host's PersistentVolume
// controller sets volumeName when it binds, and its default class admission
// the class, so an update must keep both as they are: the API lets volumeName
// be set once on an unbound claim, which would bind it to any host volume.
const claimStorageOnly = "!has(object.spec.selector) && !has(object.spec.dataSource) && !has(object.spec.dataSourceRef) && " +
	"!has(object.spec.volumeAttributesClassName) && " +
	"(oldObject == null ? (!has(object.spec.volumeName) || object.spec.volumeName == '') && " +
	"(!has(object.spec.storageClassName) || object.spec.storageClassName != '') : " +
	"(has(object.spec.volumeName) ? object.spec.volumeName : '') == (has(oldObject.spec.volumeName) ? oldObject.spec.volumeName : '') && " +
	"(has(object.spec.storageClassName) ? object.spec.storageClassName : '-') == (has(oldObject.spec.storageClassName) ? oldObject.spec.storageClassName : '-'))"

// claimMetadata is CEL true when the claim object carries only the agent's
// labels and annotations, or ones its old version already had (the host's
// controllers annotate claims they bind): never the annotations host
// provisioners and the scheduler read (volume.beta.kubernetes.io/storage-class
// picks a class, volume.kubernetes.io/selected-node a node).
const claimMetadata = "(!has(object.metadata.annotations) || object.metadata.annotations.all(k, k.startsWith('k3k.io/') || " +
	"(oldObject != null && has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && oldObject.metadata.annotations[k] == object.metadata.annotations[k]))) && " +
	"(!has(object.metadata.labels) || object.metadata.labels.all(k, k.startsWith('k3k.io/') || " +
	"(k == 'app.kubernetes.io/managed-by' && object.metadata.labels[k] == 'k3k-kubelet') || " +
	"(oldObject != null && has(oldObject.metadata.labels) && k in oldObject.metadata.labels && oldObject.metadata.labels[k] == object.metadata.labels[k])))"

func agentGuardValidations() []admissionregistrationv1.Validation {
	forbidden := ptr.To(metav1.StatusReasonForbidden)
	podOnly := func(cond string) string { return "!variables.pod || (" + cond + ")" }
	absentOrFalse := func(field string) string { return "(!has(" + field + ") || !" + field + ")" }
	volume := strings.Join([]string{
		"has(v.emptyDir)", "has(v.downwardAPI)", "has(v.ephemeral)", "has(v.image)",
		"(has(v.persistentVolumeClaim) && v.persistentVolumeClaim.claimName.matches(" + ownName + "))",
		"(has(v.secret) && has(v.secret.secretName) && v.secret.secretName.matches(" + ownName + "))",
		"(has(v.configMap) && " + own("v.configMap") + ")",
		"(has(v.projected) && (!has(v.projected.sources) || v.projected.sources.all(s, has(s.downwardAPI) || " +
			"(has(s.secret) && " + own("s.secret") + ") || (has(s.configMap) && " + own("s.configMap") + "))))",
	}, " || ")
	env := "(!has(c.env) || c.env.all(e, !has(e.valueFrom) || (" +
		"(!has(e.valueFrom.secretKeyRef) || " + own("e.valueFrom.secretKeyRef") + ") && " +
		"(!has(e.valueFrom.configMapKeyRef) || " + own("e.valueFrom.configMapKeyRef") + ")))) && " +
		"(!has(c.envFrom) || c.envFrom.all(f, (!has(f.secretRef) || " + own("f.secretRef") + ") && " +
		"(!has(f.configMapRef) || " + own("f.configMapRef") + ")))"
	return []admissionregistrationv1.Validation{
		{
			Expression: "request.name.matches(" + ownName + ")",
			// An absent subResource is no empty string in CEL: has() asks.
			MessageExpression: "'a k3k agent may only write ' + request.resource.resource + (has(request.subResource) && request.subResource != '' ? '/' + request.subResource : '') + " +
				"' of objects it named (ending in a 10-digit hash); \"' + request.name + '\" is not one'",
			Message: "a k3k agent may only write objects it named (ending in a 10-digit hash)",
			Reason:  forbidden,
		},
		{
			Expression: podOnly("has(object.spec.automountServiceAccountToken) && !object.spec.automountServiceAccountToken && " +
				"(!has(object.spec.serviceAccountName) || object.spec.serviceAccountName == 'default')"),
			Message: "a pod made by a k3k agent must not mount a host ServiceAccount token (automountServiceAccountToken false, ServiceAccount default)",
			Reason:  forbidden,
		},
		{
			Expression: podOnly(absentOrFalse("object.spec.hostNetwork") + " && " + absentOrFalse("object.spec.hostPID") + " && " + absentOrFalse("object.spec.hostIPC")),
			Message:    "a pod made by a k3k agent must not use the host's network, PID or IPC namespace",
			Reason:     forbidden,
		},
		{
			Expression: podOnly("!has(object.spec.volumes) || object.spec.volumes.all(v, " + volume + ")"),
			Message:    "a pod made by a k3k agent may only use emptyDir, downwardAPI, ephemeral and image volumes, and ConfigMaps and Secrets the agent copied, and the claims it made",
			Reason:     forbidden,
		},
		{
			Expression: podOnly("variables.containers.all(c, " + env + ")"),
			Message:    "a pod made by a k3k agent may only take environment from ConfigMaps and Secrets the agent copied",
			Reason:     forbidden,
		},
		{
			Expression: podOnly("variables.containers.all(c, !has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0))"),
			Message:    "a pod made by a k3k agent must not open host ports",
			Reason:     forbidden,
		},
		{
			Expression: podOnly("variables.containers.all(c, " + noHandlerHost + ")"),
			Message:    "a pod made by a k3k agent must not name a host in probes or lifecycle handlers (the host kubelet would connect there)",
			Reason:     forbidden,
		},
		{
			Expression: podOnly("!has(object.spec.runtimeClassName) || object.spec.runtimeClassName == ''"),
			Message:    "a pod made by a k3k agent must not choose a runtime class",
			Reason:     forbidden,
		},
		{
			Expression: podOnly("!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.ephemeral) || " + storageOnly + ")"),
			Message: "a generic ephemeral volume of a pod made by a k3k agent may only ask for storage: no template labels or annotations, " +
				"volumeName, dataSource, dataSourceRef, selector or volumeAttributesClassName",
			Reason: forbidden,
		},
		{
			Expression: podOnly("!has(object.spec.imagePullSecrets) || object.spec.imagePullSecrets.all(s, " + own("s") + ")"),
			Message:    "a pod made by a k3k agent may only pull with Secrets the agent copied",
			Reason:     forbidden,
		},
		{
			Expression: "!variables.claim || (" + claimStorageOnly + ")",
			Message: "a PersistentVolumeClaim made by a k3k agent may only ask for storage: no selector, dataSource, dataSourceRef, " +
				"volumeAttributesClassName or storage class \"\", and no volumeName or storage class other than the host gave it",
			Reason: forbidden,
		},
		{
			Expression: "!variables.claim || (" + claimMetadata + ")",
			Message:    "a PersistentVolumeClaim made by a k3k agent may carry only k3k's labels and annotations (and those the host set)",
			Reason:     forbidden,
		},
		{
			Expression: "!variables.ingress || ((!has(object.spec.defaultBackend) || " + ownBackend("object.spec.defaultBackend") + ") && " +
				"(!has(object.spec.rules) || object.spec.rules.all(r, !has(r.http) || r.http.paths.all(p, " + ownBackend("p.backend") + "))) && " +
				"(!has(object.spec.tls) || object.spec.tls.all(t, !has(t.secretName) || t.secretName.matches(" + ownName + "))))",
			Message: "an Ingress made by a k3k agent may only route to Services the agent copied and use TLS Secrets the agent copied (no resource backends)",
			Reason:  forbidden,
		},
		{
			// The hostnames themselves are the Cluster's to allow:
			// DesiredAgentIngressGuard.
			Expression: "!variables.ingress || (!has(object.spec.defaultBackend) && (!has(object.spec.rules) || object.spec.rules.all(r, has(r.host) && r.host != '')) && " +
				"(!has(object.spec.tls) || object.spec.tls.all(t, has(t.hosts) && size(t.hosts) > 0)))",
			Message: "an Ingress made by a k3k agent may not answer for every hostname of the host's ingress controller: no default backend, a host on every rule and hosts on every TLS entry",
			Reason:  forbidden,
		},
		{
			Expression: "!variables.ingress || !has(object.metadata.annotations) || object.metadata.annotations.all(k, k.startsWith('k3k.io/'))",
			Message:    "an Ingress made by a k3k agent may carry only k3k's annotations (the others configure the host's ingress controller)",
			Reason:     forbidden,
		},
		{
			Expression: "request.resource.resource != 'endpointslices' || object == null || " +
				"(has(object.metadata.labels) && 'kubernetes.io/service-name' in object.metadata.labels && " +
				"object.metadata.labels['kubernetes.io/service-name'].matches(" + ownName + "))",
			Message: "an EndpointSlice made by a k3k agent must belong to a Service the agent copied",
			Reason:  forbidden,
		},
	}
}

// agentDefaultsValidations hold the agents' pods to the defaults d every
// agent applies (translate.HostPod). All but the registry rule look at
// creation only: those fields cannot change afterwards, and checking updates
// would only stop image changes of pods made before a default was turned on.
// An image can change, so the registry rule holds for updates too.
func agentDefaultsValidations(d PodDefaultsCEL) []admissionregistrationv1.Validation {
	forbidden := ptr.To(metav1.StatusReasonForbidden)
	created := func(setting, cond string) string {
		return "!variables.pod || oldObject != null || !(" + setting + ") || (" + cond + ")"
	}
	// localhostOK is CEL true when seccomp or AppArmor profile p (a field
	// that may be absent) is no Localhost profile outside allowed.
	localhostOK := func(p, allowed string) string {
		return "(!has(" + p + ") || " + p + ".type != 'Localhost' || (has(" + p + ".localhostProfile) && " + p + ".localhostProfile in " + allowed + "))"
	}
	// profilesOK is CEL true when the pod and every container name only
	// allowed Localhost profiles in security-context field f.
	profilesOK := func(f, allowed string) string {
		return "(!has(object.spec.securityContext) || " + localhostOK("object.spec.securityContext."+f, allowed) + ") && " +
			"variables.containers.all(c, !has(c.securityContext) || " + localhostOK("c.securityContext."+f, allowed) + ")"
	}
	// address is CEL true when image i names its registry by address
	// (translate.RegistryAddressPattern; a raw string, the pattern has no
	// quote).
	address := func(i string) string {
		return i + ".lowerAscii().matches(r'" + translate.RegistryAddressPattern + "')"
	}
	memoryLimit := func(r string) string {
		return "(has(" + r + ") && has(" + r + ".limits) && 'memory' in " + r + ".limits)"
	}
	return []admissionregistrationv1.Validation{
		{
			// Windows pods may not carry one (the agent leaves them alone).
			Expression: created(d.SeccompDefault, "(has(object.spec.os) && object.spec.os.name == 'windows') || "+
				"(has(object.spec.securityContext) && has(object.spec.securityContext.seccompProfile))"),
			Message: "a pod made by a k3k agent must carry a pod-level seccomp profile (the agent gives RuntimeDefault to pods that name none)",
			Reason:  forbidden,
		},
		{
			// The legacy annotations are ignored by kubelets since 1.27 and
			// never written by the agent: refused in any spelling.
			Expression: "!variables.pod || oldObject != null || (" + profilesOK("seccompProfile", d.SeccompLocalhostProfiles) + " && " +
				"(!has(object.metadata.annotations) || object.metadata.annotations.all(k, k != 'seccomp.security.alpha.kubernetes.io/pod' && " +
				"!k.startsWith('container.seccomp.security.alpha.kubernetes.io/'))))",
			Message: "a pod made by a k3k agent may name only the Localhost seccomp profiles the host administrator allowed, and no seccomp annotation",
			Reason:  forbidden,
		},
		{
			// The API server has turned a container's AppArmor annotation
			// into its field by now (and refused the two disagreeing); the
			// annotation is held to the list too, as the agent never
			// writes one.
			Expression: "!variables.pod || oldObject != null || (" + profilesOK("appArmorProfile", d.AppArmorLocalhostProfiles) + " && " +
				"(!has(object.metadata.annotations) || object.metadata.annotations.all(k, !k.startsWith('container.apparmor.security.beta.kubernetes.io/') || " +
				"!object.metadata.annotations[k].startsWith('" + corev1.DeprecatedAppArmorBetaProfileNamePrefix + "') || " +
				"object.metadata.annotations[k].substring(" + strconv.Itoa(len(corev1.DeprecatedAppArmorBetaProfileNamePrefix)) + ") in " + d.AppArmorLocalhostProfiles + ")))",
			Message: "a pod made by a k3k agent may name only the Localhost AppArmor profiles the host administrator allowed",
			Reason:  forbidden,
		},
		{
			Expression: created(d.MemoryLimit, memoryLimit("object.spec.resources")+" || variables.containers.all(c, "+memoryLimit("c.resources")+")"),
			Message:    "a pod made by a k3k agent must bound its memory: a memory limit on every container or on the pod (the agent's default limits name memory)",
			Reason:     forbidden,
		},
		{
			Expression: created(d.MemoryLimit, "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.emptyDir) || "+
				"!has(v.emptyDir.medium) || v.emptyDir.medium != 'Memory' || has(v.emptyDir.sizeLimit))"),
			Message: "a pod made by a k3k agent must give every emptyDir of medium Memory a sizeLimit (the agent gives the pod's memory limit)",
			Reason:  forbidden,
		},
		{
			Expression: created(d.AlwaysPullImages, "variables.containers.all(c, has(c.imagePullPolicy) && c.imagePullPolicy == 'Always') && "+
				"(!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.image) || (has(v.image.pullPolicy) && v.image.pullPolicy == 'Always')))"),
			Message: "a pod made by a k3k agent must pull every image Always (the host's sharedAgent.alwaysPullImages)",
			Reason:  forbidden,
		},
		{
			Expression: "!variables.pod || " + d.AllowRegistryAddresses + " || (" +
				"variables.containers.all(c, !has(c.image) || !" + address("c.image") + ") && " +
				"(!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.image) || !has(v.image.reference) || !" + address("v.image.reference") + ")))",
			Message: "a pod made by a k3k agent must not name an image registry by address (an IP, localhost or a one-label name): the host node would connect there to pull",
			Reason:  forbidden,
		},
	}
}

// The agent's Pod Security guard: a second policy, since it needs the
// cluster's level and every other rule must hold without it.
//
// Its parameters are the Cluster objects of the request's namespace
// (paramKind Cluster, every Cluster of the namespace selected): each is
// evaluated and the results are ANDed; the one whose name is the agent's
// cluster (from the agent's username, k3k-<cluster>-kubelet) decides, the
// others pass. The level is what spec.podSecurityLevel says, baseline when
// empty, and baseline for privileged unless the host administrator allowed it
// (allowPrivileged, the chart's sharedAgent.allowPrivilegedPods). An agent
// cannot change its Cluster (its Role has no rights on Clusters). A namespace
// without a Cluster gives an agent no pods at all (parameterNotFoundAction
// Deny).
//
// The checks are the Pod Security Standards' (baseline: privileged,
// capabilities, seccomp and AppArmor Unconfined, SELinux, procMount, sysctls,
// Windows host processes; restricted adds privilege escalation, non-root,
// seccomp profile, capabilities dropped), written in CEL from
// k8s.io/pod-security-admission/policy v0.37. Host namespaces, hostPath, host
// ports and probe hosts are refused at every level by the agent guard.

// baselineCapabilities may be added at the baseline level.
var baselineCapabilities = []string{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}

// safeSysctls may be set at the baseline level.
var safeSysctls = []string{
	"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
	"net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
	"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat",
}

// seLinuxTypes may be set at the baseline level.
var seLinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

func celList(items []string) string {
	q := make([]string, len(items))
	for i, it := range items {
		q[i] = "'" + it + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// DesiredAgentPodSecurityGuard is the Pod Security policy and its binding,
// both named name. allowPrivileged is a CEL boolean literal ("true" or
// "false"): whether a Cluster may choose the privileged level.
func DesiredAgentPodSecurityGuard(name, allowPrivileged string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	// Creation only: a pod's security context, volumes and containers cannot
	// change afterwards (only images and ephemeral containers can, and the
	// agent's Role has no pods/ephemeralcontainers), so checking updates
	// would add nothing but stop image changes of pods made before the
	// Cluster's level was raised.
	return clusterParamGuard(name, admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}, podSecurityVariables(allowPrivileged), podSecurityValidations())
}

// clusterParamGuard is a policy named name for the agents' writes that rule
// matches, with the Clusters of the request's namespace as its parameters,
// and its binding. Every Cluster of the namespace is a param and each must
// pass; the variables sa (the agent's ServiceAccount name) and mine (this
// param is the agent's own Cluster) come first, then vars.
func clusterParamGuard(name string, rule admissionregistrationv1.RuleWithOperations, vars []admissionregistrationv1.Variable, validations []admissionregistrationv1.Validation) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: v1beta1.GroupVersion.String(), Kind: "Cluster"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: rule}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "made-by-a-k3k-agent",
				Expression: "request.userInfo.username.matches('" + agentUserPattern + "')",
			}},
			Variables: append([]admissionregistrationv1.Variable{
				// system:serviceaccount:<ns>:k3k-<cluster>-kubelet
				{Name: "sa", Expression: "request.userInfo.username.split(':')[3]"},
				{Name: "mine", Expression: "params.metadata.name == variables.sa.substring(4, size(variables.sa) - 8)"},
			}, vars...),
			Validations: validations,
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name,
			// Allow, not Deny, where a namespace holds no Cluster: the API
			// server looks the params up before it evaluates the match
			// condition, so Deny refused every pod of every such namespace
			// to everyone (seen on a real node: the controller's own
			// ReplicaSet could not make its pod in k3k-system). Agents exist
			// only beside their Cluster; the main guard's rules hold them
			// everywhere.
			ParamRef: &admissionregistrationv1.ParamRef{
				Selector:                &metav1.LabelSelector{},
				ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction),
			},
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}

func podSecurityVariables(allowPrivileged string) []admissionregistrationv1.Variable {
	return []admissionregistrationv1.Variable{
		{Name: "pod", Expression: "!has(request.subResource) && object != null"},
		// Every Cluster of the namespace is a param and each must pass: another
		// cluster's param holds the agent to baseline, so an agent whose own
		// Cluster is gone (its ServiceAccount not yet collected) or is not
		// matched never escapes to privileged.
		{Name: "specLevel", Expression: "!has(params.spec.podSecurityLevel) || params.spec.podSecurityLevel == '' ? 'baseline' : params.spec.podSecurityLevel"},
		// A VirtualClusterPolicy's level where stricter (policy.go: the
		// stored spec of a Cluster made before its policy may be looser).
		{Name: "boundLevel", Expression: "has(params.status) && has(params.status.policyBounds) && has(params.status.policyBounds.podSecurityLevel) && " +
			podSecurityRankCEL + "[params.status.policyBounds.podSecurityLevel] > " + podSecurityRankCEL + "[variables.specLevel] ? " +
			"params.status.policyBounds.podSecurityLevel : variables.specLevel"},
		{Name: "level", Expression: "!variables.mine ? 'baseline' : " +
			"(variables.boundLevel == 'privileged' && !(" + allowPrivileged + ") ? 'baseline' : variables.boundLevel)"},
		{Name: "enforce", Expression: "variables.pod && variables.level != 'privileged'"},
		{Name: "restricted", Expression: "variables.enforce && variables.level == 'restricted'"},
		{Name: "containers", Expression: "variables.pod ? object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : []) : []"},
		{Name: "psc", Expression: "variables.pod && has(object.spec.securityContext) ? object.spec.securityContext : null"},
		// The agent's cap on grace periods (translate.capGracePeriods):
		// the Cluster's, or the agent's default, or a policy's where
		// smaller.
		{Name: "specGrace", Expression: "has(params.spec.maxTerminationGracePeriodSeconds) ? params.spec.maxTerminationGracePeriodSeconds : " +
			strconv.FormatInt(agentDefaultMaxGrace, 10)},
		{Name: "maxGrace", Expression: "has(params.status) && has(params.status.policyBounds) && has(params.status.policyBounds.maxTerminationGracePeriodSeconds) && " +
			"params.status.policyBounds.maxTerminationGracePeriodSeconds < variables.specGrace ? params.status.policyBounds.maxTerminationGracePeriodSeconds : variables.specGrace"},
		// The controller's decision that the agent runs its pods in user
		// namespaces (userns.go), which the agent cannot change: its Role
		// has no rights on Clusters.
		{Name: "userns", Expression: "variables.mine && has(params.status) && has(params.status.conditions) && " +
			"params.status.conditions.exists(c, c.type == '" + v1beta1.ConditionUserNamespaces + "' && c.status == 'True')"},
	}
}

func podSecurityValidations() []admissionregistrationv1.Validation {
	forbidden := ptr.To(metav1.StatusReasonForbidden)
	// csc is CEL true when container c has a securityContext with field set.
	csc := func(field string) string { return "(has(c.securityContext) && has(c.securityContext." + field + "))" }
	psc := func(field string) string { return "(variables.psc != null && has(variables.psc." + field + "))" }
	rule := func(restricted bool, check, what string) admissionregistrationv1.Validation {
		gate := "!variables.enforce"
		if restricted {
			gate = "!variables.restricted"
		}
		return admissionregistrationv1.Validation{
			Expression:        gate + " || (" + check + ")",
			MessageExpression: "'a pod made by a k3k agent for cluster ' + params.metadata.name + ' must meet Pod Security level ' + variables.level + ': " + what + "'",
			Reason:            forbidden,
		}
	}
	seLinuxOK := func(o string) string {
		return "(!has(" + o + ".type) || " + o + ".type in " + celList(seLinuxTypes) + ") && (!has(" + o + ".user) || " + o + ".user == '') && (!has(" + o + ".role) || " + o + ".role == '')"
	}
	podNonRoot := psc("runAsNonRoot") + " && variables.psc.runAsNonRoot"
	podSeccomp := psc("seccompProfile") + " && variables.psc.seccompProfile.type in ['RuntimeDefault', 'Localhost']"
	probeGrace := func(p string) string {
		return "(!has(c." + p + ") || !has(c." + p + ".terminationGracePeriodSeconds) || c." + p + ".terminationGracePeriodSeconds <= variables.maxGrace)"
	}
	return []admissionregistrationv1.Validation{
		{
			// At every level: a pod that ignores SIGTERM with a year of
			// grace would outlive its virtual pod, namespace and Cluster.
			// The API server has defaulted the pod's own (30) by now.
			Expression: "!variables.pod || !variables.mine || ((!has(object.spec.terminationGracePeriodSeconds) || object.spec.terminationGracePeriodSeconds <= variables.maxGrace) && " +
				"variables.containers.all(c, " + probeGrace("livenessProbe") + " && " + probeGrace("startupProbe") + "))",
			MessageExpression: "'a pod made by a k3k agent for cluster ' + params.metadata.name + ' may have grace periods of at most ' + string(variables.maxGrace) + ' s (spec.maxTerminationGracePeriodSeconds)'",
			Reason:            forbidden,
		},
		{
			// Below privileged (translate.userNamespaceProblems); Windows
			// pods have no user namespaces, and the API refuses a user
			// namespace beside a host namespace, which the main guard
			// refuses at every level anyway (so its reason is the one given).
			Expression: "!variables.enforce || !variables.userns || (has(object.spec.os) && object.spec.os.name == 'windows') || " +
				"(has(object.spec.hostNetwork) && object.spec.hostNetwork) || (has(object.spec.hostPID) && object.spec.hostPID) || " +
				"(has(object.spec.hostIPC) && object.spec.hostIPC) || (has(object.spec.hostUsers) && !object.spec.hostUsers)",
			MessageExpression: "'a pod made by a k3k agent for cluster ' + params.metadata.name + ' must run in a user namespace (hostUsers: false): its UserNamespaces condition is True'",
			Reason:            forbidden,
		},
		rule(false, "variables.containers.all(c, !"+csc("privileged")+" || !c.securityContext.privileged)", "no privileged containers"),
		rule(false, "variables.containers.all(c, !"+csc("capabilities")+" || !has(c.securityContext.capabilities.add) || c.securityContext.capabilities.add.all(a, a in "+celList(baselineCapabilities)+"))",
			"no capabilities added beyond the default set"),
		rule(false, "(!"+psc("seccompProfile")+" || variables.psc.seccompProfile.type != 'Unconfined') && variables.containers.all(c, !"+csc("seccompProfile")+" || c.securityContext.seccompProfile.type != 'Unconfined')",
			"no seccomp profile Unconfined"),
		rule(false, "(!"+psc("appArmorProfile")+" || variables.psc.appArmorProfile.type != 'Unconfined') && variables.containers.all(c, !"+csc("appArmorProfile")+" || c.securityContext.appArmorProfile.type != 'Unconfined') && "+
			"(!has(object.metadata.annotations) || object.metadata.annotations.all(k, !k.startsWith('container.apparmor.security.beta.kubernetes.io/') || object.metadata.annotations[k] == 'runtime/default' || object.metadata.annotations[k].startsWith('localhost/')))",
			"no AppArmor profile Unconfined"),
		rule(false, "(!"+psc("seLinuxOptions")+" || ("+seLinuxOK("variables.psc.seLinuxOptions")+")) && variables.containers.all(c, !"+csc("seLinuxOptions")+" || ("+seLinuxOK("c.securityContext.seLinuxOptions")+"))",
			"no SELinux user or role, and only container SELinux types"),
		rule(false, "variables.containers.all(c, !"+csc("procMount")+" || c.securityContext.procMount == 'Default')", "no procMount other than Default"),
		rule(false, "!"+psc("sysctls")+" || variables.psc.sysctls.all(s, s.name in "+celList(safeSysctls)+")", "only safe sysctls"),
		rule(false, "(!"+psc("windowsOptions")+" || !has(variables.psc.windowsOptions.hostProcess) || !variables.psc.windowsOptions.hostProcess) && "+
			"variables.containers.all(c, !"+csc("windowsOptions")+" || !has(c.securityContext.windowsOptions.hostProcess) || !c.securityContext.windowsOptions.hostProcess)",
			"no Windows host processes"),
		rule(true, "variables.containers.all(c, "+csc("allowPrivilegeEscalation")+" && !c.securityContext.allowPrivilegeEscalation)", "allowPrivilegeEscalation false in every container"),
		rule(true, "variables.containers.all(c, "+csc("runAsNonRoot")+" ? c.securityContext.runAsNonRoot : ("+podNonRoot+"))", "runAsNonRoot true"),
		rule(true, "(!"+psc("runAsUser")+" || variables.psc.runAsUser != 0) && variables.containers.all(c, !"+csc("runAsUser")+" || c.securityContext.runAsUser != 0)", "no runAsUser 0"),
		rule(true, "variables.containers.all(c, "+csc("seccompProfile")+" ? c.securityContext.seccompProfile.type in ['RuntimeDefault', 'Localhost'] : ("+podSeccomp+"))",
			"seccomp profile RuntimeDefault or Localhost"),
		rule(true, "variables.containers.all(c, "+csc("capabilities")+" && has(c.securityContext.capabilities.drop) && 'ALL' in c.securityContext.capabilities.drop && "+
			"(!has(c.securityContext.capabilities.add) || c.securityContext.capabilities.add.all(a, a == 'NET_BIND_SERVICE')))",
			"capabilities drop ALL, add at most NET_BIND_SERVICE"),
	}
}
