package charttest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/internal/testenv"
)

// The suite runs the helm binary built from go.mod's tool directive and one
// kube-apiserver with etcd (envtest, binaries built from source). The chart's
// CRD is installed by the tests themselves, from the chart.
var (
	helmBin  string
	helmHome string
	// kubeconfigPath is an admin kubeconfig of the test API server, for helm.
	kubeconfigPath string
	restConfig     *rest.Config
	scheme         *runtime.Scheme
	k8s            client.Client
	chartDir       = filepath.Join("..", "..", "charts", "k3k")
	crdDir         = filepath.Join(chartDir, "crds")
)

// release and releaseNS are the release every test renders.
const (
	release   = "k3k"
	releaseNS = "k3k-system"
	// agentRole is the agent ClusterRole the chart renders for release.
	agentRole = "k3k-agent"
	// backupExecRole is the ClusterRole the backup Jobs are bound to.
	backupExecRole = "k3k-backup-exec"
	// kubeVersion is what helm checks the chart's kubeVersion against: the
	// version of the test kube-apiserver (k3s's Kubernetes, hack/k3s.sh). A helm
	// built from its module without release ldflags would otherwise assume v1.20.
	kubeVersion = "v1.34.3+k3s1"
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	var err error
	if helmBin, err = testenv.Binary("helm"); err != nil {
		fmt.Fprintln(os.Stderr, "chart tests need helm:", err, "(make helm builds just helm)")
		return 1
	}
	// helm keeps caches and its config under these; keep them out of $HOME.
	if helmHome, err = os.MkdirTemp("", "k3k-charttest-helm-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(helmHome)

	env, err := testenv.StartEnvtest()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	restConfig, scheme, k8s = env.Config, env.Scheme, env.Client
	kc, err := env.AdminKubeconfig("helm-admin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kubeconfigPath = filepath.Join(helmHome, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kc, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// helm runs the helm binary; stderr is returned for the tests that check it.
func helm(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(helmBin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(helmHome, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(helmHome, "config"),
		"HELM_DATA_HOME="+filepath.Join(helmHome, "data"),
	)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// valueSets are the value files the chart is rendered with; "" is the chart's
// own defaults.
var valueSets = []string{"", "registry.yaml", "watch-namespaces.yaml", "defaults.yaml", "scheduling.yaml", "images.yaml", "observability.yaml", "agent.yaml"}

// templateArgs are the arguments of `helm template` for one value set.
func templateArgs(valuesFile string, extra ...string) []string {
	args := []string{"template", release, chartDir, "--namespace", releaseNS, "--kube-version", kubeVersion}
	if valuesFile != "" {
		args = append(args, "--values", filepath.Join("testdata", "values", valuesFile))
	}
	return append(args, extra...)
}

// render runs helm template and decodes every manifest.
func render(t *testing.T, valuesFile string, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	out, stderr, err := helm(templateArgs(valuesFile, extra...)...)
	if err != nil {
		t.Fatalf("helm template with %q: %v\n%s", valuesFile, err, stderr)
	}
	objs, err := decode(out)
	if err != nil {
		t.Fatalf("decoding the rendered manifests: %v", err)
	}
	return objs
}

// decode splits a multi-document YAML stream into objects, dropping empty ones.
func decode(manifests string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// find returns the rendered object of that kind, namespace and name, or nil.
func find(objs []*unstructured.Unstructured, kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	return nil
}

func kinds(objs []*unstructured.Unstructured) map[string]int {
	n := map[string]int{}
	for _, o := range objs {
		n[o.GetKind()]++
	}
	return n
}

// deployment is the controller Deployment, typed.
func deployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	u := find(objs, "Deployment", releaseNS, release)
	if u == nil {
		t.Fatalf("no Deployment %s/%s rendered; kinds: %v", releaseNS, release, kinds(objs))
	}
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, d, true); err != nil {
		t.Fatalf("the Deployment has unknown fields: %v", err)
	}
	return d
}
