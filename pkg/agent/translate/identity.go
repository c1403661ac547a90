package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// TokenSpec is a ServiceAccount token a pod projects: the agent requests it
// from the virtual cluster (TokenRequest, bound to the pod) and stores it under
// its key in the pod's identity Secret.
type TokenSpec struct {
	Audience          string
	ExpirationSeconds int64
}

// DefaultTokenExpiration is what kubelet requests when a projection names no
// expiration.
const DefaultTokenExpiration = int64(3600)

// Identity lists what a pod's identity Secret holds: downward API fields under
// Fields (key → field path) and ServiceAccount tokens under Tokens.
type Identity struct {
	Fields map[string]string
	Tokens map[string]TokenSpec
}

// Empty reports whether the pod needs no identity Secret.
func (i Identity) Empty() bool { return len(i.Fields) == 0 && len(i.Tokens) == 0 }

// PodIdentity collects the downward API field references and ServiceAccount
// token projections in spec's volumes; env references are resolved to literal
// values instead (see HostPod).
func PodIdentity(spec *corev1.PodSpec) Identity {
	id := Identity{Fields: map[string]string{}, Tokens: map[string]TokenSpec{}}
	addItems := func(items []corev1.DownwardAPIVolumeFile) {
		for _, it := range items {
			if it.FieldRef != nil {
				id.Fields[fieldKey(it.FieldRef.FieldPath)] = it.FieldRef.FieldPath
			}
		}
	}
	for _, v := range spec.Volumes {
		switch {
		case v.DownwardAPI != nil:
			addItems(v.DownwardAPI.Items)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.DownwardAPI != nil {
					addItems(s.DownwardAPI.Items)
				}
				if s.ServiceAccountToken != nil {
					ts := tokenSpec(s.ServiceAccountToken)
					id.Tokens[tokenKey(ts)] = ts
				}
			}
		}
	}
	return id
}

func tokenSpec(p *corev1.ServiceAccountTokenProjection) TokenSpec {
	ts := TokenSpec{Audience: p.Audience, ExpirationSeconds: DefaultTokenExpiration}
	if p.ExpirationSeconds != nil {
		ts.ExpirationSeconds = *p.ExpirationSeconds
	}
	return ts
}

func fieldKey(path string) string { return "field-" + shortHash(path) }

func tokenKey(ts TokenSpec) string {
	return "token-" + shortHash(ts.Audience+"\x00"+strconv.FormatInt(ts.ExpirationSeconds, 10))
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// FieldValue resolves a downward API field path against the virtual pod, the
// way kubelet would against the pod it runs. Status fields are not resolved
// here: the host pod's values are the same and kubelet on the host fills them.
func (t *Translator) FieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return t.cfg.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	}
	if v, ok := labelOrAnnotationValue(pod, path); ok {
		return v, nil
	}
	return "", fmt.Errorf("field path %q is not supported", path)
}

// labelOrAnnotationValue resolves a path that reads one label or annotation
// (metadata.labels['k'], metadata.annotations['k']): "" for a key the pod
// does not have, as a kubelet gives. ok is false for any other path.
func labelOrAnnotationValue(pod *corev1.Pod, path string) (value string, ok bool) {
	if key, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[key], true
	}
	if key, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[key], true
	}
	return "", false
}

// subscript parses "prefix['key']".
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// formatMap renders labels or annotations as kubelet writes them into a
// downward API file: sorted key="value" lines.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := make([]string, len(keys))
	for i, k := range keys {
		lines[i] = k + "=" + strconv.Quote(m[k])
	}
	return strings.Join(lines, "\n")
}

// HostIdentitySecret is the identity Secret of vpod: every field of id resolved
// against vpod and every token from tokens (key → token). A token missing from
// tokens is left out; kubelet on the host waits for the key to appear. The
// caller sets owner references (the host pod).
func (t *Translator) HostIdentitySecret(vpod *corev1.Pod, id Identity, tokens map[string][]byte) (*corev1.Secret, error) {
	s := &corev1.Secret{
		ObjectMeta: t.hostMeta(KindPodIdentity, vpod.Namespace, vpod.Name, string(vpod.UID)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{},
	}
	for key, path := range id.Fields {
		v, err := t.FieldValue(vpod, path)
		if err != nil {
			return nil, err
		}
		s.Data[key] = []byte(v)
	}
	for key := range id.Tokens {
		if tok, ok := tokens[key]; ok {
			s.Data[key] = tok
		}
	}
	return s, nil
}
