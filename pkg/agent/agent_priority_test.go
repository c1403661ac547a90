package agent_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// A pod's priority class reaches the host only as the host class the
// administrator mapped it to (the suite maps critical to tenant-critical);
// a pod naming another runs at the host's default priority and is told so.
func TestAgentMapsPriorityClasses(t *testing.T) {
	const ns = "priority"
	virtualNamespace(t, ns)
	c := ctx(t)
	for _, pc := range []struct {
		client kubernetes.Interface
		name   string
		value  int32
	}{{hostAdmin, "tenant-critical", 5000}, {virtAdmin, "critical", 1000000}, {virtAdmin, "gold", 2000000}} {
		_, err := pc.client.SchedulingV1().PriorityClasses().Create(c, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: pc.name}, Value: pc.value}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	createVirtual(t, boundPod(ns, "mapped", func(p *corev1.Pod) { p.Spec.PriorityClassName = "critical" }))
	createVirtual(t, boundPod(ns, "unmapped", func(p *corev1.Pod) { p.Spec.PriorityClassName = "gold" }))

	// The host's priority admission gives the mapped pod the host class's
	// value, not the virtual one's.
	if hp := waitHostPod(t, ns, "mapped"); hp.Spec.PriorityClassName != "tenant-critical" || hp.Spec.Priority == nil || *hp.Spec.Priority != 5000 {
		t.Errorf("mapped: host pod class %q priority %v, want tenant-critical at 5000", hp.Spec.PriorityClassName, hp.Spec.Priority)
	}
	if hp := waitHostPod(t, ns, "unmapped"); hp.Spec.PriorityClassName != "" || hp.Spec.Priority == nil || *hp.Spec.Priority != 0 {
		t.Errorf("unmapped: host pod class %q priority %v, want none at 0", hp.Spec.PriorityClassName, hp.Spec.Priority)
	}
	notMapped := func(e corev1.Event) bool {
		return e.Type == corev1.EventTypeWarning && e.Reason == translate.ReasonPriorityClassNotMapped && strings.Contains(e.Message, `priority class "gold" has no host class`)
	}
	eventually(t, "a PriorityClassNotMapped Event on the unmapped pod", func() error {
		if n, err := countVirtualEvents(c, ns, "unmapped", notMapped); err != nil || n != 1 {
			return fmt.Errorf("%d Events (%v)", n, err)
		}
		return nil
	})
	if n, err := countVirtualEvents(c, ns, "mapped", func(e corev1.Event) bool { return e.Reason == translate.ReasonPriorityClassNotMapped }); err != nil || n != 0 {
		t.Errorf("%d PriorityClassNotMapped Events on the mapped pod (%v)", n, err)
	}
}
