package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestAMissingNamespaceHasItsOwnHint(t *testing.T) {
	ns := fmt.Sprintf("cli-missing-%d", time.Now().UnixNano()%1000000)
	r := k3kcli(t, "cluster", "create", "x", "-n", ns, "--wait=false")
	if r.code != ExitError {
		t.Fatalf("create: exit %d, want %d", r.code, ExitError)
	}
	assertOneLineError(t, r.errOut, fmt.Sprintf("namespace %q does not exist", ns), "hint: add --create-namespace")
	for _, args := range [][]string{
		{"kubeconfig", "get", "x", "-n", ns},
		{"cluster", "update", "x", "-n", ns, "--servers", "1"},
		{"cluster", "connect", "x", "-n", ns},
	} {
		r := k3kcli(t, args...)
		if r.code != ExitError {
			t.Errorf("%v: exit %d, want %d", args, r.code, ExitError)
		}
		assertOneLineError(t, r.errOut, fmt.Sprintf("namespace %q does not exist", ns), "hint: check -n")
	}
}

func TestCreateNamespace(t *testing.T) {
	ns := fmt.Sprintf("cli-new-%d", time.Now().UnixNano()%1000000)
	r := k3kcli(t, "cluster", "create", "x", "-n", ns, "--create-namespace", "--wait=false")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	if !strings.Contains(r.out, "namespace "+ns+" created") {
		t.Errorf("stdout does not say the namespace was created:\n%s", r.out)
	}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: ns}, &corev1.Namespace{}); err != nil {
		t.Fatalf("namespace: %v", err)
	}
	getCluster(t, ns, "x")
	// An existing namespace is used as it is.
	r = k3kcli(t, "cluster", "create", "y", "-n", ns, "--create-namespace", "--wait=false")
	if r.code != ExitOK || strings.Contains(r.out, "namespace "+ns+" created") {
		t.Fatalf("second create: exit %d, stdout %q", r.code, r.out)
	}
	getCluster(t, ns, "y")
}
