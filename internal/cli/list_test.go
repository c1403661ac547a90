package cli

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/k3k-io/k3k/api/v1beta1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run go test -run %s -update to create it): %v", t.Name(), err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (rerun with -update if the change is intended)\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestListPrintsATableOfClusters(t *testing.T) {
	ns := createNamespace(t, "golden-list")
	for _, args := range [][]string{
		{"web", "--persistence-type", "ephemeral"},
		{"ha", "--servers", "3", "--datastore", "etcd"},
		{"api"},
	} {
		if r := k3kcli(t, append([]string{"cluster", "create", "-n", ns, "--wait=false"}, args...)...); r.code != ExitOK {
			t.Fatalf("create %v: exit %d", args, r.code)
		}
	}
	// What the controller would report for two of them; "web" has no status yet.
	api := getCluster(t, ns, "api")
	api.Status.ReadyServers = 1
	api.Status.Datastore = &v1beta1.DatastoreStatus{Type: v1beta1.SQLiteDatastore}
	setStatus(t, api, v1beta1.PhaseReady, metav1.Condition{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonReady})
	ha := getCluster(t, ns, "ha")
	ha.Status.ReadyServers = 2
	ha.Status.Datastore = &v1beta1.DatastoreStatus{Type: v1beta1.EtcdDatastore}
	setStatus(t, ha, v1beta1.PhaseProvisioning, metav1.Condition{Type: v1beta1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1beta1.ReasonNotReady})

	// Ages are measured from a clock three days after the newest cluster.
	var newest time.Time
	for _, name := range []string{"web", "ha", "api"} {
		if c := getCluster(t, ns, name); c.CreationTimestamp.After(newest) {
			newest = c.CreationTimestamp.Time
		}
	}
	now := func() time.Time { return newest.Add(72 * time.Hour) }

	r := k3kcliWith(t, now, "cluster", "list", "-n", ns)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	golden(t, "list.golden", r.out)

	r = k3kcliWith(t, now, "cluster", "list", "-A")
	if r.code != ExitOK || !strings.Contains(r.out, "golden-list") {
		t.Errorf("list -A does not show the clusters of namespace golden-list: exit %d\n%s", r.code, r.out)
	}

	for _, format := range []string{"json", "yaml"} {
		r := k3kcli(t, "cluster", "list", "-n", ns, "-o", format)
		if r.code != ExitOK {
			t.Fatalf("-o %s: exit %d", format, r.code)
		}
		var list v1beta1.ClusterList
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(r.out), &list)
		} else {
			err = yaml.UnmarshalStrict([]byte(r.out), &list)
		}
		if err != nil {
			t.Fatalf("-o %s output does not parse as a ClusterList: %v", format, err)
		}
		if list.Kind != "ClusterList" || list.APIVersion != "k3k.io/v1beta1" || len(list.Items) != 3 || list.Items[0].Name != "api" || list.Items[0].Kind != "Cluster" {
			t.Errorf("-o %s: unexpected list %s/%s with %d items", format, list.APIVersion, list.Kind, len(list.Items))
		}
		if strings.Contains(r.out, "managedFields") {
			t.Errorf("-o %s prints managed fields", format)
		}
	}
}

func TestListSaysSoWhenThereAreNoClusters(t *testing.T) {
	ns := newNamespace(t)
	r := k3kcli(t, "cluster", "list", "-n", ns)
	if r.code != ExitOK || r.out != "" || !strings.Contains(r.errOut, "no clusters found in namespace "+ns) {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.out, r.errOut)
	}
}

// The CLI's own clock must not leak into a test through the list: a cluster
// created just now is listed with an age in seconds.
func TestListAgeUsesTheInjectedClock(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "young", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatal("create failed")
	}
	c := getCluster(t, ns, "young")
	r := k3kcliWith(t, func() time.Time { return c.CreationTimestamp.Add(90 * time.Second) }, "cluster", "list", "-n", ns)
	if !strings.Contains(r.out, "90s") {
		t.Errorf("age column does not say 90s:\n%s", r.out)
	}
	_ = context.Background()
}
