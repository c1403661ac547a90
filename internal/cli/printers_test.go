package cli

import (
	"strings"
	"testing"
)

func TestListOutputFormatsFromCliRuntime(t *testing.T) {
	ns := newNamespace(t)
	for _, name := range []string{"b", "a"} {
		if r := k3kcli(t, "cluster", "create", name, "-n", ns, "--wait=false", "--version", "v1.34.3-k3s1"); r.code != ExitOK {
			t.Fatalf("create %s failed", name)
		}
	}
	cases := []struct {
		output string
		want   string
	}{
		{"name", "cluster.k3k.io/a\ncluster.k3k.io/b\n"},
		{"jsonpath={.items[*].metadata.name}", "a b"},
		{"jsonpath={range .items[*]}{.metadata.name}={.spec.servers}{\"\\n\"}{end}", "a=1\nb=1\n"},
	}
	for _, tc := range cases {
		r := k3kcli(t, "cluster", "list", "-n", ns, "-o", tc.output)
		if r.code != ExitOK || r.out != tc.want {
			t.Errorf("-o %s: exit %d, stdout %q, want %q", tc.output, r.code, r.out, tc.want)
		}
	}

	// The table's columns are the CRD's printer columns; wide adds the ones
	// of priority 1.
	r := k3kcli(t, "cluster", "list", "-n", ns)
	header := strings.Fields(strings.SplitN(r.out, "\n", 2)[0])
	if strings.Join(header, " ") != "NAME MODE READY SERVERS DATASTORE PHASE AGE" {
		t.Errorf("table header %v", header)
	}
	r = k3kcli(t, "cluster", "list", "-n", ns, "-o", "wide")
	header = strings.Fields(strings.SplitN(r.out, "\n", 2)[0])
	if strings.Join(header, " ") != "NAME MODE READY SERVERS DATASTORE PHASE VERSION PERSISTENCE ENDPOINT POLICY AGE" {
		t.Errorf("wide header %v", header)
	}
	if !strings.Contains(r.out, "v1.34.3-k3s1") {
		t.Errorf("wide output lacks the version:\n%s", r.out)
	}
	r = k3kcli(t, "cluster", "list", "-A")
	if !strings.HasPrefix(r.out, "NAMESPACE") || !strings.Contains(r.out, ns) {
		t.Errorf("-A has no namespace column:\n%s", r.out)
	}

	for _, bad := range []string{"table2", "jsonpath={.items[", "go-template"} {
		r := k3kcli(t, "cluster", "list", "-n", ns, "-o", bad)
		if r.code != ExitUsage {
			t.Errorf("-o %s: exit %d, want %d", bad, r.code, ExitUsage)
		}
		assertOneLineError(t, r.errOut)
	}
}
