package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshot"
)

func serverPod(name string, running, datastoreReady, deleting bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	if running {
		p.Status.Phase = corev1.PodRunning
	}
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "datastore", Ready: datastoreReady}}
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	}
	return p
}

func TestSnapshotSource(t *testing.T) {
	cases := []struct {
		name string
		pods []corev1.Pod
		want string
	}{
		{"no pod, no source", nil, ""},
		{"a pod whose datastore is not ready is not asked", []corev1.Pod{serverPod("k3k-c-server-0", true, false, false)}, ""},
		{"a pod that is not running is not asked", []corev1.Pod{serverPod("k3k-c-server-0", false, true, false)}, ""},
		{"a pod being deleted is not asked", []corev1.Pod{serverPod("k3k-c-server-0", true, true, true)}, ""},
		{"the lowest ready ordinal is asked, by number not by text", []corev1.Pod{
			serverPod("k3k-c-server-10", true, true, false), serverPod("k3k-c-server-2", true, true, false), serverPod("k3k-c-server-0", true, false, false),
		}, "k3k-c-server-2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := snapshotSource(tc.pods)
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tc.want {
				t.Fatalf("source %q, want %q", name, tc.want)
			}
		})
	}
}

func TestSidecarSnapshotCommand(t *testing.T) {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "ha"}}
	sqlite := SidecarSnapshotCommand(c, v1beta1.SQLiteDatastore, "k3k-ha-server-0")
	// The copy goes to the pod's emptyDir, never onto the data volume.
	if !slices.Contains(sqlite, "--tmp-dir="+layout.DatastorePodDir) || !slices.Contains(sqlite, "--data-dir="+layout.DatastoreDataDir) {
		t.Fatalf("sqlite command %v", sqlite)
	}
	etcd := strings.Join(SidecarSnapshotCommand(c, v1beta1.EtcdDatastore, "k3k-ha-server-1"), " ")
	for _, want := range []string{"snapshot etcd", "--endpoint=https://k3k-ha-server-1.k3k-ha-server-headless.tenants.svc:2379", "--dial-address=127.0.0.1:2379", "--key-file=" + layout.EtcdKeyPath} {
		if !strings.Contains(etcd, want) {
			t.Fatalf("etcd command %q lacks %q", etcd, want)
		}
	}
}

// TestWriteSnapshotFile: the file appears complete or not at all, mode 0600,
// and never replaces a file that is there.
func TestWriteSnapshotFile(t *testing.T) {
	data := bytes.Repeat([]byte("kine"), 10_000)
	var wire bytes.Buffer
	sw := snapshot.NewStreamWriter(&wire)
	if _, err := sw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := sw.Finish(snapshot.Manifest{Datastore: snapshot.SQLite, Revision: 9}); err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.ReadStream(&wire, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "c.snapshot")
	if err := writeSnapshotFile(path, m, []byte("token"), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file mode %v, want 0600", st.Mode().Perm())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got bytes.Buffer
	a, err := snapshot.ReadArchive(f, &got)
	if err != nil || !bytes.Equal(got.Bytes(), data) || string(a.Token) != "token" {
		t.Fatalf("read back: %v", err)
	}

	if err := writeSnapshotFile(path, m, []byte("other"), bytes.NewReader(data)); err == nil {
		t.Fatal("an existing snapshot file was replaced")
	}
	// A short data stream leaves nothing behind.
	short := filepath.Join(dir, "short.snapshot")
	if err := writeSnapshotFile(short, m, []byte("token"), bytes.NewReader(data[:100])); err == nil {
		t.Fatal("a snapshot file was written from short data")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("files left: %v", entries)
	}
}

// TestSnapshotRefusals: what cannot be snapshotted is refused with a reason,
// before anything is written.
func TestSnapshotRefusals(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	if r := k3kcli(t, "cluster", "create", "snap", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatalf("create: exit %d", r.code)
	}
	ext := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext"}}
	ext.Spec.Datastore.Type = v1beta1.ExternalDatastore
	ext.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "postgres://db.example:5432/k3s"}
	if err := k8s.Create(ctx, ext); err != nil {
		t.Fatal(err)
	}
	unresolved := filepath.Join(t.TempDir(), "unresolved")
	if r := k3kcli(t, "cluster", "snapshot", "snap", "-n", ns, "-o", unresolved); r.code != ExitError {
		t.Fatalf("a cluster the controller never saw: exit %d, want %d", r.code, ExitError)
	} else {
		assertOneLineError(t, r.errOut, "datastore type is not known yet")
	}
	// What the controller records on its first reconcile.
	snap := getCluster(t, ns, "snap")
	snap.Status.Datastore = &v1beta1.DatastoreStatus{Type: v1beta1.SQLiteDatastore}
	if err := k8s.Status().Update(ctx, snap); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	existing := filepath.Join(dir, "there")
	if err := os.WriteFile(existing, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "snap.snapshot")
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"-o is required", []string{"cluster", "snapshot", "snap", "-n", ns}, ExitUsage, "-o FILE is required"},
		{"a missing cluster is named", []string{"cluster", "snapshot", "nope", "-n", ns, "-o", out}, ExitError, `"nope" not found`},
		{"an external datastore is not k3k's to snapshot", []string{"cluster", "snapshot", "ext", "-n", ns, "-o", out}, ExitUsage, "its own tools"},
		{"a cluster without a running server has nothing to snapshot", []string{"cluster", "snapshot", "snap", "-n", ns, "-o", out}, ExitError, "no running server pod"},
		{"an existing file is never overwritten", []string{"cluster", "snapshot", "snap", "-n", ns, "-o", existing}, ExitUsage, "exists already"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := k3kcli(t, tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d", r.code, tc.code)
			}
			assertOneLineError(t, r.errOut, tc.want)
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Fatalf("a snapshot file was made: %v", err)
			}
		})
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep me" {
		t.Fatal("an existing file was touched")
	}
}
