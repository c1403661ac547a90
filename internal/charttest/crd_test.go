package charttest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/k3k-io/k3k/internal/testenv"
)

// TestChartCRDsAreTheGeneratedOnes regenerates the CRDs from api/ into a
// scratch directory and requires the chart's copies to be byte for byte the
// same: a stale chart would install a schema the controller does not speak.
func TestChartCRDsAreTheGeneratedOnes(t *testing.T) {
	gen, err := testenv.Binary("controller-gen")
	if err != nil {
		t.Fatalf("regenerating the CRDs needs controller-gen: %v", err)
	}
	out := t.TempDir()
	cmd := exec.Command(gen, "crd", "paths=./api/...", "output:crd:artifacts:config="+out)
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}
	generated, chart := dirFiles(t, out), dirFiles(t, crdDir)
	if !slices.Equal(names(generated), names(chart)) {
		t.Fatalf("charts/k3k/crds holds %v, controller-gen makes %v: run make generate", names(chart), names(generated))
	}
	for name, want := range generated {
		if !bytes.Equal(chart[name], want) {
			t.Errorf("charts/k3k/crds/%s differs from what controller-gen generates: run make generate", name)
		}
	}

	// The chart renders its CRDs from files/crds (templates/crds.yaml): those
	// must be the generated files too, and the rendered CRDs the same objects
	// plus the keep policy and the chart's labels.
	chartCopies := dirFiles(t, filepath.Join(chartDir, "files", "crds"))
	if !slices.Equal(names(chartCopies), names(chart)) {
		t.Fatalf("charts/k3k/files/crds holds %v, charts/k3k/crds %v: run make generate", names(chartCopies), names(chart))
	}
	rendered := render(t, "", "--include-crds")
	if n := kinds(rendered)["CustomResourceDefinition"]; n != len(chart) {
		t.Errorf("helm template --include-crds renders %d CRDs, want %d (crds/ must stay out of the chart: .helmignore)", n, len(chart))
	}
	if n := kinds(render(t, "", "--include-crds", "--set", "crds.install=false"))["CustomResourceDefinition"]; n != 0 {
		t.Errorf("crds.install=false still renders %d CRDs", n)
	}
	for name, data := range chart {
		if !bytes.Equal(chartCopies[name], data) {
			t.Errorf("charts/k3k/files/crds/%s differs from charts/k3k/crds/%s: run make generate", name, name)
		}
		want, err := decode(string(data))
		if err != nil || len(want) != 1 {
			t.Fatalf("%s: %d objects, %v", name, len(want), err)
		}
		got := find(rendered, "CustomResourceDefinition", "", want[0].GetName())
		if got == nil {
			t.Errorf("helm template does not render %s", want[0].GetName())
			continue
		}
		if !equality.Semantic.DeepEqual(got.Object["spec"], want[0].Object["spec"]) {
			t.Errorf("the rendered CRD %s's spec differs from charts/k3k/crds/%s", want[0].GetName(), name)
		}
		if got.GetAnnotations()["helm.sh/resource-policy"] != "keep" || got.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("the rendered CRD %s lacks the keep policy or the chart's labels: %v %v", got.GetName(), got.GetAnnotations(), got.GetLabels())
		}
	}
}

func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = data
	}
	return files
}

func names(files map[string][]byte) []string {
	var out []string
	for n := range files {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
