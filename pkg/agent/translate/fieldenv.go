package translate

import (
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
)

// A variable read from one of the pod's labels or annotations
// (fieldRef metadata.labels['k'], metadata.annotations['k']) is resolved by
// a kubelet each time the container starts, so a changed annotation reaches
// the next start (the conformance test "a failing subpath expansion can be
// modified during the lifecycle of a container" relies on it). The host pod
// does not carry the tenant's labels and annotations (they may mean
// something to the host's controllers), so the agent carries each value
// such a variable reads in an annotation of its own, k3k.io/field-<hash of
// the path>, points the variable there, and keeps the annotation current
// (package podsync).

const fieldAnnotationPrefix = "k3k.io/field-"

// fieldAnnotation is the host annotation that carries the value of field
// path (metadata.labels['k'] or metadata.annotations['k']) of the virtual
// pod.
func fieldAnnotation(path string) string {
	sum := sha256.Sum256([]byte(path))
	return fieldAnnotationPrefix + hex.EncodeToString(sum[:])[:10]
}

// labelOrAnnotation says whether field path reads one label or annotation.
func labelOrAnnotation(path string) bool {
	_, ok := labelOrAnnotationValue(&corev1.Pod{}, path)
	return ok
}

// FieldAnnotations are the host pod annotations that carry the labels and
// annotations of vpod its containers' variables read (init containers
// too), with their current values ("" for one vpod does not have, as a
// kubelet gives).
func FieldAnnotations(vpod *corev1.Pod) map[string]string {
	out := map[string]string{}
	forEachContainer(&vpod.Spec, func(c *corev1.Container) {
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
				continue
			}
			path := e.ValueFrom.FieldRef.FieldPath
			if v, ok := labelOrAnnotationValue(vpod, path); ok {
				out[fieldAnnotation(path)] = v
			}
		}
	})
	return out
}

// FieldAnnotationsPatch returns the annotations of FieldAnnotations(vpod)
// that host does not carry with that value yet; nil when none.
func FieldAnnotationsPatch(vpod, host *corev1.Pod) map[string]string {
	var out map[string]string
	for k, v := range FieldAnnotations(vpod) {
		if cur, ok := host.Annotations[k]; !ok || cur != v {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}
