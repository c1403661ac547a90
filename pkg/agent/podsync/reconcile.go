package podsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/nodeadmit"
	"github.com/k3k-io/k3k/pkg/agent/syncloop"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// reconcile brings one virtual pod and its host pod in step. requeue asks for
// another pass soon without an error (a cache that has not caught up yet).
func (r *run) reconcile(ctx context.Context, key string) (requeue bool, err error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return false, nil
	}
	vpod, err := syncloop.Found(r.vPods.Pods(ns).Get(name))
	if err != nil {
		return false, err
	}
	hostNS := r.tr.Config().HostNamespace
	hpod, err := syncloop.Found(r.hPods.Pods(hostNS).Get(r.tr.HostName(translate.KindPod, ns, name)))
	if err != nil {
		return false, err
	}
	if hpod != nil {
		if !r.tr.IsCopyOf(hpod, translate.KindPod, ns, name) {
			// The informer selects by our labels; a pod carrying them with
			// annotations naming something else was not made by this agent.
			logr.FromContextOrDiscard(ctx).Info("host pod does not belong to this virtual pod; leaving it alone", "pod", key, "hostPod", hpod.Name)
			return false, nil
		}
	}

	switch {
	case vpod == nil:
		return r.virtualGone(ctx, ns, name, hpod)
	case vpod.DeletionTimestamp != nil:
		return r.virtualDeleting(ctx, vpod, hpod)
	case hpod != nil && hpod.Annotations[translate.AnnotationUID] != string(vpod.UID):
		// A new incarnation under the same name (a StatefulSet pod): the old
		// host pod goes first.
		return true, r.deleteHost(ctx, hpod, nil)
	case hpod != nil && hpod.DeletionTimestamp != nil && hostDisruption(hpod) != "":
		return false, r.followHostEviction(ctx, vpod, hpod)
	case hpod == nil:
		return r.create(ctx, vpod)
	}
	if err := r.syncCopies(ctx, vpod, hpod); err != nil {
		return false, err
	}
	if err := r.patchSpec(ctx, vpod, hpod); err != nil {
		return false, err
	}
	status := translate.VirtualStatus(vpod, hpod)
	// Ephemeral containers (kubectl debug) are added to running pods; the
	// host pod never gets them, the virtual pod says why.
	status.EphemeralContainerStatuses = r.tr.EphemeralStatuses(vpod)
	if err := r.mirrorStatus(ctx, vpod, status); err != nil {
		return false, err
	}
	// Said once the status that shows them is written, so a failed write
	// does not say them twice.
	for _, name := range translate.StartedContainers(vpod.Status, status) {
		r.record(ctx, vpod, corev1.EventTypeNormal, "Started", "Started container "+name)
	}
	return false, nil
}

// virtualGone deletes the host pod of a virtual pod that no longer exists,
// once the virtual API server itself says so.
func (r *run) virtualGone(ctx context.Context, ns, name string, hpod *corev1.Pod) (bool, error) {
	r.forget(ns, name)
	if hpod == nil {
		return false, nil
	}
	if hpod.DeletionTimestamp != nil {
		// Already terminating, perhaps with a grace period from before the
		// cap: deleteHost shortens it to the cap, else leaves it alone.
		return false, r.deleteHost(ctx, hpod, nil)
	}
	live, err := r.virtual.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && live.Spec.NodeName == r.tr.Config().NodeName:
		return true, nil // our cache lags behind
	case err == nil, apierrors.IsNotFound(err):
	default:
		return false, fmt.Errorf("confirming virtual pod is gone: %w", err)
	}
	return false, r.deleteHost(ctx, hpod, nil)
}

