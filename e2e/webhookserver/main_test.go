package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// TestValidate: the webhook denies exactly the objects labelled
// e2e.k3k.io/deny=true, naming the pod that served the answer, and answers
// the request's UID, as the API server requires.
func TestValidate(t *testing.T) {
	h := handler("webhook-pod-1")
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		allowed bool
	}{
		{"an unlabelled object is allowed", nil, true},
		{"an object labelled deny=true is denied", map[string]string{DenyLabel: "true"}, false},
		{"an object labelled deny=false is allowed", map[string]string{DenyLabel: "false"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": metav1.ObjectMeta{Name: "x", Labels: tc.labels}})
			body, _ := json.Marshal(admissionv1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request:  &admissionv1.AdmissionRequest{UID: types.UID("uid-1"), Object: runtime.RawExtension{Raw: obj}},
			})
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body)))
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("answer %d %q: %v", rec.Code, rec.Body.String(), err)
			}
			if out.Response.UID != "uid-1" || out.Response.Allowed != tc.allowed || out.Kind != "AdmissionReview" {
				t.Fatalf("response %+v (kind %q); want uid-1, allowed %v", out.Response, out.Kind, tc.allowed)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, "webhook-pod-1") {
				t.Errorf("denial %q does not name the pod", out.Response.Result.Message)
			}
		})
	}
}

// TestAggregatedAPI: discovery lists pings; a get names the serving pod and
// the user the aggregator passed on.
func TestAggregatedAPI(t *testing.T) {
	h := handler("webhook-pod-1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/apis/e2e.k3k.io/v1alpha1", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"name":"pings"`) {
		t.Fatalf("discovery: %d %s", rec.Code, rec.Body.String())
	}
	req := httptest.NewRequest(http.MethodGet, "/apis/e2e.k3k.io/v1alpha1/namespaces/hooks/pings/hello", nil)
	req.Header.Set("X-Remote-User", "system:admin")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var p map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p["servedBy"] != "webhook-pod-1" || p["user"] != "system:admin" || p["kind"] != "Ping" {
		t.Fatalf("get: %d %s (%v)", rec.Code, rec.Body.String(), err)
	}
}
