package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshot"
)

// snapshotFile writes a valid snapshot file of a few bytes of data.
func snapshotFile(t *testing.T) string {
	t.Helper()
	data := bytes.Repeat([]byte("data"), 100)
	var wire bytes.Buffer
	sw := snapshot.NewStreamWriter(&wire)
	if _, err := sw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := sw.Finish(snapshot.Manifest{Datastore: snapshot.SQLite, Revision: 3}); err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.ReadStream(&wire, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "c.snapshot")
	if err := writeSnapshotFile(path, m, []byte("tok"), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRestoreFromRefusals: a file that is not a snapshot, or a name whose
// volumes are still there, is refused before any Cluster is created.
func TestRestoreFromRefusals(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte("not a tar"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := snapshotFile(t)
	damaged := filepath.Join(t.TempDir(), "damaged")
	b, _ := os.ReadFile(good)
	i := bytes.Index(b, []byte("datadata"))
	b[i] ^= 1
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-k3k-old-server-0", Labels: map[string]string{v1beta1.LabelCluster: "old"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := k8s.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, cluster, file, want string
	}{
		{"a missing file", "a", filepath.Join(t.TempDir(), "nope"), "no such file"},
		{"a file that is not a snapshot", "b", garbage, "not a usable snapshot"},
		{"a snapshot whose data does not match its manifest", "c", damaged, "sha256"},
		{"a name whose volumes are kept", "old", good, "volumes of an earlier cluster"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := k3kcli(t, "cluster", "create", tc.cluster, "-n", ns, "--restore-from", tc.file)
			if r.code != ExitUsage {
				t.Fatalf("exit %d, want %d", r.code, ExitUsage)
			}
			assertOneLineError(t, r.errOut, tc.want)
			if err := k8s.Get(ctx, keyOf(ns, tc.cluster), &v1beta1.Cluster{}); !apierrors.IsNotFound(err) {
				t.Fatalf("a Cluster was created: %v", err)
			}
		})
	}
}

// TestRestoreFromMarksTheClusterAndWaitsForItsDatastore: a good file makes a
// Cluster annotated restore-pending (so the controller mints no token), then
// waits for the first server's datastore; with no server here it times out
// saying so, and writes no token.
func TestRestoreFromMarksTheClusterAndWaitsForItsDatastore(t *testing.T) {
	ns := newNamespace(t)
	r := k3kcli(t, "cluster", "create", "fresh", "-n", ns, "--restore-from", snapshotFile(t), "--timeout", "1s")
	if r.code != ExitTimeout {
		t.Fatalf("exit %d, want %d", r.code, ExitTimeout)
	}
	assertOneLineError(t, r.errOut, "not restored", "datastore of k3k-fresh-server-0 was not ready")
	c := getCluster(t, ns, "fresh")
	if _, ok := c.Annotations[v1beta1.AnnotationRestorePending]; !ok {
		t.Fatalf("annotations %v lack %s", c.Annotations, v1beta1.AnnotationRestorePending)
	}
	if err := k8s.Get(context.Background(), keyOf(ns, "k3k-fresh-token"), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a token Secret was written before the data: %v", err)
	}
}

func TestSidecarRestoreCommand(t *testing.T) {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "ha"}}
	if got := SidecarRestoreCommand(c, v1beta1.SQLiteDatastore, "k3k-ha-server-0"); !slices.Contains(got, "--tmp-dir="+layout.DatastorePodDir) || !slices.Contains(got, "--endpoint=http://127.0.0.1:2379") {
		t.Fatalf("sqlite command %v", got)
	}
	etcd := strings.Join(SidecarRestoreCommand(c, v1beta1.EtcdDatastore, "k3k-ha-server-0"), " ")
	for _, want := range []string{"--endpoint=https://k3k-ha-server-0.k3k-ha-server-headless.tenants.svc:2379", "--dial-address=127.0.0.1:2379", "--tmp-dir=" + layout.EtcdDataDir} {
		if !strings.Contains(etcd, want) {
			t.Fatalf("etcd command %q lacks %q", etcd, want)
		}
	}
}
