package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// inPlaceCluster makes a sqlite Cluster named name whose token Secret holds
// token, as the controller would have left it (no controller runs here).
func inPlaceCluster(t *testing.T, ns, name, token string, mutate func(*v1beta1.Cluster)) *v1beta1.Cluster {
	t.Helper()
	ctx := context.Background()
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	c.Spec.Datastore.Type = v1beta1.SQLiteDatastore
	if mutate != nil {
		mutate(c)
	}
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: layout.NamesFor(c).Token},
		Data: map[string][]byte{layout.SecretKeyToken: []byte(token)}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeServerPod makes server pod ordinal 0 of c (no kubelet runs here);
// ready sets its status as a started pod whose datastore is ready and whose
// k3s waits.
func fakeServerPod(t *testing.T, c *v1beta1.Cluster, ready bool) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: layout.ServerPodName(c, 0),
		Labels: map[string]string{v1beta1.LabelCluster: c.Name, v1beta1.LabelComponent: v1beta1.ComponentServer}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "k3s", Image: "k3s"}}}}
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if ready {
		p.Status.Phase = corev1.PodRunning
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "datastore", Ready: true}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "k3s", Ready: false}}
		if err := k8s.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func tokenSecret(t *testing.T, c *v1beta1.Cluster) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8s.Get(context.Background(), keyOf(c.Namespace, layout.NamesFor(c).Token), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRestoreInPlaceRefusals: what cannot or should not be restored in
// place is refused with a reason before anything changes: no annotation,
// the token where it was.
func TestRestoreInPlaceRefusals(t *testing.T) {
	ns := newNamespace(t)
	good := snapshotFile(t) // its token is "tok"
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte("not a tar"), 0o600); err != nil {
		t.Fatal(err)
	}
	inPlaceCluster(t, ns, "plain", "tok", nil)
	inPlaceCluster(t, ns, "other", "another-token", nil)
	inPlaceCluster(t, ns, "paused", "tok", func(c *v1beta1.Cluster) { c.Spec.Paused = true })
	inPlaceCluster(t, ns, "ext", "tok", func(c *v1beta1.Cluster) {
		c.Spec.Datastore.Type = v1beta1.ExternalDatastore
		c.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "postgres://db.example:5432/k3s"}
	})
	inPlaceCluster(t, ns, "ephemeral", "tok", func(c *v1beta1.Cluster) { c.Spec.Persistence.Type = v1beta1.EphemeralPersistence })
	inPlaceCluster(t, ns, "creating", "", func(c *v1beta1.Cluster) {
		c.Annotations = map[string]string{v1beta1.AnnotationRestorePending: "0123456789abcdef"}
	})
	cases := []struct {
		name, cluster string
		args          []string
		code          int
		want          []string
	}{
		{"without --from", "plain", nil, ExitUsage, []string{"--from FILE is required"}},
		{"a cluster that does not exist", "nope", []string{"--from", good, "--yes"}, ExitError, []string{"nope"}},
		{"a file that is not a snapshot", "plain", []string{"--from", garbage, "--yes"}, ExitUsage, []string{"not a usable snapshot"}},
		{"a missing file", "plain", []string{"--from", filepath.Join(t.TempDir(), "nope"), "--yes"}, ExitUsage, []string{"no such file"}},
		{"an external datastore", "ext", []string{"--from", good, "--yes"}, ExitUsage, []string{"external datastore", "sqlite and etcd"}},
		{"a cluster whose data is in emptyDirs", "ephemeral", []string{"--from", good, "--yes"}, ExitUsage, []string{"persistence ephemeral"}},
		{"a paused cluster", "paused", []string{"--from", good, "--yes"}, ExitUsage, []string{"paused"}},
		{"a snapshot of another cluster's token", "other", []string{"--from", good, "--yes"}, ExitUsage, []string{"another cluster", "create NAME --restore-from"}},
		{"a cluster being created from a snapshot", "creating", []string{"--from", good, "--yes"}, ExitUsage, []string{"being created from a snapshot"}},
		{"no confirmation (nothing to read it from)", "plain", []string{"--from", good}, ExitUsage, []string{"not confirmed", "--yes"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := k3kcli(t, append([]string{"cluster", "restore", tc.cluster, "-n", ns}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d", r.code, tc.code)
			}
			assertOneLineError(t, r.errOut, tc.want...)
			c := &v1beta1.Cluster{}
			if err := k8s.Get(context.Background(), keyOf(ns, tc.cluster), c); apierrors.IsNotFound(err) {
				return
			} else if err != nil {
				t.Fatal(err)
			}
			if v := c.Annotations[v1beta1.AnnotationRestorePending]; strings.HasPrefix(v, inPlacePrefix) {
				t.Fatalf("the refused restore annotated the cluster: %q", v)
			}
			if s := tokenSecret(t, c); s.Annotations[v1beta1.AnnotationRestorePending] != "" || len(s.Data[tokenBeforeRestoreKey]) != 0 {
				t.Fatalf("the refused restore marked the token Secret: %v", s.Annotations)
			}
		})
	}
}

