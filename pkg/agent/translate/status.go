package translate

import (
	corev1 "k8s.io/api/core/v1"
)

// Reasons the agent sets on virtual pods it fails itself.
const (
	// ReasonUnsupported: the pod uses a feature the agent refuses.
	ReasonUnsupported = "UnsupportedPod"
	// ReasonHostPodLost: the host pod that ran the pod disappeared (evicted,
	// deleted by a host administrator). Like a pod whose node was lost, it is
	// failed so that its controller replaces it.
	ReasonHostPodLost = "HostPodLost"
	// ReasonHostRejected: the host API refused the translated pod as invalid.
	ReasonHostRejected = "HostRejected"
)

// VirtualStatus is the status vpod should report while host runs it: the
// host's phase, conditions, container statuses, IPs and start time. The
// PodScheduled condition stays the virtual one (it is about the virtual
// scheduler's decision, which placed the pod on the agent's node), and
// generations are the virtual pod's, since the host pod's count host updates.
func VirtualStatus(vpod, host *corev1.Pod) corev1.PodStatus {
	h := host.Status.DeepCopy()
	s := corev1.PodStatus{
		Phase:                      h.Phase,
		Message:                    h.Message,
		Reason:                     h.Reason,
		HostIP:                     h.HostIP,
		HostIPs:                    h.HostIPs,
		PodIP:                      h.PodIP,
		PodIPs:                     h.PodIPs,
		StartTime:                  h.StartTime,
		InitContainerStatuses:      h.InitContainerStatuses,
		ContainerStatuses:          h.ContainerStatuses,
		EphemeralContainerStatuses: vpod.Status.EphemeralContainerStatuses,
		QOSClass:                   h.QOSClass,
	}
	if s.Phase == "" {
		s.Phase = corev1.PodPending
	}
	if s.QOSClass == "" {
		s.QOSClass = vpod.Status.QOSClass
	}
	if h.ObservedGeneration != 0 {
		s.ObservedGeneration = vpod.Generation
	}
	for _, c := range vpod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			s.Conditions = append(s.Conditions, c)
		}
	}
	for _, c := range h.Conditions {
		if c.Type == corev1.PodScheduled {
			continue
		}
		if c.ObservedGeneration != 0 {
			c.ObservedGeneration = vpod.Generation
		}
		s.Conditions = append(s.Conditions, c)
	}
	return s
}

// FailedStatus is the status of a virtual pod the agent will not run, or
// whose host pod is gone: phase Failed with reason and message, every
// container reported as not running (kubelet reports a terminated state; the
// agent never ran the container, so there is no exit code to give).
func FailedStatus(vpod *corev1.Pod, reason, message string) corev1.PodStatus {
	s := *vpod.Status.DeepCopy()
	s.Phase = corev1.PodFailed
	s.Reason = reason
	s.Message = message
	for i, c := range s.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			s.Conditions[i].Status = corev1.ConditionFalse
			s.Conditions[i].Reason = reason
		}
	}
	for i := range s.ContainerStatuses {
		s.ContainerStatuses[i].Ready = false
	}
	return s
}
