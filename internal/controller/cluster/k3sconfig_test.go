package cluster

import (
	"strings"
	"testing"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// TestConfigHashOfExistingClustersIsKept pins the pod template's config hash
// of the sample cluster to what k3k wrote before ServerConfig returned it
// (then TemplateConfigHash rendered the file a second time): a different hash
// would roll every existing server on upgrade.
func TestConfigHashOfExistingClustersIsKept(t *testing.T) {
	for _, tc := range []struct {
		datastore v1beta1.DatastoreType
		servers   int32
		want      string
	}{
		{v1beta1.SQLiteDatastore, 1, "0d07bee59893af73"},
		{v1beta1.EtcdDatastore, 3, "bee8022479756285"},
	} {
		c := sampleCluster()
		c.Spec.Datastore.Type, c.Spec.Servers = tc.datastore, tc.servers
		s, err := Resolve(c, testConfig)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ServerConfig(c, s)
		if err != nil {
			t.Fatal(err)
		}
		if got.Hash != tc.want {
			t.Errorf("%s with %d servers: hash %s, want %s (existing servers would roll)", tc.datastore, tc.servers, got.Hash, tc.want)
		}
		if tc.datastore != v1beta1.EtcdDatastore && got.Hash != ConfigHash(got.Data) {
			t.Errorf("%s: the hash is not the file's", tc.datastore)
		}
	}
}

// TestServiceNetworkInTheConfigFile: a new cluster's file names the host's
// network; one made before the controller chose it (k3s's default, no
// spec.serviceCIDR) renders the file it always had, so its servers do not roll.
func TestServiceNetworkInTheConfigFile(t *testing.T) {
	cfg := testConfig
	cfg.HostServiceCIDR = "10.96.0.0/16"
	c := sampleCluster()
	c.Spec.ServiceCIDR, c.Spec.ClusterDNS = "", ""
	before, err := ServerConfig(c, Settings{Datastore: v1beta1.SQLiteDatastore, Servers: 1})
	if err != nil {
		t.Fatal(err)
	}

	existing := c.DeepCopy()
	existing.Status.PersistenceType = v1beta1.DynamicPersistence
	s, err := Resolve(existing, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ServerConfig(existing, s)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash != before.Hash || strings.Contains(string(got.Data), "service-cidr") {
		t.Fatalf("an existing cluster's file changed:\n%s", got.Data)
	}

	if s, err = Resolve(c, cfg); err != nil {
		t.Fatal(err)
	}
	got, err = ServerConfig(c, s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got.Data), "\nservice-cidr: 10.96.0.0/16\n") {
		t.Fatalf("a new cluster's file does not name the host's network:\n%s", got.Data)
	}
}
