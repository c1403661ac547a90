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
		"example.com/dongle":  resource.MustParse("1"),
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
	withLimit := func(p *corev1.Pod, init bool, name, q string) *corev1.Pod {
		c := corev1.Container{Name: "x", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceName(name): resource.MustParse(q)},
			Limits:   corev1.ResourceList{corev1.ResourceName(name): resource.MustParse(q)},
		}}
		if init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		} else {
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
		return p
	}
	limitOnly := pod("", "")
	limitOnly.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"example.com/fpga": resource.MustParse("1")}
	podLevel := pod("", "")
	podLevel.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{"hugepages-1Gi": resource.MustParse("2Gi")}}
	cases = append(cases, []struct {
		name       string
		pod        *corev1.Pod
		running    []*corev1.Pod
		wantReason string
		wantIn     string
	}{
		{"a GPU the node does not advertise is refused", withLimit(pod("", ""), false, "nvidia.com/gpu", "1"), nil,
			"OutOfnvidia.com/gpu", "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 0, capacity: 0"},
		{"hugepages asked for by an init container are refused", withLimit(pod("", ""), true, "hugepages-2Mi", "64Mi"), nil,
			"OutOfhugepages-2Mi", "hugepages-2Mi, requested: 64Mi"},
		{"a device plugin's resource set only as a limit is refused", limitOnly, nil, "OutOfexample.com/fpga", "example.com/fpga, requested: 1"},
		{"hugepages asked for at pod level are refused", podLevel, nil, "OutOfhugepages-1Gi", "hugepages-1Gi, requested: 2Gi"},
		{"ephemeral storage the node does not advertise is refused", withLimit(pod("", ""), false, "ephemeral-storage", "1Gi"), nil,
			"OutOfephemeral-storage", "ephemeral-storage, requested: 1Gi, used: 0, capacity: 0"},
		{"a resource the node advertises is counted, not refused", withLimit(pod("", ""), false, "example.com/dongle", "1"), nil, "", ""},
		{"a resource the node advertises is bounded by its capacity", withLimit(pod("", ""), false, "example.com/dongle", "1"),
			[]*corev1.Pod{withLimit(pod("", ""), false, "example.com/dongle", "1")}, "OutOfexample.com/dongle", "requested: 1, used: 1, capacity: 1"},
		{"a zero quantity asks for nothing", withLimit(pod("", ""), false, "nvidia.com/gpu", "0"), nil, "", ""},
	}...)
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
	if Admit(withLimit(pod("100", "1Ti"), false, "nvidia.com/gpu", "8"), nil, nil) != nil {
		t.Error("no capacity bounded something")
	}
}
