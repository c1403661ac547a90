// Package nodeadmit decides, as a kubelet's admission does, whether a pod
// fits on the agent's virtual node next to the pods it already runs. The
// virtual scheduler already keeps to the node's capacity; a pod whose
// spec.nodeName a tenant set directly skips the scheduler, and without this
// check could ask the host for any number of pods of any size, or for
// resources the node does not offer at all (GPUs, hugepages, a device
// plugin's devices).
package nodeadmit

import (
	"fmt"
	"slices"
	"sort"

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
// containers, sidecars and overhead included); "pods" bounds the count. A
// pod that requests or limits a resource capacity does not name is refused
// as if the node had none of it. A nil capacity bounds nothing. Nil means it
// fits.
func Admit(pod *corev1.Pod, running []*corev1.Pod, capacity corev1.ResourceList) *Rejection {
	if capacity == nil {
		return nil
	}
	if max, ok := capacity[corev1.ResourcePods]; ok && int64(len(running))+1 > max.Value() {
		return &Rejection{
			Reason:  "OutOfpods",
			Message: fmt.Sprintf("Pod was rejected: Node didn't have enough resource: pods, running: %d, capacity: %d", len(running), max.Value()),
		}
	}
	if rej := unadvertised(pod, capacity); rej != nil {
		return rej
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
	for _, name := range bounded(capacity) {
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

// bounded lists the resources of capacity a pod's requests count against:
// cpu, memory and ephemeral storage first (the kubelet's order), then the
// others by name; "pods" bounds the count instead.
func bounded(capacity corev1.ResourceList) []corev1.ResourceName {
	first := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}
	var rest []string
	for name := range capacity {
		if name != corev1.ResourcePods && !slices.Contains(first, name) {
			rest = append(rest, string(name))
		}
	}
	sort.Strings(rest)
	out := first
	for _, name := range rest {
		out = append(out, corev1.ResourceName(name))
	}
	return out
}

// unadvertised refuses a pod that asks for a resource capacity does not
// name, the first in name order, in the kubelet's words with a capacity of
// zero. A kubelet drops extended resources its node does not know before it
// fits a pod (they may be a scheduler extender's); the agent cannot: the
// host pod would ask the host for them, GPUs, hugepages or a device plugin's
// devices the host administrator never offered the tenant. Zero quantities
// ask for nothing and pass.
func unadvertised(pod *corev1.Pod, capacity corev1.ResourceList) *Rejection {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	asked := map[corev1.ResourceName]resource.Quantity{}
	note := func(list corev1.ResourceList) {
		for name, q := range list {
			if _, offered := capacity[name]; offered || q.IsZero() {
				continue
			}
			if _, seen := asked[name]; !seen {
				asked[name] = q
			}
		}
	}
	// Requests first, so the message shows the request where there is one.
	// Pod-level resources are counted by neither helper without the
	// PodLevelResources option; they are noted as written.
	note(requests)
	note(limits)
	if r := pod.Spec.Resources; r != nil {
		note(r.Requests)
		note(r.Limits)
	}
	if len(asked) == 0 {
		return nil
	}
	names := make([]string, 0, len(asked))
	for name := range asked {
		names = append(names, string(name))
	}
	sort.Strings(names)
	name := corev1.ResourceName(names[0])
	return &Rejection{
		Reason: "OutOf" + string(name),
		Message: fmt.Sprintf("Pod was rejected: Node didn't have enough resource: %s, requested: %s, used: 0, capacity: 0",
			name, show(asked[name])),
	}
}

func show(q resource.Quantity) string { return q.String() }
