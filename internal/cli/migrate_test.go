package cli

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// recordDatastore writes what the controller records of cluster name:
// status.datastore.type ds, and the Migrating condition (reason "" removes
// it), Ready and the ready servers.
func recordDatastore(t *testing.T, ns, name string, ds v1beta1.DatastoreType, migrating string, ready bool, servers int32) {
	t.Helper()
	c := getCluster(t, ns, name)
	c.Status.Datastore = &v1beta1.DatastoreStatus{Type: ds}
	c.Status.PersistenceType = v1beta1.DynamicPersistence
	c.Status.ReadyServers = servers
	if migrating == "" {
		meta.RemoveStatusCondition(&c.Status.Conditions, v1beta1.ConditionMigrating)
	} else {
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1beta1.ConditionMigrating, Status: metav1.ConditionTrue, Reason: migrating, Message: "step " + migrating})
	}
	status, phase := metav1.ConditionFalse, v1beta1.PhaseProvisioning
	if ready {
		status, phase = metav1.ConditionTrue, v1beta1.PhaseReady
	}
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1beta1.ConditionReady, Status: status, Reason: "Test", Message: "as the test says"})
	c.Status.Phase = phase
	if err := k8s.Status().Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateRefusals: what cannot be migrated is refused with a reason
// before anything changes (the spec stays sqlite).
func TestMigrateRefusals(t *testing.T) {
	ns := newNamespace(t)
	inPlaceCluster(t, ns, "plain", "tok", nil)
	inPlaceCluster(t, ns, "ha", "tok", func(c *v1beta1.Cluster) { c.Spec.Datastore.Type = v1beta1.EtcdDatastore })
	inPlaceCluster(t, ns, "paused", "tok", func(c *v1beta1.Cluster) { c.Spec.Paused = true })
	inPlaceCluster(t, ns, "ext", "tok", func(c *v1beta1.Cluster) {
		c.Spec.Datastore.Type = v1beta1.ExternalDatastore
		c.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "postgres://db.example:5432/k3s"}
	})
	inPlaceCluster(t, ns, "ephemeral", "tok", func(c *v1beta1.Cluster) { c.Spec.Persistence.Type = v1beta1.EphemeralPersistence })
	inPlaceCluster(t, ns, "creating", "", func(c *v1beta1.Cluster) {
		c.Annotations = map[string]string{v1beta1.AnnotationRestorePending: "0123456789abcdef"}
	})
	inPlaceCluster(t, ns, "restoring", "tok", func(c *v1beta1.Cluster) {
		c.Annotations = map[string]string{v1beta1.AnnotationRestorePending: inPlacePrefix + "0123456789abcdef"}
	})
	cases := []struct {
		name, cluster string
		args          []string
		code          int
		want          []string
	}{
		{"without --to", "plain", []string{"--yes"}, ExitUsage, []string{"from sqlite to etcd only"}},
		{"to sqlite", "plain", []string{"--to", "sqlite", "--yes"}, ExitUsage, []string{"from sqlite to etcd only"}},
		{"an even number of servers", "plain", []string{"--to", "etcd", "--servers", "2", "--yes"}, ExitUsage, []string{"odd number of servers"}},
		{"a cluster that does not exist", "nope", []string{"--to", "etcd", "--yes"}, ExitError, []string{"nope"}},
		{"an etcd cluster (one way only)", "ha", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"uses etcd already", "never back"}},
		{"an external datastore", "ext", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"external datastore"}},
		{"a cluster whose data is in an emptyDir", "ephemeral", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"persistence ephemeral", "create NAME --datastore etcd --restore-from"}},
		{"a paused cluster", "paused", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"paused"}},
		{"a cluster being created from a snapshot", "creating", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"a restore is under way"}},
		{"a cluster being restored in place", "restoring", []string{"--to", "etcd", "--yes"}, ExitUsage, []string{"a restore is under way"}},
		{"no confirmation (nothing to read it from)", "plain", []string{"--to", "etcd"}, ExitUsage, []string{"not confirmed", "--yes"}},
		{"abort with no migration under way", "plain", []string{"--abort"}, ExitUsage, []string{"no migration is under way"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := ""
			if tc.cluster != "nope" {
				before = string(getCluster(t, ns, tc.cluster).Spec.Datastore.Type)
			}
			r := k3kcli(t, append([]string{"cluster", "migrate", tc.cluster, "-n", ns}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d", r.code, tc.code)
			}
			assertOneLineError(t, r.errOut, tc.want...)
			if tc.cluster != "nope" {
				if c := getCluster(t, ns, tc.cluster); string(c.Spec.Datastore.Type) != before || c.Spec.Datastore.MigrateFrom != "" {
					t.Fatalf("the refused command changed the spec: datastore %q (was %q), migrateFrom %q", c.Spec.Datastore.Type, before, c.Spec.Datastore.MigrateFrom)
				}
			}
		})
	}
}

// fakeController plays the controller's part for cluster name: each step
// waits until its predicate holds on the Cluster, then writes its status.
func fakeController(t *testing.T, ns, name string, steps ...func(*v1beta1.Cluster) bool) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, step := range steps {
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				c := &v1beta1.Cluster{}
				if err := k8s.Get(context.Background(), keyOf(ns, name), c); err == nil && step(c) {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("the fake controller waited in vain")
					return
				}
			}
		}
	}()
	return &wg
}

