package volumesync

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/k3k-io/k3k/pkg/agent/syncloop"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// Reasons of the Events on virtual claims.
const (
	// ReasonUnsupported: the claim asks for something the agent does not
	// pass to the host (translate.ClaimProblems).
	ReasonUnsupported = "UnsupportedClaim"
	// ReasonHostRefused: the host API refused the host claim or its
	// expansion (quota, validation, a class without expansion).
	ReasonHostRefused = "HostRefused"
)

// reconcile brings one virtual claim, its host claim and its virtual volume
// in step. requeue asks for another pass soon without an error (a cache that
// has not caught up yet).
func (r *run) reconcile(ctx context.Context, key string) (requeue bool, err error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return false, nil
	}
	vc, err := syncloop.Found(r.vClaims.PersistentVolumeClaims(ns).Get(name))
	if err != nil {
		return false, err
	}
	hostNS := r.tr.Config().HostNamespace
	hc, err := syncloop.Found(r.hClaims.PersistentVolumeClaims(hostNS).Get(r.tr.HostName(translate.KindClaim, ns, name)))
	if err != nil {
		return false, err
	}
	if hc != nil {
		if !r.tr.IsCopyOf(hc, translate.KindClaim, ns, name) {
			logr.FromContextOrDiscard(ctx).Info("host claim does not belong to this virtual claim; leaving it alone", "claim", key, "hostClaim", hc.Name)
			return false, nil
		}
	}

	switch {
	case vc == nil:
		return r.virtualGone(ctx, ns, name, hc)
	case hc != nil && hc.Annotations[translate.AnnotationUID] != string(vc.UID):
		// A new claim under the same name (a StatefulSet's claim deleted and
		// made again): the old host claim and its data go first.
		return true, r.deleteClaim(ctx, ns, name, hc)
	}
	if err := r.deleteStaleVolumes(ctx, ns, name, string(vc.UID)); err != nil {
		return false, err
	}
	desired, err := r.tr.HostClaim(vc)
	var unsupported *translate.UnsupportedError
	if errors.As(err, &unsupported) {
		// The host claim of a claim that was allowed when it was made (an
		// allow-list shrunk since) is left alone: it holds data.
		r.report(ctx, vc, ReasonUnsupported, translate.ClaimRefusal(unsupported.Reasons))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if hc == nil {
		if vc.DeletionTimestamp != nil {
			return false, nil // going; nothing to make
		}
		if hc, err = r.createClaim(ctx, vc, desired); hc == nil || err != nil {
			return hc == nil && err == nil, err
		}
	} else if err := r.expand(ctx, vc, hc); err != nil {
		return false, err
	}
	if err := r.applyVolume(ctx, vc, hc); err != nil {
		return false, err
	}
	return false, r.mirrorStatus(ctx, vc, hc)
}

// createClaim makes the host claim. It returns nil without an error when the
// host cache has yet to see a claim that exists, or the host refused it for
// now (reported on the virtual claim and retried on the next resync).
func (r *run) createClaim(ctx context.Context, vc, desired *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error) {
	created, err := r.cfg.Host.CoreV1().PersistentVolumeClaims(desired.Namespace).Create(ctx, desired, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil, nil
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err):
		// Quota or an admission policy (Forbidden) may pass later; the
		// tenant cannot see the host's answer, so it becomes an Event.
		r.report(ctx, vc, ReasonHostRefused, "the host refused the claim: "+err.Error())
		return nil, fmt.Errorf("creating host claim: %w", err)
	case err != nil:
		return nil, fmt.Errorf("creating host claim: %w", err)
	}
	return created, nil
}

// expand passes a larger storage request on to the host claim.
func (r *run) expand(ctx context.Context, vc, hc *corev1.PersistentVolumeClaim) error {
	want, grows := translate.ClaimGrows(vc, hc)
	if !grows || hc.DeletionTimestamp != nil {
		return nil
	}
	u := hc.DeepCopy()
	if u.Spec.Resources.Requests == nil {
		u.Spec.Resources.Requests = corev1.ResourceList{}
	}
	u.Spec.Resources.Requests[corev1.ResourceStorage] = want
	_, err := r.cfg.Host.CoreV1().PersistentVolumeClaims(u.Namespace).Update(ctx, u, metav1.UpdateOptions{})
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		// Not retried at once: the class does not allow expansion, or the
		// quota has no room. The next resync tries again.
		r.report(ctx, vc, ReasonHostRefused, "the host refused to expand the claim: "+err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("expanding host claim: %w", err)
	}
	return nil
}

