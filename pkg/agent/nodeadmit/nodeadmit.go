// Package nodeadmit decides, as a kubelet's admission does, whether a pod
// fits on the agent's virtual node next to the pods it already runs. The
// virtual scheduler already keeps to the node's capacity; a pod whose
// spec.nodeName a tenant set directly skips the scheduler, and without this
// check could ask the host for any number of pods of any size.
package nodeadmit

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Rejection says why a pod does not fit, in a kubelet's words: Reason is
// OutOfcpu, OutOfmemory, OutOfpods (OutOf<resource>), Message the numbers.
type Rejection struct {
	Reason  string
	Message string
}

// Admit checks pod against capacity (the node's allocatable) with running
// already admitted. Requests are counted as the scheduler counts them (init
// containers, sidecars and overhead included); only resources capacity names
// are bounded, and "pods" bounds the count. Nil means it fits.
func Admit(pod *corev1.Pod, running []*corev1.Pod, capacity corev1.ResourceList) *Rejection {
	if max, ok := capacity[corev1.ResourcePods]; ok && int64(len(running))+1 > max.Value() {
		return &Rejection{
			Reason:  "OutOfpods",
			Message: fmt.Sprintf("Pod was rejected: Node didn't have enough resource: pods, running: %d, capacity: %d", len(running), max.Value()),
		}
	}
	used := corev1.ResourceList{}
	for _, p := range running {
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			sum := used[name]
			sum.Add(q)
			used[name] = sum
		}
	}
	want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		limit, bounded := capacity[name]
		q, asked := want[name]
		if !bounded || !asked || q.IsZero() {
			continue
		}
		total := used[name].DeepCopy()
		total.Add(q)
		if total.Cmp(limit) > 0 {
			return &Rejection{
				Reason: "OutOf" + string(name),
				Message: fmt.Sprintf("Pod was rejected: Node didn't have enough resource: %s, requested: %s, used: %s, capacity: %s",
					name, show(q), show(used[name]), show(limit)),
			}
		}
	}
	return nil
}

func show(q resource.Quantity) string { return q.String() }
