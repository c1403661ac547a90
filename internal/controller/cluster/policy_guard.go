package cluster

import (
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// The policy guard: an admission policy that refuses a Cluster breaking the
// VirtualClusterPolicy its namespace is bound to, naming the policy and
// what breaks it. Its params are every VirtualClusterPolicy; each is
// evaluated and the one the namespace's label names decides, the others
// pass. The binding looks only at namespaces that carry the label.
//
// A change that leaves a field as it was is not refused for that field
// (ratcheting, as the API server does for a CRD's own rules): a Cluster made
// before the policy can still be paused, scaled down or annotated, and the
// controller holds it to the policy where it can (policy.go, its Policy
// condition). Only the Cluster's own resource is looked at, never its status.
//
// Installed by the Helm chart (templates/policy-guard.yaml, generated from
// this file by `make generate`).

// podSecurityRankCEL orders the Pod Security levels from the loosest, as
// pod-security-admission's CompareLevels does, as a CEL map.
const podSecurityRankCEL = "{'privileged': 0, 'baseline': 1, 'restricted': 2}"

// DesiredPolicyGuard is the policy and its binding, both named name.
func DesiredPolicyGuard(name string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	meta := metav1.ObjectMeta{Name: name, Labels: map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue}}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: meta,
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: v1beta1.GroupVersion.String(), Kind: "VirtualClusterPolicy"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{v1beta1.GroupVersion.Group}, APIVersions: []string{v1beta1.GroupVersion.Version},
						Resources: []string{"clusters"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope),
					},
				},
			}}},
			Variables:   policyGuardVariables(),
			Validations: policyGuardValidations(),
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: *meta.DeepCopy(),
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name,
			// A namespace bound to a policy that does not exist is let
			// through here (the API server cannot tell "none of these"
			// from "not this one"); the Cluster's Policy condition says so.
			ParamRef: &admissionregistrationv1.ParamRef{
				Selector:                &metav1.LabelSelector{},
				ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction),
			},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: v1beta1.LabelPolicyName, Operator: metav1.LabelSelectorOpExists,
				}}},
			},
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}

// specField is the CEL of obj.spec.<path>, or def when any part of it is
// missing (obj is object or oldObject).
func specField(obj, path, def string) string {
	has := "has(" + obj + ".spec)"
	at := obj + ".spec"
	for _, part := range strings.Split(path, ".") {
		at += "." + part
		has += " && has(" + at + ")"
	}
	return has + " ? " + at + " : " + def
}

func policyGuardVariables() []admissionregistrationv1.Variable {
	label := "'" + v1beta1.LabelPolicyName + "'"
	rank := podSecurityRankCEL
	return []admissionregistrationv1.Variable{
		// This param is the namespace's policy: the others pass.
		{Name: "mine", Expression: "has(namespaceObject.metadata.labels) && " + label + " in namespaceObject.metadata.labels && " +
			"namespaceObject.metadata.labels[" + label + "] == params.metadata.name"},
		{Name: "update", Expression: "request.operation == 'UPDATE'"},
		{Name: "name", Expression: "'VirtualClusterPolicy ' + params.metadata.name"},
		{Name: "mode", Expression: specField("object", "mode", "'shared'")},
		{Name: "datastore", Expression: specField("object", "datastore.type", "''")},
		{Name: "servers", Expression: specField("object", "servers", "1")},
		{Name: "level", Expression: rank + "[" + specField("object", "podSecurityLevel", "'baseline'") + "]"},
		{Name: "quota", Expression: specField("object", "quota.hard", "{}")},
		{Name: "limitsMax", Expression: specField("object", "limits.max", "{}")},
		{Name: "classes", Expression: specField("object", "storageClasses", "[]")},
		// The same of the stored Cluster, for the ratchet; only read
		// where variables.update holds.
		{Name: "oldMode", Expression: "variables.update ? (" + specField("oldObject", "mode", "'shared'") + ") : ''"},
		{Name: "oldDatastore", Expression: "variables.update ? (" + specField("oldObject", "datastore.type", "''") + ") : '-'"},
		{Name: "oldServers", Expression: "variables.update ? (" + specField("oldObject", "servers", "1") + ") : 0"},
		{Name: "oldLevel", Expression: "variables.update ? " + rank + "[" + specField("oldObject", "podSecurityLevel", "'baseline'") + "] : 3"},
		{Name: "oldQuota", Expression: "variables.update ? (" + specField("oldObject", "quota.hard", "{}") + ") : {}"},
		{Name: "oldLimitsMax", Expression: "variables.update ? (" + specField("oldObject", "limits.max", "{}") + ") : {}"},
		{Name: "oldClasses", Expression: "variables.update ? (" + specField("oldObject", "storageClasses", "[]") + ") : []"},
	}
}

