package cluster

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// pauseUnsupported says why spec.paused cannot be honoured for these
// settings; "" when it can. etcd members are not stopped all at once yet (the
// membership code would take scaled-down pods for departing members), and an
// ephemeral cluster's data is its pods' emptyDirs, which stopping would lose.
func pauseUnsupported(s Settings) string {
	switch {
	case s.Datastore == v1beta1.EtcdDatastore:
		return "spec.paused is not supported with the etcd datastore yet; the cluster keeps running"
	case s.Persistence == v1beta1.EphemeralPersistence:
		return "spec.paused would lose the data of an ephemeral cluster (it lives in the pods); the cluster keeps running"
	}
	return ""
}

// paused reports whether c is paused and the pause is honoured: its servers
// and agent are to run zero replicas.
func paused(c *v1beta1.Cluster, s Settings) bool {
	return c.Spec.Paused && pauseUnsupported(s) == ""
}

// pausedCondition is the Paused condition for what was observed; ok is false
// with no reason when spec.paused is not set (the condition is then absent).
func pausedCondition(c *v1beta1.Cluster, o observation) (cond condResult, present bool) {
	if !c.Spec.Paused {
		return condResult{}, false
	}
	if why := pauseUnsupported(o.settings); why != "" {
		return condResult{false, v1beta1.ReasonPauseUnsupported, why}, true
	}
	running := 0
	for _, p := range o.serverPods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			running++
		}
	}
	if o.agent != nil && o.agent.Status.Replicas > 0 {
		running += int(o.agent.Status.Replicas)
	}
	if running > 0 {
		return condResult{false, v1beta1.ReasonPausing, fmt.Sprintf("scaled to zero; %d server and agent pods still running", running)}, true
	}
	return condResult{true, v1beta1.ReasonPaused, "servers and agent scaled to zero; volumes, Secrets and Services kept; set spec.paused to false to resume"}, true
}

// pausedStatus applies a pause to st: the Paused condition, and while the
// pause is honoured the phase Paused and Ready false with reason Paused. A
// cluster that is not paused has no Paused condition.
func pausedStatus(c *v1beta1.Cluster, o observation, st *v1beta1.ClusterStatus, set func(t string, ok bool, reason, msg string)) {
	cond, present := pausedCondition(c, o)
	if !present {
		meta.RemoveStatusCondition(&st.Conditions, v1beta1.ConditionPaused)
		return
	}
	set(v1beta1.ConditionPaused, cond.ok, cond.reason, cond.message)
	if cond.reason == v1beta1.ReasonPauseUnsupported || !c.DeletionTimestamp.IsZero() {
		return
	}
	set(v1beta1.ConditionReady, false, v1beta1.ReasonPaused, "the cluster is paused (spec.paused)")
	st.Phase = v1beta1.PhasePaused
}
