package cli

import (
	"context"
	"testing"

	"github.com/k3k-io/k3k/api/v1beta1"
)

func TestRecoverRequestsTheRecoveryOfAnEtcdClusterOnly(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "ha", "-n", ns, "--servers", "3", "--datastore", "etcd", "--wait=false"); r.code != ExitOK {
		t.Fatalf("create: exit %d: %s", r.code, r.errOut)
	}
	if r := k3kcli(t, "cluster", "recover", "ha", "-n", ns); r.code != ExitOK {
		t.Fatalf("recover: exit %d: %s", r.code, r.errOut)
	}
	c := &v1beta1.Cluster{}
	if err := k8s.Get(context.Background(), keyOf(ns, "ha"), c); err != nil {
		t.Fatal(err)
	}
	if c.Annotations[v1beta1.AnnotationEtcdRecover] == "" {
		t.Fatalf("annotations %v, want the recovery request", c.Annotations)
	}

	if r := k3kcli(t, "cluster", "create", "single", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatalf("create: exit %d", r.code)
	}
	r := k3kcli(t, "cluster", "recover", "single", "-n", ns)
	if r.code != ExitUsage {
		t.Fatalf("recover of a sqlite cluster: exit %d, want %d", r.code, ExitUsage)
	}
	assertOneLineError(t, r.errOut, "does not run etcd members")
	if err := k8s.Get(context.Background(), keyOf(ns, "single"), c); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Annotations[v1beta1.AnnotationEtcdRecover]; ok {
		t.Fatal("a sqlite cluster was annotated")
	}
}