// hostDisruption is the reason of the host pod's DisruptionTarget condition
// when it is True, or "": Kubernetes sets it on a pod it takes away (the
// taint manager evicting pods from a node that stopped answering, the
// Eviction API of a drain, the scheduler's preemption, pod garbage
// collection).
func hostDisruption(hpod *corev1.Pod) string {
	for _, c := range hpod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// followHostEviction deletes the virtual pod of a host pod the host is
// taking away, as Kubernetes deletes a pod it evicts: the virtual pod's
// controller makes its replacement now, not when the host pod is gone, which
// from a node that stopped answering is never (its pods stay Terminating
// until the node comes back or is declared off). The virtual pod finishes
// deleting once the host pod is gone (virtualDeleting), as the host pod
// does. The Event names only the condition's reason: its message may name a
// host node.
func (r *run) followHostEviction(ctx context.Context, vpod, hpod *corev1.Pod) error {
	err := r.virtual.CoreV1().Pods(vpod.Namespace).Delete(ctx, vpod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: hpod.DeletionGracePeriodSeconds,
		Preconditions:      &metav1.Preconditions{UID: &vpod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting virtual pod whose host pod is evicted: %w", err)
	}
	r.record(ctx, vpod, corev1.EventTypeWarning, "Evicted",
		fmt.Sprintf("the host is taking this pod away (%s); its controller, if it has one, replaces it", hostDisruption(hpod)))
	return nil
}

// virtualDeleting stops the host pod with the virtual pod's grace period,
// capped, and, once the host pod is gone, completes the virtual deletion as
// kubelet does.
func (r *run) virtualDeleting(ctx context.Context, vpod, hpod *corev1.Pod) (bool, error) {
	if hpod != nil {
		// A host pod already terminating is deleted again only when that
		// shortens its grace period (a second, shorter virtual deletion; a
		// host pod deleted before the cap existed).
		if err := r.deleteHost(ctx, hpod, vpod.DeletionGracePeriodSeconds); err != nil {
			return false, err
		}
		// Status keeps flowing while containers stop; the host pod's
		// disappearance brings the key back.
		return false, r.mirrorStatus(ctx, vpod, translate.VirtualStatus(vpod, hpod))
	}
	err := r.virtual.CoreV1().Pods(vpod.Namespace).Delete(ctx, vpod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(int64(0)),
		Preconditions:      &metav1.Preconditions{UID: &vpod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return false, fmt.Errorf("completing deletion of virtual pod: %w", err)
	}
	r.forget(vpod.Namespace, vpod.Name)
	return false, nil
}

// deleteHost deletes hpod with the grace period hostDeletion gives for
// requested (the virtual pod's, nil when there is none), if that deletes it
// or shortens its deletion.
func (r *run) deleteHost(ctx context.Context, hpod *corev1.Pod, requested *int64) error {
	grace, ok := hostDeletion(hpod, requested, r.tr.Config().MaxTerminationGracePeriodSeconds)
	if !ok {
		return nil
	}
	err := r.cfg.Host.CoreV1().Pods(hpod.Namespace).Delete(ctx, hpod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(grace),
		Preconditions:      &metav1.Preconditions{UID: &hpod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting host pod: %w", err)
	}
	return nil
}

// create makes the host pod for a virtual pod that has none, or fails the
// virtual pod when it cannot or can no longer run.
func (r *run) create(ctx context.Context, vpod *corev1.Pod) (bool, error) {
	if vpod.Status.Phase == corev1.PodSucceeded || vpod.Status.Phase == corev1.PodFailed {
		return false, nil
	}
	if vpod.Status.StartTime != nil || vpod.Status.Phase == corev1.PodRunning {
		// Only a host pod's status sets these; it ran and is gone.
		return false, r.mirrorStatus(ctx, vpod, translate.FailedStatus(vpod, translate.ReasonHostPodLost,
			"the host pod running this pod was deleted"))
	}
	hpod, err := r.tr.HostPod(vpod)
	var unsupported *translate.UnsupportedError
	if errors.As(err, &unsupported) {
		return false, r.refuse(ctx, vpod, translate.ReasonUnsupported, unsupported.Error())
	}
	reasons, err := r.claimProblems(ctx, vpod)
	if err != nil {
		return false, err
	}
	if len(reasons) > 0 {
		return false, r.refuse(ctx, vpod, translate.ReasonUnsupported, (&translate.UnsupportedError{Reasons: reasons}).Error())
	}
	if err != nil {
		return false, err
	}
	if r.cfg.ServiceLinks != nil && translate.ServiceLinksEnabled(vpod) {
		links, complete := r.cfg.ServiceLinks(vpod.Namespace)
		if !complete && r.cfg.Now().Sub(vpod.CreationTimestamp.Time) < serviceLinksWait {
			return true, nil
		}
		translate.AddServiceLinks(hpod, links)
	}
	if rejection := r.admit(vpod); rejection != nil {
		return false, r.refuse(ctx, vpod, rejection.Reason, rejection.Message)
	}
	created, err := r.cfg.Host.CoreV1().Pods(hpod.Namespace).Create(ctx, hpod, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		r.unadmit(vpod)
	}
	if apierrors.IsAlreadyExists(err) {
		return true, nil // the host cache has not seen it yet
	}
	if apierrors.IsInvalid(err) {
		// The host's validation refuses what the virtual cluster accepted (a
		// different version or policy); the spec will not change, so retrying
		// is pointless. Forbidden (quota, admission) is retried: it may pass later.
		return false, r.mirrorStatus(ctx, vpod, translate.FailedStatus(vpod, translate.ReasonHostRejected, err.Error()))
	}
	if apierrors.IsForbidden(err) {
		// Retried (it may pass once the quota has room), and said on the
		// virtual pod meanwhile: the tenant cannot see the host's answer.
		if serr := r.mirrorStatus(ctx, vpod, translate.HostRefusedStatus(vpod, err.Error())); serr != nil {
			return false, errors.Join(fmt.Errorf("creating host pod: %w", err), serr)
		}
	}
	if err != nil {
		return false, fmt.Errorf("creating host pod: %w", err)
	}
	// Said once: a pod's host pod is created once.
	if note := r.tr.PriorityClassNote(vpod); note != "" {
		r.event(ctx, vpod, translate.ReasonPriorityClassNotMapped, note)
	}
	// The copies are owned by the host pod, so they are written after it; the
	// host kubelet retries mounting until they exist.
	if err := r.syncCopies(ctx, vpod, created); err != nil {
		return false, err
	}
	return false, r.mirrorStatus(ctx, vpod, translate.VirtualStatus(vpod, created))
}

// mirrorStatus writes status onto the virtual pod when it differs.
func (r *run) mirrorStatus(ctx context.Context, vpod *corev1.Pod, status corev1.PodStatus) error {
	_, err := r.writeStatus(ctx, vpod, status)
	return err
}

// writeStatus writes status onto the virtual pod when it differs and says
// whether it did.
func (r *run) writeStatus(ctx context.Context, vpod *corev1.Pod, status corev1.PodStatus) (bool, error) {
	if equality.Semantic.DeepEqual(vpod.Status, status) {
		return false, nil
	}
	p := vpod.DeepCopy()
	p.Status = status
	_, err := r.virtual.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("updating virtual pod status: %w", err)
	}
	return true, nil
}

// refuse fails a virtual pod the agent will not run, and records a Warning
// Event on it the first time, so `kubectl describe pod` and `kubectl get
// events` say why.
func (r *run) refuse(ctx context.Context, vpod *corev1.Pod, reason, message string) error {
	wrote, err := r.writeStatus(ctx, vpod, translate.FailedStatus(vpod, reason, message))
	if err != nil || !wrote {
		return err
	}
	r.event(ctx, vpod, reason, message)
	return nil
}

// event records a Warning Event on vpod in the virtual cluster, as a kubelet
// does; failing to record one is logged, not retried.
func (r *run) event(ctx context.Context, vpod *corev1.Pod, reason, message string) {
	r.record(ctx, vpod, corev1.EventTypeWarning, reason, message)
}

// record records an Event of type typ on vpod from component kubelet: the
// agent's refusals (Warning) and what clients wait for (Normal: a container
// started, which kubectl and the conformance suite look for).
func (r *run) record(ctx context.Context, vpod *corev1.Pod, typ, reason, message string) {
	syncloop.Warning{
		Object: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: vpod.Namespace, Name: vpod.Name, UID: vpod.UID, ResourceVersion: vpod.ResourceVersion,
		},
		Component: "kubelet", Node: r.tr.Config().NodeName,
		Reason: reason, Message: message, At: r.cfg.Now(), Type: typ,
	}.Record(ctx, r.virtual)
}

// admit decides whether vpod fits on the node next to the pods already
// admitted (virtual pods of this node that are not finished and have a host
// pod, or were admitted by this agent and wait for it in the cache), and
// records it when it does.
func (r *run) admit(vpod *corev1.Pod) *nodeadmit.Rejection {
	if r.cfg.Capacity == nil {
		return nil
	}
	r.admitMu.Lock()
	defer r.admitMu.Unlock()
	key := vpod.Namespace + "/" + vpod.Name
	all, err := r.vPods.List(labels.Everything())
	if err != nil {
		return &nodeadmit.Rejection{Reason: "AdmissionError", Message: err.Error()}
	}
	hostNS := r.tr.Config().HostNamespace
	var running []*corev1.Pod
	for _, p := range all {
		k := p.Namespace + "/" + p.Name
		if k == key || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if uid, ok := r.admitted[k]; ok && uid == p.UID {
			running = append(running, p)
			continue
		}
		h, err := r.hPods.Pods(hostNS).Get(r.tr.HostName(translate.KindPod, p.Namespace, p.Name))
		if err == nil && h.Annotations[translate.AnnotationUID] == string(p.UID) {
			running = append(running, p)
		}
	}
	if rej := nodeadmit.Admit(vpod, running, r.cfg.Capacity); rej != nil {
		return rej
	}
	r.admitted[key] = vpod.UID
	return nil
}

// unadmit drops the admission record of a pod whose host pod was not made.
func (r *run) unadmit(vpod *corev1.Pod) {
	r.admitMu.Lock()
	defer r.admitMu.Unlock()
	delete(r.admitted, vpod.Namespace+"/"+vpod.Name)
}

// patchSpec carries the in-place changes of the virtual pod to the host
// pod: images (unless refused), a set or shortened active deadline, and the
// labels and annotations its variables read (translate.FieldAnnotations).
func (r *run) patchSpec(ctx context.Context, vpod, hpod *corev1.Pod) error {
	if hpod.DeletionTimestamp != nil {
		r.imageRefusals.Delete(vpod.Namespace + "/" + vpod.Name)
		return nil
	}
	deadline := translate.ActiveDeadlinePatch(vpod, hpod)
	diff := r.allowedImagePatch(ctx, vpod, hpod)
	fields := translate.FieldAnnotationsPatch(vpod, hpod)
	if len(diff) == 0 && deadline == nil && len(fields) == 0 {
		return nil
	}
	p := hpod.DeepCopy()
	for k, v := range fields {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			if img, ok := diff[list[i].Name]; ok {
				list[i].Image = img
			}
		}
	}
	if deadline != nil {
		p.Spec.ActiveDeadlineSeconds = deadline
	}
	if _, err := r.cfg.Host.CoreV1().Pods(p.Namespace).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating the host pod's images, deadline or field annotations: %w", err)
	}
	return nil
}

