package translate

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KindClaim is the kind of the host copies of PersistentVolumeClaims.
const KindClaim Kind = "persistentvolumeclaim"

// Markers of the virtual PersistentVolumes the agent makes for synced claims.
const (
	// VolumeDriver is the CSI driver name of those volumes. No such driver
	// runs anywhere: the volume is mounted by the host kubelet through the
	// host claim, and the virtual node has no attach/detach controller
	// (it does not carry the controller-managed-attach-detach annotation).
	VolumeDriver = "host.k3k.io"
	// AnnotationHostClaim names the host claim a virtual volume stands for
	// ("<host namespace>/<name>").
	AnnotationHostClaim = "k3k.io/host-claim"
	// AnnotationHostVolume names the host PersistentVolume the host claim is
	// bound to, once it is.
	AnnotationHostVolume = "k3k.io/host-volume"
	// AnnotationHostPhase is the host claim's phase (Pending until the host
	// binds it; for WaitForFirstConsumer classes that is when the first host
	// pod using it is scheduled).
	AnnotationHostPhase = "k3k.io/host-phase"
	// annotationProvisionedBy is what the virtual PersistentVolume controller
	// reads to know that an external provisioner (the agent) deletes the
	// volume; it never tries to itself.
	annotationProvisionedBy = "pv.kubernetes.io/provisioned-by"
)

// VirtualVolumeName is the name of the virtual PersistentVolume of claim
// uid, as dynamic provisioners name theirs.
func VirtualVolumeName(claimUID string) string { return "pvc-" + claimUID }

// ClaimProblems lists why a virtual claim does not get a host copy. Only
// size, access modes, volume mode and an allowed storage class reach the
// host; a claim that asks for more is refused rather than silently trimmed,
// so the tenant learns why it never binds:
//
//   - selector: the host's PersistentVolume controller would bind the host
//     claim to any host volume with matching labels (someone else's data);
//   - volumeName other than the agent's own virtual volume: a claim bound (or
//     pre-bound) to a volume the tenant made in the virtual cluster is not
//     backed by anything on the host;
//   - dataSource, dataSourceRef: the host would clone the named claim or
//     snapshot of the host namespace, where the cluster's server keeps its
//     datastore;
//   - volumeAttributesClassName: attribute classes are the host
//     administrator's;
//   - storage class "" (no class): binds a pre-provisioned host volume made
//     by hand (hostPath, NFS, local disks); a class not in the allow-list.
//
// Labels and annotations are never copied, so there is nothing to refuse in
// them (volume.beta.kubernetes.io/storage-class, which would override the
// class, volume.kubernetes.io/selected-node, which picks the provisioning
// node, never reach the host).
func (t *Translator) ClaimProblems(v *corev1.PersistentVolumeClaim) []string {
	var r []string
	s := v.Spec
	if s.Selector != nil {
		r = append(r, "spec.selector would bind the host claim to any host volume with those labels")
	}
	if s.VolumeName != "" && s.VolumeName != VirtualVolumeName(string(v.UID)) {
		r = append(r, fmt.Sprintf("spec.volumeName %q: only volumes the agent makes for the claim are backed on the host", s.VolumeName))
	}
	if s.DataSource != nil {
		r = append(r, "spec.dataSource would clone a host object")
	}
	if s.DataSourceRef != nil {
		r = append(r, "spec.dataSourceRef would clone a host object")
	}
	if s.VolumeAttributesClassName != nil {
		r = append(r, "spec.volumeAttributesClassName: volume attribute classes are the host administrator's")
	}
	if p := t.storageClassProblem(s.StorageClassName); p != "" {
		r = append(r, p)
	}
	if _, ok := s.Resources.Requests[corev1.ResourceStorage]; !ok {
		r = append(r, "spec.resources.requests.storage is required")
	}
	return r
}

