package cluster

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

func TestServerDisruptionBudgetKeepsWhatTheDatastoreNeeds(t *testing.T) {
	c := sampleCluster()
	for _, tc := range []struct {
		datastore v1beta1.DatastoreType
		pods      int32
		// "" for no budget; otherwise "min N" or "max N"
		want string
	}{
		{v1beta1.SQLiteDatastore, 1, ""},
		{v1beta1.SQLiteDatastore, 0, ""},
		{v1beta1.EtcdDatastore, 0, ""}, // paused
		{v1beta1.EtcdDatastore, 1, ""},
		{v1beta1.EtcdDatastore, 2, "min 2"}, // both are the quorum
		{v1beta1.EtcdDatastore, 3, "min 2"},
		{v1beta1.EtcdDatastore, 4, "min 3"}, // a member still leaving after a scale-down counts
		{v1beta1.EtcdDatastore, 5, "min 3"},
		{v1beta1.ExternalDatastore, 1, ""},
		{v1beta1.ExternalDatastore, 3, "max 1"},
	} {
		pdb := DesiredServerDisruptionBudget(c, tc.datastore, tc.pods)
		got := ""
		if pdb != nil {
			switch s := pdb.Spec; {
			case s.MinAvailable != nil && s.MaxUnavailable == nil:
				got = "min " + s.MinAvailable.String()
			case s.MaxUnavailable != nil && s.MinAvailable == nil:
				got = "max " + s.MaxUnavailable.String()
			default:
				t.Fatalf("%s with %d pods: minAvailable %v and maxUnavailable %v", tc.datastore, tc.pods, s.MinAvailable, s.MaxUnavailable)
			}
			if pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
				t.Errorf("%s with %d pods: an unready server would hold a drain (policy %v)", tc.datastore, tc.pods, pdb.Spec.UnhealthyPodEvictionPolicy)
			}
			if sel := pdb.Spec.Selector.MatchLabels; sel[v1beta1.LabelComponent] != v1beta1.ComponentServer || sel[v1beta1.LabelCluster] != c.Name {
				t.Errorf("%s with %d pods: selector %v does not pick exactly the server pods", tc.datastore, tc.pods, sel)
			}
		}
		if got != tc.want {
			t.Errorf("%s with %d pods: budget %q, want %q", tc.datastore, tc.pods, got, tc.want)
		}
	}
}

// TestServerDisruptionBudgetFollowsTheServers: the reconciler makes the budget
// for two external-datastore servers and removes it when the Cluster shrinks
// to one.
func TestServerDisruptionBudgetFollowsTheServers(t *testing.T) {
	ctx := context.Background()
	r, _ := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "two", func(c *v1beta1.Cluster) {
		c.Spec.Servers = 2
		c.Spec.Datastore = v1beta1.DatastoreConfig{Type: v1beta1.ExternalDatastore, External: &v1beta1.ExternalDatastoreConfig{
			Endpoint: "postgres://db.example:5432/k3s",
		}}
	}))
	reconcileOnce(t, r, c)
	name := layout.NamesFor(c).StatefulSet
	pdb := &policyv1.PodDisruptionBudget{}
	get(t, c, name, pdb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Fatalf("budget for two stateless servers: %+v", pdb.Spec)
	}

	get(t, c, c.Name, c)
	c.Spec.Servers = 1
	if err := k8s.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, pdb); !apierrors.IsNotFound(err) {
		t.Fatalf("the budget is still there with one server: %v", err)
	}
}

func TestServerPlacement(t *testing.T) {
	c := sampleCluster()
	for _, tc := range []struct {
		datastore v1beta1.DatastoreType
		spread    v1beta1.ServerSpread
		want      string // "", "spread" or "apart"
	}{
		{v1beta1.SQLiteDatastore, v1beta1.SpreadPreferred, ""},
		{v1beta1.SQLiteDatastore, v1beta1.SpreadRequired, ""},
		{v1beta1.EtcdDatastore, v1beta1.SpreadPreferred, "spread"},
		{v1beta1.EtcdDatastore, v1beta1.SpreadRequired, "apart"},
		{v1beta1.ExternalDatastore, v1beta1.SpreadPreferred, "spread"},
		{v1beta1.ExternalDatastore, v1beta1.SpreadRequired, "apart"},
	} {
		s := Settings{Datastore: tc.datastore, ServerSpread: tc.spread, Servers: 1}
		sts := DesiredStatefulSet(c, s, testConfig, 1, "hash")
		pod := sts.Spec.Template.Spec
		got := ""
		if n := len(pod.TopologySpreadConstraints); n > 0 {
			tsc := pod.TopologySpreadConstraints[0]
			if n != 1 || tsc.TopologyKey != corev1.LabelHostname || tsc.WhenUnsatisfiable != corev1.ScheduleAnyway || tsc.MaxSkew != 1 ||
				tsc.LabelSelector.MatchLabels[v1beta1.LabelComponent] != v1beta1.ComponentServer {
				t.Fatalf("%s/%s: constraints %+v", tc.datastore, tc.spread, pod.TopologySpreadConstraints)
			}
			got = "spread"
		}
		if pod.Affinity != nil {
			terms := pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
			if got != "" || len(terms) != 1 || terms[0].TopologyKey != corev1.LabelHostname || terms[0].LabelSelector.MatchLabels[v1beta1.LabelCluster] != c.Name {
				t.Fatalf("%s/%s: affinity %+v beside constraints %q", tc.datastore, tc.spread, pod.Affinity, got)
			}
			got = "apart"
		}
		if got != tc.want {
			t.Errorf("%s/%s: placement %q, want %q", tc.datastore, tc.spread, got, tc.want)
		}
	}
}

// TestServerSpreadDefault: spec.serverSpread wins over the controller's
// default, which wins over Preferred.
func TestServerSpreadDefault(t *testing.T) {
	for _, tc := range []struct {
		spec, dflt, want v1beta1.ServerSpread
	}{
		{"", "", v1beta1.SpreadPreferred},
		{"", v1beta1.SpreadRequired, v1beta1.SpreadRequired},
		{v1beta1.SpreadPreferred, v1beta1.SpreadRequired, v1beta1.SpreadPreferred},
		{v1beta1.SpreadRequired, "", v1beta1.SpreadRequired},
	} {
		c := sampleCluster()
		c.Spec.ServerSpread = tc.spec
		s, err := Resolve(c, Config{DefaultServerSpread: tc.dflt})
		if err != nil {
			t.Fatal(err)
		}
		if s.ServerSpread != tc.want {
			t.Errorf("spec %q, default %q: %q, want %q", tc.spec, tc.dflt, s.ServerSpread, tc.want)
		}
	}
}
