package cli

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// clusterWarnings prints the Warning Events on a Cluster as they appear while
// a command waits for it. Blocking causes the progress line already shows
// (the ServersReady condition carries them) are not printed twice.
type clusterWarnings struct {
	seen map[string]bool
	// off is set when Events cannot be read (e.g. the user may not list
	// them): the wait goes on without them.
	off bool
}

func (w *clusterWarnings) print(ctx context.Context, o Options, s *session, c *v1beta1.Cluster, elapsed time.Duration) {
	if w.off || c.UID == "" {
		return
	}
	events := &corev1.EventList{}
	if err := s.client.List(ctx, events, client.InNamespace(c.Namespace), client.MatchingFields{"involvedObject.uid": string(c.UID)}); err != nil {
		w.off = true
		return
	}
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	for _, e := range events.Items {
		if e.Type != corev1.EventTypeWarning || v1beta1.IsBlockingReason(e.Reason) {
			continue
		}
		key := e.Reason + "\x00" + e.Message
		if w.seen[key] {
			continue
		}
		w.seen[key] = true
		fmt.Fprintf(o.Err, "[%6s] warning %s: %s\n", elapsed.Round(time.Second), e.Reason, e.Message)
	}
}
