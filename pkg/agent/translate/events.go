package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EventReportingController is the reportingController of every Event the
// agent writes into the virtual cluster, its own and those it carries over
// from the host.
const EventReportingController = "k3k.io/kubelet"

// eventMessage says what a host Event of one reason becomes on the virtual
// pod: its message rewritten (after the host pod's identity has been
// replaced by the virtual pod's), or ok false for an Event the tenant does
// not see.
type eventMessage func(msg string) (string, bool)

// as the host wrote it, the host pod's names replaced: what a kubelet says
// about the pod's own containers, images and probes.
func asWritten(msg string) (string, bool) { return msg, true }

// hidden: the host's message is replaced by a fixed one, because it may name
// the host's network, paths, devices or other pods.
func hidden(replacement string) eventMessage {
	return func(string) (string, bool) { return replacement, true }
}

// quotedVolume is the volume name in a kubelet's volume messages
// (`MountVolume.SetUp failed for volume "data" : ...`).
var quotedVolume = regexp.MustCompile(`for volume "([^"]+)"`)

// lowOn is the resource in an eviction message ("The node was low on
// resource: memory. ...").
var lowOn = regexp.MustCompile(`low on resource: ([a-z-]+)`)

// podEventMessages are the host Events about a host pod that its virtual pod
// shows, by reason: what the host's kubelet, scheduler and eviction manager
// say about it. Anything else stays on the host: an allow-list, because a
// message is free text and a new reason may carry anything. "Started" is
// left out: the agent says it itself once the virtual status shows the
// container running (podsync), as the conformance suite expects.
var podEventMessages = map[string]eventMessage{
	// Images, containers and probes: the kubelet's messages name the pod's
	// own containers, images, exit codes and probe answers.
	"Pulling": asWritten, "Pulled": asWritten, "Created": asWritten, "Killing": asWritten,
	"BackOff": asWritten, "ExceededGracePeriod": asWritten, "ErrImageNeverPull": asWritten,
	"Unhealthy": asWritten, "ProbeWarning": asWritten,
	"FailedPreStopHook": asWritten, "FailedPostStartHook": asWritten, "Preempting": asWritten,
	// "Failed" is a failed pull ("Failed to pull image ...: <the node's
	// error>", scrubbed as in the container status) or a container that could
	// not be created or started (the runtime's error, which the container's
	// status shows as well).
	"Failed": func(msg string) (string, bool) {
		if image, ok := strings.CutPrefix(msg, "Failed to pull image "); ok {
			if i := strings.Index(image, ": "); i > 0 {
				image = image[:i]
			}
			return fmt.Sprintf("Failed to pull image %s: %s (the host node's message is not shown)", image, pullFailureKind(msg)), true
		}
		return msg, true
	},
	// Volumes: the host's message names host claims, volumes, devices and
	// paths; the tenant learns which of its volumes, not why.
	"FailedMount":        volumeMessage("could not be mounted"),
	"FailedMapVolume":    volumeMessage("could not be mapped"),
	"FailedAttachVolume": volumeMessage("could not be attached"),
	// The sandbox: the network plugin's errors name host interfaces and
	// address ranges.
	"FailedCreatePodSandBox": hidden("the host node could not create the pod's sandbox; it will try again (the host node's message is not shown)"),
	"SandboxChanged":         hidden("the pod's sandbox changed; it will be killed and re-created"),
	// Placement on the host: the scheduler counts and names host nodes,
	// their taints and their labels.
	"FailedScheduling": hidden("no host node can run the pod now (too little room, or none fits its placement); it stays pending until one can (the host's message is not shown)"),
	"Preempted":        hidden("preempted on the host by a pod of higher priority"),
	// Eviction: the node's thresholds and usage are the host's; which
	// resource ran short is the tenant's to know.
	"Evicted": func(msg string) (string, bool) {
		if m := lowOn.FindStringSubmatch(msg); m != nil {
			return fmt.Sprintf("the host node was low on %s and evicted the pod", m[1]), true
		}
		return "the host node evicted the pod", true
	},
}

func volumeMessage(what string) eventMessage {
	return func(msg string) (string, bool) {
		if m := quotedVolume.FindStringSubmatch(msg); m != nil {
			return fmt.Sprintf("volume %q %s (the host node's message is not shown)", m[1], what), true
		}
		return "a volume " + what + " (the host node's message is not shown)", true
	}
}

