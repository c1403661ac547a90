package charttest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ensureNamespace creates a namespace unless it exists.
func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// installCRDs creates the rendered CRDs (for real: objects of their kinds can
// only be dry-run once they exist) and waits until they are established.
func installCRDs(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if err := k8s.Create(ctx, o.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating CRD %s: %v", o.GetName(), err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for !established(ctx, o.GetName()) {
			if time.Now().After(deadline) {
				t.Fatalf("CRD %s not established", o.GetName())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// installMonitoringCRD installs the Prometheus Operator's ServiceMonitor CRD
// (a cut-down copy in testdata/crds), which the chart's ServiceMonitor needs
// and the chart does not ship.
func installMonitoringCRD(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "crds", "monitoring.coreos.com_servicemonitors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(string(data))
	if err != nil {
		t.Fatalf("decoding the ServiceMonitor CRD: %v", err)
	}
	installCRDs(t, objs)
}

func established(ctx context.Context, name string) bool {
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// TestRenderedManifestsAreAcceptedByKubeAPIServer sends every rendered object
// of every value set to a real kube-apiserver as a server-side dry run: the
// schema, defaulting and admission of the API server judge them, nothing is
// stored.
func TestRenderedManifestsAreAcceptedByKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	for _, values := range valueSets {
		name := values
		if name == "" {
			name = "chart defaults"
		}
		t.Run(name, func(t *testing.T) {
			objs := render(t, values, "--include-crds")
			installCRDs(t, objs)
			installMonitoringCRD(t)
			n := 0
			for _, o := range objs {
				if o.GetKind() == "CustomResourceDefinition" {
					continue
				}
				if ns := o.GetNamespace(); ns != "" {
					ensureNamespace(t, ns)
				}
				// Strict: a field the API server's schema does not know is an
				// error, not silently dropped.
				if err := k8s.Create(ctx, o.DeepCopy(), client.DryRunAll, client.FieldValidation("Strict")); err != nil {
					t.Errorf("kube-apiserver rejects %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
				n++
			}
			if n < 6 {
				t.Errorf("only %d objects rendered", n)
			}
		})
	}
}