// allowedImagePatch is the image changes of vpod the host pod may take
// (translate.ImagePatch): none when one of its images is refused, which the
// tenant is told once per version of the virtual pod's spec that asked.
func (r *run) allowedImagePatch(ctx context.Context, vpod, hpod *corev1.Pod) map[string]string {
	diff := translate.ImagePatch(vpod, hpod)
	key := vpod.Namespace + "/" + vpod.Name
	if len(diff) == 0 {
		r.imageRefusals.Delete(key)
		return nil
	}
	if reasons := r.tr.ImageProblems(&vpod.Spec); len(reasons) > 0 {
		if !r.imageRefusalSaid(key, vpod) {
			r.event(ctx, vpod, translate.ReasonUnsupported, "image update refused by the shared-mode agent: "+strings.Join(reasons, "; "))
		}
		return nil
	}
	return diff
}

// imageRefusalSaid reports whether the refusal of vpod's image update was
// already reported for this version of vpod's spec, and records that it now is.
func (r *run) imageRefusalSaid(key string, vpod *corev1.Pod) bool {
	// The generation counts spec changes only (the agent's own status
	// writes change the resourceVersion); servers before 1.33 leave it 0.
	version := fmt.Sprintf("%s/g%d", vpod.UID, vpod.Generation)
	if vpod.Generation == 0 {
		version = string(vpod.UID) + "/" + vpod.ResourceVersion
	}
	prev, loaded := r.imageRefusals.Swap(key, version)
	return loaded && prev == version
}

