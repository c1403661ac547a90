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
	// ReasonHostForbidden: the host API refused the host pod for now (an
	// exceeded ResourceQuota, an admission policy); the agent keeps trying.
	ReasonHostForbidden = "HostForbidden"
	// ReasonCopyForbidden (an Event on a pod or a Service): the host API
	// refused a copy the object needs, a ConfigMap or Secret a pod uses, a
	// Service or its EndpointSlices (an exceeded ResourceQuota, an admission
	// policy); the agent keeps trying, and a pod waits for its volumes.
	ReasonCopyForbidden = "HostCopyForbidden"
	// ReasonClusterIPNotRouted (an Event on a Service): the host could not
	// give the Service's copy its virtual ClusterIP (taken on the host, or
	// outside the host's Service network), so that address does not route;
	// the Service's name and environment variables give the copy's.
	ReasonClusterIPNotRouted = "ClusterIPNotRouted"
	// ReasonNodePortNotServed (an Event on a Service): the agent could not
	// open a node port of the Service at the node's address.
	ReasonNodePortNotServed = "NodePortNotServed"
	// ReasonNotExposedOnHost (an Event on a NodePort or LoadBalancer
	// Service): the host exposes nothing of a virtual cluster's Services
	// outside it; the node ports are served to the virtual cluster's own
	// pods, and a LoadBalancer gets no address.
	ReasonNotExposedOnHost = "NotExposedOnHost"
	// ReasonPriorityClassNotMapped (an Event on a pod): the pod's priority
	// class has no host class (translate.Config.PriorityClasses); it runs at
	// the host's default priority.
	ReasonPriorityClassNotMapped = "PriorityClassNotMapped"
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
		// The virtual pod keeps its own QoS class: the virtual API server set
		// it from the pod as the tenant wrote it and refuses any change, while
		// the host pod's can differ (a host LimitRange's default requests make
		// a BestEffort pod Burstable there).
		QOSClass: vpod.Status.QOSClass,
	}
	scrubPullMessages(s.InitContainerStatuses)
	scrubPullMessages(s.ContainerStatuses)
	if s.Phase == "" {
		s.Phase = corev1.PodPending
	}
	if s.QOSClass == "" {
		s.QOSClass = h.QOSClass
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

// HostRefusedStatus is the status of a virtual pod whose host pod the host API
// refused for now (an exceeded ResourceQuota, an admission policy): still
// Pending, with the host's answer as the pod's reason and message, so that
// `kubectl get` and `describe` say why it does not start. The agent keeps
// trying; the pod starts once the host admits it.
func HostRefusedStatus(vpod *corev1.Pod, message string) corev1.PodStatus {
	s := *vpod.Status.DeepCopy()
	s.Phase = corev1.PodPending
	s.Reason = ReasonHostForbidden
	s.Message = message
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
