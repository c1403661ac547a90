package ingresssync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/k3k-io/k3k/pkg/agent/syncloop"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// ReasonUnsupported is the reason of the Warning Event on a virtual Ingress
// the agent does not copy (translate.IngressProblems).
const ReasonUnsupported = "UnsupportedIngress"

func (r *run) reconcile(ctx context.Context, key string) (requeue bool, err error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return false, nil
	}
	v, err := syncloop.Found(r.vIngresses.Ingresses(ns).Get(name))
	if err != nil {
		return false, err
	}
	hostNS := r.tr.Config().HostNamespace
	h, err := syncloop.Found(r.hIngresses.Ingresses(hostNS).Get(r.tr.HostName(translate.KindIngress, ns, name)))
	if err != nil {
		return false, err
	}
	if h != nil {
		if !r.tr.IsCopyOf(h, translate.KindIngress, ns, name) {
			logr.FromContextOrDiscard(ctx).Info("host Ingress does not belong to this virtual Ingress; leaving it alone", "ingress", key, "hostIngress", h.Name)
			return false, nil
		}
	}
	switch {
	case v == nil:
		return r.virtualGone(ctx, ns, name, h)
	case h != nil && h.Annotations[translate.AnnotationUID] != string(v.UID):
		return true, r.deleteHost(ctx, h)
	}
	desired, err := r.tr.HostIngress(v)
	var unsupported *translate.UnsupportedError
	if errors.As(err, &unsupported) {
		r.report(ctx, v, "ingress not synced to the host: "+strings.Join(unsupported.Reasons, "; "))
		if h != nil {
			// It was allowed before (the Ingress or the class map changed).
			return false, r.deleteHost(ctx, h)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	c := r.cfg.Host.NetworkingV1().Ingresses(hostNS)
	switch {
	case h == nil:
		created, err := c.Create(ctx, desired, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("creating host Ingress: %w", err)
		}
		h = created
	case h.Annotations[translate.AnnotationHash] != desired.Annotations[translate.AnnotationHash]:
		u := h.DeepCopy()
		u.Labels, u.Annotations, u.OwnerReferences, u.Spec = desired.Labels, desired.Annotations, desired.OwnerReferences, desired.Spec
		updated, err := c.Update(ctx, u, metav1.UpdateOptions{})
		if err != nil {
			return false, fmt.Errorf("updating host Ingress: %w", err)
		}
		h = updated
	}
	if err := r.copySecrets(ctx, v, h); err != nil {
		return false, err
	}
	if status, changed := translate.IngressStatus(v, h); changed {
		u := v.DeepCopy()
		u.Status = status
		if _, err := r.virtual.NetworkingV1().Ingresses(ns).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return false, fmt.Errorf("updating virtual Ingress status: %w", err)
		}
	}
	return false, nil
}

// copySecrets writes the host copies of the TLS Secrets v names, owned by
// the host Ingress h. A Secret that does not exist is skipped: the host
// ingress controller serves its default certificate meanwhile, as it would
// for a missing Secret of its own.
func (r *run) copySecrets(ctx context.Context, v, h *networkingv1.Ingress) error {
	for _, name := range translate.IngressSecrets(v) {
		s, err := r.vSecrets.Secrets(v.Namespace).Get(name)
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return err
		}
		hs := r.tr.HostIngressSecret(s)
		hs.OwnerReferences = []metav1.OwnerReference{{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Name: h.Name, UID: h.UID}}
		if err := r.writeSecret(ctx, hs); err != nil {
			return err
		}
	}
	return nil
}

// writeSecret creates or replaces a host Secret unless the same content was
// written within RewriteInterval: the agent may not read host Secrets (see
// podsync), so it writes blind and remembers what it wrote.
func (r *run) writeSecret(ctx context.Context, s *corev1.Secret) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("hashing: %w", err)
	}
	sum := sha256.Sum256(b)
	hash := hex.EncodeToString(sum[:])
	now := r.cfg.Now()
	r.mu.Lock()
	w, ok := r.written[s.Name]
	r.mu.Unlock()
	if ok && w.hash == hash && now.Sub(w.at) < r.cfg.RewriteInterval {
		return nil
	}
	c := r.cfg.Host.CoreV1().Secrets(s.Namespace)
	if _, err = c.Update(ctx, s, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing host Secret %s: %w", s.Name, err)
	}
	r.mu.Lock()
	r.written[s.Name] = written{hash: hash, at: now}
	r.mu.Unlock()
	return nil
}

func (r *run) virtualGone(ctx context.Context, ns, name string, h *networkingv1.Ingress) (bool, error) {
	r.said.Forget(ns + "/" + name)
	if h == nil {
		return false, nil
	}
	live, err := r.virtual.NetworkingV1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && string(live.UID) == h.Annotations[translate.AnnotationUID]:
		return true, nil // our cache lags behind
	case err == nil, apierrors.IsNotFound(err):
	default:
		return false, fmt.Errorf("confirming virtual Ingress is gone: %w", err)
	}
	return false, r.deleteHost(ctx, h)
}

func (r *run) deleteHost(ctx context.Context, h *networkingv1.Ingress) error {
	err := r.cfg.Host.NetworkingV1().Ingresses(h.Namespace).Delete(ctx, h.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &h.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting host Ingress: %w", err)
	}
	return nil
}

// report records a Warning Event on the virtual Ingress, once per message.
func (r *run) report(ctx context.Context, v *networkingv1.Ingress, message string) {
	if !r.said.First(v.Namespace+"/"+v.Name, v.UID, message) {
		return
	}
	syncloop.Warning{
		Object: corev1.ObjectReference{
			APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Namespace: v.Namespace, Name: v.Name, UID: v.UID, ResourceVersion: v.ResourceVersion,
		},
		Component: "k3k-kubelet", Node: r.tr.Config().NodeName,
		Reason: ReasonUnsupported, Message: message, At: r.cfg.Now(),
	}.Record(ctx, r.virtual)
}
