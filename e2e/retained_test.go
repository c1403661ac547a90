//go:build e2e

package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
	_ "modernc.org/sqlite" // reads the snapshot's SQLite database

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/k3k-io/k3k/pkg/snapshot"
)

// retainedObjects is how many ConfigMaps the retained-volume scenarios write
// before deleting the cluster with --keep-data.
const retainedObjects = 100

// TestRetainedVolumesComeBackSQLite is `k3kcli cluster delete --keep-data`,
// then `k3kcli cluster create` with the same name, on the SQLite datastore.
func TestRetainedVolumesComeBackSQLite(t *testing.T) {
	t.Parallel()
	retainedVolumesComeBack(t, "kept", 1, "--datastore", "sqlite", "--persistence-type", "dynamic")
}

// TestRetainedVolumesComeBackEtcd is the same with three etcd servers.
func TestRetainedVolumesComeBackEtcd(t *testing.T) {
	t.Parallel()
	retainedVolumesComeBack(t, "kept-ha", 3, "--servers", "3", "--datastore", "etcd", "--timeout", "15m")
}

// retainedVolumesComeBack writes objects, counts them, deletes the cluster
// keeping its volumes, creates it again with the same name and flags and
// counts again: the same objects, unchanged (same resourceVersion and
// content), served with the original token, and the cluster is writable.
func retainedVolumesComeBack(t *testing.T, name string, servers int, flags ...string) {
	v := createCluster(t, name, flags...)
	w := workload{namespace: name + "-data"}
	w.create(t, v.client)
	for i := range retainedObjects {
		if err := retry(func(ctx context.Context) error {
			_, err := v.client.CoreV1().ConfigMaps(w.namespace).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("object-%03d", i), Labels: map[string]string{"e2e": "kept"}},
				Data:       map[string]string{"value": fmt.Sprintf("%s-%d", name, i)},
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}); err != nil {
			t.Fatalf("writing object %d: %v", i, err)
		}
	}
	before := keptObjects(t, v.client)
	if len(before) != retainedObjects {
		t.Fatalf("counted %d objects before the deletion, wrote %d", len(before), retainedObjects)
	}
	token := secretData(t, v, v.tokenSecret())

	// A snapshot while the cluster serves, through the host API's pods/exec.
	file := filepath.Join(cfg.workDir, name+".snapshot")
	k3kcli(t, "cluster", "snapshot", name, "-n", v.namespace, "-o", file)
	m, inSnapshot := snapshotObjects(t, file, w.namespace)
	t.Logf("snapshot: %s, revision %d, %d bytes, k3s %s, from %s; holds %d of the %d objects", m.Datastore, m.Revision, m.Size, m.K3sVersion, m.Source, inSnapshot, retainedObjects)
	if inSnapshot != retainedObjects || m.Cluster.Name != name || m.Cluster.Namespace != v.namespace || m.Revision <= 0 || m.K3sVersion == "" {
		t.Fatalf("snapshot manifest %+v holding %d objects, want %d of cluster %s/%s", m, inSnapshot, retainedObjects, v.namespace, name)
	}
	if got := snapshotToken(t, file); string(got) != string(token["token"]) {
		t.Fatal("the snapshot's token is not the cluster's token")
	}

	out := k3kcli(t, "cluster", "delete", name, "-n", v.namespace, "--keep-data")
	if !strings.Contains(out, "volumes are kept") {
		t.Fatalf("delete --keep-data did not say the volumes are kept:\n%s", out)
	}
	eventually(t, 5*time.Minute, "the cluster, its server pods and its token Secret gone, its volumes kept", func(ctx context.Context) (bool, error) {
		pods, err := host.CoreV1().Pods(v.namespace).List(ctx, metav1.ListOptions{LabelSelector: "k3k.io/cluster=" + name + ",k3k.io/component=server"})
		if err != nil {
			return false, err
		}
		claims, err := host.CoreV1().PersistentVolumeClaims(v.namespace).List(ctx, metav1.ListOptions{LabelSelector: "k3k.io/cluster=" + name})
		if err != nil {
			return false, err
		}
		if len(claims.Items) != servers {
			return false, fmt.Errorf("%d server volumes, want %d kept", len(claims.Items), servers)
		}
		_, err = host.CoreV1().Secrets(v.namespace).Get(ctx, v.tokenSecret(), metav1.GetOptions{})
		return len(pods.Items) == 0 && apierrors.IsNotFound(err), nil
	})

	start := time.Now()
	args := append([]string{"cluster", "create", name, "-n", v.namespace, "--expose", "nodeport",
		"--timeout", "10m", "--output-kubeconfig", v.kubeconfig}, flags...)
	k3kcli(t, args...)
	t.Logf("cluster %s/%s created again on its kept volumes: ready after %s", v.namespace, name, time.Since(start).Round(time.Millisecond))
	v.client = virtualClient(t, v.kubeconfig)

	after := keptObjects(t, v.client)
	t.Logf("objects before the deletion: %d; after the cluster came back: %d", len(before), len(after))
	if !maps.Equal(before, after) {
		t.Fatalf("the cluster came back with other objects:\nbefore %v\nafter  %v", before, after)
	}
	w.check(t, v.client)
	if got := secretData(t, v, v.tokenSecret()); !equalData(got, token) {
		t.Fatal("the token Secret of the cluster that came back is not the original token")
	}
	eventually(t, time.Minute, "an Event saying the servers started to restore the token", func(ctx context.Context) (bool, error) {
		events, err := host.EventsV1().Events(v.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "ServersStartedToRestoreToken" && e.Regarding.Name == name {
				return true, nil
			}
		}
		return false, nil
	})
	after2 := workload{namespace: name + "-after"}
	after2.create(t, v.client)
	after2.check(t, v.client)
}

