package cluster

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// Retained volumes coming back.
//
// `k3kcli cluster delete NAME --keep-data` (spec.persistence.whenDeleted:
// Retain) keeps the server volumes; everything else, the token Secret
// included, goes with the Cluster through its owner references. A Cluster
// created later with the same name and namespace finds those volumes
// (serverHasData), so reconcileToken never generates a token for it: the data
// was encrypted with the old one, and only the servers' own copy
// (<data-dir>/server/token, on the retained volume) knows it. The token
// Secret is created empty, as for any server with data whose Secret was lost.
//
// Such a cluster's servers are started while the token Secret is still empty
// (serversMayStart). Nothing starts without a token: k3s is given
// --token-file, and k3s waits for a missing token file (it reads it again
// every 2 s for 4 minutes, then exits and the kubelet starts it again). The
// server pod's publisher meanwhile restores the Secret from the server's own
// copy, the kubelet projects the restored Secret into the pod's optional token
// volume, and k3s starts on its data with its own token.
//
// The other way out of the deadlock, keeping the token Secret on --keep-data,
// was not taken: it fixes only the clusters deleted through the CLI by this
// k3k version. A token Secret deleted by hand, or volumes kept by whenDeleted:
// Retain set with kubectl before this change, would still wait forever for a
// server that is never started. Restoring from the server's own copy works for
// all of them: the server's own copy on its volume is the authority for the
// token (docs/architecture.md, the token Secret's row).
//
// A retained volume on which k3s never wrote its token (its server never got
// that far) cannot be restored from: k3s keeps waiting, and the condition says
// what to do.

// serversMayStart reports whether a server StatefulSet may be created: the
// token is in its Secret, or it is awaiting restore from the servers' own copy,
// which only a running server pod can do. A user's token Secret that is
// missing (TokenSecretNotFound) holds the servers back: nothing could restore it.
func serversMayStart(o *observation) bool {
	if o.restore.hold {
		// spec.restoreFrom: the restore Job must exist first (restore.go).
		return false
	}
	return o.token.ready || awaitingTokenRestore(o)
}

func awaitingTokenRestore(o *observation) bool {
	return !o.token.ready && o.token.reason == v1beta1.ReasonTokenAwaitingRestore
}

func restorePending(c *v1beta1.Cluster) bool {
	_, ok := c.Annotations[v1beta1.AnnotationRestorePending]
	return ok
}

// tokenAwaitingRestoreMessage is TokenReady's message while the token Secret
// waits for the servers, or a restore, to fill it.
func tokenAwaitingRestoreMessage(c *v1beta1.Cluster, secret string) string {
	if strings.HasPrefix(c.Annotations[v1beta1.AnnotationRestorePending], "in-place/") {
		return fmt.Sprintf("restoring in place from a snapshot (k3kcli cluster restore, annotation %s): k3s is stopped on every server and waits for its token while the datastore's data is replaced; "+
			"Secret %s gets the snapshot's token when that is done. If it stays so, the restore was interrupted: run the same k3kcli cluster restore again to finish it", v1beta1.AnnotationRestorePending, secret)
	}
	if c.Spec.RestoreFrom != nil {
		return fmt.Sprintf("restoring from %s on claim %s (spec.restoreFrom): Secret %s gets the snapshot's token from the restore Job once its data is loaded into the datastore; k3s waits for it. "+
			"k3k never generates a token for such a cluster (see the Restored condition)", c.Spec.RestoreFrom.File, c.Spec.RestoreFrom.ClaimName, secret)
	}
	if restorePending(c) {
		return fmt.Sprintf("restoring from a snapshot (annotation %s): Secret %s gets the snapshot's token once its data is loaded into the datastore; k3s waits for it. "+
			"If it stays so, the restore was interrupted: delete the Cluster and restore again", v1beta1.AnnotationRestorePending, secret)
	}
	return fmt.Sprintf("Secret %s is missing or empty but the servers already hold data (a published kubeconfig or a server volume, e.g. kept by delete --keep-data): "+
		"the servers start on their volumes and the publisher restores the token from the server's own copy (%s), which k3s waits for; "+
		"k3k never generates a replacement token for existing data. If it stays so, the server's volume holds no token "+
		"(its server never started): put the original token into the Secret, or delete the volumes to start empty", secret, layout.ServerTokenPath)
}

// recordTokenRestoreStart records that the servers were started on retained
// data to restore the token; called once, when the StatefulSet is created.
func (r *Reconciler) recordTokenRestoreStart(c *v1beta1.Cluster) {
	if restorePending(c) || c.Spec.RestoreFrom != nil {
		r.event(c, corev1.EventTypeNormal, v1beta1.ReasonServersStartedToRestoreToken, "StartServers",
			fmt.Sprintf("restoring from a snapshot: the servers start with empty datastores and k3s waits for Secret %s, which gets the snapshot's token once its data is loaded", layout.NamesFor(c).Token))
		return
	}
	r.event(c, corev1.EventTypeNormal, v1beta1.ReasonServersStartedToRestoreToken, "StartServers",
		fmt.Sprintf("the servers already hold data and Secret %s is empty: the servers start on their volumes and restore the token from their own copy", layout.NamesFor(c).Token))
}
