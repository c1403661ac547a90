package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// newCluster returns an unsaved Cluster with the given changes applied.
func newCluster(ns, name string, changes ...func(*v1beta1.Cluster)) *v1beta1.Cluster {
	c := &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, change := range changes {
		change(c)
	}
	return c
}

// TestAdmissionRejectsInvalidSpecs creates each invalid spec against the real
// kube-apiserver and checks that the CRD's validation rules reject it with the
// message that names the field.
func TestAdmissionRejectsInvalidSpecs(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		spec   func(*v1beta1.Cluster)
		wantIn string
	}{
		{"virtual mode is not supported yet", func(c *v1beta1.Cluster) { c.Spec.Mode = v1beta1.VirtualMode }, "'virtual' is not supported yet"},
		{"an unknown mode is refused", func(c *v1beta1.Cluster) { c.Spec.Mode = "dedicated" }, `spec.mode: Unsupported value: "dedicated"`},
		{"fewer than one server is refused", func(c *v1beta1.Cluster) { c.Spec.Servers = -1 }, "spec.servers: Invalid value: -1: spec.servers in body should be greater than or equal to 1"},
		{"more than seven servers are refused", func(c *v1beta1.Cluster) {
			c.Spec.Servers = 9
			c.Spec.Datastore.Type = v1beta1.EtcdDatastore
		}, "spec.servers in body should be less than or equal to 7"},
		{"sqlite with three servers is refused", func(c *v1beta1.Cluster) {
			c.Spec.Servers = 3
			c.Spec.Datastore.Type = v1beta1.SQLiteDatastore
		}, "servers: datastore.type sqlite runs exactly 1 server"},
		{"etcd with an even number of servers is refused", func(c *v1beta1.Cluster) {
			c.Spec.Servers = 4
			c.Spec.Datastore.Type = v1beta1.EtcdDatastore
		}, "servers: datastore.type etcd needs an odd number of servers"},
		{"external without an endpoint is refused", func(c *v1beta1.Cluster) { c.Spec.Datastore.Type = v1beta1.ExternalDatastore }, "datastore.external.endpoint is required when datastore.type is external"},
		{"a grace period cap of 0 is refused", func(c *v1beta1.Cluster) { c.Spec.MaxTerminationGracePeriodSeconds = ptr.To(int64(0)) },
			"spec.maxTerminationGracePeriodSeconds in body should be greater than or equal to 1"},
		{"a grace period cap over an hour is refused", func(c *v1beta1.Cluster) { c.Spec.MaxTerminationGracePeriodSeconds = ptr.To(int64(3601)) },
			"spec.maxTerminationGracePeriodSeconds in body should be less than or equal to 3600"},
		{"external settings with sqlite are refused", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.SQLiteDatastore
			c.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "postgres://db:5432/k3s"}
		}, "datastore.external may only be set when datastore.type is external"},
		{"an etcd quota below 256Mi is refused", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.EtcdDatastore
			c.Spec.Datastore.Etcd = &v1beta1.EtcdDatastoreConfig{QuotaBackendSize: "100Mi"}
		}, "datastore.etcd.quotaBackendSize must be a quantity between 256Mi and 8Gi"},
		{"an etcd quota above 8Gi is refused", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.EtcdDatastore
			c.Spec.Persistence.StorageRequestSize = "100Gi"
			c.Spec.Datastore.Etcd = &v1beta1.EtcdDatastoreConfig{QuotaBackendSize: "16Gi"}
		}, "datastore.etcd.quotaBackendSize must be a quantity between 256Mi and 8Gi"},
		{"an etcd quota larger than the default 2Gi volume is refused", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.EtcdDatastore
			c.Spec.Datastore.Etcd = &v1beta1.EtcdDatastoreConfig{QuotaBackendSize: "4Gi"}
		}, "datastore.etcd.quotaBackendSize may not exceed persistence.storageRequestSize"},
		{"an etcd quota above 2Gi on ephemeral volumes is refused", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.EtcdDatastore
			c.Spec.Persistence.Type = v1beta1.EphemeralPersistence
			c.Spec.Datastore.Etcd = &v1beta1.EtcdDatastoreConfig{QuotaBackendSize: "4Gi"}
		}, "datastore.etcd.quotaBackendSize may not exceed persistence.storageRequestSize"},
		{"etcd settings with sqlite are refused", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.SQLiteDatastore
			c.Spec.Datastore.Etcd = &v1beta1.EtcdDatastoreConfig{QuotaBackendSize: "1Gi"}
		}, "datastore.etcd may only be set when datastore.type is etcd"},
		{"an unknown datastore is refused", func(c *v1beta1.Cluster) { c.Spec.Datastore.Type = "mongodb" }, `spec.datastore.type: Unsupported value: "mongodb"`},
		{"an unknown persistence type is refused", func(c *v1beta1.Cluster) { c.Spec.Persistence.Type = "static" }, `spec.persistence.type: Unsupported value: "static"`},
		{"a storage size that is not a quantity is refused", func(c *v1beta1.Cluster) { c.Spec.Persistence.StorageRequestSize = "lots" }, "persistence.storageRequestSize must be a quantity such as 2Gi"},
		{"a cluster CIDR that is not a CIDR is refused", func(c *v1beta1.Cluster) { c.Spec.ClusterCIDR = "10.42.0.0" }, "clusterCIDR must be a CIDR such as 10.42.0.0/16"},
		{"a service CIDR that is not a CIDR is refused", func(c *v1beta1.Cluster) { c.Spec.ServiceCIDR = "banana" }, "serviceCIDR must be a CIDR such as 10.43.0.0/16"},
		{"a cluster DNS that is not an IP is refused", func(c *v1beta1.Cluster) { c.Spec.ClusterDNS = "dns.local" }, "clusterDNS must be an IP address"},
		{"two ways of exposing are refused", func(c *v1beta1.Cluster) {
			c.Spec.Expose = &v1beta1.ExposeConfig{NodePort: &v1beta1.NodePortConfig{}, LoadBalancer: &v1beta1.LoadBalancerConfig{}}
		}, "expose: ingress, loadBalancer and nodePort are mutually exclusive"},
		{"a node port outside the node port range is refused", func(c *v1beta1.Cluster) {
			c.Spec.Expose = &v1beta1.ExposeConfig{NodePort: &v1beta1.NodePortConfig{ServerPort: ptr.To[int32](8443)}}
		}, "spec.expose.nodePort.serverPort in body should be greater than or equal to 30000"},
		{"an external endpoint that is a SQLite file in the pod is refused", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.ExternalDatastore
			c.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "sqlite:///var/lib/rancher/k3s/server/db/state.db"}
		}, "datastore.external.endpoint must be a postgres://"},
		{"an external endpoint without a scheme is refused", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.ExternalDatastore
			c.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "db.example:5432"}
		}, "k3s would keep the cluster in a SQLite file inside the server pod"},
		{"an unknown volume retention is refused", func(c *v1beta1.Cluster) { c.Spec.Persistence.WhenDeleted = "Keep" }, `spec.persistence.whenDeleted: Unsupported value: "Keep"`},
		{"a token Secret reference needs a name", func(c *v1beta1.Cluster) { c.Spec.TokenSecretRef = &v1beta1.TokenSecretReference{} }, "spec.tokenSecretRef.name in body should be at least 1 chars long"},
		{"a name too long for the derived names is refused", func(c *v1beta1.Cluster) { c.Name = strings.Repeat("n", 42) }, "metadata.name may be at most 41 characters"},
		{"a k3s version with spaces is refused", func(c *v1beta1.Cluster) { c.Spec.Version = "v1 latest" }, "spec.version in body should match"},
		{"an ingress host pattern that allows every name under a top-level domain is refused", func(c *v1beta1.Cluster) {
			c.Spec.Ingresses = &v1beta1.IngressSyncConfig{Enabled: true, Hosts: []string{"shop.example.com", "*.com"}}
		}, "spec.ingresses.hosts[1] in body should match"},
		{"an ingress host pattern with a wildcard inside is refused", func(c *v1beta1.Cluster) {
			c.Spec.Ingresses = &v1beta1.IngressSyncConfig{Enabled: true, Hosts: []string{"shop.*.example.com"}}
		}, "spec.ingresses.hosts[0] in body should match"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(ns, fmt.Sprintf("invalid-%d", i), tc.spec)
			err := k8s.Create(context.Background(), c)
			if err == nil {
				t.Fatalf("created an invalid Cluster; want an error containing %q", tc.wantIn)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("error does not name the problem:\n got: %v\nwant: ...%s...", err, tc.wantIn)
			}
		})
	}
}

