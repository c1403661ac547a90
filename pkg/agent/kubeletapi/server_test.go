package kubeletapi

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLogOptions(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	cases := []struct {
		name    string
		query   string
		want    *corev1.PodLogOptions
		wantErr bool
	}{
		{"no options reads the whole log of the container", "", &corev1.PodLogOptions{Container: "c"}, false},
		{"kubectl logs -f --tail=5 --timestamps", "follow=true&tailLines=5&timestamps=true", &corev1.PodLogOptions{Container: "c", Follow: true, TailLines: ptr.To(int64(5)), Timestamps: true}, false},
		{"previous container with a byte limit", "previous=true&limitBytes=100", &corev1.PodLogOptions{Container: "c", Previous: true, LimitBytes: ptr.To(int64(100))}, false},
		{"since a time and since seconds", "sinceTime=2026-11-30T10:00:00Z&sinceSeconds=60", &corev1.PodLogOptions{Container: "c", SinceTime: &since, SinceSeconds: ptr.To(int64(60))}, false},
		{"a malformed number is refused", "tailLines=many", nil, true},
		{"a malformed time is refused", "sinceTime=yesterday", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := logOptions(httptest.NewRequest("GET", "/containerLogs/ns/p/c?"+tc.query, nil), "c")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
