package translate

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// tenantClaim is a claim as a StatefulSet makes one, with metadata a hostile
// tenant added: the beta class annotation (it overrides storageClassName on
// the host), the node a provisioner should use, and the controller's
// labels.
func tenantClaim() *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: "data-db-0", Namespace: "shop", UID: "claim-uid",
			Labels: map[string]string{"app": "db", "app.kubernetes.io/managed-by": "k3k", "k3k.io/component": "server"},
			Annotations: map[string]string{
				"volume.beta.kubernetes.io/storage-class": "",
				"volume.kubernetes.io/selected-node":      "control-plane",
			},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:  ptr.To(corev1.PersistentVolumeFilesystem),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi"), "example.com/iops": resource.MustParse("9000")},
				Limits:   corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
			},
		},
	}
}

func TestHostClaimKeepsOnlyStorage(t *testing.T) {
	tr := newTranslator(t, func(c *Config) {
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "k3k.io/v1beta1", Kind: "Cluster", Name: "c1", UID: "cluster-uid"}}
	})
	h, err := tr.HostClaim(tenantClaim())
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != tr.HostName(KindClaim, "shop", "data-db-0") || h.Namespace != "tenant" || !hashSuffix.MatchString(h.Name) {
		t.Errorf("name %s/%s", h.Namespace, h.Name)
	}
	wantLabels := map[string]string{LabelManagedBy: ManagedByValue, LabelCluster: "c1", LabelVirtualNamespace: "shop"}
	if diff := cmp.Diff(wantLabels, h.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	for k := range h.Annotations {
		if !strings.HasPrefix(k, "k3k.io/") {
			t.Errorf("annotation %q reached the host claim", k)
		}
	}
	want := corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		VolumeMode:  ptr.To(corev1.PersistentVolumeFilesystem),
		Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
		},
	}
	if diff := cmp.Diff(want, h.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if len(h.OwnerReferences) != 1 || h.OwnerReferences[0].UID != "cluster-uid" {
		t.Errorf("owners %v, want the Cluster", h.OwnerReferences)
	}
	again, _ := tr.HostClaim(tenantClaim())
	if again.Annotations[AnnotationHash] != h.Annotations[AnnotationHash] {
		t.Error("the hash of an unchanged claim changed")
	}
	bigger := tenantClaim()
	bigger.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("5Gi")
	if b, _ := tr.HostClaim(bigger); b.Annotations[AnnotationHash] == h.Annotations[AnnotationHash] {
		t.Error("the hash did not follow the size")
	}
}

// claimAttacks are the claims a hostile tenant may write to reach host
// volumes, each with what the refusal must say.
var claimAttacks = []struct {
	name   string
	mutate func(*corev1.PersistentVolumeClaim)
	want   string
}{
	{"a selector picking another tenant's volume", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "other"}}
	}, "spec.selector"},
	{"a volume name binding a host volume", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pvc-0d1b6a7e-host" }, `spec.volumeName "pvc-0d1b6a7e-host"`},
	{"a clone of the server's claim", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "data-k3k-c1-server-0"}
	}, "spec.dataSource"},
	{"a clone through dataSourceRef", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "data-k3k-c1-server-0"}
	}, "spec.dataSourceRef"},
	{"a snapshot restore", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "server-backup"}
	}, "spec.dataSource"},
	{"a volume attributes class", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeAttributesClassName = ptr.To("gold") }, "spec.volumeAttributesClassName"},
	{"the empty class, which binds hand-made host volumes", func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptr.To("") }, `storage class "" (no class)`},
	{"a class the host administrator did not allow", func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptr.To("premium") }, `storage class "premium" is not one the host administrator allowed (the host's default class, fast)`},
	{"no size", func(c *corev1.PersistentVolumeClaim) { c.Spec.Resources.Requests = nil }, "spec.resources.requests.storage is required"},
}

