package cluster

import (
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