// VirtualPodEvent is the Event the virtual cluster shows for host, an Event
// the host cluster recorded about hostPod, one of this agent's host pods: on
// the virtual pod hostPod stands for, reported by the virtual node, with the
// message rewritten so that it names the virtual pod and nothing of the host
// (see podEventMessages). ok is false when the tenant is not shown it: a
// reason not on the list, an Event about another object, a pod that is not
// this agent's. The name is derived from the host Event's UID, so writing it
// again updates the same virtual Event: the host's count and timestamps
// carry over, and a restarted agent repeats nothing.
func (t *Translator) VirtualPodEvent(host *corev1.Event, hostPod *corev1.Pod) (*corev1.Event, bool) {
	io := host.InvolvedObject
	if io.Kind != "Pod" || io.Namespace != hostPod.Namespace || io.Name != hostPod.Name || io.UID != hostPod.UID {
		return nil, false
	}
	k, ok := t.VirtualKeyOf(hostPod)
	if !ok || k.Kind != KindPod {
		return nil, false
	}
	if host.Type != corev1.EventTypeNormal && host.Type != corev1.EventTypeWarning {
		return nil, false
	}
	rewrite, ok := podEventMessages[host.Reason]
	if !ok {
		return nil, false
	}
	msg, ok := rewrite(hostIdentityReplaced(host.Message, hostPod, k))
	if !ok {
		return nil, false
	}
	first, last, count := eventTimes(host)
	component := host.Source.Component
	if component == "" {
		component = host.ReportingController
	}
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: virtualEventName(k.Name, host.UID), Namespace: k.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: k.Namespace, Name: k.Name, UID: types.UID(k.UID),
			FieldPath: io.FieldPath,
		},
		Reason: host.Reason, Message: msg, Type: host.Type,
		Source:         corev1.EventSource{Component: component, Host: t.cfg.NodeName},
		FirstTimestamp: first, LastTimestamp: last, Count: count,
		ReportingController: EventReportingController, ReportingInstance: t.cfg.NodeName,
	}, true
}

// hostIdentityReplaced replaces the host pod's names in a kubelet message by
// the virtual pod's: "ns/name" (the scheduler's, the eviction manager's),
// "name_ns(uid)" (the kubelet's pod description), the bare name and UID.
// The host namespace alone is left: it may be a word of any message.
func hostIdentityReplaced(msg string, hostPod *corev1.Pod, k VirtualKey) string {
	return strings.NewReplacer(
		hostPod.Namespace+"/"+hostPod.Name, k.Namespace+"/"+k.Name,
		hostPod.Name+"_"+hostPod.Namespace, k.Name+"_"+k.Namespace,
		hostPod.Name, k.Name,
		string(hostPod.UID), k.UID,
	).Replace(msg)
}

// eventTimes reads when an Event was first and last seen and how often, from
// either form: the core form's timestamps and count, or the events.k8s.io
// form's event time and series (the scheduler's). The virtual Event is
// written in the core form, which needs no action or series.
func eventTimes(e *corev1.Event) (first, last metav1.Time, count int32) {
	first, last, count = e.FirstTimestamp, e.LastTimestamp, e.Count
	if first.IsZero() {
		first = metav1.NewTime(e.EventTime.Time)
	}
	if s := e.Series; s != nil {
		if s.LastObservedTime.After(last.Time) {
			last = metav1.NewTime(s.LastObservedTime.Time)
		}
		count = max(count, s.Count)
	}
	if last.IsZero() || last.Before(&first) {
		last = first
	}
	if first.IsZero() {
		first = metav1.NewTime(e.CreationTimestamp.Time)
		last = first
	}
	// Whole seconds: the core form's timestamps are stored so, and an
	// update must compare equal to what was read back.
	first, last = metav1.NewTime(first.Truncate(time.Second)), metav1.NewTime(last.Truncate(time.Second))
	return first, last, max(count, 1)
}

// virtualEventName is "<pod>.<10 hex digits of the host Event's UID>",
// cut to fit a name.
func virtualEventName(pod string, hostUID types.UID) string {
	sum := sha256.Sum256([]byte(hostUID))
	suffix := "." + hex.EncodeToString(sum[:])[:hashLength]
	if room := 253 - len(suffix); len(pod) > room {
		pod = strings.TrimRight(pod[:room], ".-")
	}
	return pod + suffix
}