// syncCopies writes the host copies of the ConfigMaps and Secrets vpod uses,
// and its identity Secret. A reference to something that does not exist in the
// virtual cluster is skipped: the host kubelet then waits for it, as the
// virtual one would.
func (r *run) syncCopies(ctx context.Context, vpod, hpod *corev1.Pod) error {
	if err := r.writeCopies(ctx, vpod, hpod); err != nil {
		return err
	}
	r.copyRefusals.Forget(vpod.Namespace + "/" + vpod.Name)
	return nil
}

func (r *run) writeCopies(ctx context.Context, vpod, hpod *corev1.Pod) error {
	refs := translate.PodRefs(&vpod.Spec)
	for _, n := range refs.ConfigMaps {
		v, err := r.vCMs.ConfigMaps(vpod.Namespace).Get(n)
		if apierrors.IsNotFound(err) {
			if err := r.emptyGone(ctx, vpod, hpod, "configmap", n); err != nil {
				return err
			}
			continue
		} else if err != nil {
			return err
		}
		h := r.tr.HostConfigMap(v)
		h.OwnerReferences = r.owners("configmap/"+h.Name, hpod)
		if err := r.copied(ctx, vpod, "ConfigMap "+n, r.write(ctx, h)); err != nil {
			return err
		}
	}
	for _, n := range refs.Secrets {
		v, err := r.vSecrets.Secrets(vpod.Namespace).Get(n)
		if apierrors.IsNotFound(err) {
			if err := r.emptyGone(ctx, vpod, hpod, "secret", n); err != nil {
				return err
			}
			continue
		} else if err != nil {
			return err
		}
		h := r.tr.HostSecret(v)
		h.OwnerReferences = r.owners("secret/"+h.Name, hpod)
		if err := r.copied(ctx, vpod, "Secret "+n, r.write(ctx, h)); err != nil {
			return err
		}
	}
	id := translate.PodIdentity(&vpod.Spec)
	if id.Empty() {
		return nil
	}
	tokens, err := r.issueTokens(ctx, vpod, id)
	if err != nil {
		return err
	}
	h, err := r.tr.HostIdentitySecret(vpod, id, tokens)
	if err != nil {
		return err
	}
	h.OwnerReferences = []metav1.OwnerReference{podOwner(hpod)}
	return r.write(ctx, h)
}

