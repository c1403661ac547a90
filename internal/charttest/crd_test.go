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

	// helm installs crds/ as they are; check that the rendered CRDs are those files.
	rendered := render(t, "", "--include-crds")
	for name, data := range chart {
		want, err := decode(string(data))
		if err != nil || len(want) != 1 {
			t.Fatalf("%s: %d objects, %v", name, len(want), err)
		}
		got := find(rendered, "CustomResourceDefinition", "", want[0].GetName())
		if got == nil {
			t.Errorf("helm template --include-crds does not render %s", want[0].GetName())
			continue
		}
		if !equality.Semantic.DeepEqual(got.Object, want[0].Object) {
			t.Errorf("the rendered CRD %s differs from charts/k3k/crds/%s", want[0].GetName(), name)
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
