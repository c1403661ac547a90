package translate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func TestVirtualStorageClasses(t *testing.T) {
	tr := newTranslator(t, func(c *Config) {
		c.StorageClasses = []string{"fast", "slow"}
		c.DefaultStorageClass = "standard"
		c.ExpandableStorageClasses = []string{"fast", "standard"}
	})
	got := tr.VirtualStorageClasses()
	want := []struct {
		name            string
		def, expandable bool
	}{{"fast", false, true}, {"slow", false, false}, {"standard", true, true}}
	if len(got) != len(want) {
		t.Fatalf("%d classes, want %d", len(got), len(want))
	}
	for i, w := range want {
		c := got[i]
		if c.Name != w.name || (c.Annotations[annotationDefaultClass] == "true") != w.def || ptr.Deref(c.AllowVolumeExpansion, false) != w.expandable ||
			c.Provisioner != StorageClassProvisioner || !IsVirtualStorageClass(c) {
			t.Errorf("class %d: %+v, want %+v", i, c, w)
		}
	}

	// A default that is also allowed by name is listed once.
	tr = newTranslator(t, func(c *Config) { c.StorageClasses = []string{"standard"}; c.DefaultStorageClass = "standard" })
	if got := tr.VirtualStorageClasses(); len(got) != 1 || got[0].Annotations[annotationDefaultClass] != "true" {
		t.Errorf("got %+v", got)
	}
	// Nothing allowed, no default known: nothing shown.
	if got := newTranslator(t).VirtualStorageClasses(); len(got) != 0 {
		t.Errorf("got %+v", got)
	}
}

// A claim may name the host's default class: the virtual API server gives
// its name to claims that name none, once the default's copy is there.
func TestClaimMayNameTheHostDefaultClass(t *testing.T) {
	tr := newTranslator(t, func(c *Config) { c.StorageClasses = []string{"fast"}; c.DefaultStorageClass = "standard" })
	claim := func(class string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}
	}
	for _, class := range []string{"standard", "fast"} {
		if p := tr.ClaimProblems(claim(class)); len(p) != 0 {
			t.Errorf("class %q refused: %v", class, p)
		}
	}
	if p := tr.ClaimProblems(claim("premium")); len(p) != 1 {
		t.Errorf("class premium: %v, want refused", p)
	}
}