// copied passes on err, the outcome of writing the host copy of what (a
// virtual ConfigMap or Secret vpod uses). A Forbidden answer (the
// namespace's ResourceQuota on configmaps or secrets is full, an admission
// policy) is said once on the virtual pod as a Warning Event: the pod waits
// for its volumes, and the tenant cannot see the host's answer otherwise.
// The write is retried like any failed one. syncCopies stops at the first
// failed copy, so one record per pod is enough.
func (r *run) copied(ctx context.Context, vpod *corev1.Pod, what string, err error) error {
	if apierrors.IsForbidden(err) {
		message := "the host refused the copy of " + what + " (the pod waits for it): " + apiMessage(err)
		if r.copyRefusals.First(vpod.Namespace+"/"+vpod.Name, vpod.UID, message) {
			r.event(ctx, vpod, translate.ReasonCopyForbidden, message)
		}
	}
	return err
}

// apiMessage is the API server's message of err, without the wrapping
// this agent added.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

// owners are the host pods using a host copy: every host pod the index lists
// for it, plus hpod, which the cache may not hold yet.
func (r *run) owners(ref string, hpod *corev1.Pod) []metav1.OwnerReference {
	byName := map[string]metav1.OwnerReference{hpod.Name: podOwner(hpod)}
	objs, _ := r.hIndex.ByIndex(refsIndex, ref)
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			byName[p.Name] = podOwner(p)
		}
	}
	out := make([]metav1.OwnerReference, 0, len(byName))
	for _, o := range byName {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func podOwner(p *corev1.Pod) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}
}

