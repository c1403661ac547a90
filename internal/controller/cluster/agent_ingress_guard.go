package cluster

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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
	return clusterParamGuard(name, admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"networking.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"ingresses"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}, []admissionregistrationv1.Variable{
		// Not the status subresource: the agent never writes it, and it
		// carries no host.
		{Name: "ingress", Expression: "!has(request.subResource) && object != null"},
		// Only the agent's own Cluster says what it may claim.
		{Name: "hosts", Expression: "has(params.spec.ingresses) && has(params.spec.ingresses.hosts) ? params.spec.ingresses.hosts : []"},
	}, []admissionregistrationv1.Validation{{
		Expression: "!variables.ingress || !variables.mine || (" +
			"(!has(object.spec.rules) || object.spec.rules.all(r, !has(r.host) || " + allowed("r.host") + ")) && " +
			"(!has(object.spec.tls) || object.spec.tls.all(t, !has(t.hosts) || t.hosts.all(h, " + allowed("h") + "))))",
		MessageExpression: "'an Ingress made by a k3k agent for cluster ' + params.metadata.name + ' may claim only the hostnames its Cluster allows (spec.ingresses.hosts: ' + " +
			"(size(variables.hosts) == 0 ? 'none' : variables.hosts.join(', ')) + ')'",
		Reason: ptr.To(metav1.StatusReasonForbidden),
	}})
}
