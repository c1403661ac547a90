// Command webhookserver is the end-to-end suite's admission webhook and
// aggregated API server (e2e/webhook_test.go): the suite runs it as a pod in a
// virtual cluster, which the shared agent runs on the host, and checks that the
// virtual API server calls it. It is a test program, packed as image
// k3k-io/k3k-e2e-webhook by hack/images.sh, never part of the product.
//
// Over TLS (certificate and key in PEM from $TLS_CERT and $TLS_KEY, which the
// test signs with a CA of its own) on $LISTEN_ADDRESS (default :8443) it serves:
//
//	POST /validate   a validating webhook (admission.k8s.io/v1): it denies an
//	                 object labelled e2e.k3k.io/deny=true, with a message naming
//	                 this pod, and allows everything else
//	/apis/e2e.k3k.io/v1alpha1...
//	                 the aggregated API group e2e.k3k.io/v1alpha1 with one
//	                 namespaced, read-only resource "pings": discovery, list and
//	                 get; every answer names this pod
//	GET /healthz     200 "ok", for the readiness probe
package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Group and Version of the aggregated API.
const (
	Group   = "e2e.k3k.io"
	Version = "v1alpha1"
	// DenyLabel set to "true" on an object makes the webhook refuse it.
	DenyLabel = "e2e.k3k.io/deny"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "webhookserver:", err)
		os.Exit(1)
	}
}

func run() error {
	pair, err := tls.X509KeyPair([]byte(os.Getenv("TLS_CERT")), []byte(os.Getenv("TLS_KEY")))
	if err != nil {
		return fmt.Errorf("$TLS_CERT and $TLS_KEY: %w", err)
	}
	addr := os.Getenv("LISTEN_ADDRESS")
	if addr == "" {
		addr = ":8443"
	}
	name, _ := os.Hostname()
	srv := &http.Server{
		Addr:              addr,
		Handler:           handler(name),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Printf("serving the webhook and %s/%s on %s as %s", Group, Version, addr, name)
	return srv.ListenAndServeTLS("", "")
}

func handler(servedBy string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("POST /validate", func(w http.ResponseWriter, r *http.Request) { validate(w, r, servedBy) })
	base := "/apis/" + Group + "/" + Version
	mux.HandleFunc("GET /apis", func(w http.ResponseWriter, _ *http.Request) {
		gv := metav1.GroupVersionForDiscovery{GroupVersion: Group + "/" + Version, Version: Version}
		writeJSON(w, http.StatusOK, &metav1.APIGroupList{
			TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
			Groups:   []metav1.APIGroup{{Name: Group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}},
		})
	})
	mux.HandleFunc("GET "+base, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, &metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: Group + "/" + Version,
			APIResources: []metav1.APIResource{{Name: "pings", SingularName: "ping", Namespaced: true, Kind: "Ping", Verbs: []string{"get", "list"}}},
		})
	})
	mux.HandleFunc("GET "+base+"/namespaces/{ns}/pings", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"apiVersion": Group + "/" + Version, "kind": "PingList", "metadata": map[string]any{},
			"items": []any{ping(r.PathValue("ns"), "ping", servedBy, r)},
		})
	})
	mux.HandleFunc("GET "+base+"/namespaces/{ns}/pings/{name}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, ping(r.PathValue("ns"), r.PathValue("name"), servedBy, r))
	})
	return mux
}

// ping is the one kind of object the aggregated API serves. It says which pod
// served it and which user the aggregator said was asking.
func ping(ns, name, servedBy string, r *http.Request) map[string]any {
	return map[string]any{
		"apiVersion": Group + "/" + Version, "kind": "Ping",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"servedBy": servedBy,
		"user":     r.Header.Get("X-Remote-User"),
	}
}

func validate(w http.ResponseWriter, r *http.Request, servedBy string) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	var obj struct {
		metav1.ObjectMeta `json:"metadata"`
	}
	_ = json.Unmarshal(review.Request.Object.Raw, &obj)
	if strings.EqualFold(obj.Labels[DenyLabel], "true") {
		resp.Allowed = false
		resp.Result = &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
			Message: fmt.Sprintf("denied by the e2e webhook served by %s", servedBy),
		}
	}
	log.Printf("admission %s %s %s/%s: allowed %v", review.Request.Operation, review.Request.Kind.Kind, review.Request.Namespace, review.Request.Name, resp.Allowed)
	writeJSON(w, http.StatusOK, &admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
