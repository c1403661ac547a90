package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// recordEvent writes an events.k8s.io Event on c, as the controller's
// recorder does.
func recordEvent(t *testing.T, c *v1beta1.Cluster, eventType, reason, note string) {
	t.Helper()
	e := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: fmt.Sprintf("%s.%d", c.Name, time.Now().UnixNano())},
		EventTime:  metav1.NewMicroTime(time.Now()), ReportingController: "k3k.io/cluster", ReportingInstance: "test",
		Action: "Reconcile", Type: eventType, Reason: reason, Note: note,
		Regarding: corev1.ObjectReference{Kind: "Cluster", APIVersion: v1beta1.GroupVersion.String(), Namespace: c.Namespace, Name: c.Name, UID: c.UID},
	}
	if err := k8s.Create(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

// A create that is stuck says why while it waits and when it gives up: the
// blocking cause the controller put in ServersReady, and Warning Events on
// the Cluster as they appear (once each).
func TestCreateShowsWhatHoldsTheServerUp(t *testing.T) {
	ns := newNamespace(t)
	progress := &syncBuffer{}
	done := make(chan result, 1)
	go func() {
		done <- k3kcliTo(t, time.Now, progress, "cluster", "create", "stuck", "-n", ns, "--timeout", "20s")
	}()
	var c *v1beta1.Cluster
	eventually(t, "the CLI creates the cluster", func() error {
		c = &v1beta1.Cluster{}
		return k8s.Get(context.Background(), keyOf(ns, "stuck"), c)
	})
	cause := `0/1 servers ready; pod k3k-stuck-server-0: PersistentVolumeClaim data-k3k-stuck-server-0 is Pending (ProvisioningFailed: storageclass.storage.k8s.io "missing" not found)`
	setStatus(t, c, v1beta1.PhaseProvisioning,
		metav1.Condition{Type: v1beta1.ConditionServersReady, Status: metav1.ConditionFalse, Reason: v1beta1.ReasonServerVolumePending, Message: cause},
		metav1.Condition{Type: v1beta1.ConditionKubeconfigPublished, Status: metav1.ConditionFalse, Reason: v1beta1.ReasonWaiting, Message: "waiting"})
	recordEvent(t, c, corev1.EventTypeWarning, v1beta1.ReasonServerVolumePending, "ServersReady=False: "+cause)
	recordEvent(t, c, corev1.EventTypeWarning, "RecoveryRefused", "the cluster still has quorum")
	recordEvent(t, c, corev1.EventTypeNormal, "TokenAvailable", "generated token Secret")
	eventually(t, "the CLI to show the cause and the warning", func() error {
		p := progress.String()
		if !strings.Contains(p, "ServersReady=ServerVolumePending ("+cause+")") || !strings.Contains(p, "warning RecoveryRefused: the cluster still has quorum") {
			return fmt.Errorf("progress so far:\n%s", p)
		}
		return nil
	})
	r := <-done
	if r.code != ExitTimeout {
		t.Fatalf("exit %d, want %d", r.code, ExitTimeout)
	}
	assertOneLineError(t, r.errOut, "not ready after 20s", "last seen: Provisioning: KubeconfigPublished=Waiting, ServersReady=ServerVolumePending ("+cause+")")
	if n := strings.Count(r.errOut, "warning RecoveryRefused"); n != 1 {
		t.Errorf("the warning was printed %d times, want once:\n%s", n, r.errOut)
	}
	if strings.Contains(r.errOut, "TokenAvailable") || strings.Contains(r.errOut, "warning "+v1beta1.ReasonServerVolumePending) {
		t.Errorf("normal events or causes the progress line shows were printed as warnings:\n%s", r.errOut)
	}
}
