package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// failureReasons are condition reasons that mean something is wrong rather
// than still in progress; their Events are Warnings.
var failureReasons = map[string]bool{
	v1beta1.ReasonInvalidSpec: true, v1beta1.ReasonInvalid: true, v1beta1.ReasonTokenSecretNotFound: true, v1beta1.ReasonReconcileError: true,
	v1beta1.ReasonPolicyNotFound: true, v1beta1.ReasonPolicyBroken: true,
}

// observeClaims reads the server volume claims while a server pod is not
// ready, and for each Pending one its events, which say why it is not bound
// (the events are read uncached: the controller does not watch them). Nothing
// is read while every server is ready.
func (r *Reconciler) observeClaims(ctx context.Context, c *v1beta1.Cluster, o *observation) error {
	waiting := false
	for i := range o.serverPods {
		if !podIsReady(&o.serverPods[i]) {
			waiting = true
		}
	}
	if !waiting {
		return nil
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := r.Client.List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels(serverLabels(c))); err != nil {
		return fmt.Errorf("listing server volumes: %w", err)
	}
	o.claims = map[string]claimFacts{}
	for _, pvc := range claims.Items {
		f := claimFacts{claim: pvc}
		if pvc.Status.Phase == corev1.ClaimPending && r.APIReader != nil {
			events := &corev1.EventList{}
			if err := r.APIReader.List(ctx, events, client.InNamespace(c.Namespace), client.MatchingFields{
				"involvedObject.kind": "PersistentVolumeClaim", "involvedObject.name": pvc.Name, "involvedObject.uid": string(pvc.UID),
			}); err != nil {
				return fmt.Errorf("listing events of volume claim %s: %w", pvc.Name, err)
			}
			if e := latestClaimEvent(events.Items); e != nil {
				f.event = e.DeepCopy()
			}
		}
		o.claims[pvc.Name] = f
	}
	return nil
}

// recordTransitions records an Event on the Cluster for each condition that
// appeared or whose status or reason changed in this reconcile, and for each
// new blocking cause: the Cluster's steps and failures, as `kubectl describe`
// and k3kcli show them. Events are recorded only after the status that
// carries the same facts was written.
func (r *Reconciler) recordTransitions(c *v1beta1.Cluster, before, after v1beta1.ClusterStatus, o *observation) {
	if r.Recorder == nil {
		return
	}
	for _, cond := range conditionEvents(before.Conditions, after.Conditions) {
		if cond.Type == v1beta1.ConditionLastBackupSucceeded && (cond.Reason == v1beta1.ReasonBackupSucceeded || cond.Reason == v1beta1.ReasonBackupFailed) {
			// Every snapshot and failure has an Event of its own
			// (recordBackupEvents), not only a change of the condition.
			continue
		}
		eventType := corev1.EventTypeNormal
		switch {
		case cond.Status == metav1.ConditionTrue:
		case v1beta1.IsBlockingReason(cond.Reason):
			if b := firstBlocker(o.serverPods, o.claims); b == nil || b.warning {
				eventType = corev1.EventTypeWarning
			}
		case failureReasons[cond.Reason]:
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(c, nil, eventType, cond.Reason, cond.Type, "%s=%s: %s", cond.Type, cond.Status, cond.Message)
	}
}

// conditionEvents are the conditions of after that deserve an Event: new
// ones, ones whose status or reason changed, and blocking ones whose message
// (the cause) changed.
func conditionEvents(before, after []metav1.Condition) []metav1.Condition {
	var out []metav1.Condition
	for _, cond := range after {
		old := meta.FindStatusCondition(before, cond.Type)
		switch {
		case old == nil, old.Status != cond.Status, old.Reason != cond.Reason:
		case v1beta1.IsBlockingReason(cond.Reason) && old.Message != cond.Message:
		default:
			continue
		}
		out = append(out, cond)
	}
	return out
}
