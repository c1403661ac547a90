package podsecurity

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLevels(t *testing.T) {
	root := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(int64(0))}}}}
	privileged := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
	cases := []struct {
		level string
		spec  *corev1.PodSpec
		want  string // empty: allowed
	}{
		{Baseline, root, ""},
		{Baseline, privileged, `Pod Security "baseline": privileged (container "c" must not set securityContext.privileged=true)`},
		{Restricted, root, `Pod Security "restricted": `},
		{Privileged, privileged, ""},
	}
	for _, tc := range cases {
		t.Run(tc.level+" "+tc.want, func(t *testing.T) {
			e, err := New(tc.level)
			if err != nil {
				t.Fatal(err)
			}
			got := Describe(e.Check(&metav1.ObjectMeta{}, tc.spec))
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := New("lenient"); err == nil {
		t.Error("an unknown level was accepted")
	}
}
