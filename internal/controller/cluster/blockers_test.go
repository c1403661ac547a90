package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

func TestFirstBlockerNamesTheCause(t *testing.T) {
	pod := func(name string, change func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "data",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + name}}}}}}
		if change != nil {
			change(&p)
		}
		return p
	}
	claim := func(name string, phase corev1.PersistentVolumeClaimPhase, event *corev1.Event) claimFacts {
		return claimFacts{claim: corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}, event: event}
	}
	unschedulable := func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/1 nodes are available: 1 Insufficient memory.\npreemption: 0/1 nodes are available"}}
	}
	waiting := func(reason, msg string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "k3s", Image: "rancher/k3s:v9", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
		}
	}
	crashLoop := func(p *corev1.Pod) {
		waiting("CrashLoopBackOff", "back-off 40s restarting failed container")(p)
		p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
			Message: "level=fatal msg=\"starting kubernetes: postgres://admin:SECRET-PASSWORD@db/k3s\""}
	}
	ready := func(p *corev1.Pod) {
		crashLoop(p) // what the pod went through does not matter once it is ready
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	provisioningFailed := &corev1.Event{Type: corev1.EventTypeWarning, Reason: "ProvisioningFailed", Message: `storageclass.storage.k8s.io "missing" not found`}
	externalProvisioning := &corev1.Event{Type: corev1.EventTypeNormal, Reason: "ExternalProvisioning", Message: "waiting for a volume to be created by the external provisioner"}
	waitingForConsumer := &corev1.Event{Type: corev1.EventTypeNormal, Reason: "WaitForFirstConsumer", Message: "waiting for first consumer to be created before binding"}

	cases := []struct {
		name        string
		pods        []corev1.Pod
		claims      map[string]claimFacts
		wantReason  string
		wantMessage string
		wantWarning bool
		wantAbsent  string
	}{{
		name:   "a pod that is only starting has no blocker",
		pods:   []corev1.Pod{pod("s-0", waiting("ContainerCreating", ""))},
		claims: map[string]claimFacts{"data-s-0": claim("data-s-0", corev1.ClaimBound, nil)},
	}, {
		name:       "a pending claim is named with its warning event",
		pods:       []corev1.Pod{pod("s-0", unschedulable)},
		claims:     map[string]claimFacts{"data-s-0": claim("data-s-0", corev1.ClaimPending, provisioningFailed)},
		wantReason: v1beta1.ReasonServerVolumePending, wantWarning: true,
		wantMessage: `pod s-0: PersistentVolumeClaim data-s-0 is Pending (ProvisioningFailed: storageclass.storage.k8s.io "missing" not found)`,
	}, {
		name:       "a pending claim whose latest event is normal is reported but is no warning",
		pods:       []corev1.Pod{pod("s-0", nil)},
		claims:     map[string]claimFacts{"data-s-0": claim("data-s-0", corev1.ClaimPending, externalProvisioning)},
		wantReason: v1beta1.ReasonServerVolumePending, wantWarning: false,
		wantMessage: "pod s-0: PersistentVolumeClaim data-s-0 is Pending (ExternalProvisioning: waiting for a volume to be created by the external provisioner)",
	}, {
		name:   "a claim waiting for its pod to be scheduled is not a blocker: every create passes through it",
		pods:   []corev1.Pod{pod("s-0", nil)},
		claims: map[string]claimFacts{"data-s-0": claim("data-s-0", corev1.ClaimPending, waitingForConsumer)},
	}, {
		name:       "a claim waiting for a pod that cannot be scheduled gives the scheduler's reason",
		pods:       []corev1.Pod{pod("s-0", unschedulable)},
		claims:     map[string]claimFacts{"data-s-0": claim("data-s-0", corev1.ClaimPending, waitingForConsumer)},
		wantReason: v1beta1.ReasonServerUnschedulable, wantWarning: true,
		wantMessage: "pod s-0 is Unschedulable: 0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available",
	}, {
		name:       "an unschedulable pod carries the scheduler's reason on one line",
		pods:       []corev1.Pod{pod("s-0", unschedulable)},
		claims:     map[string]claimFacts{"data-s-0": claim("data-s-0", corev1.ClaimBound, nil)},
		wantReason: v1beta1.ReasonServerUnschedulable, wantWarning: true,
		wantMessage: "pod s-0 is Unschedulable: 0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available",
	}, {
		name:       "an image that cannot be pulled is named with the kubelet's message",
		pods:       []corev1.Pod{pod("s-0", waiting("ImagePullBackOff", `Back-off pulling image "rancher/k3s:v9"`))},
		wantReason: v1beta1.ReasonServerImagePullFailing, wantWarning: true,
		wantMessage: `pod s-0: container k3s cannot pull image rancher/k3s:v9 (ImagePullBackOff): Back-off pulling image "rancher/k3s:v9"`,
	}, {
		name:       "a crash loop gives the last exit code, never the container's last words",
		pods:       []corev1.Pod{pod("s-0", crashLoop)},
		wantReason: v1beta1.ReasonServerCrashLooping, wantWarning: true,
		wantMessage: "pod s-0: container k3s is in CrashLoopBackOff, last exit code 1 (Error)",
		wantAbsent:  "SECRET-PASSWORD",
	}, {
		name:       "the first blocked pod by name wins and ready pods are skipped",
		pods:       []corev1.Pod{pod("s-2", unschedulable), pod("s-0", ready), pod("s-1", crashLoop)},
		wantReason: v1beta1.ReasonServerCrashLooping, wantWarning: true,
		wantMessage: "pod s-1: container k3s is in CrashLoopBackOff, last exit code 1 (Error)",
	}, {
		name:   "ready pods have no blocker whatever they went through",
		pods:   []corev1.Pod{pod("s-0", ready)},
		claims: map[string]claimFacts{"data-s-0": claim("data-s-0", corev1.ClaimPending, provisioningFailed)},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := firstBlocker(tc.pods, tc.claims)
			if tc.wantReason == "" {
				if b != nil {
					t.Fatalf("blocker %+v, want none", b)
				}
				return
			}
			if b == nil {
				t.Fatal("no blocker")
			}
			if b.reason != tc.wantReason || b.message != tc.wantMessage || b.warning != tc.wantWarning {
				t.Errorf("got %s %q warning=%v\nwant %s %q warning=%v", b.reason, b.message, b.warning, tc.wantReason, tc.wantMessage, tc.wantWarning)
			}
			if tc.wantAbsent != "" && strings.Contains(b.message, tc.wantAbsent) {
				t.Errorf("message carries %q", tc.wantAbsent)
			}
		})
	}
}