// TestRestoreInPlaceAsksFirst: without --yes the answer on stdin decides.
func TestRestoreInPlaceAsksFirst(t *testing.T) {
	ns := newNamespace(t)
	inPlaceCluster(t, ns, "ask", "tok", nil)
	good := snapshotFile(t)
	for _, answer := range []string{"n\n", "", "maybe\n"} {
		var errOut syncBuffer
		o := cliOptions(&strings.Builder{}, &errOut, nil)
		o.In = strings.NewReader(answer)
		code := Run(context.Background(), o, []string{"--kubeconfig", kubeconfigPath, "cluster", "restore", "ask", "-n", ns, "--from", good})
		if code != ExitUsage || !strings.Contains(errOut.String(), "Restore? [y/N]") || !strings.Contains(errOut.String(), "not confirmed") {
			t.Fatalf("answer %q: exit %d, stderr %q", answer, code, errOut.String())
		}
	}
	if got := getCluster(t, ns, "ask").Annotations[v1beta1.AnnotationRestorePending]; got != "" {
		t.Fatalf("a restore not confirmed annotated the cluster: %q", got)
	}
}

// TestRestoreInPlaceStopsTheServersAndCanBeRunAgain: a confirmed restore
// marks the Cluster and the token Secret (the token kept under
// token-before-restore, the server pods recorded), deletes the server pod so
// that k3s stops, and, with no StatefulSet here to make it again, times out
// saying what it waits for and how to finish. Run again it keeps the marks
// and the token; once a new pod with a ready datastore is there it goes on
// to load the snapshot into it, which fails here (no kubelet) saying that
// the servers are stopped and that running it again finishes the job.
func TestRestoreInPlaceStopsTheServersAndCanBeRunAgain(t *testing.T) {
	ns := newNamespace(t)
	c := inPlaceCluster(t, ns, "live", "tok", nil)
	old := fakeServerPod(t, c, false)
	good := snapshotFile(t)
	r := k3kcli(t, "cluster", "restore", "live", "-n", ns, "--from", good, "--yes", "--timeout", "2s")
	if r.code != ExitTimeout {
		t.Fatalf("exit %d, want %d", r.code, ExitTimeout)
	}
	assertOneLineError(t, r.errOut, "not restored", "server pod k3k-live-server-0 to be made again", "run the same k3kcli cluster restore again")
	if !strings.Contains(r.errOut, "deleted server pod k3k-live-server-0") {
		t.Fatalf("stderr does not say the server pod was deleted: %s", r.errOut)
	}
	check := func() {
		t.Helper()
		if v := getCluster(t, ns, "live").Annotations[v1beta1.AnnotationRestorePending]; !strings.HasPrefix(v, inPlacePrefix) {
			t.Fatalf("cluster annotation %q, want %s…", v, inPlacePrefix)
		}
		s := tokenSecret(t, c)
		if s.Annotations[v1beta1.AnnotationRestorePending] != string(old.UID) {
			t.Fatalf("token Secret mark %q, want the old pod's UID %s", s.Annotations[v1beta1.AnnotationRestorePending], old.UID)
		}
		if len(s.Data[layout.SecretKeyToken]) != 0 || string(s.Data[tokenBeforeRestoreKey]) != "tok" {
			t.Fatalf("token Secret data keys %v: want the token moved to %s", slices.Sorted(func(yield func(string) bool) {
				for k := range s.Data {
					if !yield(k) {
						return
					}
				}
			}), tokenBeforeRestoreKey)
		}
	}
	check()
	if err := k8s.Get(context.Background(), keyOf(ns, old.Name), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the server pod was not deleted: %v", err)
	}

	// Run again, as the error says: the same marks, nothing lost.
	r = k3kcli(t, "cluster", "restore", "live", "-n", ns, "--from", good, "--yes", "--timeout", "2s")
	if r.code != ExitTimeout {
		t.Fatalf("second run: exit %d, want %d", r.code, ExitTimeout)
	}
	check()

	// What the StatefulSet would do: a new pod, its datastore ready, k3s
	// waiting. It is not deleted; the snapshot goes to it.
	fresh := fakeServerPod(t, c, true)
	r = k3kcli(t, "cluster", "restore", "live", "-n", ns, "--from", good, "--yes", "--timeout", "20s")
	if r.code != ExitError {
		t.Fatalf("third run: exit %d, want %d", r.code, ExitError)
	}
	assertOneLineError(t, r.errOut, "loading the snapshot in pod "+ns+"/k3k-live-server-0", "run the same k3kcli cluster restore again")
	live := &corev1.Pod{}
	if err := k8s.Get(context.Background(), keyOf(ns, fresh.Name), live); err != nil || live.UID != fresh.UID || live.DeletionTimestamp != nil {
		t.Fatalf("the pod made after the mark was deleted: %v", err)
	}
	check()
}

