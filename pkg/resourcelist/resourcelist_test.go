package resourcelist

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func mustParse(t *testing.T, s string) corev1.ResourceList {
	t.Helper()
	l, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestParse(t *testing.T) {
	l := mustParse(t, " pods=50, requests.cpu=8,requests.memory=16Gi ,")
	if len(l) != 3 || l.Pods().Value() != 50 || l.Name("requests.cpu", resource.DecimalSI).Value() != 8 {
		t.Fatalf("parsed %v", l)
	}
	if l := mustParse(t, ""); len(l) != 0 {
		t.Fatalf("empty string parsed to %v", l)
	}
	for _, bad := range []string{"pods", "pods=lots", "=5", "pods=-1"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}
