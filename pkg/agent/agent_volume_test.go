package agent_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/translate"
	"github.com/k3k-io/k3k/pkg/agent/volumesync"
)

// expandableClass makes the allowed class on the host, allowing expansion,
// and waits for the agent's virtual copy of it (package classsync), which
// allows it too: the virtual apiserver's resize admission asks the virtual
// class, the host's the host class.
func expandableClass(t *testing.T) {
	t.Helper()
	_, err := hostAdmin.StorageV1().StorageClasses().Create(ctx(t), &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: allowedClass},
		Provisioner:          "example.com/fast",
		AllowVolumeExpansion: ptr.To(true),
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	eventually(t, "the virtual copy of class "+allowedClass+" allowing expansion", func() error {
		c, err := virtAdmin.StorageV1().StorageClasses().Get(ctx(t), allowedClass, metav1.GetOptions{})
		if err == nil && !ptr.Deref(c.AllowVolumeExpansion, false) {
			err = fmt.Errorf("allowVolumeExpansion %v", c.AllowVolumeExpansion)
		}
		return err
	})
}

func claim(ns, name string, mutate ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func hostClaimName(ns, name string) string { return tr.HostName(translate.KindClaim, ns, name) }

// TestAgentClaimLifecycle: a virtual claim gets a host claim with storage
// only and a virtual PersistentVolume pre-bound to it; once both sides bind
// (the test plays the two PersistentVolume controllers, envtest has none),
// the host's capacity shows in the virtual volume and claim; a pod mounts the
// host claim; steady state writes nothing; a larger request reaches the host
// claim; deleting the virtual claim deletes the host claim and the virtual
// volume.
func TestAgentClaimLifecycle(t *testing.T) {
	c := ctx(t)
	const ns = "vol"
	virtualNamespace(t, ns)
	expandableClass(t)
	vc, err := virtAdmin.CoreV1().PersistentVolumeClaims(ns).Create(c, claim(ns, "data", func(p *corev1.PersistentVolumeClaim) {
		p.Spec.StorageClassName = ptr.To(allowedClass)
		// What the tenant writes into metadata never reaches the host.
		p.Labels = map[string]string{"app": "db", "app.kubernetes.io/managed-by": "k3k"}
		p.Annotations = map[string]string{"volume.kubernetes.io/selected-node": "control-plane"}
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := ns + "/data"

	var hc *corev1.PersistentVolumeClaim
	eventually(t, "host claim", func() (err error) {
		hc, err = hostAdmin.CoreV1().PersistentVolumeClaims(hostNamespace).Get(c, hostClaimName(ns, "data"), metav1.GetOptions{})
		return err
	})
	if hc.Labels["app"] != "" || hc.Labels[translate.LabelManagedBy] != translate.ManagedByValue || hc.Annotations["volume.kubernetes.io/selected-node"] != "" {
		t.Errorf("host claim metadata: labels %v annotations %v", hc.Labels, hc.Annotations)
	}
	if ptr.Deref(hc.Spec.StorageClassName, "") != allowedClass || hc.Spec.VolumeName != "" || hc.Spec.Selector != nil {
		t.Errorf("host claim spec %+v", hc.Spec)
	}
	if len(hc.OwnerReferences) != 1 || hc.OwnerReferences[0].Kind != "Cluster" {
		t.Errorf("host claim owners %v, want the Cluster", hc.OwnerReferences)
	}

	pvName := translate.VirtualVolumeName(string(vc.UID))
	var pv *corev1.PersistentVolume
	eventually(t, "virtual volume", func() (err error) {
		pv, err = virtAdmin.CoreV1().PersistentVolumes().Get(c, pvName, metav1.GetOptions{})
		return err
	})
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != vc.UID || ref.Name != "data" || ref.Namespace != ns {
		t.Errorf("virtual volume claimRef %+v", pv.Spec.ClaimRef)
	}
	if pv.Spec.StorageClassName != allowedClass || pv.Annotations[translate.AnnotationHostClaim] != hostNamespace+"/"+hc.Name || pv.Annotations[translate.AnnotationHostPhase] == "Bound" {
		t.Errorf("virtual volume class %q annotations %v", pv.Spec.StorageClassName, pv.Annotations)
	}

	// The virtual PersistentVolume controller binds the claim to the
	// pre-bound volume; the host's binds the host claim to what its
	// provisioner made (rounded up to 2Gi).
	vc.Spec.VolumeName = pvName
	if vc, err = virtAdmin.CoreV1().PersistentVolumeClaims(ns).Update(c, vc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: vc.Spec.AccessModes,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	if _, err = virtAdmin.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(c, vc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	hc.Spec.VolumeName = "pvc-host-1"
	if hc, err = hostAdmin.CoreV1().PersistentVolumeClaims(hostNamespace).Update(c, hc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	hc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: hc.Spec.AccessModes,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}}
	if _, err = hostAdmin.CoreV1().PersistentVolumeClaims(hostNamespace).UpdateStatus(c, hc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the host's capacity and volume on the virtual side", func() error {
		pv, err := virtAdmin.CoreV1().PersistentVolumes().Get(c, pvName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.String() != "2Gi" || pv.Annotations[translate.AnnotationHostVolume] != "pvc-host-1" || pv.Annotations[translate.AnnotationHostPhase] != "Bound" {
			return fmt.Errorf("volume capacity %s annotations %v", q.String(), pv.Annotations)
		}
		got, err := virtAdmin.CoreV1().PersistentVolumeClaims(ns).Get(c, "data", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q := got.Status.Capacity[corev1.ResourceStorage]; q.String() != "2Gi" || got.Status.Phase != corev1.ClaimBound {
			return fmt.Errorf("claim status %+v", got.Status)
		}
		return nil
	})

	createVirtual(t, boundPod(ns, "db-0", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	}))
	hp := waitHostPod(t, ns, "db-0")
	if v := hp.Spec.Volumes[0].PersistentVolumeClaim; v == nil || v.ClaimName != hc.Name {
		t.Errorf("host pod volume %+v, want host claim %s", hp.Spec.Volumes[0], hc.Name)
	}

	expectQuietResyncs(t, theAgent.ClaimReconciled, key)

	// Expansion: the virtual claim asks for more; the host claim follows.
	vc, err = virtAdmin.CoreV1().PersistentVolumeClaims(ns).Get(c, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("3Gi")
	if _, err := virtAdmin.CoreV1().PersistentVolumeClaims(ns).Update(c, vc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "host claim expanded", func() error {
		h, err := hostAdmin.CoreV1().PersistentVolumeClaims(hostNamespace).Get(c, hc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q := h.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "3Gi" {
			return fmt.Errorf("host request %s", q.String())
		}
		return nil
	})

	// Deletion: the pod goes, then the claim (the test plays the virtual
	// claim protection controller, removing its finalizer).
	if err := virtAdmin.CoreV1().Pods(ns).Delete(c, "db-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if err := virtAdmin.CoreV1().PersistentVolumeClaims(ns).Delete(c, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	removeFinalizers(t, ns, "data")
	eventually(t, "host claim deleted", func() error {
		h, err := hostAdmin.CoreV1().PersistentVolumeClaims(hostNamespace).Get(c, hc.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && h.DeletionTimestamp != nil) {
			return nil // gone, or held by the host's claim protection
		}
		return fmt.Errorf("still there (%v)", err)
	})
	eventually(t, "virtual volume deleted", func() error {
		v, err := virtAdmin.CoreV1().PersistentVolumes().Get(c, pvName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && v.DeletionTimestamp != nil) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// removeFinalizers does what the virtual claim protection controller does
// once no pod uses the claim.
func removeFinalizers(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, "claim finalizers removed", func() error {
		got, err := virtAdmin.CoreV1().PersistentVolumeClaims(ns).Get(ctx(t), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		got.Finalizers = nil
		_, err = virtAdmin.CoreV1().PersistentVolumeClaims(ns).Update(ctx(t), got, metav1.UpdateOptions{})
		return err
	})
}

// TestAgentRefusesClaimAttacks: claims written to reach host volumes (pick
// one by label, bind one by name, clone the server's claim, take
// hand-made volumes with the empty class, a class the host administrator did
// not allow) get a Warning Event saying why and nothing on the host, no
// virtual volume; a pod pinned to the node with such a claim is failed
// UnsupportedPod naming the claim. Every host request runs under the guard.
func TestAgentRefusesClaimAttacks(t *testing.T) {
	c := ctx(t)
	const ns = "hostile-claims"
	virtualNamespace(t, ns)
	cases := []struct {
		name, want string
		mutate     func(*corev1.PersistentVolumeClaim)
	}{
		{"selector", "spec.selector", func(p *corev1.PersistentVolumeClaim) {
			p.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "other"}}
		}},
		{"volume-name", `spec.volumeName "pvc-host-of-another-tenant"`, func(p *corev1.PersistentVolumeClaim) { p.Spec.VolumeName = "pvc-host-of-another-tenant" }},
		{"clone", "spec.dataSource would clone", func(p *corev1.PersistentVolumeClaim) {
			p.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "data-k3k-c1-server-0"}
		}},
		{"clone-ref", "spec.dataSourceRef would clone", func(p *corev1.PersistentVolumeClaim) {
			p.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "data-k3k-c1-server-0"}
		}},
		{"no-class", `storage class "" (no class)`, func(p *corev1.PersistentVolumeClaim) { p.Spec.StorageClassName = ptr.To("") }},
		{"premium", `storage class "premium" is not one the host administrator allowed`, func(p *corev1.PersistentVolumeClaim) { p.Spec.StorageClassName = ptr.To("premium") }},
	}
	uids := map[string]string{}
	for _, tc := range cases {
		got, err := virtAdmin.CoreV1().PersistentVolumeClaims(ns).Create(c, claim(ns, tc.name, tc.mutate), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		uids[tc.name] = string(got.UID)
	}
	createVirtual(t, boundPod(ns, "uses-selector", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "selector"}}}}
	}))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eventually(t, "a Warning Event on claim "+tc.name, func() error {
				evs, err := virtAdmin.CoreV1().Events(ns).List(c, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + uids[tc.name]})
				if err != nil {
					return err
				}
				for _, e := range evs.Items {
					if e.Type == corev1.EventTypeWarning && e.Reason == volumesync.ReasonUnsupported && strings.Contains(e.Message, tc.want) {
						return nil
					}
				}
				return fmt.Errorf("events %v", evs.Items)
			})
			waitPasses(t, theAgent.ClaimReconciled, ns+"/"+tc.name, 2)
			if _, err := hostAdmin.CoreV1().PersistentVolumeClaims(hostNamespace).Get(c, hostClaimName(ns, tc.name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("host claim: %v, want NotFound", err)
			}
			if _, err := virtAdmin.CoreV1().PersistentVolumes().Get(c, translate.VirtualVolumeName(uids[tc.name]), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("virtual volume: %v, want NotFound", err)
			}
		})
	}
	t.Run("a pod using a refused claim", func(t *testing.T) {
		waitVirtualPhase(t, ns, "uses-selector", corev1.PodFailed, func(p *corev1.Pod) error {
			if p.Status.Reason != translate.ReasonUnsupported || !strings.Contains(p.Status.Message, `claim "selector" is not synced to the host: spec.selector`) {
				return fmt.Errorf("reason %q message %q", p.Status.Reason, p.Status.Message)
			}
			return nil
		})
		if _, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hostPodName(ns, "uses-selector"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("host pod: %v, want NotFound", err)
		}
	})
	t.Run("a claim replaced under the same name by an allowed one is synced", func(t *testing.T) {
		if err := virtAdmin.CoreV1().PersistentVolumeClaims(ns).Delete(c, "premium", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		removeFinalizers(t, ns, "premium")
		waitGone(t, "claim premium", func() error {
			_, err := virtAdmin.CoreV1().PersistentVolumeClaims(ns).Get(c, "premium", metav1.GetOptions{})
			return err
		})
		if _, err := virtAdmin.CoreV1().PersistentVolumeClaims(ns).Create(c, claim(ns, "premium"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "host claim", func() error {
			_, err := hostAdmin.CoreV1().PersistentVolumeClaims(hostNamespace).Get(c, hostClaimName(ns, "premium"), metav1.GetOptions{})
			if err != nil {
				return errors.New("not yet: " + err.Error())
			}
			return nil
		})
	})
}