// boundsCEL is the check that every name of the Cluster's list (cur) is at
// most the policy's of the same name (bound), or as it was (old), and the
// message naming those that are not.
func boundsCEL(cur, old, bound string) (rule, message string) {
	over := "k in " + bound + " && quantity(string(" + cur + "[k])).compareTo(quantity(string(" + bound + "[k]))) > 0 && " +
		"!(k in " + old + " && string(" + old + "[k]) == string(" + cur + "[k]))"
	rule = cur + ".all(k, !(" + over + "))"
	message = cur + ".filter(k, " + over + ").map(k, k + ' ' + string(" + cur + "[k]) + ' > ' + string(" + bound + "[k])).join(', ')"
	return rule, message
}

func policyGuardValidations() []admissionregistrationv1.Validation {
	quota, quotaMsg := boundsCEL("variables.quota", "variables.oldQuota", "params.spec.quota.hard")
	limits, limitsMsg := boundsCEL("variables.limitsMax", "variables.oldLimitsMax", "params.spec.maxLimits")
	check := func(field, has, ok, message string) admissionregistrationv1.Validation {
		return admissionregistrationv1.Validation{
			Expression:        "!variables.mine || !(" + has + ") || (" + ok + ")",
			MessageExpression: "'spec." + field + ": ' + variables.name + ' ' + " + message,
			Reason:            ptr.To(metav1.StatusReasonForbidden),
		}
	}
	return []admissionregistrationv1.Validation{
		check("mode", "has(params.spec.allowedMode)",
			"variables.mode == params.spec.allowedMode || (variables.update && variables.mode == variables.oldMode)",
			"'allows mode ' + params.spec.allowedMode + ' only, not ' + variables.mode"),
		check("datastore.type", "has(params.spec.allowedDatastores)",
			"variables.datastore in params.spec.allowedDatastores || (variables.update && variables.datastore == variables.oldDatastore)",
			"'allows datastores ' + params.spec.allowedDatastores.join(', ') + ' only' + "+
				"(variables.datastore == '' ? ': name one (the controller\\'s default is not known here)' : ', not ' + variables.datastore)"),
		check("servers", "has(params.spec.maxServers)",
			"variables.servers <= params.spec.maxServers || (variables.update && variables.servers <= variables.oldServers)",
			"'allows at most ' + string(params.spec.maxServers) + ' servers, not ' + string(variables.servers)"),
		check("podSecurityLevel", "has(params.spec.podSecurityLevel)",
			"variables.level >= "+podSecurityRankCEL+"[params.spec.podSecurityLevel] || (variables.update && variables.level >= variables.oldLevel)",
			"'allows no Pod Security level looser than ' + params.spec.podSecurityLevel"),
		check("quota.hard", "has(params.spec.quota) && has(params.spec.quota.hard)", quota,
			"'bounds quota.hard: ' + "+quotaMsg),
		check("limits.max", "has(params.spec.maxLimits)", limits,
			"'bounds limits.max: ' + "+limitsMsg),
		check("storageClasses", "has(params.spec.storageClasses)",
			"variables.classes.all(s, s in params.spec.storageClasses || s in variables.oldClasses)",
			"'allows storage classes ' + params.spec.storageClasses.join(', ') + ' only, not ' + "+
				"variables.classes.filter(s, !(s in params.spec.storageClasses) && !(s in variables.oldClasses)).join(', ')"),
		check("maxTerminationGracePeriodSeconds", "has(params.spec.maxTerminationGracePeriodSeconds) && has(object.spec) && has(object.spec.maxTerminationGracePeriodSeconds)",
			"object.spec.maxTerminationGracePeriodSeconds <= params.spec.maxTerminationGracePeriodSeconds || "+
				"(variables.update && has(oldObject.spec) && has(oldObject.spec.maxTerminationGracePeriodSeconds) && object.spec.maxTerminationGracePeriodSeconds <= oldObject.spec.maxTerminationGracePeriodSeconds)",
			"'allows at most ' + string(params.spec.maxTerminationGracePeriodSeconds) + ', not ' + string(object.spec.maxTerminationGracePeriodSeconds)"),
	}
}
