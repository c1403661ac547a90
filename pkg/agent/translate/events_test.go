package translate

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// hostPodOf is the host pod tr makes for virtual pod ns/name with uid.
func hostPodOf(t *testing.T, tr *Translator, ns, name, uid string) *corev1.Pod {
	t.Helper()
	hp, err := tr.HostPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: tr.cfg.NodeName, Containers: []corev1.Container{{Name: "main", Image: "busybox:1"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	hp.UID = "host-pod-uid"
	return hp
}

func TestVirtualPodEventMessages(t *testing.T) {
	tr := newTranslator(t)
	hp := hostPodOf(t, tr, "shop", "web-0", "virtual-uid")
	cases := []struct {
		reason, message string
		want            string // "" for not shown
	}{
		{"Killing", "Stopping container main", "Stopping container main"},
		{"Failed", "Error: ErrImagePull", "Error: ErrImagePull"},
		{"Failed", `Failed to pull image "ghcr.io/x/y:1": rpc error: code = NotFound desc = failed to pull and unpack image: not found`,
			`Failed to pull image "ghcr.io/x/y:1": not found (the host node's message is not shown)`},
		{"Failed", `Failed to pull image "x:1": failed to authorize: 401 Unauthorized`,
			`Failed to pull image "x:1": access denied (check the pod's imagePullSecrets) (the host node's message is not shown)`},
		{"FailedMount", `MountVolume.SetUp failed for volume "config" : configmap "config-shop-0123456789" not found`,
			`volume "config" could not be mounted (the host node's message is not shown)`},
		{"FailedMount", `Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[]: timed out`,
			"a volume could not be mounted (the host node's message is not shown)"},
		{"FailedCreatePodSandBox", `Failed to create pod sandbox: plugin type="bridge" failed (add): failed to allocate for range 0: 10.244.0.0/24 exhausted`,
			"the host node could not create the pod's sandbox; it will try again (the host node's message is not shown)"},
		{"Evicted", "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 512Mi.",
			"the host node was low on ephemeral-storage and evicted the pod"},
		{"Evicted", "Pod was evicted", "the host node evicted the pod"},
		{"Preempted", "Preempted by pod 0b6b on node worker-3", "preempted on the host by a pod of higher priority"},
		{"Scheduled", "Successfully assigned tenant/" + hp.Name + " to worker-3", ""},
		{"Started", "Started container main", ""},
		{"NodeNotReady", "Node is not ready", ""},
		{"TaintManagerEviction", "Marking for deletion Pod tenant/" + hp.Name, ""},
	}
	for _, c := range cases {
		e := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "e", Namespace: "tenant", UID: "host-event"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "tenant", Name: hp.Name, UID: hp.UID},
			Type:           corev1.EventTypeWarning, Reason: c.reason, Message: c.message,
			FirstTimestamp: metav1.Now(), Count: 1,
		}
		got, ok := tr.VirtualPodEvent(e, hp)
		switch {
		case c.want == "" && ok:
			t.Errorf("%s %q: shown as %q, want not shown", c.reason, c.message, got.Message)
		case c.want == "":
		case !ok:
			t.Errorf("%s %q: not shown, want %q", c.reason, c.message, c.want)
		case got.Message != c.want:
			t.Errorf("%s %q: %q, want %q", c.reason, c.message, got.Message, c.want)
		}
	}
}

func TestVirtualPodEventOnlyAboutTheAgentsOwnPod(t *testing.T) {
	tr := newTranslator(t)
	hp := hostPodOf(t, tr, "shop", "web-0", "virtual-uid")
	event := func(mutate func(*corev1.Event)) *corev1.Event {
		e := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "e", Namespace: "tenant", UID: "host-event"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "tenant", Name: hp.Name, UID: hp.UID},
			Type:           corev1.EventTypeWarning, Reason: "BackOff", Message: "Back-off restarting failed container main",
		}
		mutate(e)
		return e
	}
	if _, ok := tr.VirtualPodEvent(event(func(*corev1.Event) {}), hp); !ok {
		t.Fatal("an Event about the host pod is not shown")
	}
	other := newTranslator(t, func(c *Config) { c.ClusterName = "c2" })
	for what, e := range map[string]*corev1.Event{
		"an earlier pod of the name": event(func(e *corev1.Event) { e.InvolvedObject.UID = "earlier" }),
		"another kind":               event(func(e *corev1.Event) { e.InvolvedObject.Kind = "PersistentVolumeClaim" }),
		"another namespace":          event(func(e *corev1.Event) { e.InvolvedObject.Namespace = "elsewhere" }),
		"an odd type":                event(func(e *corev1.Event) { e.Type = "Critical" }),
	} {
		if got, ok := tr.VirtualPodEvent(e, hp); ok {
			t.Errorf("%s: shown as %+v", what, got)
		}
	}
	if got, ok := other.VirtualPodEvent(event(func(*corev1.Event) {}), hp); ok {
		t.Errorf("another cluster's agent shows the pod's Event: %+v", got)
	}
}

func TestVirtualPodEventIsAValidEvent(t *testing.T) {
	tr := newTranslator(t)
	long := strings.Repeat("a", 253)
	hp := hostPodOf(t, tr, "shop", long, "virtual-uid")
	at := time.Date(2026, 12, 7, 8, 0, 0, 500_000_000, time.UTC)
	// The scheduler's form: event time and series, no count or timestamps.
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "e", Namespace: "tenant", UID: "host-event"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "tenant", Name: hp.Name, UID: hp.UID},
		Type:           corev1.EventTypeWarning, Reason: "FailedScheduling", Message: "0/3 nodes are available",
		EventTime: metav1.NewMicroTime(at), Action: "Scheduling", ReportingController: "default-scheduler", ReportingInstance: "s",
		Series: &corev1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(at.Add(time.Minute))},
	}
	got, ok := tr.VirtualPodEvent(e, hp)
	if !ok {
		t.Fatal("not shown")
	}
	if got.Count != 4 || !got.FirstTimestamp.Time.Equal(at.Truncate(time.Second)) || !got.LastTimestamp.Time.Equal(at.Add(time.Minute).Truncate(time.Second)) {
		t.Errorf("count %d, first %v, last %v", got.Count, got.FirstTimestamp, got.LastTimestamp)
	}
	if got.Source.Component != "default-scheduler" || got.Source.Host != "k3k-c1-kubelet" {
		t.Errorf("source %+v", got.Source)
	}
	if errs := validation.NameIsDNSSubdomain(got.Name, false); len(errs) > 0 {
		t.Errorf("name %q: %v", got.Name, errs)
	}
	again, _ := tr.VirtualPodEvent(e, hp)
	e2 := e.DeepCopy()
	e2.UID = "another-host-event"
	third, _ := tr.VirtualPodEvent(e2, hp)
	if again.Name != got.Name || third.Name == got.Name {
		t.Errorf("names %q, %q (same host Event), %q (another): want the same for the same host Event only", got.Name, again.Name, third.Name)
	}
}
