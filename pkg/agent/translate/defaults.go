package translate

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/podsecurity"
)

// What a tenant leaves out of a pod gets the host's default, and several of
// the host's defaults are unsafe for a hostile tenant: no seccomp profile, no
// memory bound, a tmpfs as large as the node's memory, whatever grace period
// the tenant wrote. The functions here give the host pod the safe value
// instead, in the copy HostPod builds; each leaves alone what the tenant set
// within bounds.

// seccompDefault gives a pod without a pod-level seccomp profile
// RuntimeDefault, unless Config.DisableSeccompDefault. Without one the host
// runtime starts its containers with no filter at all (Seccomp: 0 in
// /proc/self/status), and `unshare -U -r` then opens a user namespace, with
// the kernel surface behind it. Containers that name their own profile keep
// it (the container's profile wins over the pod's). Windows pods may not set
// a seccomp profile at all and are left alone.
func (t *Translator) seccompDefault(spec *corev1.PodSpec) {
	if t.cfg.DisableSeccompDefault || isWindows(spec) {
		return
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.SecurityContext.SeccompProfile == nil {
		spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
}

// userNamespace runs the host pod in a user namespace of its own (hostUsers:
// false) when Config.UserNamespaces, unless the pod chose otherwise, which
// only the privileged level allows (userNamespaceProblems), or cannot run in
// one: raw block devices (volumeDevices) are neither idmapped nor chowned, so
// the API refuses them with hostUsers false. Windows pods have no user
// namespaces.
func (t *Translator) userNamespace(spec *corev1.PodSpec) {
	if !t.cfg.UserNamespaces || spec.HostUsers != nil || isWindows(spec) || hasVolumeDevices(spec) {
		return
	}
	spec.HostUsers = ptr.To(false)
}

// userNamespaceProblems refuses, when Config.UserNamespaces and below the
// privileged level, the two ways a pod would keep the node's users: asking
// for them (hostUsers: true) and raw block devices, which cannot be used in
// a user namespace. Otherwise a tenant would step out of the host
// administrator's user namespaces by writing one field.
func (t *Translator) userNamespaceProblems(spec *corev1.PodSpec) []string {
	if !t.cfg.UserNamespaces || t.pss.Level() == podsecurity.Privileged || isWindows(spec) {
		return nil
	}
	var r []string
	if ptr.Deref(spec.HostUsers, false) {
		r = append(r, "hostUsers: true: the host runs this cluster's pods in user namespaces (only the privileged level may opt out)")
	}
	forEachContainer(spec, func(c *corev1.Container) {
		if len(c.VolumeDevices) > 0 {
			r = append(r, fmt.Sprintf("container %q: volumeDevices cannot be used in a user namespace, where the host runs this cluster's pods (only the privileged level may opt out)", c.Name))
		}
	})
	return r
}

func isWindows(spec *corev1.PodSpec) bool {
	return spec.OS != nil && spec.OS.Name == corev1.Windows
}

func hasVolumeDevices(spec *corev1.PodSpec) bool {
	found := false
	forEachContainer(spec, func(c *corev1.Container) { found = found || len(c.VolumeDevices) > 0 })
	return found
}

// defaultResources gives every container (init, sidecar, regular) the
// configured default limit of each resource it sets no limit of, and the
// default request of each resource it neither requests nor limits. A pod
// that sets nothing would otherwise have no memory bound on the host.
//
// Only what the container leaves unset is filled, and never so the pod
// becomes invalid on the host:
//   - a container with its own limit but no request keeps it that way: the
//     API server copies the limit into the request;
//   - a default limit below the container's own request is raised to it, and
//     a default request above the container's limit is lowered to it;
//   - a resource the pod sets at pod level (spec.resources) is left to the
//     pod level, which bounds the containers' sum: the host would refuse
//     container requests above the pod's request or limits above its limit.
//     A pod that requests one at pod level without limiting it gets the
//     default as a pod-level limit (raised to the pod's request and to every
//     container's own limit), so pod-level requests are no way around the
//     bound.
func (t *Translator) defaultResources(spec *corev1.PodSpec) {
	if len(t.cfg.DefaultRequests) == 0 && len(t.cfg.DefaultLimits) == 0 {
		return
	}
	pod := spec.Resources
	atPodLevel := func(name corev1.ResourceName) bool {
		if pod == nil {
			return false
		}
		_, req := pod.Requests[name]
		_, lim := pod.Limits[name]
		return req || lim
	}
	forEachContainer(spec, func(c *corev1.Container) {
		res := &c.Resources
		ownLimits := map[corev1.ResourceName]bool{}
		for name := range res.Limits {
			ownLimits[name] = true
		}
		for name, def := range t.cfg.DefaultLimits {
			if ownLimits[name] || atPodLevel(name) {
				continue
			}
			q := def.DeepCopy()
			if req, ok := res.Requests[name]; ok && req.Cmp(q) > 0 {
				q = req.DeepCopy()
			}
			if res.Limits == nil {
				res.Limits = corev1.ResourceList{}
			}
			res.Limits[name] = q
		}
		for name, def := range t.cfg.DefaultRequests {
			if _, ok := res.Requests[name]; ok || ownLimits[name] || atPodLevel(name) {
				continue
			}
			q := def.DeepCopy()
			if lim, ok := res.Limits[name]; ok && q.Cmp(lim) > 0 {
				q = lim.DeepCopy()
			}
			if res.Requests == nil {
				res.Requests = corev1.ResourceList{}
			}
			res.Requests[name] = q
		}
	})
	if pod == nil {
		return
	}
	for name, def := range t.cfg.DefaultLimits {
		req, requested := pod.Requests[name]
		if _, limited := pod.Limits[name]; !requested || limited {
			continue
		}
		q := def.DeepCopy()
		if req.Cmp(q) > 0 {
			q = req.DeepCopy()
		}
		bounded := true
		forEachContainer(spec, func(c *corev1.Container) {
			lim, ok := c.Resources.Limits[name]
			if !ok {
				bounded = false
			} else if lim.Cmp(q) > 0 {
				q = lim.DeepCopy()
			}
		})
		if bounded {
			continue // every container has its own limit
		}
		if pod.Limits == nil {
			pod.Limits = corev1.ResourceList{}
		}
		pod.Limits[name] = q
	}
}

// sizeMemoryVolumes gives every emptyDir of medium Memory without a sizeLimit
// the pod's memory limit as its size: the pod-level limit, or else the sum of
// the limits of the containers that run together (regular containers and
// sidecars), after defaultResources. A pod with a container without a memory
// limit has no bound to give and keeps its volumes as written.
//
// Why: the volume is a tmpfs on the host node, and what a tenant writes there
// is node memory that outlives the container that wrote it (a restarted
// container finds its files, and their pages, still there). Host kubelets
// with SizeMemoryBackedVolumes (on from 1.22, always from 1.32) mount it at
// the pod's memory limit; older ones, or ones with the gate off, mount the
// kernel's default of half the node's memory, bounded only by the memory
// cgroups. An explicit sizeLimit is the bound written into the host pod's
// spec whatever the host kubelet: its eviction manager evicts a pod whose
// emptyDir outgrows it, and the host's own policies can see it. The size
// given is what the pod may use anyway, so a pod within its limits sees no
// difference.
func sizeMemoryVolumes(spec *corev1.PodSpec) {
	for i := range spec.Volumes {
		e := spec.Volumes[i].EmptyDir
		if e == nil || e.Medium != corev1.StorageMediumMemory || e.SizeLimit != nil {
			continue
		}
		if q, ok := podMemoryLimit(spec); ok {
			e.SizeLimit = &q
		}
	}
}

// podMemoryLimit is the most memory spec's running containers may use
// together, if they are bounded.
func podMemoryLimit(spec *corev1.PodSpec) (resource.Quantity, bool) {
	if spec.Resources != nil {
		if q, ok := spec.Resources.Limits[corev1.ResourceMemory]; ok {
			return q.DeepCopy(), true
		}
	}
	var sum resource.Quantity
	var running []corev1.Container
	for _, c := range spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			running = append(running, c)
		}
	}
	for _, c := range append(running, spec.Containers...) {
		q, ok := c.Resources.Limits[corev1.ResourceMemory]
		if !ok {
			return resource.Quantity{}, false
		}
		sum.Add(q)
	}
	return sum, true
}

// capGracePeriods holds the pod's terminationGracePeriodSeconds, and the
// probe-level ones the host kubelet uses when a liveness or startup probe
// kills a container, to Config.MaxTerminationGracePeriodSeconds. A pod that
// sets none gets the host's default of 30 s, which only a cap below 30 has
// to shorten. Without the cap a pod that ignores SIGTERM with a grace period
// of a year stays on the host, Terminating, long after its virtual pod and
// namespace are gone.
func (t *Translator) capGracePeriods(spec *corev1.PodSpec) {
	limit := t.cfg.MaxTerminationGracePeriodSeconds
	g := spec.TerminationGracePeriodSeconds
	if (g == nil && limit < corev1.DefaultTerminationGracePeriodSeconds) || (g != nil && *g > limit) {
		spec.TerminationGracePeriodSeconds = ptr.To(limit)
	}
	forEachContainer(spec, func(c *corev1.Container) {
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.StartupProbe} {
			if p != nil && p.TerminationGracePeriodSeconds != nil && *p.TerminationGracePeriodSeconds > limit {
				p.TerminationGracePeriodSeconds = ptr.To(limit)
			}
		}
	})
}
