package cluster

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// TestServerReadyOnlyWhenItsAPIServes: the server pod joins the API Service
// only when its API answers /readyz, which the kubelet cannot ask itself (k3s
// refuses anonymous requests), so the k3s container's readiness probe asks the
// publisher's /readyz, which asks the API with k3s's admin kubeconfig. Startup
// and liveness stay TCP checks of k3s's port, so a slow API never gets the
// container restarted. The same holds for every datastore.
func TestServerReadyOnlyWhenItsAPIServes(t *testing.T) {
	for _, ds := range []v1beta1.DatastoreType{v1beta1.SQLiteDatastore, v1beta1.EtcdDatastore} {
		t.Run(string(ds), func(t *testing.T) {
			c := sampleCluster()
			c.Spec.Datastore.Type = ds
			s, err := Resolve(c, testConfig)
			if err != nil {
				t.Fatal(err)
			}
			pod := DesiredStatefulSet(c, s, testConfig, 1, "hash").Spec.Template.Spec
			var k3s, pub *corev1.Container
			for i := range pod.Containers {
				switch pod.Containers[i].Name {
				case "k3s":
					k3s = &pod.Containers[i]
				case "kubeconfig-publisher":
					pub = &pod.Containers[i]
				}
			}
			if k3s == nil || pub == nil {
				t.Fatalf("containers %v", pod.Containers)
			}
			r := k3s.ReadinessProbe
			if r == nil || r.HTTPGet == nil || r.HTTPGet.Path != "/readyz" || r.HTTPGet.Port.IntValue() != layout.PublisherHealthPort {
				t.Fatalf("k3s readiness probe %+v; want GET /readyz on the publisher's port %d", r, layout.PublisherHealthPort)
			}
			if !hasPort(pub, layout.PublisherHealthPort) || !slices.Contains(pub.Command, "--health-address=:2383") {
				t.Errorf("the publisher does not serve port %d: ports %v command %v", layout.PublisherHealthPort, pub.Ports, pub.Command)
			}
			if r.TimeoutSeconds <= 3 {
				t.Errorf("readiness timeout %ds is not longer than the publisher's own 3s request to /readyz", r.TimeoutSeconds)
			}
			for name, p := range map[string]*corev1.Probe{"startup": k3s.StartupProbe, "liveness": k3s.LivenessProbe} {
				if p == nil || p.TCPSocket == nil || p.TCPSocket.Port.IntValue() != layout.APIPort {
					t.Errorf("k3s %s probe %+v; want a TCP check of port %d that does not depend on the API's readiness", name, p, layout.APIPort)
				}
			}
		})
	}
}

func hasPort(c *corev1.Container, port int32) bool {
	for _, p := range c.Ports {
		if p.ContainerPort == port {
			return true
		}
	}
	return false
}
