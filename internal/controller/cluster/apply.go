package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// The apply layer writes only when the desired object changed. Comparing a
// desired object with the live one field by field is fragile (the API server
// defaults dozens of fields), so each desired object is hashed and the hash is
// recorded on the live object in AnnotationInputHash; an equal hash means
// nothing to write. When the hash differs, copyOwned copies just the fields the
// controller owns onto the live object, keeping what the API server or other
// controllers filled in (a Service's clusterIP, a StatefulSet's status).

// inputHash fingerprints a desired object before the hash annotation is set.
func inputHash(obj client.Object) (string, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return "", fmt.Errorf("hashing %T: %w", obj, err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:12]), nil
}

// ensure makes the live object match desired, owned by c. It creates a missing
// object, and otherwise updates it only when its recorded input hash differs.
// copyOwned copies the controller's fields from desired onto live.
func ensure[T client.Object](ctx context.Context, c client.Client, owner *v1beta1.Cluster, desired T, copyOwned func(live, desired T)) error {
	if err := controllerutil.SetControllerReference(owner, desired, c.Scheme()); err != nil {
		return fmt.Errorf("setting owner of %T %s: %w", desired, desired.GetName(), err)
	}
	hash, err := inputHash(desired)
	if err != nil {
		return err
	}
	annotations := desired.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationInputHash] = hash
	desired.SetAnnotations(annotations)

	live, ok := desired.DeepCopyObject().(T)
	if !ok {
		return fmt.Errorf("copying %T", desired)
	}
	err = c.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if apierrors.IsNotFound(err) {
		if err := c.Create(ctx, desired); err != nil {
			return fmt.Errorf("creating %T %s: %w", desired, desired.GetName(), err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting %T %s: %w", desired, desired.GetName(), err)
	}
	if live.GetAnnotations()[AnnotationInputHash] == hash && metav1.IsControlledBy(live, owner) {
		return nil
	}
	live.SetLabels(mergeStrings(live.GetLabels(), desired.GetLabels()))
	live.SetAnnotations(mergeStrings(live.GetAnnotations(), desired.GetAnnotations()))
	if err := controllerutil.SetControllerReference(owner, live, c.Scheme()); err != nil {
		return fmt.Errorf("adopting %T %s: %w", live, live.GetName(), err)
	}
	copyOwned(live, desired)
	if err := c.Update(ctx, live); err != nil {
		return fmt.Errorf("updating %T %s: %w", live, live.GetName(), err)
	}
	return nil
}

// mergeStrings returns base with over's keys set; other keys of base survive,
// so labels and annotations others add are kept.
func mergeStrings(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}