// TestAdmissionRejectsInvalidUpdates changes a valid Cluster in ways the
// API forbids after creation.
func TestAdmissionRejectsInvalidUpdates(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		change func(*v1beta1.Cluster)
		wantIn string
	}{
		{"the datastore type is immutable (but for the migration to etcd)", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.ExternalDatastore
			c.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "postgres://db:5432/k3s"}
		}, "datastore.type is immutable"},
		{"unsetting the persistence type counts as a change", func(c *v1beta1.Cluster) { c.Spec.Persistence.Type = "" }, "persistence.type is immutable"},
		{"the cluster CIDR is immutable", func(c *v1beta1.Cluster) { c.Spec.ClusterCIDR = "10.50.0.0/16" }, "clusterCIDR is immutable"},
		{"the service CIDR is immutable", func(c *v1beta1.Cluster) { c.Spec.ServiceCIDR = "10.51.0.0/16" }, "serviceCIDR is immutable"},
		{"the storage request may not shrink", func(c *v1beta1.Cluster) { c.Spec.Persistence.StorageRequestSize = "1Gi" }, "persistence.storageRequestSize may only grow"},
		{"the mode stays shared", func(c *v1beta1.Cluster) { c.Spec.Mode = v1beta1.VirtualMode }, "'virtual' is not supported yet"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(ns, fmt.Sprintf("update-%d", i), func(c *v1beta1.Cluster) {
				c.Spec.Datastore.Type = v1beta1.SQLiteDatastore
				c.Spec.Persistence.Type = v1beta1.DynamicPersistence
				c.Spec.ClusterCIDR = "10.42.0.0/16"
				c.Spec.ServiceCIDR = "10.43.0.0/16"
			})
			ctx := context.Background()
			if err := k8s.Create(ctx, c); err != nil {
				t.Fatalf("creating a valid Cluster: %v", err)
			}
			tc.change(c)
			err := k8s.Update(ctx, c)
			if err == nil {
				t.Fatalf("update accepted; want an error containing %q", tc.wantIn)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("error does not name the problem:\n got: %v\nwant: ...%s...", err, tc.wantIn)
			}
		})
	}
}

