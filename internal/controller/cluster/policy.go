package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// VirtualClusterPolicy applied to a Cluster (docs/policy.md): pure, like
// desired.go. The host API refuses a Cluster that breaks its namespace's
// policy (policy_guard.go); what is here covers the Clusters made before the
// policy or its binding, and the controller's defaults, which admission does
// not see: the stricter of the policy and the Cluster is what gets deployed.

// policyOutcome is what applying a policy did and found.
type policyOutcome struct {
	// name is the policy the namespace is bound to; empty: none.
	name string
	// found is false when no policy of that name exists.
	found bool
	// tightened are the Cluster's settings the policy replaced, each as
	// "what: from → to".
	tightened []string
	// broken are the Cluster's settings that break the policy and that the
	// controller cannot tighten without losing something (its mode,
	// datastore, server count): reported, not changed.
	broken []string
	// bounds are the agent's bounds once the policy is applied
	// (status.policyBounds, which the agent guard reads).
	bounds *v1beta1.PolicyBounds
}

// condition is the Policy condition the outcome says: status, reason and
// message.
func (p policyOutcome) condition() (bool, string, string) {
	if !p.found {
		return false, v1beta1.ReasonPolicyNotFound, fmt.Sprintf("the namespace is bound (label %s) to VirtualClusterPolicy %q, which does not exist: nothing of it applies", v1beta1.LabelPolicyName, p.name)
	}
	tightened := "nothing tightened"
	if len(p.tightened) > 0 {
		tightened = "tightened " + strings.Join(p.tightened, "; ")
	}
	if len(p.broken) > 0 {
		return false, v1beta1.ReasonPolicyBroken, fmt.Sprintf("breaks VirtualClusterPolicy %q where the controller cannot tighten it: %s (the host API refuses a new Cluster like this, and any change of these fields that does not keep to the policy); %s",
			p.name, strings.Join(p.broken, "; "), tightened)
	}
	return true, v1beta1.ReasonPolicyApplied, fmt.Sprintf("VirtualClusterPolicy %q: %s", p.name, tightened)
}

// applyPolicy holds c's spec to p, in place: c is the reconcile's own copy,
// never written back (the controller writes only the status, which ignores
// the spec). datastore is the datastore in effect (Settings). Each bound the
// policy sets is compared with what would be deployed without it, the
// controller's default included where the Cluster sets nothing.
func applyPolicy(c *v1beta1.Cluster, p *v1beta1.VirtualClusterPolicy, datastore v1beta1.DatastoreType, d IsolationDefaults) policyOutcome {
	out := policyOutcome{name: p.Name, found: true}
	s := &c.Spec
	ps := p.Spec

	if mode := cmp.Or(s.Mode, v1beta1.SharedMode); ps.AllowedMode != "" && mode != ps.AllowedMode {
		out.broken = append(out.broken, fmt.Sprintf("mode %s is not the allowed %s", mode, ps.AllowedMode))
	}
	if len(ps.AllowedDatastores) > 0 && !slices.Contains(ps.AllowedDatastores, datastore) {
		out.broken = append(out.broken, fmt.Sprintf("datastore %s is not one of %v", datastore, ps.AllowedDatastores))
	}
	if servers := max(s.Servers, 1); ps.MaxServers != nil && servers > *ps.MaxServers {
		out.broken = append(out.broken, fmt.Sprintf("servers %d is more than maxServers %d", servers, *ps.MaxServers))
	}

	// The empty level is the API's default, baseline.
	if ps.PodSecurityLevel != "" && psaapi.CompareLevels(psaapi.Level(cmp.Or(s.PodSecurityLevel, v1beta1.PodSecurityBaseline)), psaapi.Level(ps.PodSecurityLevel)) < 0 {
		out.tightened = append(out.tightened, fmt.Sprintf("podSecurityLevel %s → %s", cmp.Or(s.PodSecurityLevel, v1beta1.PodSecurityBaseline), ps.PodSecurityLevel))
		s.PodSecurityLevel = ps.PodSecurityLevel
	}

	if ps.Quota != nil && len(ps.Quota.Hard) > 0 {
		if s.Quota == nil {
			s.Quota = &v1beta1.QuotaConfig{}
		}
		s.Quota.Hard = capResources("quota", s.Quota.Hard, d.QuotaHard, ps.Quota.Hard, true, &out.tightened)
	}
	if len(ps.MaxLimits) > 0 {
		if s.Limits == nil {
			s.Limits = &v1beta1.LimitsConfig{}
		}
		s.Limits.Max = capResources("limits.max", s.Limits.Max, d.LimitMax, ps.MaxLimits, true, &out.tightened)
		// A default above the max would make the LimitRange refuse every
		// container that sets nothing.
		s.Limits.Default = capResources("limits.default", s.Limits.Default, d.LimitDefault, ps.MaxLimits, false, &out.tightened)
		s.Limits.DefaultRequest = capResources("limits.defaultRequest", s.Limits.DefaultRequest, d.LimitDefaultRequest, ps.MaxLimits, false, &out.tightened)
	}

	if len(ps.StorageClasses) > 0 && len(s.StorageClasses) > 0 {
		var kept, dropped []string
		for _, sc := range s.StorageClasses {
			if slices.Contains(ps.StorageClasses, sc) {
				kept = append(kept, sc)
			} else {
				dropped = append(dropped, sc)
			}
		}
		if len(dropped) > 0 {
			out.tightened = append(out.tightened, fmt.Sprintf("storageClasses %v → %v", s.StorageClasses, kept))
			s.StorageClasses = kept
		}
	}

	if limit := ps.MaxTerminationGracePeriodSeconds; limit != nil {
		cur := ptr.Deref(s.MaxTerminationGracePeriodSeconds, agentDefaultMaxGrace)
		if cur > *limit {
			out.tightened = append(out.tightened, fmt.Sprintf("maxTerminationGracePeriodSeconds %d → %d", cur, *limit))
			s.MaxTerminationGracePeriodSeconds = ptr.To(*limit)
		}
	}
	out.bounds = &v1beta1.PolicyBounds{
		PodSecurityLevel:                 cmp.Or(s.PodSecurityLevel, v1beta1.PodSecurityBaseline),
		MaxTerminationGracePeriodSeconds: s.MaxTerminationGracePeriodSeconds,
	}
	return out
}

// capResources returns the Cluster's list (spec) with each name of bound cut
// to the bound: the Cluster's value, or the default where the Cluster sets
// none, when it is not above the bound, and the bound otherwise. Where
// neither sets the name, fill says whether the bound is set (a quota or a
// max: what the policy bounds is bounded) or nothing (a container default).
// Each change is said in *said as "what name from → to". The result replaces
// the default name by name, so a default below the bound is carried into it.
func capResources(what string, spec, defaults, bound corev1.ResourceList, fill bool, said *[]string) corev1.ResourceList {
	out := spec.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for _, k := range slices.Sorted(maps.Keys(bound)) {
		limit := bound[k]
		cur, ok := spec[k]
		if !ok {
			cur, ok = defaults[k]
		}
		switch {
		case ok && cur.Cmp(limit) <= 0:
			out[k] = cur.DeepCopy()
			continue
		case !ok && !fill:
			continue
		}
		out[k] = limit.DeepCopy()
		*said = append(*said, fmt.Sprintf("%s %s %s → %s", what, k, quantityOrNone(cur, ok), limit.String()))
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func quantityOrNone(q resource.Quantity, ok bool) string {
	if !ok {
		return "(none)"
	}
	return q.String()
}
