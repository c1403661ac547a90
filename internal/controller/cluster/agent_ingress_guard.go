package cluster

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// The agent's Ingress hosts guard: a third policy, since, like the Pod
// Security guard, it needs the agent's Cluster (spec.ingresses.hosts) as its
// parameter. The host's ingress controller serves every tenant and the
// host's own sites, and whoever claims a name first takes its traffic (and,
// with a TLS entry, serves a certificate for it), so a subverted agent must
// not claim a name its Cluster does not allow. The agent refuses the same
// Ingresses itself (translate.IngressProblems, IngressHostAllowed); the main
// guard refuses default backends and rules without a host for every agent.

// DesiredAgentIngressGuard is the Ingress hosts policy and its binding, both
// named name.
func DesiredAgentIngressGuard(name string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	// allowed is CEL true when host h is one of variables.hosts: equal to a
	// name, or under a *.suffix pattern (longer than the suffix, so
	// *.example.com does not allow example.com itself).
	allowed := func(h string) string {
		return "variables.hosts.exists(p, p == " + h + " || (p.startsWith('*.') && " + h + ".endsWith(p.substring(1)) && size(" + h + ") > size(p) - 1))"
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: v1beta1.GroupVersion.String(), Kind: "Cluster"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"networking.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"ingresses"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "made-by-a-k3k-agent",
				Expression: "request.userInfo.username.matches('" + agentUserPattern + "')",
			}},
			Variables: []admissionregistrationv1.Variable{
				// Not the status subresource: the agent never writes it, and
				// it carries no host.
				{Name: "ingress", Expression: "!has(request.subResource) && object != null"},
				{Name: "sa", Expression: "request.userInfo.username.split(':')[3]"},
				// Every Cluster of the namespace is a param and each must
				// pass; only the agent's own Cluster says what it may claim.
				{Name: "mine", Expression: "params.metadata.name == variables.sa.substring(4, size(variables.sa) - 8)"},
				{Name: "hosts", Expression: "has(params.spec.ingresses) && has(params.spec.ingresses.hosts) ? params.spec.ingresses.hosts : []"},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!variables.ingress || !variables.mine || (" +
					"(!has(object.spec.rules) || object.spec.rules.all(r, !has(r.host) || " + allowed("r.host") + ")) && " +
					"(!has(object.spec.tls) || object.spec.tls.all(t, !has(t.hosts) || t.hosts.all(h, " + allowed("h") + "))))",
				MessageExpression: "'an Ingress made by a k3k agent for cluster ' + params.metadata.name + ' may claim only the hostnames its Cluster allows (spec.ingresses.hosts: ' + " +
					"(size(variables.hosts) == 0 ? 'none' : variables.hosts.join(', ')) + ')'",
				Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name,
			// Allow where a namespace holds no Cluster, for the reason the
			// Pod Security guard's binding gives.
			ParamRef: &admissionregistrationv1.ParamRef{
				Selector:                &metav1.LabelSelector{},
				ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction),
			},
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}