// TestAdmissionAcceptsGrowthAndDefaults checks the other side: a minimal
// Cluster gets its defaults, and the storage request may grow.
func TestAdmissionAcceptsGrowthAndDefaults(t *testing.T) {
	ctx := context.Background()
	c := newCluster(newNamespace(t), "minimal")
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatalf("creating a minimal Cluster: %v", err)
	}
	// The storage size has no CRD default (the controller resolves empty to
	// 2Gi), so that a size set with ephemeral persistence can be refused.
	if c.Spec.Mode != v1beta1.SharedMode || c.Spec.Servers != 1 || c.Spec.Persistence.StorageRequestSize != "" || c.Spec.Persistence.WhenDeleted != v1beta1.DeleteVolumes {
		t.Fatalf("defaults not applied: mode=%q servers=%d size=%q whenDeleted=%q", c.Spec.Mode, c.Spec.Servers, c.Spec.Persistence.StorageRequestSize, c.Spec.Persistence.WhenDeleted)
	}
	c.Spec.Persistence.StorageRequestSize = "3Gi"
	c.Spec.ServerEnvs = []v1beta1.ServerEnvVar{{Name: "GOMAXPROCS", Value: "2"}}
	if err := k8s.Update(ctx, c); err != nil {
		t.Fatalf("growing the storage request: %v", err)
	}
}

// An etcd quota that fits the volume is accepted, and raising it with the
// volume is an update admission allows (the NOSPACE way out, docs/etcd.md).
func TestAdmissionAcceptsAnEtcdQuotaThatFitsTheVolume(t *testing.T) {
	ctx := context.Background()
	c := newCluster(newNamespace(t), "quota", func(c *v1beta1.Cluster) {
		c.Spec.Servers = 3
		c.Spec.Datastore.Type = v1beta1.EtcdDatastore
		c.Spec.Persistence.StorageRequestSize = "4Gi"
		c.Spec.Datastore.Etcd = &v1beta1.EtcdDatastoreConfig{QuotaBackendSize: "4Gi"}
	})
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatalf("creating a Cluster whose quota fits its volume: %v", err)
	}
	c.Spec.Persistence.StorageRequestSize = "8Gi"
	c.Spec.Datastore.Etcd.QuotaBackendSize = "6Gi"
	if err := k8s.Update(ctx, c); err != nil {
		t.Fatalf("raising the quota with the volume: %v", err)
	}
}

