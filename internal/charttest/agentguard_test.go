package charttest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/k3k-io/k3k/internal/controller/cluster"
)

// TestAgentGuardFollowsTheAgentValues renders the chart with several agent
// values and compares the agent guard it installs with the one the
// controller package builds for the same agent defaults: the values the
// chart passes to every agent (the controller's --agent-* flags) are also
// what the guard holds the agents' pods to, rule for rule.
func TestAgentGuardFollowsTheAgentValues(t *testing.T) {
	cases := []struct {
		name, values string
		extra        []string
		want         cluster.PodDefaults
	}{
		{"chart defaults", "", nil, cluster.AgentPodDefaults},
		{"agent.yaml", "agent.yaml", nil, cluster.PodDefaults{
			SeccompLocalhostProfiles: []string{"profiles/audit.json", "strict.json"}, AppArmorLocalhostProfiles: []string{"k3k-audited", "tenant-web"},
			MemoryLimit: true, AllowRegistryAddresses: true,
		}},
		{"default limits without memory", "", []string{"--set-string", "sharedAgent.defaultLimits.cpu=2"}, cluster.PodDefaults{
			SeccompDefault: true, AlwaysPullImages: true,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got *admissionregistrationv1.ValidatingAdmissionPolicy
			for _, o := range render(t, tc.values, tc.extra...) {
				if o.GetKind() == "ValidatingAdmissionPolicy" && strings.HasSuffix(o.GetName(), "-agent-guard") {
					got = typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, o)
				}
			}
			if got == nil {
				t.Fatal("no agent guard rendered")
			}
			want, _ := cluster.DesiredAgentGuard(got.Name, tc.want.CEL())
			if diff := cmp.Diff(want.Spec.Validations, got.Spec.Validations); diff != "" {
				t.Errorf("rendered guard differs from DesiredAgentGuard(%+v) (-want +got):\n%s", tc.want, diff)
			}
		})
	}
}