// issueTokens returns the ServiceAccount tokens id needs, requesting new ones
// from the virtual cluster when there is none for this pod or it is due for
// refresh (80% of its lifetime, as kubelet does).
func (r *run) issueTokens(ctx context.Context, vpod *corev1.Pod, id translate.Identity) (map[string][]byte, error) {
	secret := r.tr.HostName(translate.KindPodIdentity, vpod.Namespace, vpod.Name)
	now := r.cfg.Now()
	out := map[string][]byte{}
	for key, spec := range id.Tokens {
		cacheKey := secret + "/" + key
		r.mu.Lock()
		t, ok := r.tokens[cacheKey]
		r.mu.Unlock()
		if ok && t.podUID == vpod.UID && now.Before(t.refreshAt) {
			out[key] = t.value
			continue
		}
		sa := vpod.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(spec.ExpirationSeconds),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: vpod.Name, UID: vpod.UID},
		}}
		if spec.Audience != "" {
			req.Spec.Audiences = []string{spec.Audience}
		}
		resp, err := r.virtual.CoreV1().ServiceAccounts(vpod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("requesting a token for service account %s/%s: %w", vpod.Namespace, sa, err)
		}
		lifetime := resp.Status.ExpirationTimestamp.Sub(now)
		t = token{value: []byte(resp.Status.Token), podUID: vpod.UID, refreshAt: now.Add(lifetime * 8 / 10)}
		r.mu.Lock()
		r.tokens[cacheKey] = t
		r.mu.Unlock()
		out[key] = t.value
	}
	return out, nil
}

// forget drops what the Syncer remembers about a pod that is gone.
func (r *run) forget(ns, name string) {
	secret := r.tr.HostName(translate.KindPodIdentity, ns, name)
	r.progress.Forget(ns + "/" + name)
	r.imageRefusals.Delete(ns + "/" + name)
	r.copyRefusals.Forget(ns + "/" + name)
	r.admitMu.Lock()
	delete(r.admitted, ns+"/"+name)
	r.admitMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.written, "secret/"+secret)
	for k := range r.tokens {
		if strings.HasPrefix(k, secret+"/") {
			delete(r.tokens, k)
		}
	}
}

