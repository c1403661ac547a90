package snapshotter

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// TestK3sVersion: the manifest's k3sVersion is the k3s image's tag, never a
// digest an admission policy pinned the image to, and the Cluster's
// spec.version when the image has no tag.
func TestK3sVersion(t *testing.T) {
	const digest = "sha256:3f1d2c4b5a6978e0d1c2b3a4958677f6e5d4c3b2a1908f7e6d5c4b3a29180706"
	for _, tc := range []struct {
		name, image, specVersion, want string
	}{
		{"tag", "rancher/k3s:v1.34.3-k3s1", "", "v1.34.3-k3s1"},
		{"registry with a port", "registry:5000/rancher/k3s:v1.34.3-k3s1", "", "v1.34.3-k3s1"},
		{"tag beats spec.version", "rancher/k3s:v1.34.3-k3s1", "v1.33.1-k3s1", "v1.34.3-k3s1"},
		{"tag and digest", "rancher/k3s:v1.34.3-k3s1@" + digest, "", "v1.34.3-k3s1"},
		{"registry with a port, tag and digest", "registry:5000/rancher/k3s:v1.34.3-k3s1@" + digest, "", "v1.34.3-k3s1"},
		{"digest only: spec.version", "rancher/k3s@" + digest, "v1.34.3-k3s1", "v1.34.3-k3s1"},
		{"registry with a port, digest only: spec.version", "registry:5000/rancher/k3s@" + digest, "v1.34.3-k3s1", "v1.34.3-k3s1"},
		{"digest only, no spec.version", "rancher/k3s@" + digest, "", ""},
		{"no tag: spec.version", "registry:5000/rancher/k3s", "v1.34.3-k3s1", "v1.34.3-k3s1"},
		{"no tag, no spec.version", "registry:5000/rancher/k3s", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "publisher", Image: "k3k-io/k3k-datastore:dev"},
				{Name: "k3s", Image: tc.image},
			}}}
			c := &v1beta1.Cluster{Spec: v1beta1.ClusterSpec{Version: tc.specVersion}}
			if got := K3sVersion(p, c); got != tc.want {
				t.Fatalf("K3sVersion(%q, spec.version %q) = %q, want %q", tc.image, tc.specVersion, got, tc.want)
			}
		})
	}
	if got := K3sVersion(&corev1.Pod{}, nil); got != "" {
		t.Fatalf("a pod without a k3s container and no Cluster: %q", got)
	}
}