// TestMigratePatchesTheSpecAndFollowsTheController: `cluster migrate --to
// etcd --servers 3 --yes` changes spec.datastore.type to etcd and servers
// to 3 in one patch (nothing else: no exec, no marks, the token Secret
// untouched), prints each Migrating step the controller reports, and ends
// once the controller recorded etcd, Migrating went and 3 servers are
// ready. --abort after the switch is refused. A second cluster: --abort
// before the switch puts the spec back to sqlite with one server and waits
// for the SQLite cluster to be Ready.
func TestMigratePatchesTheSpecAndFollowsTheController(t *testing.T) {
	ns := newNamespace(t)
	inPlaceCluster(t, ns, "live", "tok", nil)
	recordDatastore(t, ns, "live", v1beta1.SQLiteDatastore, "", true, 1)
	token := tokenSecret(t, getCluster(t, ns, "live")).ResourceVersion

	wg := fakeController(t, ns, "live",
		func(c *v1beta1.Cluster) bool {
			if c.Spec.Datastore.Type != v1beta1.EtcdDatastore || c.Spec.Servers != 3 {
				return false
			}
			recordDatastore(t, ns, "live", v1beta1.SQLiteDatastore, v1beta1.ReasonMigrationLoadingEtcd, false, 0)
			return true
		},
		func(c *v1beta1.Cluster) bool {
			time.Sleep(200 * time.Millisecond)
			recordDatastore(t, ns, "live", v1beta1.EtcdDatastore, v1beta1.ReasonMigrationSwitched, true, 1)
			return true
		},
		func(c *v1beta1.Cluster) bool {
			time.Sleep(200 * time.Millisecond)
			recordDatastore(t, ns, "live", v1beta1.EtcdDatastore, "", true, 3)
			return true
		},
	)
	r := k3kcli(t, "cluster", "migrate", "live", "-n", ns, "--to", "etcd", "--servers", "3", "--yes", "--timeout", "30s")
	wg.Wait()
	if r.code != ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.errOut)
	}
	for _, want := range []string{"spec.datastore.type etcd, servers 3", "Migrating=True " + v1beta1.ReasonMigrationLoadingEtcd, "Migrating=True " + v1beta1.ReasonMigrationSwitched, "3/3 servers ready; Ready"} {
		if !strings.Contains(r.errOut, want) {
			t.Fatalf("stderr does not say %q:\n%s", want, r.errOut)
		}
	}
	if !strings.Contains(r.out, "migrated from sqlite to etcd with 3 servers") {
		t.Fatalf("stdout %q", r.out)
	}
	c := getCluster(t, ns, "live")
	if c.Spec.Datastore.Type != v1beta1.EtcdDatastore || c.Spec.Servers != 3 || len(c.Annotations) != 0 {
		t.Fatalf("spec after the migration: %+v, annotations %v", c.Spec.Datastore, c.Annotations)
	}
	if rv := tokenSecret(t, c).ResourceVersion; rv != token {
		t.Fatalf("the token Secret was written (resourceVersion %s, was %s)", rv, token)
	}
	r = k3kcli(t, "cluster", "migrate", "live", "-n", ns, "--abort")
	if r.code != ExitUsage {
		t.Fatalf("--abort after the switch: exit %d, want %d", r.code, ExitUsage)
	}
	assertOneLineError(t, r.errOut, "no way back")

	// --abort before the switch.
	inPlaceCluster(t, ns, "undo", "tok", nil)
	recordDatastore(t, ns, "undo", v1beta1.SQLiteDatastore, "", true, 1)
	if err := k8s.Patch(context.Background(), getCluster(t, ns, "undo"), rawMerge(MigrateSpecPatch(v1beta1.EtcdDatastore, 3))); err != nil {
		t.Fatal(err)
	}
	recordDatastore(t, ns, "undo", v1beta1.SQLiteDatastore, v1beta1.ReasonMigrationFailed, false, 0)
	wg = fakeController(t, ns, "undo", func(c *v1beta1.Cluster) bool {
		if c.Spec.Datastore.Type != v1beta1.SQLiteDatastore || c.Spec.Servers != 1 {
			return false
		}
		recordDatastore(t, ns, "undo", v1beta1.SQLiteDatastore, "", true, 1)
		return true
	})
	r = k3kcli(t, "cluster", "migrate", "undo", "-n", ns, "--abort", "--timeout", "30s")
	wg.Wait()
	if r.code != ExitOK || !strings.Contains(r.out, "serves its SQLite data again") {
		t.Fatalf("--abort before the switch: exit %d\n%s\n%s", r.code, r.out, r.errOut)
	}
	// A migration under way also refuses an in-place restore.
	inPlaceCluster(t, ns, "migrating", "tok", nil)
	recordDatastore(t, ns, "migrating", v1beta1.SQLiteDatastore, "", true, 1)
	if err := k8s.Patch(context.Background(), getCluster(t, ns, "migrating"), rawMerge(MigrateSpecPatch(v1beta1.EtcdDatastore, 3))); err != nil {
		t.Fatal(err)
	}
	r = k3kcli(t, "cluster", "restore", "migrating", "-n", ns, "--from", snapshotFile(t), "--yes")
	if r.code != ExitUsage {
		t.Fatalf("restore of a cluster being migrated: exit %d, want %d", r.code, ExitUsage)
	}
	assertOneLineError(t, r.errOut, "being migrated to etcd", "--abort")
}

func rawMerge(patch []byte) client.Patch { return client.RawPatch(types.MergePatchType, patch) }
