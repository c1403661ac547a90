// Package podsecurity holds every host pod of the shared-mode agent to a Pod
// Security Standards level with the upstream evaluator
// (k8s.io/pod-security-admission/policy), the same code the host's Pod
// Security Admission runs, rather than a list of our own that would fall
// behind new fields. The agent evaluates a virtual pod before it makes a host
// pod for it; the agent guard (internal/controller/cluster) holds a subverted
// agent to the same level at the host API.
package podsecurity

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// Levels. Privileged evaluates nothing: it is for host administrators who
// allowed a cluster to run anything (the agent's own refusals still hold).
const (
	Baseline   = string(psaapi.LevelBaseline)
	Restricted = string(psaapi.LevelRestricted)
	Privileged = string(psaapi.LevelPrivileged)
)

// Evaluator checks pods against one level.
type Evaluator struct {
	lv   psaapi.LevelVersion
	eval policy.Evaluator
}

// New returns an Evaluator of level (baseline, restricted or privileged) at
// the newest version of the standards the module knows: a newer check only
// ever forbids more.
func New(level string) (*Evaluator, error) {
	l, err := psaapi.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("pod security level %q: %w", level, err)
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return nil, fmt.Errorf("building the pod security evaluator: %w", err)
	}
	return &Evaluator{lv: psaapi.LevelVersion{Level: l, Version: psaapi.LatestVersion()}, eval: eval}, nil
}

// Level is the level evaluated.
func (e *Evaluator) Level() string { return string(e.lv.Level) }

// Check returns why a pod with meta and spec violates the level, one entry
// per failed check, each naming the level, what is forbidden and the fields
// ("privileged (container "x" must not set securityContext.privileged=true)").
// Ephemeral containers are checked like the others. Nil means allowed.
func (e *Evaluator) Check(meta *metav1.ObjectMeta, spec *corev1.PodSpec) []string {
	if e.lv.Level == psaapi.LevelPrivileged {
		return nil
	}
	agg := policy.AggregateCheckResults(e.eval.EvaluatePod(e.lv, meta, spec))
	if agg.Allowed {
		return nil
	}
	out := make([]string, 0, len(agg.ForbiddenReasons))
	for i, reason := range agg.ForbiddenReasons {
		s := fmt.Sprintf("Pod Security %q: %s", e.lv.Level, reason)
		if d := agg.ForbiddenDetails[i]; d != "" {
			s += " (" + d + ")"
		}
		out = append(out, s)
	}
	return out
}

// Describe joins reasons as Check returns them into one message.
func Describe(reasons []string) string { return strings.Join(reasons, "; ") }