// storageClassProblem says why a storage class may not be asked of the host,
// or "" when it may: unset or the host's default by name
// (Config.DefaultStorageClass), or one the host administrator allowed
// (Config.StorageClasses).
func (t *Translator) storageClassProblem(c *string) string {
	switch {
	case c == nil:
		return ""
	case *c == "":
		// An empty class asks the host for a pre-provisioned volume without a
		// class: any such PersistentVolume of the host (NFS, hostPath, a local
		// disk made by hand) whose size and access mode fit would be bound.
		return `storage class "" (no class) would bind a pre-provisioned host volume; leave storageClassName unset for the host's default class`
	case *c != t.cfg.DefaultStorageClass && !contains(t.cfg.StorageClasses, *c):
		return fmt.Sprintf("storage class %q is not one the host administrator allowed (%s)", *c, allowedClasses(t.cfg.StorageClasses))
	}
	return ""
}

// HostClaim is the host copy of a virtual claim: the agent's labels and
// annotations, the cluster as owner, and of the spec only access modes,
// storage request and limit, volume mode and storage class. It returns an
// *UnsupportedError when ClaimProblems finds any. The hash annotation covers
// what the agent decides.
func (t *Translator) HostClaim(v *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error) {
	if r := t.ClaimProblems(v); len(r) > 0 {
		return nil, &UnsupportedError{Reasons: r}
	}
	s := v.Spec
	spec := corev1.PersistentVolumeClaimSpec{
		AccessModes:      append([]corev1.PersistentVolumeAccessMode(nil), s.AccessModes...),
		VolumeMode:       s.VolumeMode,
		StorageClassName: s.StorageClassName,
		Resources:        storageOnlyResources(s.Resources),
	}
	meta := t.hostMeta(KindClaim, v.Namespace, v.Name, string(v.UID))
	meta.OwnerReferences = append(meta.OwnerReferences, t.cfg.OwnerReferences...)
	h := &corev1.PersistentVolumeClaim{ObjectMeta: meta, Spec: spec}
	h.Annotations[AnnotationHash] = fingerprint(h.Labels, h.Annotations, h.OwnerReferences, h.Spec)
	return h, nil
}

func storageOnlyResources(r corev1.VolumeResourceRequirements) corev1.VolumeResourceRequirements {
	var out corev1.VolumeResourceRequirements
	if q, ok := r.Requests[corev1.ResourceStorage]; ok {
		out.Requests = corev1.ResourceList{corev1.ResourceStorage: q}
	}
	if q, ok := r.Limits[corev1.ResourceStorage]; ok {
		out.Limits = corev1.ResourceList{corev1.ResourceStorage: q}
	}
	return out
}

// ClaimGrows reports whether the virtual claim asks for more storage than
// the host claim: the expansion to pass on (the host refuses it where the
// class does not allow expansion). A smaller request is never passed on:
// claims cannot shrink.
func ClaimGrows(v, h *corev1.PersistentVolumeClaim) (resource.Quantity, bool) {
	want, ok := v.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return resource.Quantity{}, false
	}
	have := h.Spec.Resources.Requests[corev1.ResourceStorage]
	return want, want.Cmp(have) > 0
}

