package translate

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// StorageClassProvisioner is the provisioner of the virtual cluster's copies
// of the host's storage classes. No provisioner of that name runs: the
// agent makes the volume of each claim (package volumesync), and the
// virtual cluster's PersistentVolume controller, which sees an external
// provisioner, waits for it ("ExternalProvisioning").
const StorageClassProvisioner = "k3k.io/host"

// annotationDefaultClass marks the default storage class; the virtual API
// server gives its name to claims that name none.
const annotationDefaultClass = "storageclass.kubernetes.io/is-default-class"

// VirtualStorageClasses are the storage classes the virtual cluster shows:
// one for each class its claims may name (Config.StorageClasses and the
// host's default, Config.DefaultStorageClass), under the host class's name,
// so that `kubectl get storageclass` lists them, charts that look for a
// class or the default find one, and a claim may grow where the host class
// allows it (the virtual API server's resize admission asks the virtual
// class). The host's default is the virtual default.
//
// Only names, the default mark and expansion are carried over: the host
// class's provisioner and parameters are the host's business, and binding
// is Immediate since the virtual volume is made for the host claim whatever
// the host class's binding mode (the host's binding waits for the host pod,
// as it would). Sorted by name.
func (t *Translator) VirtualStorageClasses() []*storagev1.StorageClass {
	names := append([]string(nil), t.cfg.StorageClasses...)
	if d := t.cfg.DefaultStorageClass; d != "" && !contains(names, d) {
		names = append(names, d)
	}
	sort.Strings(names)
	out := make([]*storagev1.StorageClass, 0, len(names))
	for _, n := range names {
		c := &storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{
				Name:   n,
				Labels: map[string]string{LabelManagedBy: ManagedByValue},
			},
			Provisioner:          StorageClassProvisioner,
			ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
			VolumeBindingMode:    ptr.To(storagev1.VolumeBindingImmediate),
			AllowVolumeExpansion: ptr.To(contains(t.cfg.ExpandableStorageClasses, n)),
		}
		if n == t.cfg.DefaultStorageClass {
			c.Annotations = map[string]string{annotationDefaultClass: "true"}
		}
		out = append(out, c)
	}
	return out
}

// IsVirtualStorageClass reports whether c is one of the agent's copies
// (VirtualStorageClasses), which it may change and delete; a class of the
// same name the virtual cluster's admin made is left alone.
func IsVirtualStorageClass(c *storagev1.StorageClass) bool {
	return c.Labels[LabelManagedBy] == ManagedByValue && c.Provisioner == StorageClassProvisioner
}