// TestAdmissionRefusesBadBackups sends spec.backup settings the CRD must
// refuse to the real API server.
func TestAdmissionRefusesBadBackups(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		spec   func(*v1beta1.Cluster)
		wantIn string
	}{
		{"words are no schedule", withBackup("every night", 2), "backup.schedule must be a cron schedule of five fields"},
		{"four fields are too few", withBackup("0 3 * *", 2), "backup.schedule must be a cron schedule of five fields"},
		{"a time zone is refused", withBackup("CRON_TZ=Europe/Berlin 0 3 * * *", 2), "time zones (CRON_TZ=, TZ=) are not supported"},
		{"keep 0 would delete every snapshot", withBackup("@daily", 0), "spec.backup.keep in body should be greater than or equal to 1"},
		{"keep is bounded", withBackup("@daily", 1000), "spec.backup.keep in body should be less than or equal to 100"},
		{"the claim is a name, not a path", func(c *v1beta1.Cluster) {
			withBackup("@daily", 2)(c)
			c.Spec.Backup.ClaimName = "../other/claim"
		}, "spec.backup.claimName in body should match"},
		{"external datastores are refused", func(c *v1beta1.Cluster) {
			withBackup("@daily", 2)(c)
			c.Spec.Datastore.Type = v1beta1.ExternalDatastore
			c.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "postgres://db:5432/k3s"}
		}, "scheduled snapshots are not supported with datastore.type external"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(ns, fmt.Sprintf("badbackup-%d", i), tc.spec)
			if tc.name == "keep 0 would delete every snapshot" {
				// keep 0 is omitted by omitempty and defaulted to 7; send it.
				raw := map[string]any{"apiVersion": "k3k.io/v1beta1", "kind": "Cluster", "metadata": map[string]any{"name": c.Name, "namespace": ns},
					"spec": map[string]any{"datastore": map[string]any{"type": "sqlite"}, "backup": map[string]any{"schedule": "@daily", "keep": 0, "claimName": backupClaim}}}
				err := createRaw(raw)
				if err == nil || !strings.Contains(err.Error(), tc.wantIn) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantIn)
				}
				return
			}
			err := k8s.Create(context.Background(), c)
			if err == nil || !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("got %v, want an error containing %q", err, tc.wantIn)
			}
		})
	}
	// And the defaults: keep 7 when left out, a valid schedule accepted.
	c := newCluster(ns, "goodbackup", withBackup("*/15 * * * 1-5", 0))
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatalf("a valid backup was refused: %v", err)
	}
	if c.Spec.Backup.Keep != 7 {
		t.Fatalf("keep defaulted to %d, want 7", c.Spec.Backup.Keep)
	}
}

