package translate

import (
	corev1 "k8s.io/api/core/v1"
)

// HostConfigMap is the host copy of a virtual ConfigMap. Immutability is not
// copied: the agent updates its copies in place when the virtual object is
// replaced under the same name. The caller sets owner references.
func (t *Translator) HostConfigMap(v *corev1.ConfigMap) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: t.hostMeta(KindConfigMap, v.Namespace, v.Name, string(v.UID)),
		Data:       copyMap(v.Data),
		BinaryData: copyBytes(v.BinaryData),
	}
}

// HostSecret is the host copy of a virtual Secret. A ServiceAccount token
// Secret becomes Opaque: with its original type the host's token controller
// would treat it as one of the host's own and fill or delete it. Other types
// (dockerconfigjson for image pulls, tls) are kept because kubelet reads them
// by type. The caller sets owner references.
func (t *Translator) HostSecret(v *corev1.Secret) *corev1.Secret {
	typ := v.Type
	if typ == corev1.SecretTypeServiceAccountToken || typ == "" {
		typ = corev1.SecretTypeOpaque
	}
	data := copyBytes(v.Data)
	// StringData is write-only on the API; a Secret read back never has it, but
	// a caller building one in memory may.
	for k, s := range v.StringData {
		if data == nil {
			data = map[string][]byte{}
		}
		data[k] = []byte(s)
	}
	return &corev1.Secret{
		ObjectMeta: t.hostMeta(KindSecret, v.Namespace, v.Name, string(v.UID)),
		Type:       typ,
		Data:       data,
	}
}

func copyBytes(m map[string][]byte) map[string][]byte {
	if m == nil {
		return nil
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = append([]byte(nil), v...)
	}
	return out
}
