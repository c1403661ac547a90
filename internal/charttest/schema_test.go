package charttest

import (
	"strings"
	"testing"
)

func TestBadValuesAreRejectedWithAClearMessage(t *testing.T) {
	cases := []struct {
		name string
		set  []string
		says []string
	}{
		{"an unknown persistence type", []string{"--set", "persistence.type=fast"}, []string{"persistence/type", "'dynamic', 'ephemeral'"}},
		{"an unknown datastore type", []string{"--set", "datastore.type=postgres"}, []string{"datastore/type", "'sqlite', 'etcd'"}},
		{"a misspelt top-level key", []string{"--set", "persistance.type=dynamic"}, []string{"persistance"}},
		{"a default storage size the controller cannot take yet", []string{"--set", "persistence.storageRequestSize=5Gi"}, []string{"storageRequestSize"}},
		{"an unknown pull policy", []string{"--set", "image.pullPolicy=Sometimes"}, []string{"image/pullPolicy", "'Always', 'IfNotPresent', 'Never'"}},
		{"a repository with a tag in it", []string{"--set", "image.repository=k3k-io/k3k-controller:v1"}, []string{"image/repository"}},
		{"an empty k3s version", []string{"--set", "k3sServer.image.tag="}, []string{"k3sServer/image/tag"}},
		{"a namespace that is no DNS label", []string{"--set", "watchNamespaces={Team_A}"}, []string{"watchNamespaces/0"}},
		{"the same namespace twice", []string{"--set", "watchNamespaces={a,a}"}, []string{"/watchNamespaces", "are equal"}},
		{"a storage class that is no name", []string{"--set", "persistence.storageClassName=Fast SSD"}, []string{"persistence/storageClassName"}},
		{"a pull secret without name", []string{"--set", "imagePullSecrets[0].secret=x"}, []string{"imagePullSecrets/0"}},
		{"no reconcile worker", []string{"--set", "workers=0"}, []string{"/workers", "minimum"}},
		{"a port out of range", []string{"--set", "probePort=70000"}, []string{"/probePort", "maximum"}},
		{"pull policies the controller cannot honour at once", []string{"--set", "datastore.image.pullPolicy=Always"},
			[]string{"must be equal: the controller applies one pull policy to every image it deploys"}},
		{"replicas without leader election", []string{"--set", "replicaCount=2", "--set", "leaderElection.enabled=false"},
			[]string{"replicaCount > 1 needs leaderElection.enabled: true"}},
		{"a lease duration that is no Go duration", []string{"--set", "leaderElection.leaseDuration=1 minute"}, []string{"leaderElection/leaseDuration"}},
		{"a quota given as a number", []string{"--set", "isolation.quota.pods=10"}, []string{"isolation/quota/pods"}},
		{"a quota that is no quantity", []string{"--set-string", "isolation.quota.pods=lots"}, []string{"isolation/quota/pods"}},
		{"an egress CIDR that is no CIDR", []string{"--set", "isolation.networkPolicy.egressCIDRs={internet}"}, []string{"isolation/networkPolicy/egressCIDRs/0"}},
		{"no ServiceAccount and no name", []string{"--set", "serviceAccount.create=false"}, []string{"serviceAccount.name is required"}},
		{"a ServiceMonitor with metrics off", []string{"--set", "metrics.serviceMonitor.enabled=true", "--set", "metricsPort=0"},
			[]string{"metrics.serviceMonitor.enabled needs metricsPort > 0"}},
		{"a scrape interval that is no duration", []string{"--set", "metrics.serviceMonitor.interval=30 seconds"}, []string{"metrics/serviceMonitor/interval"}},
		{"a log level the controller does not know", []string{"--set", "logLevel=verbose"}, []string{"/logLevel"}},
		{"an environment variable without name", []string{"--set", "extraEnv[0].value=x"}, []string{"extraEnv/0", "name"}},
		{"a full name that is no DNS label", []string{"--set", "fullnameOverride=Ops_Name"}, []string{"/fullnameOverride"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, err := helm(templateArgs("", tc.set...)...)
			if err == nil {
				t.Fatalf("helm template accepted %v", tc.set)
			}
			for _, want := range tc.says {
				if !strings.Contains(stderr, want) {
					t.Errorf("message does not say %q:\n%s", want, stderr)
				}
			}
		})
	}
}