func TestSidecarReplaceCommand(t *testing.T) {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "ha"}}
	sqlite := SidecarReplaceCommand(c, v1beta1.SQLiteDatastore, "k3k-ha-server-0")
	if !slices.Contains(sqlite, "--replace") || !slices.Contains(sqlite, "--sqlite-data-dir="+layout.DatastoreDataDir) {
		t.Fatalf("sqlite command %v", sqlite)
	}
	etcd := SidecarReplaceCommand(c, v1beta1.EtcdDatastore, "k3k-ha-server-0")
	if !slices.Contains(etcd, "--replace") || slices.ContainsFunc(etcd, func(s string) bool { return strings.HasPrefix(s, "--sqlite-data-dir") }) {
		t.Fatalf("etcd command %v", etcd)
	}
}

func TestServersStopped(t *testing.T) {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	pod := func(name, uid string, datastoreReady, k3sReady bool) corev1.Pod {
		p := serverPod(name, true, datastoreReady, false)
		p.UID = types.UID(uid)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "k3s", Ready: k3sReady}}
		return p
	}
	old := map[string]bool{"old-0": true, "old-1": true}
	cases := []struct {
		name    string
		pods    []corev1.Pod
		servers int32
		want    string // the pod returned, else what is waited for
	}{
		{"a pod that was there at the mark is waited out", []corev1.Pod{pod("k3k-c-server-0", "old-0", true, false)}, 1, "server pod k3k-c-server-0 to be made again"},
		{"a missing pod is waited for", nil, 1, "server pod k3k-c-server-0 to be made again"},
		{"a new pod whose k3s is ready is waited out", []corev1.Pod{pod("k3k-c-server-0", "new-0", true, true)}, 1, "k3s in k3k-c-server-0 to stop"},
		{"a new pod whose datastore is not ready is waited for", []corev1.Pod{pod("k3k-c-server-0", "new-0", false, false)}, 1, "the datastore of k3k-c-server-0 to be ready"},
		{"every server counts, not only the first", []corev1.Pod{pod("k3k-c-server-0", "new-0", true, false), pod("k3k-c-server-1", "old-1", true, false), pod("k3k-c-server-2", "new-2", true, false)}, 3, "server pod k3k-c-server-1 to be made again"},
		{"all new, k3s waiting, datastore ready: server 0 gets the snapshot", []corev1.Pod{pod("k3k-c-server-1", "new-1", false, false), pod("k3k-c-server-0", "new-0", true, false)}, 2, "k3k-c-server-0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, waiting := ServersStopped(c, tc.pods, tc.servers, old)
			if got != nil {
				waiting = got.Name
			}
			if waiting != tc.want {
				t.Fatalf("ServersStopped = %q, want %q", waiting, tc.want)
			}
		})
	}
	stop := ServersToStop([]corev1.Pod{pod("k3k-c-server-0", "old-0", true, true), pod("k3k-c-server-1", "new-1", true, false)}, old)
	if len(stop) != 1 || stop[0].Name != "k3k-c-server-0" {
		t.Fatalf("ServersToStop = %v, want only the pod that was there at the mark", stop)
	}
}