// applyVolume creates the virtual volume that stands for the host claim, or
// brings what the agent keeps current on it in step.
func (r *run) applyVolume(ctx context.Context, vc, hc *corev1.PersistentVolumeClaim) error {
	desired := r.tr.VirtualVolume(vc, hc)
	c := r.virtual.CoreV1().PersistentVolumes()
	obj, ok, err := r.vVolumes.GetByKey(desired.Name)
	if err != nil {
		return err
	}
	if !ok {
		if vc.DeletionTimestamp != nil {
			return nil
		}
		_, err := c.Create(ctx, desired, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Ours and not yet in the cache, or a volume the tenant made
			// under that name, which the cache (our label) does not hold:
			// the claim then binds to it, and the host claim stays as
			// decided; the tenant gains nothing on the host.
			return nil
		}
		if err != nil {
			return fmt.Errorf("creating virtual volume: %w", err)
		}
		return nil
	}
	live, ok := obj.(*corev1.PersistentVolume)
	if !ok || !translate.IsVirtualVolumeOf(live, vc.Namespace, vc.Name, string(vc.UID)) || live.DeletionTimestamp != nil {
		return nil
	}
	u, changed := translate.VolumeUpdate(live, desired)
	if !changed {
		return nil
	}
	if _, err := c.Update(ctx, u, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("updating virtual volume: %w", err)
	}
	return nil
}

// mirrorStatus writes the host claim's capacity and access modes onto the
// virtual claim once both are bound.
func (r *run) mirrorStatus(ctx context.Context, vc, hc *corev1.PersistentVolumeClaim) error {
	status, changed := translate.ClaimStatus(vc, hc)
	if !changed {
		return nil
	}
	u := vc.DeepCopy()
	u.Status = status
	_, err := r.virtual.CoreV1().PersistentVolumeClaims(u.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("updating virtual claim status: %w", err)
	}
	return nil
}

// virtualGone deletes the host claim and virtual volume of a virtual claim
// that no longer exists, once the virtual API server itself says so.
func (r *run) virtualGone(ctx context.Context, ns, name string, hc *corev1.PersistentVolumeClaim) (bool, error) {
	live, err := r.virtual.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		if hc == nil || string(live.UID) == hc.Annotations[translate.AnnotationUID] {
			return true, nil // our cache lags behind
		}
	case apierrors.IsNotFound(err):
	default:
		return false, fmt.Errorf("confirming virtual claim is gone: %w", err)
	}
	r.progress.Forget(ns + "/" + name)
	r.said.Forget(ns + "/" + name)
	if hc != nil {
		return false, r.deleteClaim(ctx, ns, name, hc)
	}
	return false, r.deleteStaleVolumes(ctx, ns, name, "")
}

// deleteClaim deletes a host claim (the host's claim protection keeps it
// until no host pod uses it) and the virtual volume standing for it.
func (r *run) deleteClaim(ctx context.Context, ns, name string, hc *corev1.PersistentVolumeClaim) error {
	if hc.DeletionTimestamp == nil {
		err := r.cfg.Host.CoreV1().PersistentVolumeClaims(hc.Namespace).Delete(ctx, hc.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &hc.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting host claim: %w", err)
		}
	}
	return r.deleteStaleVolumes(ctx, ns, name, "")
}

// deleteStaleVolumes deletes the agent's virtual volumes bound to claim
// ns/name whose claim UID is not keep: volumes of earlier incarnations of the
// claim, or all of them when keep is empty.
func (r *run) deleteStaleVolumes(ctx context.Context, ns, name, keep string) error {
	objs, err := r.vVolumes.ByIndex(claimIndex, ns+"/"+name)
	if err != nil {
		return err
	}
	for _, o := range objs {
		pv, ok := o.(*corev1.PersistentVolume)
		if !ok || pv.DeletionTimestamp != nil || pv.Spec.ClaimRef == nil {
			continue
		}
		uid := string(pv.Spec.ClaimRef.UID)
		if uid == keep || !translate.IsVirtualVolumeOf(pv, ns, name, uid) {
			continue
		}
		err := r.virtual.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &pv.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting virtual volume: %w", err)
		}
	}
	return nil
}

// report records a Warning Event on the virtual claim, once per claim and
// message, so `kubectl describe pvc` says why it does not bind.
func (r *run) report(ctx context.Context, vc *corev1.PersistentVolumeClaim, reason, message string) {
	if !r.said.First(vc.Namespace+"/"+vc.Name, vc.UID, message) {
		return
	}
	syncloop.Warning{
		Object: corev1.ObjectReference{
			APIVersion: "v1", Kind: "PersistentVolumeClaim", Namespace: vc.Namespace, Name: vc.Name, UID: vc.UID, ResourceVersion: vc.ResourceVersion,
		},
		Component: "k3k-kubelet", Node: r.tr.Config().NodeName,
		Reason: reason, Message: message, At: r.cfg.Now(),
	}.Record(ctx, r.virtual)
}