func TestLatestClaimEventPrefersTheLatestWarning(t *testing.T) {
	at := func(typ, reason string, sec int) corev1.Event {
		return corev1.Event{Type: typ, Reason: reason, LastTimestamp: metav1.NewTime(time.Unix(int64(sec), 0))}
	}
	got := latestClaimEvent([]corev1.Event{
		at(corev1.EventTypeWarning, "old-warning", 10), at(corev1.EventTypeNormal, "newer-normal", 30), at(corev1.EventTypeWarning, "new-warning", 20),
	})
	if got == nil || got.Reason != "new-warning" {
		t.Fatalf("got %+v, want new-warning", got)
	}
	if got := latestClaimEvent([]corev1.Event{at(corev1.EventTypeNormal, "a", 1), at(corev1.EventTypeNormal, "b", 2)}); got.Reason != "b" {
		t.Fatalf("got %s among normal events, want the latest, b", got.Reason)
	}
	if latestClaimEvent(nil) != nil {
		t.Fatal("an event out of nothing")
	}
}

// clusterEvents lists the Events recorded on c.
func clusterEvents(t *testing.T, c *v1beta1.Cluster) []corev1.Event {
	t.Helper()
	list := &corev1.EventList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(c.Namespace), client.MatchingFields{"involvedObject.uid": string(c.UID)}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// waitClusterEvent waits until the recorder has written an Event on c with
// reason and type, and returns its message.
func waitClusterEvent(t *testing.T, c *v1beta1.Cluster, eventType, reason string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var seen []string
		for _, e := range clusterEvents(t, c) {
			if e.Type == eventType && e.Reason == reason {
				return e.Message
			}
			seen = append(seen, e.Type+"/"+e.Reason)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s Event %s on the Cluster; seen: %v", eventType, reason, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStuckServerCausesReachTheConditionAndEvents walks one server pod
// through the causes that keep a create waiting, against a real API server:
// each lands in the ServersReady condition (reason and message naming it) and
// as an Event on the Cluster, and a reconcile that sees the same cause again
// writes nothing.
func TestStuckServerCausesReachTheConditionAndEvents(t *testing.T) {
	ctx := context.Background()
	r, writes := newReconciler(t)
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	stop := make(chan struct{})
	broadcaster.StartRecordingToSink(stop)
	t.Cleanup(func() { close(stop); broadcaster.Shutdown() })
	r.Recorder = broadcaster.NewRecorder(scheme, "k3k-cluster")

	c := createCluster(t, newCluster(newNamespace(t), "stuck"))
	reconcileOnce(t, r, c)
	get(t, c, c.Name, c)
	waitClusterEvent(t, c, corev1.EventTypeNormal, v1beta1.ReasonServersStarting)

	// What the StatefulSet controller would make: the claim and the pod.
	n := layout.NamesFor(c)
	sts := &appsv1.StatefulSet{}
	get(t, c, n.StatefulSet, sts)
	podName := n.StatefulSet + "-0"
	claimName := layout.DataVolume + "-" + podName
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: claimName, Labels: sts.Spec.Template.Labels},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("missing"),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}}},
	}
	if err := k8s.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimPending
	if err := k8s.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	// The claim's event as the volume controller writes it.
	if _, err := cs.CoreV1().Events(c.Namespace).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: claimName + ".1", Namespace: c.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: c.Namespace, Name: claimName, UID: pvc.UID, APIVersion: "v1"},
		Type:           corev1.EventTypeWarning, Reason: "ProvisioningFailed", Message: `storageclass.storage.k8s.io "missing" not found`,
		Source: corev1.EventSource{Component: "persistentvolume-controller"}, LastTimestamp: metav1.Now(), FirstTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: podName, Labels: sts.Spec.Template.Labels},
		Spec:       *sts.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: layout.DataVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}})
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	setPod := func(change func(*corev1.Pod)) {
		t.Helper()
		get(t, c, podName, pod)
		change(pod)
		if err := k8s.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	unschedulable := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/1 nodes are available: 1 Insufficient cpu."}
	setPod(func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{unschedulable}
	})

	steps := []struct {
		name   string
		before func()
		reason string
		want   []string
	}{{
		name:   "pending claim",
		reason: v1beta1.ReasonServerVolumePending,
		want:   []string{podName, "PersistentVolumeClaim " + claimName + " is Pending", `ProvisioningFailed: storageclass.storage.k8s.io "missing" not found`},
	}, {
		name: "unschedulable",
		before: func() {
			pvc.Status.Phase = corev1.ClaimBound
			if err := k8s.Status().Update(ctx, pvc); err != nil {
				t.Fatal(err)
			}
		},
		reason: v1beta1.ReasonServerUnschedulable,
		want:   []string{"pod " + podName + " is Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."},
	}, {
		name: "image pull",
		before: func() {
			setPod(func(p *corev1.Pod) {
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "k3s", Image: "rancher/k3s:v0.0.0-missing",
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "rancher/k3s:v0.0.0-missing"`}}}}
			})
		},
		reason: v1beta1.ReasonServerImagePullFailing,
		want:   []string{"container k3s cannot pull image rancher/k3s:v0.0.0-missing (ImagePullBackOff)"},
	}, {
		name: "crash loop",
		before: func() {
			setPod(func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodRunning
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "k3s", Image: "rancher/k3s", RestartCount: 4,
					State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 255, Reason: "Error", Message: "token=SECRET-TOKEN"}}}}
			})
		},
		reason: v1beta1.ReasonServerCrashLooping,
		want:   []string{"container k3s is in CrashLoopBackOff, last exit code 255 (Error)"},
	}}
	for _, step := range steps {
		if step.before != nil {
			step.before()
		}
		reconcileOnce(t, r, c)
		cond := condition(t, c, v1beta1.ConditionServersReady)
		if cond.Status != metav1.ConditionFalse || cond.Reason != step.reason {
			t.Fatalf("%s: ServersReady %s/%s %q, want False/%s", step.name, cond.Status, cond.Reason, cond.Message, step.reason)
		}
		for _, w := range step.want {
			if !strings.Contains(cond.Message, w) {
				t.Errorf("%s: message %q does not say %q", step.name, cond.Message, w)
			}
		}
		msg := waitClusterEvent(t, c, corev1.EventTypeWarning, step.reason)
		if !strings.Contains(msg, step.want[len(step.want)-1]) {
			t.Errorf("%s: Event %q does not carry the cause", step.name, msg)
		}
		// The same cause seen again changes nothing.
		start := writes.count()
		reconcileOnce(t, r, c)
		if d := writes.count() - start; d != 0 {
			t.Errorf("%s: a reconcile that saw the same cause made %d writes", step.name, d)
		}
		t.Logf("%s: %s", step.name, cond.Message)
	}
	for _, e := range clusterEvents(t, c) {
		if strings.Contains(e.Message, "SECRET-TOKEN") {
			t.Errorf("Event %s carries the container's termination message", e.Reason)
		}
	}
	cl := &v1beta1.Cluster{}
	get(t, c, c.Name, cl)
	if got := fmt.Sprint(cl.Status.Conditions); strings.Contains(got, "SECRET-TOKEN") {
		t.Error("the status carries the container's termination message")
	}
}
