package publisher

import (
	"fmt"
	"net/http"
	"time"
)

// HealthHandler serves /healthz. It answers 200 while the publish loop is alive,
// whatever the kubeconfig's state: a server still starting, or a Secret waiting for
// the controller, is not a reason for kubelet to restart the publisher. It answers
// 503 only when the loop has not completed a Sync for several resync periods,
// which means it is stuck and a restart would help. The body names the state and
// never holds content.
func (p *Publisher) HealthHandler() http.Handler {
	started := p.cfg.Now()
	stale := 3*p.cfg.Resync + p.cfg.MaxBackoff
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		st := p.Status()
		last := st.LastSync
		if last.IsZero() {
			last = started
		}
		if age := p.cfg.Now().Sub(last); age > stale {
			http.Error(w, fmt.Sprintf("publish loop has not run for %s", age.Round(time.Second)), http.StatusServiceUnavailable)
			return
		}
		state := string(st.State)
		if state == "" {
			state = "Starting"
		}
		if st.Err != nil {
			fmt.Fprintf(w, "ok: %s; last attempt failed: %v\n", state, st.Err)
			return
		}
		fmt.Fprintf(w, "ok: %s\n", state)
	})
}
