package translate

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPriorityClassMappedToTheHost(t *testing.T) {
	tr := newTranslator(t, func(c *Config) {
		c.PriorityClasses = map[string]string{"critical": "tenant-critical", "batch": "tenant-batch"}
	})
	pod := func(class string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", UID: "u"},
			Spec: corev1.PodSpec{
				NodeName: "k3k-c1-kubelet", Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}},
				// What the virtual API server's priority admission writes.
				PriorityClassName: class, Priority: ptr.To(int32(1000000)), PreemptionPolicy: ptr.To(corev1.PreemptNever),
			},
		}
	}
	for _, c := range []struct{ virtual, host, note string }{
		{"critical", "tenant-critical", ""},
		{"batch", "tenant-batch", ""},
		{"system-cluster-critical", "", `priority class "system-cluster-critical" has no host class`},
		{"", "", ""},
	} {
		hp, err := tr.HostPod(pod(c.virtual))
		if err != nil {
			t.Fatal(err)
		}
		// The host's admission computes value and policy from the host class.
		if hp.Spec.PriorityClassName != c.host || hp.Spec.Priority != nil || hp.Spec.PreemptionPolicy != nil {
			t.Errorf("class %q: host pod class %q priority %v policy %v, want class %q and neither", c.virtual, hp.Spec.PriorityClassName, hp.Spec.Priority, hp.Spec.PreemptionPolicy, c.host)
		}
		note := tr.PriorityClassNote(pod(c.virtual))
		if (c.note == "") != (note == "") || !strings.Contains(note, c.note) {
			t.Errorf("class %q: note %q, want %q", c.virtual, note, c.note)
		}
	}
	if note := newTranslator(t).PriorityClassNote(pod("critical")); !strings.Contains(note, "none is mapped") {
		t.Errorf("without a map: note %q", note)
	}
	if note := tr.PriorityClassNote(pod("gold")); !strings.Contains(note, "batch, critical are mapped") {
		t.Errorf("the note names the mapped classes: %q", note)
	}
}