// keptObjects maps each ConfigMap the scenario wrote to its resourceVersion
// and content: a restored object is the same object, not a copy.
func keptObjects(t *testing.T, c kubernetes.Interface) map[string]string {
	t.Helper()
	var list *corev1.ConfigMapList
	if err := retry(func(ctx context.Context) (err error) {
		list, err = c.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: "e2e=kept"})
		return err
	}); err != nil {
		t.Fatalf("listing the kept objects: %v", err)
	}
	out := map[string]string{}
	for _, cm := range list.Items {
		out[cm.Namespace+"/"+cm.Name] = cm.ResourceVersion + " " + cm.Data["value"]
	}
	return out
}

// snapshotToken is the token a snapshot file carries.
func snapshotToken(t *testing.T, file string) []byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := snapshot.ReadArchive(f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return a.Token
}

// snapshotObjects verifies a snapshot file and counts the ConfigMaps named
// object-* of namespace ns in its database, read with the datastore's own
// format: kine's table, or etcd's backend.
func snapshotObjects(t *testing.T, file, ns string) (snapshot.Manifest, int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file mode: %v %v, want 0600", st.Mode(), err)
	}
	db := filepath.Join(t.TempDir(), "data.db")
	out, err := os.Create(db)
	if err != nil {
		t.Fatal(err)
	}
	a, err := snapshot.ReadArchive(f, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("reading the snapshot: %v", err)
	}
	prefix := "/registry/configmaps/" + ns + "/object-"
	switch a.Manifest.Datastore {
	case snapshot.SQLite:
		conn, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var n int
		err = conn.QueryRow(`SELECT COUNT(*) FROM kine k WHERE k.name LIKE ? || '%' AND k.deleted = 0
			AND k.id = (SELECT MAX(id) FROM kine WHERE name = k.name)`, prefix).Scan(&n)
		if err != nil {
			t.Fatalf("counting in the SQLite snapshot: %v", err)
		}
		return a.Manifest, n
	case snapshot.Etcd:
		bdb, err := bbolt.Open(db, 0o400, &bbolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer bdb.Close()
		live := map[string]bool{}
		err = bdb.View(func(tx *bbolt.Tx) error {
			return tx.Bucket([]byte("key")).ForEach(func(k, v []byte) error {
				var kv mvccpb.KeyValue
				if err := proto.Unmarshal(v, &kv); err != nil {
					return err
				}
				if strings.HasPrefix(string(kv.Key), prefix) {
					// A tombstone row (its key ends in 't') deletes the key.
					live[string(kv.Key)] = len(k) <= 17
				}
				return nil
			})
		})
		if err != nil {
			t.Fatalf("reading the etcd snapshot: %v", err)
		}
		n := 0
		for _, ok := range live {
			if ok {
				n++
			}
		}
		return a.Manifest, n
	}
	t.Fatalf("snapshot of datastore %q", a.Manifest.Datastore)
	return snapshot.Manifest{}, 0
}
