package agent_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// The classes claims may name are StorageClasses in the virtual cluster,
// kept as the agent makes them whatever the tenant does to them; the
// tenant's own classes are left alone.
func TestAgentShowsStorageClasses(t *testing.T) {
	c := ctx(t)
	classes := virtAdmin.StorageV1().StorageClasses()
	var first types.UID
	copyOK := func(what string) {
		t.Helper()
		eventually(t, what, func() error {
			sc, err := classes.Get(c, allowedClass, metav1.GetOptions{})
			switch {
			case err != nil:
				return err
			case !translate.IsVirtualStorageClass(sc):
				return fmt.Errorf("class %s is not the agent's: %+v", sc.Name, sc)
			case !ptr.Deref(sc.AllowVolumeExpansion, false):
				return errors.New("expansion not allowed")
			case len(sc.Annotations) != 0:
				return fmt.Errorf("annotations %v", sc.Annotations)
			case ptr.Deref(sc.VolumeBindingMode, "") != storagev1.VolumeBindingImmediate:
				return fmt.Errorf("binding mode %v", sc.VolumeBindingMode)
			}
			if first == "" {
				first = sc.UID
			}
			return nil
		})
	}
	copyOK("the virtual copy of class " + allowedClass)

	// Deleted, it is made again.
	if err := classes.Delete(c, allowedClass, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "class "+allowedClass+" made again", func() error {
		sc, err := classes.Get(c, allowedClass, metav1.GetOptions{})
		if err == nil && sc.UID == first {
			err = errors.New("still the first copy")
		}
		return err
	})
	copyOK("the new copy as the agent makes it")

	// Marked default by the tenant (claims without a class would then name
	// it, though the host's default is another): the mark goes.
	sc, err := classes.Get(c, allowedClass, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
	sc.AllowVolumeExpansion = ptr.To(false)
	if _, err := classes.Update(c, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	copyOK("the default mark and expansion restored")

	// A class that looks like the agent's but is not one it shows is
	// deleted; the tenant's own class is left alone.
	for _, own := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "stale", Labels: map[string]string{translate.LabelManagedBy: translate.ManagedByValue}}, Provisioner: translate.StorageClassProvisioner},
		{ObjectMeta: metav1.ObjectMeta{Name: "tenant-local"}, Provisioner: "example.com/tenant"},
	} {
		if _, err := classes.Create(c, own, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the stale class deleted", func() error {
		_, err := classes.Get(c, "stale", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			err = errors.New("still there")
		}
		return err
	})
	time.Sleep(4 * time.Second) // a resync (3 s in this suite)
	if _, err := classes.Get(c, "tenant-local", metav1.GetOptions{}); err != nil {
		t.Errorf("the tenant's own class: %v", err)
	}
}
