package charttest

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/k3k-io/k3k/internal/testenv"
)

// previousChart writes the chart as version 0.1.0 shipped it into a scratch
// directory: the CRD in crds/ (installed once by helm, never upgraded), no
// templates/crds.yaml, and a CRD without the fields added since (spec.paused).
func previousChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "k3k")
	err := filepath.WalkDir(chartDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(chartDir, path)
		switch {
		case rel == "files" || rel == filepath.Join("templates", "crds.yaml"):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == ".helmignore" {
			data = []byte(strings.ReplaceAll(string(data), "/crds/\n", ""))
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dst, "crds", "k3k.io_clusters.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crd := map[string]any{}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd, "spec", "versions")
	v0 := versions[0].(map[string]any)
	unstructured.RemoveNestedField(v0, "schema", "openAPIV3Schema", "properties", "spec", "properties", "paused")
	versions[0] = v0
	if err := unstructured.SetNestedSlice(crd, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// hasPausedField reports whether the stored CRD's schema knows spec.paused.
func hasPausedField(t *testing.T, c client.Client) (bool, *unstructured.Unstructured) {
	t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := c.Get(context.Background(), client.ObjectKey{Name: "clusters.k3k.io"}, crd); err != nil {
		t.Fatalf("getting the CRD: %v", err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	_, found, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "paused")
	return found, crd
}

// TestHelmUpgradeUpdatesTheCRD installs the previous chart (CRD from crds/)
// with helm on a kube-apiserver of its own, then upgrades to this chart: the
// first upgrade takes the CRD over (--take-ownership, as docs/upgrade.md
// says) and updates its schema, later upgrades need nothing, and uninstalling
// keeps the CRD and the Clusters.
func TestHelmUpgradeUpdatesTheCRD(t *testing.T) {
	env, err := testenv.StartEnvtest()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	kc, err := env.AdminKubeconfig("helm-upgrade")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		args = append(args, "--kubeconfig", kubeconfig, "--namespace", "k3k-system")
		out, stderr, err := helm(args...)
		t.Logf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		return out + stderr, err
	}

	if _, err := run("install", "k3k", previousChart(t), "--create-namespace"); err != nil {
		t.Fatal("installing the previous chart failed")
	}
	installCRDsEstablished(t, env.Client)
	if found, _ := hasPausedField(t, env.Client); found {
		t.Fatal("the previous chart's CRD already has spec.paused; the test proves nothing")
	}

	// The CRD helm installed from crds/ carries no release ownership: a plain
	// upgrade refuses to take it over, and changes nothing.
	out, err := run("upgrade", "k3k", chartDir)
	if err == nil || !strings.Contains(out, "invalid ownership metadata") {
		t.Fatalf("a plain first upgrade: %v, want the ownership refusal", err)
	}
	if _, err := run("upgrade", "k3k", chartDir, "--take-ownership"); err != nil {
		t.Fatal("the first upgrade with --take-ownership failed")
	}
	found, crd := hasPausedField(t, env.Client)
	if !found {
		t.Fatal("helm upgrade did not update the CRD: spec.paused is missing")
	}
	if crd.GetAnnotations()["meta.helm.sh/release-name"] != "k3k" || crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the CRD is not the release's, kept on uninstall: %v", crd.GetAnnotations())
	}
	installCRDsEstablished(t, env.Client)

	// A field of the new schema is stored, not pruned (the API server takes
	// a moment to serve a changed schema, hence the retries).
	cl := &unstructured.Unstructured{}
	waitFor(t, "a Cluster with spec.paused stored as written", func() error {
		cl = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "k3k.io/v1beta1", "kind": "Cluster",
			"metadata": map[string]any{"name": "kept", "namespace": "k3k-system"},
			"spec":     map[string]any{"paused": true},
		}}
		if err := env.Client.Create(context.Background(), cl); err != nil {
			return err
		}
		if paused, _, _ := unstructured.NestedBool(cl.Object, "spec", "paused"); !paused {
			_ = env.Client.Delete(context.Background(), cl)
			return errors.New("spec.paused was pruned")
		}
		return nil
	})

	if _, err := run("upgrade", "k3k", chartDir); err != nil {
		t.Fatal("a later upgrade failed")
	}
	if _, err := run("uninstall", "k3k"); err != nil {
		t.Fatal("uninstall failed")
	}
	if found, _ := hasPausedField(t, env.Client); !found {
		t.Error("the CRD is gone or changed after uninstall")
	}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(cl), cl); err != nil {
		if apierrors.IsNotFound(err) {
			t.Fatal("uninstalling the chart deleted the Clusters")
		}
		t.Fatal(err)
	}
}

// installCRDsEstablished waits until clusters.k3k.io serves.
func installCRDsEstablished(t *testing.T, c client.Client) {
	t.Helper()
	waitFor(t, "clusters.k3k.io established", func() error {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		if err := c.Get(context.Background(), client.ObjectKey{Name: "clusters.k3k.io"}, crd); err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, cond := range conds {
			if m, ok := cond.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		return os.ErrNotExist
	})
}
