package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestK3kcliLinksNeitherTheReconcilerNorAnEtcdClient keeps k3kcli a client of
// the host API: it once linked the whole reconciler and, through it, the etcd
// client and gRPC (942 packages when issue 20 was filed, 795 after the names
// and the snapshot loader moved out). A new import that brings them back fails
// here rather than going unnoticed.
func TestK3kcliLinksNeitherTheReconcilerNorAnEtcdClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"github.com/k3k-io/k3k/internal/controller/",
		"go.etcd.io/etcd/client/",
		"go.etcd.io/etcd/server/",
		"google.golang.org/grpc",
	}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		for _, prefix := range forbidden {
			if strings.HasPrefix(dep, prefix) {
				t.Errorf("k3kcli links %s (no package under %s may be linked)", dep, prefix)
			}
		}
	}
	t.Logf("k3kcli links %d packages", len(deps))
}
