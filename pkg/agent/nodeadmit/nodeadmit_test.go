package nodeadmit

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func pod(cpu, memory string) *corev1.Pod {
	req := corev1.ResourceList{}
	if cpu != "" {
		req[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if memory != "" {
		req[corev1.ResourceMemory] = resource.MustParse(memory)
	}
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req}}}}}
}

func TestAdmit(t *testing.T) {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("1Gi"),
		corev1.ResourcePods:   resource.MustParse("3"),
	}
	withInit := pod("500m", "")
	withInit.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}
	withSidecar := pod("1500m", "")
	withSidecar.Spec.InitContainers = []corev1.Container{{Name: "s", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("600m")}}}}
	cases := []struct {
		name       string
		pod        *corev1.Pod
		running    []*corev1.Pod
		wantReason string
		wantIn     string
	}{
		{"a pod without requests fits an empty node", pod("", ""), nil, "", ""},
		{"a pod fits next to others within capacity", pod("1", "512Mi"), []*corev1.Pod{pod("500m", "256Mi"), pod("500m", "256Mi")}, "", ""},
		{"cpu beyond capacity", pod("1500m", ""), []*corev1.Pod{pod("1", "")}, "OutOfcpu", "cpu, requested: 1500m, used: 1, capacity: 2"},
		{"a pod larger than the node on its own", pod("", "2Gi"), nil, "OutOfmemory", "memory, requested: 2Gi, used: 0, capacity: 1Gi"},
		{"the pod count is bounded", pod("", ""), []*corev1.Pod{pod("", ""), pod("", ""), pod("", "")}, "OutOfpods", "running: 3, capacity: 3"},
		{"an init container's request counts as the scheduler counts it", withInit, nil, "OutOfcpu", "requested: 3"},
		{"a sidecar adds to the containers' requests", withSidecar, nil, "OutOfcpu", "requested: 2100m"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Admit(tc.pod, tc.running, capacity)
			if tc.wantReason == "" {
				if got != nil {
					t.Fatalf("rejected: %+v", got)
				}
				return
			}
			if got == nil || got.Reason != tc.wantReason || !strings.Contains(got.Message, tc.wantIn) {
				t.Errorf("got %+v, want %s mentioning %q", got, tc.wantReason, tc.wantIn)
			}
		})
	}
	if Admit(pod("100", "1Ti"), nil, nil) != nil {
		t.Error("no capacity bounded something")
	}
}
