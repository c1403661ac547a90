package agent_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The host's Events about a host pod reach its virtual pod as the host's
// kubelet and scheduler wrote them, minus what would name the host: the
// test writes them on the host as those components do (envtest runs
// neither), under the agent's Role, which may read them.
func TestAgentShowsHostEventsOnVirtualPods(t *testing.T) {
	const ns = "events"
	virtualNamespace(t, ns)
	vp := createVirtual(t, boundPod(ns, "app-0"))
	hp := waitHostPod(t, ns, "app-0")
	c := ctx(t)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	const hostNode = "host-node-7"

	kubelet := func(name, typ, reason, message string, podUID types.UID) *corev1.Event {
		return &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: hostNamespace},
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: hostNamespace, Name: hp.Name, UID: podUID,
				FieldPath: "spec.containers{main}"},
			Type: typ, Reason: reason, Message: message,
			Source:         corev1.EventSource{Component: "kubelet", Host: hostNode},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}
	}
	create := func(e *corev1.Event) *corev1.Event {
		t.Helper()
		got, err := hostAdmin.CoreV1().Events(hostNamespace).Create(c, e, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	create(kubelet("pull", corev1.EventTypeWarning, "Failed",
		`Failed to pull image "registry.example:5000/app:1": failed to resolve reference "registry.example:5000/app:1": dial tcp 10.96.44.9:5000: connect: connection refused`, hp.UID))
	backoff := create(kubelet("backoff", corev1.EventTypeWarning, "BackOff",
		fmt.Sprintf("Back-off restarting failed container main in pod %s_%s(%s)", hp.Name, hostNamespace, hp.UID), hp.UID))
	create(kubelet("pulled", corev1.EventTypeNormal, "Pulled", `Container image "busybox:1" already present on machine`, hp.UID))
	// Not shown: the host's scheduler placing the host pod (the virtual
	// scheduler said where the virtual pod went), an Event of the host
	// kubelet about an earlier pod of the same name, one about a pod that is
	// not the agent's.
	create(kubelet("scheduled", corev1.EventTypeNormal, "Scheduled", "Successfully assigned "+hostNamespace+"/"+hp.Name+" to "+hostNode, hp.UID))
	create(kubelet("earlier", corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container main", "an-earlier-uid"))
	other := kubelet("other", corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container k3s", "server-uid")
	other.InvolvedObject.Name = "k3k-c1-server-0"
	create(other)
	// The scheduler writes events.k8s.io Events (event time, series).
	if _, err := hostAdmin.EventsV1().Events(hostNamespace).Create(c, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "unschedulable", Namespace: hostNamespace},
		EventTime:  metav1.NewMicroTime(now.Time), Type: corev1.EventTypeWarning, Reason: "FailedScheduling", Action: "Scheduling",
		Note:                "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 Insufficient memory.",
		ReportingController: "default-scheduler", ReportingInstance: "default-scheduler-" + hostNode,
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: hostNamespace, Name: hp.Name, UID: hp.UID},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	shown := func() (map[string]corev1.Event, error) {
		evs, err := virtAdmin.CoreV1().Events(ns).List(c, metav1.ListOptions{FieldSelector: "involvedObject.name=app-0"})
		if err != nil {
			return nil, err
		}
		byReason := map[string]corev1.Event{}
		for _, e := range evs.Items {
			if e.ReportingController != "k3k.io/kubelet" || e.Reason == "Started" {
				continue
			}
			if _, dup := byReason[e.Reason]; dup {
				return nil, fmt.Errorf("two %s events on the virtual pod", e.Reason)
			}
			byReason[e.Reason] = e
		}
		return byReason, nil
	}
	var got map[string]corev1.Event
	eventually(t, "the host's Events on the virtual pod", func() (err error) {
		if got, err = shown(); err == nil && len(got) < 4 {
			err = fmt.Errorf("%d of 4 so far: %v", len(got), got)
		}
		return err
	})
	want := map[string]string{
		"Failed":           `Failed to pull image "registry.example:5000/app:1": the registry could not be reached or refused the request (the host node's message is not shown)`,
		"BackOff":          fmt.Sprintf("Back-off restarting failed container main in pod app-0_%s(%s)", ns, vp.UID),
		"Pulled":           `Container image "busybox:1" already present on machine`,
		"FailedScheduling": "no host node can run the pod now (too little room, or none fits its placement); it stays pending until one can (the host's message is not shown)",
	}
	for reason, msg := range want {
		e, ok := got[reason]
		switch {
		case !ok:
			t.Errorf("no %s event on the virtual pod", reason)
		case e.Message != msg:
			t.Errorf("%s: message %q, want %q", reason, e.Message, msg)
		case e.InvolvedObject.UID != vp.UID || e.InvolvedObject.Name != "app-0" || e.InvolvedObject.Namespace != ns:
			t.Errorf("%s: about %+v, want the virtual pod", reason, e.InvolvedObject)
		case e.Source.Host != nodeName || e.ReportingInstance != nodeName:
			t.Errorf("%s: reported by %q/%q, want the virtual node %s", reason, e.Source.Host, e.ReportingInstance, nodeName)
		}
		if reason != "FailedScheduling" && got[reason].InvolvedObject.FieldPath != "spec.containers{main}" {
			t.Errorf("%s: fieldPath %q", reason, got[reason].InvolvedObject.FieldPath)
		}
	}
	if n := len(got); n != len(want) {
		t.Errorf("%d events carried over (%v), want %d", n, got, len(want))
	}
	for _, e := range got {
		for _, hostWord := range []string{hostNamespace + "/", hp.Name, string(hp.UID), hostNode, "10.96.44.9", "taint", "server"} {
			if strings.Contains(e.Message, hostWord) || strings.Contains(e.Source.Host, hostWord) {
				t.Errorf("%s event names the host (%q): %q", e.Reason, hostWord, e.Message)
			}
		}
	}

	// The host's kubelet counts a repeated Event on the one it made; the
	// virtual Event follows it, still one.
	later := metav1.NewTime(now.Add(40 * time.Second))
	backoff.Count, backoff.LastTimestamp = 5, later
	if _, err := hostAdmin.CoreV1().Events(hostNamespace).Update(c, backoff, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the virtual BackOff event counting 5", func() error {
		got, err := shown()
		if b := got["BackOff"]; err == nil && (b.Count != 5 || !b.LastTimestamp.Equal(&later)) {
			err = fmt.Errorf("count %d, last seen %v", got["BackOff"].Count, got["BackOff"].LastTimestamp)
		}
		return err
	})
	if b := got["BackOff"]; !b.FirstTimestamp.Equal(&now) {
		t.Errorf("BackOff first seen %v, want %v", got["BackOff"].FirstTimestamp, now)
	}
}
