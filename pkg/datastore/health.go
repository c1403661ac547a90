package datastore

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// probeTimeout bounds each readiness and status check so that a stuck disk turns
// into a failed probe rather than a hung kubelet connection.
const probeTimeout = 5 * time.Second

// HealthHandler serves the probes and the status report of ds:
//
//	/healthz  200 while the process runs (liveness: restart only a dead process)
//	/readyz   200 when ds serves and accepts writes, else 503 with the reason
//	/status   the Status as JSON
//
// Liveness deliberately does not depend on the disk: restarting the process does
// not make a full or slow volume any better, it only adds a crash loop.
func HealthHandler(ds Datastore) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		if err := ds.Ready(ctx); err != nil {
			writeText(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		st, err := ds.Status(ctx)
		if err != nil {
			writeText(w, http.StatusServiceUnavailable, "status unavailable: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})
	return mux
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg + "\n"))
}
