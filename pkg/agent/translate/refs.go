package translate

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// Refs are the ConfigMaps and Secrets a pod spec names, sorted and without
// duplicates. On a virtual pod they are virtual names in the pod's namespace; on
// a host pod, host names in the host namespace.
type Refs struct {
	ConfigMaps []string
	Secrets    []string
}

// PodRefs collects every ConfigMap and Secret that spec refers to: volumes
// (including projected sources), env and envFrom of every container, and image
// pull Secrets.
func PodRefs(spec *corev1.PodSpec) Refs {
	cms, secrets := map[string]bool{}, map[string]bool{}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			cms[v.ConfigMap.Name] = true
		case v.Secret != nil:
			secrets[v.Secret.SecretName] = true
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					cms[s.ConfigMap.Name] = true
				}
				if s.Secret != nil {
					secrets[s.Secret.Name] = true
				}
			}
		}
	}
	forEachContainer(spec, func(c *corev1.Container) {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				cms[e.ConfigMapRef.Name] = true
			}
			if e.SecretRef != nil {
				secrets[e.SecretRef.Name] = true
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if e.ValueFrom.ConfigMapKeyRef != nil {
				cms[e.ValueFrom.ConfigMapKeyRef.Name] = true
			}
			if e.ValueFrom.SecretKeyRef != nil {
				secrets[e.ValueFrom.SecretKeyRef.Name] = true
			}
		}
	})
	for _, s := range spec.ImagePullSecrets {
		secrets[s.Name] = true
	}
	delete(cms, "")
	delete(secrets, "")
	return Refs{ConfigMaps: sortedKeys(cms), Secrets: sortedKeys(secrets)}
}

// forEachContainer visits init containers and containers. Ephemeral containers
// are not translated (they are added through a subresource the agent does not
// serve), so they are not visited.
func forEachContainer(spec *corev1.PodSpec, f func(*corev1.Container)) {
	for i := range spec.InitContainers {
		f(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		f(&spec.Containers[i])
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
