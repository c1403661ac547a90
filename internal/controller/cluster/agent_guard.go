package cluster

import (
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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
// a pod may reference only such ConfigMaps and Secrets, no claims, no host
// namespaces, no privileged containers, no host ports and no ServiceAccount
// token. The agent itself never asks for more (it refuses such virtual pods),
// so the guard changes nothing for a working agent and stops a subverted one.
//
// It is installed by the Helm chart (templates/agent-guard.yaml, generated
// from this file by `make generate`); requests of anyone but an agent are not
// looked at.

// agentUserPattern matches the username of every agent ServiceAccount,
// system:serviceaccount:<namespace>:k3k-<cluster>-kubelet (AgentName).
const agentUserPattern = `^system:serviceaccount:[^:]+:k3k-[^:]+-kubelet$`

// ownName is the CEL regular expression of names the agent derives.
const ownName = `'-[0-9a-f]{10}$'`

// DesiredAgentGuard is the policy and its binding, both named name.
func DesiredAgentGuard(name string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	writes := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
	rule := func(group string, ops []admissionregistrationv1.OperationType, resources ...string) admissionregistrationv1.NamedRuleWithOperations {
		return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: ops,
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: resources, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}}
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManagedBy: ManagedByValue}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				// exec, attach and port-forward are CONNECTs of pods' subresources.
				rule("", append(writes, admissionregistrationv1.Connect), "pods", "pods/exec", "pods/attach", "pods/portforward", "configmaps", "secrets", "services"),
				rule("discovery.k8s.io", writes, "endpointslices"),
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "made-by-a-k3k-agent",
				Expression: "request.userInfo.username.matches('" + agentUserPattern + "')",
			}},
			Variables:   agentGuardVariables(),
			Validations: agentGuardValidations(),
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManagedBy: ManagedByValue}},
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
	}
}

// own is CEL true when ref (a reference with a name field) names an object
// of the agent's.
func own(ref string) string {
	return "(has(" + ref + ".name) && " + ref + ".name.matches(" + ownName + "))"
}

func agentGuardValidations() []admissionregistrationv1.Validation {
	forbidden := ptr.To(metav1.StatusReasonForbidden)
	podOnly := func(cond string) string { return "!variables.pod || (" + cond + ")" }
	absentOrFalse := func(field string) string { return "(!has(" + field + ") || !" + field + ")" }
	volume := strings.Join([]string{
		"has(v.emptyDir)", "has(v.downwardAPI)", "has(v.ephemeral)", "has(v.image)",
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
			Message:    "a pod made by a k3k agent may only use emptyDir, downwardAPI, ephemeral and image volumes, and ConfigMaps and Secrets the agent copied",
			Reason:     forbidden,
		},
		{
			Expression: podOnly("variables.containers.all(c, " + env + ")"),
			Message:    "a pod made by a k3k agent may only take environment from ConfigMaps and Secrets the agent copied",
			Reason:     forbidden,
		},
		{
			Expression: podOnly("variables.containers.all(c, (!has(c.securityContext) || " + absentOrFalse("c.securityContext.privileged") + ") && " +
				"(!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)))"),
			Message: "a pod made by a k3k agent must not run privileged containers or open host ports",
			Reason:  forbidden,
		},
		{
			Expression: podOnly("!has(object.spec.imagePullSecrets) || object.spec.imagePullSecrets.all(s, " + own("s") + ")"),
			Message:    "a pod made by a k3k agent may only pull with Secrets the agent copied",
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
