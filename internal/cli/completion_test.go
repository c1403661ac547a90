package cli

import (
	"slices"
	"strings"
	"testing"
)

// completions runs cobra's hidden __complete command, which the generated
// shell scripts call, and returns the candidates it prints.
func completions(t *testing.T, args ...string) []string {
	t.Helper()
	r := k3kcli(t, append([]string{"__complete"}, args...)...)
	if r.code != ExitOK {
		t.Fatalf("__complete %v: exit %d: %s", args, r.code, r.errOut)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		if line != "" && !strings.HasPrefix(line, ":") {
			out = append(out, strings.SplitN(line, "\t", 2)[0])
		}
	}
	return out
}

func TestShellCompletionOffersClustersNamespacesAndValues(t *testing.T) {
	ns := newNamespace(t)
	for _, name := range []string{"alpha", "beta", "alps"} {
		if r := k3kcli(t, "cluster", "create", name, "-n", ns, "--wait=false"); r.code != ExitOK {
			t.Fatal("create failed")
		}
	}
	if got := completions(t, "-n", ns, "cluster", "delete", "al"); !slices.Equal(got, []string{"alpha", "alps"}) {
		t.Errorf("cluster names for delete: %v", got)
	}
	if got := completions(t, "-n", ns, "kubeconfig", "get", ""); len(got) != 3 {
		t.Errorf("cluster names for kubeconfig get: %v", got)
	}
	if got := completions(t, "-n", ns, "cluster", "create", ""); len(got) != 0 {
		t.Errorf("create offers existing names for a new cluster: %v", got)
	}
	if got := completions(t, "cluster", "list", "-n", ns[:len(ns)-1]); !slices.Contains(got, ns) {
		t.Errorf("namespaces: %v lacks %s", got, ns)
	}
	if got := completions(t, "cluster", "create", "x", "--datastore", ""); !slices.Equal(got, []string{"sqlite", "etcd"}) {
		t.Errorf("--datastore values: %v", got)
	}
	if got := completions(t, "cluster", "list", "-o", ""); !slices.Contains(got, "wide") || !slices.Contains(got, "jsonpath=") {
		t.Errorf("-o values: %v", got)
	}
}
