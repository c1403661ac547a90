package podsync

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestHostDeletion(t *testing.T) {
	const limit = 300
	year := int64(31536000)
	running := func(spec *int64) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: spec}}
	}
	terminating := func(current int64) *corev1.Pod {
		now := metav1.Now()
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now, DeletionGracePeriodSeconds: ptr.To(current)},
			Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(current)},
		}
	}
	cases := []struct {
		name      string
		hpod      *corev1.Pod
		requested *int64
		wantGrace int64
		wantSend  bool
	}{
		{"the virtual pod's grace period is used when within the cap", running(ptr.To(year)), ptr.To(int64(45)), 45, true},
		{"the virtual pod's grace period of a year is capped", running(ptr.To(year)), ptr.To(year), limit, true},
		{"a forced virtual deletion stays immediate", running(ptr.To(int64(30))), ptr.To(int64(0)), 0, true},
		{"without one the host pod's own grace period is used", running(ptr.To(int64(60))), nil, 60, true},
		{"a host pod from before the cap with a year is deleted with the cap", running(ptr.To(year)), nil, limit, true},
		{"a host pod without a grace period gets the API's 30 s", running(nil), nil, 30, true},
		{"a host pod terminating with a year is deleted again with the cap", terminating(year), nil, limit, true},
		{"a host pod terminating with a year, its virtual pod deleting, is deleted again with the capped request", terminating(year), ptr.To(int64(30)), 30, true},
		{"a shorter second virtual deletion shortens the host pod's", terminating(30), ptr.To(int64(1)), 1, true},
		{"a host pod terminating within the cap is left alone", terminating(30), nil, 0, false},
		{"the same request again sends nothing", terminating(30), ptr.To(int64(30)), 0, false},
		{"a longer request never lengthens a deletion", terminating(30), ptr.To(int64(200)), 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			grace, send := hostDeletion(tc.hpod, tc.requested, limit)
			if grace != tc.wantGrace || send != tc.wantSend {
				t.Errorf("hostDeletion = %d, %v; want %d, %v", grace, send, tc.wantGrace, tc.wantSend)
			}
		})
	}
}