func TestHostClaimRefusesAttacks(t *testing.T) {
	tr := newTranslator(t, func(c *Config) { c.StorageClasses = []string{"fast"} })
	for _, tc := range claimAttacks {
		t.Run(tc.name, func(t *testing.T) {
			c := tenantClaim()
			tc.mutate(c)
			h, err := tr.HostClaim(c)
			var ue *UnsupportedError
			if !errors.As(err, &ue) || h != nil {
				t.Fatalf("got %v, %v; want an *UnsupportedError and no host claim", h, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to mention %q", err, tc.want)
			}
			if p := tr.ClaimProblems(c); len(p) != 1 {
				t.Errorf("ClaimProblems = %q, want exactly one", p)
			}
		})
	}
	t.Run("an allowed class and the agent's own volume name pass", func(t *testing.T) {
		c := tenantClaim()
		c.Spec.StorageClassName = ptr.To("fast")
		c.Spec.VolumeName = VirtualVolumeName(string(c.UID))
		h, err := tr.HostClaim(c)
		if err != nil {
			t.Fatal(err)
		}
		if h.Spec.VolumeName != "" || ptr.Deref(h.Spec.StorageClassName, "") != "fast" {
			t.Errorf("volumeName %q class %v", h.Spec.VolumeName, h.Spec.StorageClassName)
		}
	})
}

func TestHostPodMountsTheHostClaim(t *testing.T) {
	tr := newTranslator(t)
	p := plainPod()
	p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0", ReadOnly: true}}}}
	h, err := tr.HostPod(p)
	if err != nil {
		t.Fatal(err)
	}
	got := h.Spec.Volumes[0].PersistentVolumeClaim
	if got == nil || got.ClaimName != tr.HostName(KindClaim, "shop", "data-db-0") || !got.ReadOnly {
		t.Errorf("volume %+v, want the host claim, read-only", h.Spec.Volumes[0])
	}
}

func TestVirtualVolumeStandsForTheHostClaim(t *testing.T) {
	tr := newTranslator(t)
	v := tenantClaim()
	v.Spec.StorageClassName = ptr.To("fast")
	h, _ := newTranslator(t, func(c *Config) { c.StorageClasses = []string{"fast"} }).HostClaim(v)

	pending := tr.VirtualVolume(v, h)
	if pending.Name != "pvc-claim-uid" || pending.Spec.ClaimRef.UID != v.UID || pending.Spec.ClaimRef.Name != "data-db-0" || pending.Spec.ClaimRef.Namespace != "shop" {
		t.Errorf("name %s claimRef %+v", pending.Name, pending.Spec.ClaimRef)
	}
	if q := pending.Spec.Capacity[corev1.ResourceStorage]; q.String() != "1Gi" || pending.Spec.StorageClassName != "fast" {
		t.Errorf("capacity %s class %q, want the request and the claim's class", q.String(), pending.Spec.StorageClassName)
	}
	if pending.Spec.CSI == nil || pending.Spec.CSI.Driver != VolumeDriver || pending.Spec.CSI.VolumeHandle != "tenant/"+h.Name {
		t.Errorf("source %+v", pending.Spec.PersistentVolumeSource)
	}
	if pending.Annotations[AnnotationHostVolume] != "" || pending.Annotations[AnnotationHostClaim] != "tenant/"+h.Name {
		t.Errorf("annotations %v", pending.Annotations)
	}
	if !IsVirtualVolumeOf(pending, "shop", "data-db-0", "claim-uid") || IsVirtualVolumeOf(pending, "shop", "data-db-0", "other-uid") {
		t.Error("IsVirtualVolumeOf does not recognise the volume by its claim")
	}

	h.Spec.VolumeName = "pvc-host-1"
	h.Status = corev1.PersistentVolumeClaimStatus{
		Phase:       corev1.ClaimBound,
		Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteOncePod},
	}
	bound := tr.VirtualVolume(v, h)
	if q := bound.Spec.Capacity[corev1.ResourceStorage]; q.String() != "2Gi" || len(bound.Spec.AccessModes) != 2 {
		t.Errorf("capacity %s modes %v, want the host's", q.String(), bound.Spec.AccessModes)
	}
	if bound.Annotations[AnnotationHostVolume] != "pvc-host-1" || bound.Annotations[AnnotationHostPhase] != "Bound" {
		t.Errorf("annotations %v", bound.Annotations)
	}
	if u, changed := VolumeUpdate(pending, bound); !changed || u.Annotations[AnnotationHostVolume] != "pvc-host-1" {
		t.Errorf("update %v changed %v", u.Annotations, changed)
	}
	if _, changed := VolumeUpdate(bound, bound); changed {
		t.Error("an up-to-date volume counts as changed")
	}

	if _, ok := ClaimStatus(v, h); ok {
		t.Error("status mirrored onto a claim the virtual cluster has not bound")
	}
	v.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	s, ok := ClaimStatus(v, h)
	if q := s.Capacity[corev1.ResourceStorage]; !ok || q.String() != "2Gi" || s.Phase != corev1.ClaimBound || len(s.AccessModes) != 2 {
		t.Errorf("status %+v ok %v", s, ok)
	}
	v.Status = s
	if _, ok := ClaimStatus(v, h); ok {
		t.Error("an up-to-date status counts as changed")
	}
}

func TestClaimGrows(t *testing.T) {
	v, h := tenantClaim(), tenantClaim()
	if _, grows := ClaimGrows(v, h); grows {
		t.Error("same size grows")
	}
	v.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("3Gi")
	if q, grows := ClaimGrows(v, h); !grows || q.String() != "3Gi" {
		t.Errorf("got %s %v", q.String(), grows)
	}
	v.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("500Mi")
	if _, grows := ClaimGrows(v, h); grows {
		t.Error("a smaller request is passed on")
	}
}
