package translate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A Localhost seccomp or AppArmor profile is a file on the host node (or a
// profile loaded into its kernel), written by the node's administrator for
// pods they chose: one may allow what the runtime default forbids. The Pod
// Security Standards allow any Localhost profile at every level, so a tenant
// could name whichever a node happens to have. The agent refuses those the
// host administrator did not list, at every level, in every spelling: the
// pod-level and container-level fields (ephemeral containers too) and the
// deprecated annotations.

// profileKind says where a pod names profiles of one kind.
type profileKind struct {
	// name is what the reasons call it: "seccomp" or "AppArmor".
	name string
	// pod and container return the profile of a security context:
	// its type and, for Localhost, its name.
	pod       func(*corev1.PodSecurityContext) (localhost bool, profile string)
	container func(*corev1.SecurityContext) (localhost bool, profile string)
	// annotation says whether annotation key names a profile, and whose:
	// "pod", or the container's name.
	annotation func(key string) (owner string, ok bool)
}

var seccompProfiles = profileKind{
	name: "seccomp",
	pod: func(sc *corev1.PodSecurityContext) (bool, string) {
		return seccompLocalhostName(sc.SeccompProfile)
	},
	container: func(sc *corev1.SecurityContext) (bool, string) {
		return seccompLocalhostName(sc.SeccompProfile)
	},
	annotation: func(k string) (string, bool) {
		if k == corev1.SeccompPodAnnotationKey {
			return "pod", true
		}
		if c, ok := strings.CutPrefix(k, corev1.SeccompContainerAnnotationKeyPrefix); ok {
			return fmt.Sprintf("container %q", c), true
		}
		return "", false
	},
}

var appArmorProfiles = profileKind{
	name: "AppArmor",
	pod: func(sc *corev1.PodSecurityContext) (bool, string) {
		return appArmorLocalhostName(sc.AppArmorProfile)
	},
	container: func(sc *corev1.SecurityContext) (bool, string) {
		return appArmorLocalhostName(sc.AppArmorProfile)
	},
	annotation: func(k string) (string, bool) {
		if c, ok := strings.CutPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix); ok {
			return fmt.Sprintf("container %q", c), true
		}
		return "", false
	},
}

func seccompLocalhostName(p *corev1.SeccompProfile) (bool, string) {
	if p == nil || p.Type != corev1.SeccompProfileTypeLocalhost {
		return false, ""
	}
	return true, ptr.Deref(p.LocalhostProfile, "")
}

func appArmorLocalhostName(p *corev1.AppArmorProfile) (bool, string) {
	if p == nil || p.Type != corev1.AppArmorProfileTypeLocalhost {
		return false, ""
	}
	return true, ptr.Deref(p.LocalhostProfile, "")
}

// localhostProblems lists the Localhost profiles of kind k that a pod names
// and allowed does not hold.
func localhostProblems(k profileKind, allowed []string, meta *metav1.ObjectMeta, spec *corev1.PodSpec) []string {
	var r []string
	// refused holds owner and profile of each field refused, so that an
	// annotation the API server already turned into that field (AppArmor)
	// is not reported twice.
	refused := map[[2]string]bool{}
	check := func(owner, where string, localhost bool, name string) {
		if localhost && !slices.Contains(allowed, name) && !refused[[2]string{owner, name}] {
			refused[[2]string{owner, name}] = true
			r = append(r, fmt.Sprintf("%s: %s profile Localhost %q is not one the host administrator allowed (%s)",
				where, k.name, name, allowedProfiles(allowed)))
		}
	}
	if sc := spec.SecurityContext; sc != nil {
		l, name := k.pod(sc)
		check("pod", "pod", l, name)
	}
	visit := func(c *corev1.Container) {
		if sc := c.SecurityContext; sc != nil {
			l, name := k.container(sc)
			owner := fmt.Sprintf("container %q", c.Name)
			check(owner, owner, l, name)
		}
	}
	forEachContainer(spec, visit)
	for i := range spec.EphemeralContainers {
		visit((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	// Both kinds spell a Localhost profile localhost/<name> in annotations.
	for _, key := range slices.Sorted(maps.Keys(meta.Annotations)) {
		owner, ok := k.annotation(key)
		if !ok {
			continue
		}
		name, localhost := strings.CutPrefix(meta.Annotations[key], corev1.SeccompLocalhostProfileNamePrefix)
		check(owner, fmt.Sprintf("%s (annotation %q)", owner, key), localhost, name)
	}
	return r
}

// localhostProfiles refuses the Localhost seccomp and AppArmor profiles the
// host administrator did not allow (Config.SeccompLocalhostProfiles,
// Config.AppArmorLocalhostProfiles). The host ignores the seccomp
// annotations (they are not copied, and kubelets ignore them since 1.27);
// they are refused alike so that no spelling of a profile slips through.
// The AppArmor annotation is still honoured by API servers, which turn it
// into the field.
func (t *Translator) localhostProfiles(meta *metav1.ObjectMeta, spec *corev1.PodSpec) []string {
	return append(localhostProblems(seccompProfiles, t.cfg.SeccompLocalhostProfiles, meta, spec),
		localhostProblems(appArmorProfiles, t.cfg.AppArmorLocalhostProfiles, meta, spec)...)
}

func allowedProfiles(p []string) string {
	if len(p) == 0 {
		return "none is"
	}
	return "allowed: " + strings.Join(p, ", ")
}
