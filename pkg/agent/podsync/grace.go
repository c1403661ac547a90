package podsync

import (
	corev1 "k8s.io/api/core/v1"
)

// hostDeletion is the grace period to delete hpod with, and whether to send
// the deletion at all. Every host pod deletion is held to limit (the
// agent's MaxTerminationGracePeriodSeconds): host pods made before the cap
// existed carry the tenant's own grace period, up to a year for a pod that
// ignores SIGTERM, and the virtual pod's deletion grace period is the
// tenant's too.
//
// A running host pod is deleted with requested (the virtual pod's deletion
// grace period) when there is one, else with its own
// terminationGracePeriodSeconds (30 s, the API's default, when unset),
// capped. A host pod already terminating is deleted again only when that
// shortens its deletion grace period, to requested (capped) or, without one,
// to the cap: the API shortens a grace period on a second deletion and never
// lengthens it, so anything else would be a write that changes nothing.
func hostDeletion(hpod *corev1.Pod, requested *int64, limit int64) (grace int64, ok bool) {
	if hpod.DeletionTimestamp != nil {
		target := limit
		if requested != nil {
			target = min(*requested, limit)
		}
		if current := hpod.DeletionGracePeriodSeconds; current != nil && *current > target {
			return target, true
		}
		return 0, false
	}
	grace = corev1.DefaultTerminationGracePeriodSeconds
	switch {
	case requested != nil:
		grace = *requested
	case hpod.Spec.TerminationGracePeriodSeconds != nil:
		grace = *hpod.Spec.TerminationGracePeriodSeconds
	}
	return min(grace, limit), true
}