// VirtualVolume is the virtual PersistentVolume that stands for the host
// claim h of virtual claim v: pre-bound to v (claimRef with its UID), so the
// virtual PersistentVolume controller binds v to it and the virtual
// scheduler can place v's pods. Its capacity and access modes are the host
// claim's once the host has bound it, the request until then; its class is
// v's, so the binding matches. Annotations name the host claim, the host
// volume and the host phase. Reclaim policy Delete with the agent as
// provisioner: the virtual controller leaves deletion to the agent, which
// deletes the host claim and this volume when v goes.
func (t *Translator) VirtualVolume(v, h *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	capacity := v.Spec.Resources.Requests[corev1.ResourceStorage]
	modes := v.Spec.AccessModes
	ann := map[string]string{
		annotationProvisionedBy: VolumeDriver,
		AnnotationHostClaim:     h.Namespace + "/" + h.Name,
		AnnotationHostPhase:     string(h.Status.Phase),
	}
	if h.Status.Phase == corev1.ClaimBound {
		if q, ok := h.Status.Capacity[corev1.ResourceStorage]; ok && q.Cmp(capacity) >= 0 {
			capacity = q
		}
		if len(h.Status.AccessModes) > 0 {
			modes = h.Status.AccessModes
		}
		ann[AnnotationHostVolume] = h.Spec.VolumeName
	}
	class := ""
	if v.Spec.StorageClassName != nil {
		class = *v.Spec.StorageClassName
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        VirtualVolumeName(string(v.UID)),
			Labels:      map[string]string{LabelManagedBy: ManagedByValue},
			Annotations: ann,
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: capacity},
			AccessModes:                   append([]corev1.PersistentVolumeAccessMode(nil), modes...),
			VolumeMode:                    v.Spec.VolumeMode,
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			ClaimRef: &corev1.ObjectReference{
				APIVersion: "v1", Kind: "PersistentVolumeClaim",
				Namespace: v.Namespace, Name: v.Name, UID: v.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver:       VolumeDriver,
				VolumeHandle: h.Namespace + "/" + h.Name,
			}},
		},
	}
}

// IsVirtualVolumeOf reports whether pv is the agent's virtual volume for
// claim (namespace, name, uid): its name, driver and claimRef say so.
func IsVirtualVolumeOf(pv *corev1.PersistentVolume, namespace, name, uid string) bool {
	ref := pv.Spec.ClaimRef
	return pv.Name == VirtualVolumeName(uid) && pv.Labels[LabelManagedBy] == ManagedByValue &&
		pv.Spec.CSI != nil && pv.Spec.CSI.Driver == VolumeDriver &&
		ref != nil && ref.Namespace == namespace && ref.Name == name && string(ref.UID) == uid
}

// VolumeUpdate returns live with what the agent keeps current on its virtual
// volume (capacity, access modes, host annotations) taken from desired, and
// whether anything changed. The source and claimRef are immutable or the
// binding's.
func VolumeUpdate(live, desired *corev1.PersistentVolume) (*corev1.PersistentVolume, bool) {
	u := live.DeepCopy()
	if u.Annotations == nil {
		u.Annotations = map[string]string{}
	}
	for _, k := range []string{AnnotationHostClaim, AnnotationHostVolume, AnnotationHostPhase} {
		if v, ok := desired.Annotations[k]; ok {
			u.Annotations[k] = v
		} else {
			delete(u.Annotations, k)
		}
	}
	u.Spec.Capacity = desired.Spec.Capacity
	u.Spec.AccessModes = desired.Spec.AccessModes
	return u, !equality.Semantic.DeepEqual(live.Annotations, u.Annotations) || !equality.Semantic.DeepEqual(live.Spec, u.Spec)
}

// ClaimStatus is the virtual claim's status with the host claim's capacity
// and access modes, once both are bound; the phase stays the virtual
// PersistentVolume controller's (it owns the binding). ok is false when
// nothing is to be mirrored.
func ClaimStatus(v, h *corev1.PersistentVolumeClaim) (corev1.PersistentVolumeClaimStatus, bool) {
	if v.Status.Phase != corev1.ClaimBound || h.Status.Phase != corev1.ClaimBound {
		return v.Status, false
	}
	s := *v.Status.DeepCopy()
	if q, ok := h.Status.Capacity[corev1.ResourceStorage]; ok {
		s.Capacity = corev1.ResourceList{corev1.ResourceStorage: q}
	}
	if len(h.Status.AccessModes) > 0 {
		s.AccessModes = append([]corev1.PersistentVolumeAccessMode(nil), h.Status.AccessModes...)
	}
	return s, !equality.Semantic.DeepEqual(v.Status, s)
}

// ClaimRefusal is the message of the Warning Event on a refused claim.
func ClaimRefusal(reasons []string) string {
	return "claim not synced to the host: " + strings.Join(reasons, "; ")
}