// TestAdmissionAllowsOnlyTheMigrationFromSQLiteToEtcd walks the one change of
// datastore.type the API allows (the migration, started by the type change
// alone; datastore.migrateFrom sqlite still accepted beside it) and the ways
// around it that it must refuse. The way back reads the status the
// controller records (status.datastore.type: sqlite until the switch), set
// here by the test as the controller would.
func TestAdmissionAllowsOnlyTheMigrationFromSQLiteToEtcd(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	type step struct {
		name   string
		change func(*v1beta1.Cluster)
		wantIn string // empty: accepted
		// status, when set, is the controller's status write instead of a
		// user's change.
		status func(*v1beta1.ClusterStatus)
	}
	toEtcd := func(marked bool) func(*v1beta1.Cluster) {
		return func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.EtcdDatastore
			c.Spec.Servers = 3
			if marked {
				c.Spec.Datastore.MigrateFrom = v1beta1.SQLiteDatastore
			}
		}
	}
	back := func(c *v1beta1.Cluster) {
		c.Spec.Datastore.Type = v1beta1.SQLiteDatastore
		c.Spec.Datastore.MigrateFrom = ""
		c.Spec.Servers = 1
	}
	recorded := func(ds v1beta1.DatastoreType, p v1beta1.PersistenceType) func(*v1beta1.ClusterStatus) {
		return func(st *v1beta1.ClusterStatus) {
			st.Datastore = &v1beta1.DatastoreStatus{Type: ds}
			st.PersistenceType = p
		}
	}
	run := func(t *testing.T, c *v1beta1.Cluster, steps []step) {
		t.Helper()
		if err := k8s.Create(ctx, c); err != nil {
			t.Fatalf("creating %s: %v", c.Name, err)
		}
		for _, s := range steps {
			live := &v1beta1.Cluster{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), live); err != nil {
				t.Fatal(err)
			}
			if s.status != nil {
				s.status(&live.Status)
				if err := k8s.Status().Update(ctx, live); err != nil {
					t.Fatalf("%s: the status write was refused: %v", s.name, err)
				}
				continue
			}
			s.change(live)
			err := k8s.Update(ctx, live)
			switch {
			case s.wantIn == "" && err != nil:
				t.Fatalf("%s: refused: %v", s.name, err)
			case s.wantIn != "" && err == nil:
				t.Fatalf("%s: accepted; want an error containing %q", s.name, s.wantIn)
			case s.wantIn != "" && !strings.Contains(err.Error(), s.wantIn):
				t.Fatalf("%s: error does not name the problem:\n got: %v\nwant: ...%s...", s.name, err, s.wantIn)
			}
		}
	}
	const notSwitched = "only while a migration from sqlite has not switched"

	t.Run("from sqlite", func(t *testing.T) {
		run(t, newCluster(ns, "migrate-sqlite", func(c *v1beta1.Cluster) { c.Spec.Datastore.Type = v1beta1.SQLiteDatastore }), []step{
			{name: "recorded sqlite", status: recorded(v1beta1.SQLiteDatastore, v1beta1.DynamicPersistence)},
			{name: "the mark without the type", change: func(c *v1beta1.Cluster) { c.Spec.Datastore.MigrateFrom = v1beta1.SQLiteDatastore }, wantIn: "datastore.migrateFrom may only be set when datastore.type is etcd"},
			{name: "the mark with another value", change: func(c *v1beta1.Cluster) {
				toEtcd(false)(c)
				c.Spec.Datastore.MigrateFrom = v1beta1.EtcdDatastore
			}, wantIn: "spec.datastore.migrateFrom: Unsupported value"},
			{name: "to etcd with 3 servers, the type change alone", change: toEtcd(false)},
			{name: "back to sqlite before the switch", change: back},
			{name: "to etcd with the mark (earlier k3kcli)", change: toEtcd(true)},
			{name: "back again", change: back},
			{name: "to etcd again", change: toEtcd(false)},
			{name: "the controller records the switch", status: recorded(v1beta1.EtcdDatastore, v1beta1.DynamicPersistence)},
			{name: "back to sqlite after the switch", change: back, wantIn: notSwitched},
			{name: "the mark after the switch", change: func(c *v1beta1.Cluster) { c.Spec.Datastore.MigrateFrom = v1beta1.SQLiteDatastore }, wantIn: "datastore.migrateFrom is set only together with the change"},
		})
	})
	t.Run("from the default datastore", func(t *testing.T) {
		run(t, newCluster(ns, "migrate-default"), []step{
			{name: "recorded sqlite", status: recorded(v1beta1.SQLiteDatastore, v1beta1.DynamicPersistence)},
			{name: "to etcd", change: toEtcd(false)},
		})
	})
	t.Run("ephemeral", func(t *testing.T) {
		run(t, newCluster(ns, "migrate-ephemeral", func(c *v1beta1.Cluster) { c.Spec.Datastore.Type = v1beta1.SQLiteDatastore }), []step{
			{name: "recorded sqlite on an emptyDir", status: recorded(v1beta1.SQLiteDatastore, v1beta1.EphemeralPersistence)},
			{name: "to etcd", change: toEtcd(false), wantIn: "persistence ephemeral cannot be migrated"},
		})
	})
	t.Run("the mark at creation", func(t *testing.T) {
		c := newCluster(ns, "migrate-create", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.EtcdDatastore
			c.Spec.Datastore.MigrateFrom = v1beta1.SQLiteDatastore
		})
		err := k8s.Create(ctx, c)
		if err == nil || !strings.Contains(err.Error(), "datastore.migrateFrom cannot be set when a cluster is created") {
			t.Fatalf("creating a Cluster with datastore.migrateFrom: %v, want it refused", err)
		}
	})
	t.Run("from etcd", func(t *testing.T) {
		run(t, newCluster(ns, "migrate-etcd", func(c *v1beta1.Cluster) { c.Spec.Datastore.Type = v1beta1.EtcdDatastore }), []step{
			{name: "to sqlite before any status", change: back, wantIn: notSwitched},
			{name: "recorded etcd", status: recorded(v1beta1.EtcdDatastore, v1beta1.DynamicPersistence)},
			{name: "a mark on a cluster that was etcd", change: func(c *v1beta1.Cluster) { c.Spec.Datastore.MigrateFrom = v1beta1.SQLiteDatastore }, wantIn: "datastore.migrateFrom is set only together with the change"},
			{name: "to sqlite", change: back, wantIn: notSwitched},
		})
	})
	t.Run("from external", func(t *testing.T) {
		run(t, newCluster(ns, "migrate-external", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = v1beta1.ExternalDatastore
			c.Spec.Datastore.External = &v1beta1.ExternalDatastoreConfig{Endpoint: "postgres://db:5432/k3s"}
		}), []step{
			{name: "to etcd", change: func(c *v1beta1.Cluster) {
				toEtcd(false)(c)
				c.Spec.Datastore.External = nil
			}, wantIn: "datastore.type is immutable"},
		})
	})
}
