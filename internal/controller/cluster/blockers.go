package cluster

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/k3k-io/k3k/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
)

// maxCauseLength bounds the text copied from an event or a scheduler message
// into a condition: enough to act on, short enough for one line.
const maxCauseLength = 300

// blocker is why a server pod does not start.
type blocker struct {
	reason  string
	message string
	// warning is false for a cause that is still expected to pass (a claim
	// whose latest event is a Normal one, such as waiting for its provisioner).
	warning bool
}

// claimFacts is what was observed of one server volume claim.
type claimFacts struct {
	claim corev1.PersistentVolumeClaim
	// event is the claim's latest event, Warnings before Normal ones; nil
	// when it has none.
	event *corev1.Event
}

// imagePullReasons are the kubelet's waiting reasons for an image that does
// not arrive.
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
}

// firstBlocker is the first blocking cause of the server pods that are not
// ready, in pod name order: a Pending volume claim, then scheduling, then the
// containers (native sidecars and init containers first). nil when no pod is
// blocked by one of those causes (it may still be starting).
func firstBlocker(pods []corev1.Pod, claims map[string]claimFacts) *blocker {
	sorted := append([]corev1.Pod(nil), pods...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for i := range sorted {
		if b := podBlocker(&sorted[i], claims); b != nil {
			return b
		}
	}
	return nil
}

func podBlocker(p *corev1.Pod, claims map[string]claimFacts) *blocker {
	if p.DeletionTimestamp != nil || podIsReady(p) {
		return nil
	}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		f, ok := claims[v.PersistentVolumeClaim.ClaimName]
		if !ok || f.claim.Status.Phase != corev1.ClaimPending {
			continue
		}
		if f.event != nil && f.event.Type == corev1.EventTypeNormal && f.event.Reason == "WaitForFirstConsumer" {
			// Bound once the pod is scheduled: every create passes through
			// this; a pod that cannot be scheduled says so below.
			continue
		}
		msg := fmt.Sprintf("pod %s: PersistentVolumeClaim %s is Pending", p.Name, f.claim.Name)
		warning := true
		if f.event != nil {
			msg += fmt.Sprintf(" (%s: %s)", f.event.Reason, clip(f.event.Message))
			warning = f.event.Type == corev1.EventTypeWarning
		}
		return &blocker{v1beta1.ReasonServerVolumePending, msg, warning}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &blocker{v1beta1.ReasonServerUnschedulable, fmt.Sprintf("pod %s is Unschedulable: %s", p.Name, clip(c.Message)), true}
		}
	}
	statuses := append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, s := range statuses {
		w := s.State.Waiting
		if w == nil {
			continue
		}
		switch {
		case imagePullReasons[w.Reason]:
			msg := fmt.Sprintf("pod %s: container %s cannot pull image %s (%s)", p.Name, s.Name, s.Image, w.Reason)
			if w.Message != "" {
				msg += ": " + clip(w.Message)
			}
			return &blocker{v1beta1.ReasonServerImagePullFailing, msg, true}
		case w.Reason == "CrashLoopBackOff":
			// Only the exit code and the runtime's reason: the termination
			// message is the container's log tail, which may name a DSN or
			// a token.
			msg := fmt.Sprintf("pod %s: container %s is in CrashLoopBackOff", p.Name, s.Name)
			if t := s.LastTerminationState.Terminated; t != nil {
				msg += fmt.Sprintf(", last exit code %d", t.ExitCode)
				if t.Reason != "" {
					msg += " (" + t.Reason + ")"
				}
			}
			return &blocker{v1beta1.ReasonServerCrashLooping, msg, true}
		}
	}
	return nil
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// latestClaimEvent picks the event that explains a Pending claim: the latest
// Warning, else the latest event of any type.
func latestClaimEvent(events []corev1.Event) *corev1.Event {
	var best *corev1.Event
	better := func(e, than *corev1.Event) bool {
		if (e.Type == corev1.EventTypeWarning) != (than.Type == corev1.EventTypeWarning) {
			return e.Type == corev1.EventTypeWarning
		}
		return eventTime(e).After(eventTime(than))
	}
	for i := range events {
		if best == nil || better(&events[i], best) {
			best = &events[i]
		}
	}
	return best
}

// eventTime is when an event was last seen, from whichever field its
// recorder filled.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// clip shortens s to maxCauseLength on a rune boundary and folds it to one line.
func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= maxCauseLength {
		return s
	}
	cut := maxCauseLength
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