// write creates or replaces a host ConfigMap or Secret unless the same content
// was written within RewriteInterval. The update is unconditional (no
// resourceVersion): the agent may not read Secrets, so it cannot know the
// current version, and the object is entirely its own.
func (r *run) write(ctx context.Context, obj any) error {
	var kind, name string
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		kind, name = "configmap", o.Name
	case *corev1.Secret:
		kind, name = "secret", o.Name
	default:
		return fmt.Errorf("cannot write %T", obj)
	}
	h, err := hashOf(obj)
	if err != nil {
		return err
	}
	key := kind + "/" + name
	now := r.cfg.Now()
	r.mu.Lock()
	w, ok := r.written[key]
	r.mu.Unlock()
	if ok && w.hash == h && now.Sub(w.at) < r.cfg.RewriteInterval {
		return nil
	}
	ns := r.tr.Config().HostNamespace
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		c := r.cfg.Host.CoreV1().ConfigMaps(ns)
		if _, err = c.Update(ctx, o, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = c.Create(ctx, o, metav1.CreateOptions{})
		}
	case *corev1.Secret:
		c := r.cfg.Host.CoreV1().Secrets(ns)
		if _, err = c.Update(ctx, o, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = c.Create(ctx, o, metav1.CreateOptions{})
		}
	}
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("writing host %s %s: created concurrently, retrying", kind, name)
	}
	if err != nil {
		return fmt.Errorf("writing host %s %s: %w", kind, name, err)
	}
	w = written{hash: h, at: now}
	if sec, ok := obj.(*corev1.Secret); ok {
		w.secretType = sec.Type
	}
	r.mu.Lock()
	r.written[key] = w
	r.mu.Unlock()
	return nil
}

// emptyGone empties the host copy of a ConfigMap or Opaque Secret (kind
// "configmap" or "secret") of the pod's namespace that the virtual cluster no
// longer has, when the agent wrote one: the kubelet then takes its keys out
// of the volumes that show it, as a kubelet does for an optional volume
// whose object is deleted. The agent may not delete host ConfigMaps and
// Secrets (its Role), and a copy goes with the last pod that owns it. A copy
// never written is left alone: the host kubelet waits for it, or mounts an
// optional one empty. Other Secret types keep their last keys (their type,
// which an update cannot change, requires some).
func (r *run) emptyGone(ctx context.Context, vpod, hpod *corev1.Pod, kind, name string) error {
	tk := translate.KindConfigMap
	if kind == "secret" {
		tk = translate.KindSecret
	}
	host := r.tr.HostName(tk, vpod.Namespace, name)
	r.mu.Lock()
	w, ok := r.written[kind+"/"+host]
	r.mu.Unlock()
	if !ok || (kind == "secret" && w.secretType != corev1.SecretTypeOpaque) {
		return nil
	}
	meta := metav1.ObjectMeta{Namespace: vpod.Namespace, Name: name}
	owners := r.owners(kind+"/"+host, hpod)
	if kind == "secret" {
		h := r.tr.HostSecret(&corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque})
		h.OwnerReferences = owners
		return r.write(ctx, h)
	}
	h := r.tr.HostConfigMap(&corev1.ConfigMap{ObjectMeta: meta})
	h.OwnerReferences = owners
	return r.write(ctx, h)
}

// hashOf fingerprints what is written, owner references included.
func hashOf(obj any) (string, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return "", fmt.Errorf("hashing: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// claimProblems lists the claims of vpod that have no host copy because the
// agent refuses them (package volumesync): a pod pinned to the node with
// nodeName, which skips the virtual scheduler's wait for the claim to bind,
// would otherwise wait on the host forever. A claim that does not exist yet
// is not a problem: the host pod waits for it, as a kubelet would. A claim
// the cache does not hold is read from the virtual API: the claim and pod
// caches are separate, and a claim made just before the pod may not be in
// its cache yet.
func (r *run) claimProblems(ctx context.Context, vpod *corev1.Pod) ([]string, error) {
	var out []string
	for _, v := range vpod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		name := v.PersistentVolumeClaim.ClaimName
		c, err := r.vClaims.PersistentVolumeClaims(vpod.Namespace).Get(name)
		if apierrors.IsNotFound(err) {
			c, err = r.virtual.CoreV1().PersistentVolumeClaims(vpod.Namespace).Get(ctx, name, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading claim %s/%s: %w", vpod.Namespace, name, err)
		}
		if p := r.tr.ClaimProblems(c); len(p) > 0 {
			out = append(out, fmt.Sprintf("volume %q: claim %q is not synced to the host: %s", v.Name, c.Name, strings.Join(p, "; ")))
		}
	}
	return out, nil
}
