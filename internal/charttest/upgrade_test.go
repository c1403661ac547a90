package charttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/k3k-io/k3k/internal/testenv"
)

// previousChart is the chart as the last commit before templates/crds.yaml
// (e9099f5, chart version 0.1.0) had it, made with `helm package`: the CRD in
// crds/, which helm installs once and never upgrades, without the fields
// added since. docs/upgrade.md says how to make it again.
var previousChart = filepath.Join("testdata", "k3k-0.1.0.tgz")

// newFields are paths under the Cluster schema's spec.properties that the
// current CRD has and the previous chart's lacks.
var newFields = [][]string{{"backup"}, {"ingresses"}, {"restoreFrom"}, {"datastore", "properties", "etcd"}, {"maxTerminationGracePeriodSeconds"}}

// crdLacks lists the newFields the stored CRD's schema does not have.
func crdLacks(t *testing.T, c client.Client) ([]string, *unstructured.Unstructured) {
	t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := c.Get(context.Background(), client.ObjectKey{Name: "clusters.k3k.io"}, crd); err != nil {
		t.Fatalf("getting the CRD: %v", err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	spec := []string{"schema", "openAPIV3Schema", "properties", "spec", "properties"}
	var lacks []string
	for _, f := range newFields {
		if _, found, _ := unstructured.NestedMap(versions[0].(map[string]any), append(slices.Clone(spec), f...)...); !found {
			lacks = append(lacks, strings.Join(f, "."))
		}
	}
	return lacks, crd
}

// TestHelmUpgradeUpdatesTheCRD installs the previous chart release (CRD from
// crds/) with helm on a kube-apiserver of its own and makes a Cluster with
// it, then upgrades to this chart: the first upgrade takes the CRD over
// (--take-ownership, as docs/upgrade.md says) and updates its schema, the
// Cluster is still there and takes the new fields, later upgrades need
// nothing, and uninstalling keeps the CRD and the Clusters.
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
	chartOfRelease := func() string {
		out, err := run("list", "--output", "json")
		if err != nil {
			t.Fatal("helm list failed")
		}
		var releases []struct{ Name, Chart string }
		if err := json.Unmarshal([]byte(out), &releases); err != nil || len(releases) != 1 {
			t.Fatalf("helm list: %v, %d releases", err, len(releases))
		}
		return releases[0].Chart
	}
	current, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	meta := struct{ Version string }{}
	if err := yaml.Unmarshal(current, &meta); err != nil {
		t.Fatal(err)
	}

	if _, err := run("install", "k3k", previousChart, "--create-namespace"); err != nil {
		t.Fatal("installing the previous chart failed")
	}
	if got := chartOfRelease(); got != "k3k-0.1.0" || meta.Version == "0.1.0" {
		t.Fatalf("installed %s, upgrading to %s: the chart version was not raised", got, meta.Version)
	}
	installCRDsEstablished(t, env.Client)
	if lacks, _ := crdLacks(t, env.Client); len(lacks) != len(newFields) {
		t.Fatalf("the previous chart's CRD lacks only %v of %v; the test proves nothing", lacks, newFields)
	}
	// A Cluster made with the previous CRD, which the upgrade must keep.
	kept := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k3k.io/v1beta1", "kind": "Cluster",
		"metadata": map[string]any{"name": "kept", "namespace": "k3k-system"},
		"spec":     map[string]any{"tlsSANs": []any{"kept.example.com"}, "paused": true},
	}}
	if err := env.Client.Create(context.Background(), kept); err != nil {
		t.Fatalf("creating a Cluster with the previous CRD: %v", err)
	}

	// The CRD helm installed from crds/ carries no release ownership: a plain
	// upgrade refuses to take it over, and changes nothing.
	out, err := run("upgrade", "k3k", chartDir)
	if err == nil || !strings.Contains(out, "invalid ownership metadata") {
		t.Fatalf("a plain first upgrade: %v, want the ownership refusal", err)
	}
	if lacks, _ := crdLacks(t, env.Client); len(lacks) != len(newFields) {
		t.Fatalf("the refused upgrade changed the CRD (it lacks only %v)", lacks)
	}
	if _, err := run("upgrade", "k3k", chartDir, "--take-ownership"); err != nil {
		t.Fatal("the first upgrade with --take-ownership failed")
	}
	if got := chartOfRelease(); got != "k3k-"+meta.Version {
		t.Errorf("the release runs %s after the upgrade, want k3k-%s", got, meta.Version)
	}
	lacks, crd := crdLacks(t, env.Client)
	if len(lacks) != 0 {
		t.Fatalf("helm upgrade did not update the CRD: %v missing", lacks)
	}
	if crd.GetAnnotations()["meta.helm.sh/release-name"] != "k3k" || crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the CRD is not the release's, kept on uninstall: %v", crd.GetAnnotations())
	}
	installCRDsEstablished(t, env.Client)

	// The Cluster made before the upgrade is there, unchanged, and takes a
	// field of the new schema, stored rather than pruned (the API server
	// takes a moment to serve a changed schema, hence the retries).
	waitFor(t, "the Cluster from before the upgrade to store spec.ingresses", func() error {
		cl := &unstructured.Unstructured{}
		cl.SetGroupVersionKind(kept.GroupVersionKind())
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(kept), cl); err != nil {
			return err
		}
		if cl.GetUID() != kept.GetUID() {
			return fmt.Errorf("the Cluster was replaced (uid %s, was %s)", cl.GetUID(), kept.GetUID())
		}
		if sans, _, _ := unstructured.NestedStringSlice(cl.Object, "spec", "tlsSANs"); !slices.Equal(sans, []string{"kept.example.com"}) {
			return fmt.Errorf("spec.tlsSANs is %v after the upgrade", sans)
		}
		if err := unstructured.SetNestedField(cl.Object, true, "spec", "ingresses", "enabled"); err != nil {
			return err
		}
		if err := env.Client.Update(context.Background(), cl); err != nil {
			return err
		}
		if on, _, _ := unstructured.NestedBool(cl.Object, "spec", "ingresses", "enabled"); !on {
			return errors.New("spec.ingresses was pruned")
		}
		return nil
	})

	if _, err := run("upgrade", "k3k", chartDir); err != nil {
		t.Fatal("a later upgrade failed")
	}
	if _, err := run("uninstall", "k3k"); err != nil {
		t.Fatal("uninstall failed")
	}
	if lacks, _ := crdLacks(t, env.Client); len(lacks) != 0 {
		t.Errorf("the CRD is gone or changed after uninstall (lacks %v)", lacks)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(kept), kept); err != nil {
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
