package cli

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/k3k-io/k3k/api/v1beta1"
)

func TestBadInputGetsOneClearLineAndChangesNothing(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name string
		args []string
		code int
		says []string
	}{
		{"a missing name", []string{"cluster", "create"}, ExitUsage, []string{"missing the cluster NAME", "hint: usage: k3kcli cluster create NAME"}},
		{"two names", []string{"cluster", "create", "a", "b"}, ExitUsage, []string{"expected one cluster NAME, got 2"}},
		{"a name that is no DNS label", []string{"cluster", "create", "Bad_Name"}, ExitUsage, []string{`invalid cluster name "Bad_Name"`, "hint: use lower-case letters"}},
		{"a name too long for the derived names", []string{"cluster", "create", strings.Repeat("a", 42)}, ExitUsage, []string{"too long", "at most 41 characters"}},
		{"several servers on sqlite", []string{"cluster", "create", "x", "--servers", "3"}, ExitUsage, []string{"--servers 3 needs the etcd datastore", "hint: add --datastore etcd"}},
		{"an even number of etcd servers", []string{"cluster", "create", "x", "--servers", "2", "--datastore", "etcd"}, ExitUsage, []string{"odd number"}},
		{"an unknown datastore", []string{"cluster", "create", "x", "--datastore", "mysql"}, ExitUsage, []string{`--datastore "mysql" is not a datastore type`, "hint: use sqlite or etcd"}},
		{"an unknown persistence type", []string{"cluster", "create", "x", "--persistence-type", "disk"}, ExitUsage, []string{"hint: use dynamic or ephemeral"}},
		{"a size that is no quantity", []string{"cluster", "create", "x", "--storage-size", "lots"}, ExitUsage, []string{`--storage-size "lots" is not a positive quantity`}},
		{"storage settings without volumes", []string{"cluster", "create", "x", "--persistence-type", "ephemeral", "--storage-size", "1Gi"}, ExitUsage, []string{"ephemeral has none"}},
		{"a version that is no tag", []string{"cluster", "create", "x", "--version", "v1.34 latest"}, ExitUsage, []string{"is not an image tag"}},
		{"a node port outside the range", []string{"cluster", "create", "x", "--expose", "nodeport:80"}, ExitUsage, []string{"must be a number from 30000 to 32767"}},
		{"an ingress without host", []string{"cluster", "create", "x", "--expose", "ingress"}, ExitUsage, []string{"needs a host name"}},
		{"an unknown exposure", []string{"cluster", "create", "x", "--expose", "tunnel"}, ExitUsage, []string{`--expose "tunnel" is not a way`}},
		{"a number flag given a word", []string{"cluster", "create", "x", "--servers", "three"}, ExitUsage, []string{"invalid argument", "hint: run with --help"}},
		{"an unknown flag", []string{"cluster", "create", "x", "--replicas", "3"}, ExitUsage, []string{"unknown flag: --replicas"}},
		{"an unknown command", []string{"clusters"}, ExitUsage, []string{`unknown command "clusters"`}},
		{"an unknown output format", []string{"cluster", "list", "-o", "xml"}, ExitUsage, []string{`--output "xml"`, "hint: use -o wide, -o name, -o json, -o yaml"}},
		{"a zero timeout", []string{"cluster", "create", "x", "--timeout", "0s"}, ExitUsage, []string{"--timeout must be positive"}},
		{"a flag the API server owns, rejected at admission", []string{"cluster", "create", "x", "--wait=false", "--server-args=--token=abc"}, ExitUsage,
			[]string{"creating cluster", "serverArgs: --token is set by k3k and cannot be overridden", "hint: fix the rejected value"}},
		{"a kubeconfig that does not exist", []string{"cluster", "list", "--kubeconfig", "/nonexistent/kubeconfig"}, ExitError, []string{"loading the host cluster's kubeconfig", "hint: check --kubeconfig"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := k3kcli(t, append(tc.args, "-n", ns)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d", r.code, tc.code)
			}
			if strings.Count(r.errOut, "\n") != 1 {
				t.Errorf("stderr is not exactly one line: %q", r.errOut)
			}
			assertOneLineError(t, r.errOut, tc.says...)
		})
	}
	list := &v1beta1.ClusterList{}
	if err := k8s.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Items {
		if c.Namespace == ns {
			t.Errorf("bad input created cluster %s", c.Name)
		}
	}
	if err := k8s.Get(context.Background(), keyOf(ns, "x"), &v1beta1.Cluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster x exists: %v", err)
	}
}

func TestCreatingAnExistingClusterSaysWhatToDoInstead(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "twice", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatal("first create failed")
	}
	r := k3kcli(t, "cluster", "create", "twice", "-n", ns, "--wait=false")
	if r.code != ExitError {
		t.Fatalf("exit %d, want %d", r.code, ExitError)
	}
	assertOneLineError(t, r.errOut, "already exists", "hint: choose another name")
}
