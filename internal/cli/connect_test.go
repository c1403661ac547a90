package cli

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPickReadyPod(t *testing.T) {
	ready := func(name string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	notReady := ready("k3k-a-server-0")
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	deleting := ready("k3k-a-server-0")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	pending := ready("k3k-a-server-0")
	pending.Status.Phase = corev1.PodPending
	cases := []struct {
		name string
		pods []corev1.Pod
		want string
	}{
		{"no pods means nothing to connect to", nil, ""},
		{"the lowest ready ordinal is chosen", []corev1.Pod{ready("k3k-a-server-2"), ready("k3k-a-server-1")}, "k3k-a-server-1"},
		{"a pod that is not ready is passed over", []corev1.Pod{notReady, ready("k3k-a-server-1")}, "k3k-a-server-1"},
		{"a pod being deleted is passed over", []corev1.Pod{deleting, ready("k3k-a-server-2")}, "k3k-a-server-2"},
		{"a pod that is not running is passed over", []corev1.Pod{pending}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if p := pickReadyPod(tc.pods); p != nil {
				got = p.Name
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestConnectRefusesAClusterWithoutAReadyServer(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "cn", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatal("create failed")
	}
	// A server pod that exists but is not ready yet.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "k3k-cn-server-0", Namespace: ns,
			Labels: map[string]string{"k3k.io/cluster": "cn", "k3k.io/component": "server"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "k3s", Image: "rancher/k3s"}}},
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	r := k3kcli(t, "cluster", "connect", "cn", "-n", ns)
	if r.code != ExitError {
		t.Fatalf("exit %d, want %d", r.code, ExitError)
	}
	assertOneLineError(t, r.errOut, "has no ready server pod", "hint: wait until it is ready")

	r = k3kcli(t, "cluster", "connect", "missing", "-n", ns)
	if r.code != ExitError {
		t.Fatalf("missing cluster: exit %d, want %d", r.code, ExitError)
	}
	assertOneLineError(t, r.errOut, "not found")
}
