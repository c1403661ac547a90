package cluster

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

func TestResolve(t *testing.T) {
	cfg := Config{ServerImage: "rancher/k3s", DefaultVersion: "v1.34.3-k3s1", DefaultPersistence: v1beta1.EphemeralPersistence, DefaultDatastore: v1beta1.SQLiteDatastore, DefaultStorageClass: "fast"}
	cases := []struct {
		name    string
		spec    v1beta1.ClusterSpec
		want    Settings
		wantErr string
	}{
		{
			name: "an empty spec takes every default",
			spec: v1beta1.ClusterSpec{},
			want: Settings{Persistence: v1beta1.EphemeralPersistence, Datastore: v1beta1.SQLiteDatastore, StorageClass: ptr.To("fast"), StorageSize: resource.MustParse("2Gi"), ServerImage: "rancher/k3s:v1.34.3-k3s1", Servers: 1, ServerSpread: v1beta1.SpreadPreferred, ServiceCIDR: K3sDefaultServiceCIDR},
		},
		{
			name: "the spec wins over the defaults",
			spec: v1beta1.ClusterSpec{Servers: 3, ServerSpread: v1beta1.SpreadRequired, Version: "v1.33.1-k3s1", Persistence: v1beta1.PersistenceConfig{Type: v1beta1.DynamicPersistence, StorageClassName: ptr.To(""), StorageRequestSize: "10Gi"}, Datastore: v1beta1.DatastoreConfig{Type: v1beta1.EtcdDatastore}},
			want: Settings{Persistence: v1beta1.DynamicPersistence, Datastore: v1beta1.EtcdDatastore, StorageClass: ptr.To(""), StorageSize: resource.MustParse("10Gi"), ServerImage: "rancher/k3s:v1.33.1-k3s1", Servers: 3, ServerSpread: v1beta1.SpreadRequired, ServiceCIDR: K3sDefaultServiceCIDR},
		},
		{
			name:    "three servers on the default sqlite cannot be realised",
			spec:    v1beta1.ClusterSpec{Servers: 3},
			wantErr: "servers: 3 needs datastore.type etcd; the datastore in effect is sqlite, which runs exactly 1 server",
		},
		{
			name:    "etcd settings on the default sqlite cannot be realised",
			spec:    v1beta1.ClusterSpec{Datastore: v1beta1.DatastoreConfig{Etcd: &v1beta1.EtcdDatastoreConfig{QuotaBackendSize: "4Gi"}}},
			wantErr: "datastore.etcd is set but the datastore in effect is sqlite: set datastore.type etcd, or remove datastore.etcd",
		},
		{
			name:    "an etcd quota that is not a quantity is reported",
			spec:    v1beta1.ClusterSpec{Servers: 3, Datastore: v1beta1.DatastoreConfig{Type: v1beta1.EtcdDatastore, Etcd: &v1beta1.EtcdDatastoreConfig{QuotaBackendSize: "huge"}}},
			wantErr: `datastore.etcd.quotaBackendSize "huge" is not a quantity`,
		},
		{
			name:    "a size that is not a quantity is reported",
			spec:    v1beta1.ClusterSpec{Persistence: v1beta1.PersistenceConfig{StorageRequestSize: "big"}},
			wantErr: `persistence.storageRequestSize "big" is not a quantity`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(&v1beta1.Cluster{Spec: tc.spec}, cfg)
			if tc.wantErr != "" {
				var invalid *InvalidSpecError
				if !errors.As(err, &invalid) || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want InvalidSpecError %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestServiceNetworkChosenOnceAndKept: a new shared-mode Cluster gets the
// host's Service network, so its ClusterIPs are free on the host too; what a
// Cluster runs with is never moved afterwards.
func TestServiceNetworkChosenOnceAndKept(t *testing.T) {
	const host = "10.96.0.0/16"
	withAgent := Config{AgentImage: "k3k/agent:dev", HostServiceCIDR: host}
	for _, tc := range []struct {
		name   string
		cfg    Config
		spec   v1beta1.ClusterSpec
		status v1beta1.ClusterStatus
		want   string
	}{
		{"a new cluster takes the host's network", withAgent, v1beta1.ClusterSpec{}, v1beta1.ClusterStatus{}, host},
		{"the spec wins", withAgent, v1beta1.ClusterSpec{ServiceCIDR: "10.50.0.0/16"}, v1beta1.ClusterStatus{}, "10.50.0.0/16"},
		{"the recorded network is kept when the host's differs", withAgent, v1beta1.ClusterSpec{}, v1beta1.ClusterStatus{PersistenceType: v1beta1.DynamicPersistence, ServiceCIDR: "10.100.0.0/16"}, "10.100.0.0/16"},
		{"a cluster reconciled before the field existed keeps k3s's default", withAgent, v1beta1.ClusterSpec{}, v1beta1.ClusterStatus{PersistenceType: v1beta1.DynamicPersistence}, K3sDefaultServiceCIDR},
		{"a clusterDNS picked for k3s's network keeps it", withAgent, v1beta1.ClusterSpec{ClusterDNS: "10.43.0.10"}, v1beta1.ClusterStatus{}, K3sDefaultServiceCIDR},
		{"no host network known", Config{AgentImage: "k3k/agent:dev"}, v1beta1.ClusterSpec{}, v1beta1.ClusterStatus{}, K3sDefaultServiceCIDR},
		{"no agent runs pods on the host", Config{HostServiceCIDR: host}, v1beta1.ClusterSpec{}, v1beta1.ClusterStatus{}, K3sDefaultServiceCIDR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Resolve(&v1beta1.Cluster{Spec: tc.spec, Status: tc.status}, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if s.ServiceCIDR != tc.want {
				t.Fatalf("service network %q, want %q", s.ServiceCIDR, tc.want)
			}
			st := observedStatus(&v1beta1.Cluster{Spec: tc.spec, Status: tc.status}, observation{settings: s})
			if st.ServiceCIDR != tc.want {
				t.Fatalf("status.serviceCIDR %q, want %q", st.ServiceCIDR, tc.want)
			}
		})
	}
}

func sampleCluster() *v1beta1.Cluster {
	return &v1beta1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "tenants"},
		Spec: v1beta1.ClusterSpec{
			Servers: 1, ClusterCIDR: "10.42.0.0/16", ServiceCIDR: "10.43.0.0/16", ClusterDNS: "10.43.0.10",
			TLSSANs:     []string{"demo.example.com", "k3k-demo-service"},
			ServerArgs:  []string{"--kube-apiserver-arg=v=2"},
			Persistence: v1beta1.PersistenceConfig{StorageRequestSize: "2Gi"},
		},
	}
}

func TestServerConfigIsTheK3sConfigFile(t *testing.T) {
	c := sampleCluster()
	s, err := Resolve(c, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ServerConfig(c, s)
	if err != nil {
		t.Fatal(err)
	}
	want := `cluster-cidr: 10.42.0.0/16
cluster-dns: 10.43.0.10
data-dir: /var/lib/rancher/k3s
datastore-endpoint: http://127.0.0.1:2379
disable:
- servicelb
- traefik
- metrics-server
- local-storage
- coredns
disable-agent: true
disable-cloud-controller: true
egress-selector-mode: disabled
https-listen-port: 6443
kube-apiserver-arg:
- enable-aggregator-routing=true
service-cidr: 10.43.0.0/16
tls-san:
- k3k-demo-service
- k3k-demo-service.tenants
- k3k-demo-service.tenants.svc
- k3k-demo-service.tenants.svc.cluster.local
- demo.example.com
token-file: /etc/k3k/token/token
write-kubeconfig: /var/lib/k3k/kubeconfig/kubeconfig.yaml
write-kubeconfig-mode: "0600"
`
	if diff := cmp.Diff(want, string(got.Data)); diff != "" {
		t.Fatalf("k3s config (-want +got):\n%s", diff)
	}
}

func TestDesiredStatefulSetPersistence(t *testing.T) {
	cases := []struct {
		name        string
		persistence v1beta1.PersistenceType
		retention   v1beta1.VolumeRetention
		wantClaims  int
		wantDataVol *corev1.VolumeSource
		wantPolicy  string
	}{
		{"dynamic gets a claim per server, deleted with the cluster", v1beta1.DynamicPersistence, "", 1, nil, "Delete"},
		{"dynamic with Retain keeps the claims", v1beta1.DynamicPersistence, v1beta1.RetainVolumes, 1, nil, "Retain"},
		{"ephemeral keeps data in an emptyDir", v1beta1.EphemeralPersistence, "", 0, &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}, "Delete"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := sampleCluster()
			c.Spec.Persistence.Type = tc.persistence
			c.Spec.Persistence.WhenDeleted = tc.retention
			s, err := Resolve(c, testConfig)
			if err != nil {
				t.Fatal(err)
			}
			sts := DesiredStatefulSet(c, s, testConfig, 1, ConfigHash([]byte("cfg")))
			if got := len(sts.Spec.VolumeClaimTemplates); got != tc.wantClaims {
				t.Fatalf("%d claim templates, want %d", got, tc.wantClaims)
			}
			var dataVol *corev1.VolumeSource
			for _, v := range sts.Spec.Template.Spec.Volumes {
				if v.Name == layout.DataVolume {
					dataVol = v.VolumeSource.DeepCopy()
				}
			}
			if diff := cmp.Diff(tc.wantDataVol, dataVol); diff != "" {
				t.Fatalf("data volume (-want +got):\n%s", diff)
			}
			if got := string(sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted); got != tc.wantPolicy {
				t.Fatalf("whenDeleted %s, want %s", got, tc.wantPolicy)
			}
		})
	}
}

func TestDesiredStatefulSetPod(t *testing.T) {
	c := sampleCluster()
	c.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	s, err := Resolve(c, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	sts := DesiredStatefulSet(c, s, testConfig, 1, ConfigHash([]byte("cfg")))
	pod := sts.Spec.Template.Spec

	wantMounts := map[string][]corev1.VolumeMount{
		"datastore": {
			{Name: "data", MountPath: "/var/lib/k3k/datastore", SubPath: "datastore"},
			{Name: "tmp", MountPath: "/run/k3k-datastore", SubPath: "datastore"},
			{Name: "data", MountPath: "/var/lib/rancher/k3s", SubPath: "k3s"},
		},
		"k3s": {
			{Name: "data", MountPath: "/var/lib/rancher/k3s", SubPath: "k3s"},
			{Name: "config", MountPath: "/etc/k3k/config", ReadOnly: true},
			{Name: "kubeconfig", MountPath: "/var/lib/k3k/kubeconfig"},
			{Name: "token", MountPath: "/etc/k3k/token", ReadOnly: true},
			{Name: "tmp", MountPath: "/tmp"},
		},
		"kubeconfig-publisher": {
			{Name: "kubeconfig", MountPath: "/var/lib/k3k/kubeconfig", ReadOnly: true},
			{Name: "data", MountPath: "/var/lib/rancher/k3s", ReadOnly: true, SubPath: "k3s"},
		},
	}
	for _, ctr := range append(append([]corev1.Container(nil), pod.InitContainers...), pod.Containers...) {
		if diff := cmp.Diff(wantMounts[ctr.Name], ctr.VolumeMounts); diff != "" {
			t.Errorf("%s mounts (-want +got):\n%s", ctr.Name, diff)
		}
		sc := ctr.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("%s security context is not restrictive: %+v", ctr.Name, sc)
		}
	}
	if diff := cmp.Diff([]string{
		"/usr/local/bin/datastore", "publish-kubeconfig",
		"--kubeconfig-path=/var/lib/k3k/kubeconfig/kubeconfig.yaml",
		"--server-url=https://k3k-demo-service.tenants.svc:443",
		"--namespace=tenants",
		"--secret-name=k3k-demo-kubeconfig",
		"--token-path=/var/lib/rancher/k3s/server/token",
		"--token-secret-name=k3k-demo-token",
		"--health-address=:2383",
		"--identity=$(POD_NAME)",
	}, pod.Containers[1].Command); diff != "" {
		t.Errorf("publisher command (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{
		"/usr/local/bin/datastore", "sqlite", "--data-dir=/var/lib/k3k/datastore",
		"--listen-address=127.0.0.1:2379", "--health-address=:2381", "--metrics-address=:2382",
		"--pod-dir=/run/k3k-datastore", "--k3s-data-dir=/var/lib/rancher/k3s",
	}, pod.InitContainers[0].Command); diff != "" {
		t.Errorf("datastore command (-want +got):\n%s", diff)
	}
	if pod.NodeSelector["disk"] != "ssd" || pod.ServiceAccountName != "k3k-demo-server" {
		t.Errorf("nodeSelector %v serviceAccount %s", pod.NodeSelector, pod.ServiceAccountName)
	}
	if got := sts.Spec.Template.Annotations[AnnotationConfigHash]; got != ConfigHash([]byte("cfg")) {
		t.Errorf("config hash annotation %q", got)
	}
	// A different config must roll the pods.
	if other := DesiredStatefulSet(c, s, testConfig, 1, ConfigHash([]byte("cfg2"))); other.Spec.Template.Annotations[AnnotationConfigHash] == sts.Spec.Template.Annotations[AnnotationConfigHash] {
		t.Errorf("a config change does not change the pod template")
	}
}

func TestDesiredServiceExpose(t *testing.T) {
	cases := []struct {
		name     string
		expose   *v1beta1.ExposeConfig
		wantType corev1.ServiceType
		wantPort int32
		wantNode int32
	}{
		{"in-cluster by default", nil, corev1.ServiceTypeClusterIP, 443, 0},
		{"a node port", &v1beta1.ExposeConfig{NodePort: &v1beta1.NodePortConfig{ServerPort: ptr.To[int32](31443)}}, corev1.ServiceTypeNodePort, 443, 31443},
		{"a load balancer on its own port", &v1beta1.ExposeConfig{LoadBalancer: &v1beta1.LoadBalancerConfig{ServerPort: ptr.To[int32](6443)}}, corev1.ServiceTypeLoadBalancer, 6443, 0},
		{"an ingress keeps the Service in-cluster", &v1beta1.ExposeConfig{Ingress: &v1beta1.IngressConfig{Host: "k.example.com"}}, corev1.ServiceTypeClusterIP, 443, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := sampleCluster()
			c.Spec.Expose = tc.expose
			svc := DesiredService(c)
			if svc.Spec.Type != tc.wantType || svc.Spec.Ports[0].Port != tc.wantPort || svc.Spec.Ports[0].NodePort != tc.wantNode || svc.Spec.Ports[0].TargetPort.IntValue() != 6443 {
				t.Fatalf("type %s ports %+v", svc.Spec.Type, svc.Spec.Ports)
			}
		})
	}
}

func TestIngressHostIsATLSSAN(t *testing.T) {
	c := sampleCluster()
	c.Spec.Expose = &v1beta1.ExposeConfig{Ingress: &v1beta1.IngressConfig{Host: "k.example.com", Annotations: map[string]string{"a": "b"}}}
	if ing := DesiredIngress(c); ing == nil || ing.Spec.Rules[0].Host != "k.example.com" || ing.Annotations["a"] != "b" {
		t.Fatalf("ingress %+v", ing)
	}
	want := []string{"k3k-demo-service", "k3k-demo-service.tenants", "k3k-demo-service.tenants.svc", "k3k-demo-service.tenants.svc.cluster.local", "k.example.com", "demo.example.com"}
	if diff := cmp.Diff(want, TLSSANs(c)); diff != "" {
		t.Fatalf("SANs (-want +got):\n%s", diff)
	}
	if DesiredIngress(sampleCluster()) != nil {
		t.Fatal("an ingress without expose.ingress")
	}
}

func TestComputeStatus(t *testing.T) {
	ready := tokenState{true, v1beta1.ReasonTokenAvailable, "ok"}
	base := Settings{Datastore: v1beta1.SQLiteDatastore, Persistence: v1beta1.DynamicPersistence, Servers: 1}
	cases := []struct {
		name      string
		o         observation
		wantPhase v1beta1.ClusterPhase
		want      map[string]string // condition type -> reason
	}{
		{
			name:      "nothing created yet is pending",
			o:         observation{settings: base, token: ready},
			wantPhase: v1beta1.PhasePending,
			want:      map[string]string{v1beta1.ConditionServersReady: v1beta1.ReasonServersStarting, v1beta1.ConditionKubeconfigPublished: v1beta1.ReasonWaiting, v1beta1.ConditionReady: v1beta1.ReasonNotReady},
		},
		{
			name:      "an invalid kubeconfig is reported as such",
			o:         observation{settings: base, token: ready, kubeconfig: []byte("x"), kubeconfigErr: errors.New("bad")},
			wantPhase: v1beta1.PhasePending,
			want:      map[string]string{v1beta1.ConditionKubeconfigPublished: v1beta1.ReasonInvalid},
		},
		{
			name:      "an unrealisable spec fails",
			o:         observation{settings: base, settingsErr: &InvalidSpecError{Message: "no"}},
			wantPhase: v1beta1.PhaseFailed,
			want:      map[string]string{v1beta1.ConditionReady: v1beta1.ReasonInvalidSpec},
		},
		{
			name:      "etcd before any member was observed",
			o:         observation{settings: Settings{Datastore: v1beta1.EtcdDatastore, Servers: 3}, token: ready},
			wantPhase: v1beta1.PhasePending,
			want:      map[string]string{v1beta1.ConditionDatastoreReady: v1beta1.ReasonDatastoreStarting, v1beta1.ConditionEtcdMembership: v1beta1.ReasonNotObserved},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := sampleCluster()
			st := computeStatus(c, tc.o)
			if st.Phase != tc.wantPhase {
				t.Fatalf("phase %s, want %s", st.Phase, tc.wantPhase)
			}
			for typ, reason := range tc.want {
				var got string
				for _, cond := range st.Conditions {
					if cond.Type == typ {
						got = cond.Reason
					}
				}
				if got != reason {
					t.Errorf("%s reason %q, want %q", typ, got, reason)
				}
			}
		})
	}
}

// TestSQLiteAndEtcdKeepTheirDataApartOnTheVolume: the migration to etcd
// keeps the SQLite file untouched on the same volume (k3kcli cluster migrate
// --abort serves it again), because the etcd pod never mounts the SQLite
// directory of the volume and the SQLite pod never mounts etcd's.
func TestSQLiteAndEtcdKeepTheirDataApartOnTheVolume(t *testing.T) {
	subPaths := func(ds v1beta1.DatastoreType, servers int32) map[string]bool {
		c := newCluster("ns", "apart", func(c *v1beta1.Cluster) {
			c.Spec.Datastore.Type = ds
			c.Spec.Servers = servers
			c.Spec.Persistence.Type = v1beta1.DynamicPersistence
		})
		s, err := Resolve(c, testConfig)
		if err != nil {
			t.Fatal(err)
		}
		pod := DesiredStatefulSet(c, s, testConfig, servers, "hash").Spec.Template.Spec
		got := map[string]bool{}
		for _, ct := range append(pod.InitContainers, pod.Containers...) {
			for _, m := range ct.VolumeMounts {
				if m.Name == layout.DataVolume {
					if m.SubPath == "" {
						t.Fatalf("%s: container %s mounts the whole data volume at %s", ds, ct.Name, m.MountPath)
					}
					got[m.SubPath] = true
				}
			}
		}
		return got
	}
	sqlite, etcd := subPaths(v1beta1.SQLiteDatastore, 1), subPaths(v1beta1.EtcdDatastore, 1)
	if !sqlite["datastore"] || sqlite["etcd"] {
		t.Fatalf("sqlite pod mounts the data volume's subPaths %v, want datastore and not etcd", sqlite)
	}
	if !etcd["etcd"] || etcd["datastore"] {
		t.Fatalf("etcd pod mounts the data volume's subPaths %v, want etcd and never the SQLite directory", etcd)
	}
}

// TestServerPodSharesItsPIDNamespaceExceptWithAnExternalDatastore: with sqlite
// and etcd, k3s must not be its container's PID 1 (it would keep a `k3s init`
// reaper of ~21 MiB); with an external datastore the publisher must not see
// k3s's environment, which holds the endpoint with its credentials.
func TestServerPodSharesItsPIDNamespaceExceptWithAnExternalDatastore(t *testing.T) {
	for _, tc := range []struct {
		datastore v1beta1.DatastoreType
		want      bool
	}{
		{v1beta1.SQLiteDatastore, true},
		{v1beta1.EtcdDatastore, true},
		{v1beta1.ExternalDatastore, false},
	} {
		c := externalCluster("")
		if tc.datastore != v1beta1.ExternalDatastore {
			c.Spec.Datastore = v1beta1.DatastoreConfig{Type: tc.datastore}
		}
		s, err := Resolve(c, testConfig)
		if err != nil {
			t.Fatal(err)
		}
		pod := DesiredStatefulSet(c, s, testConfig, 1, "h").Spec.Template.Spec
		if got := pod.ShareProcessNamespace != nil && *pod.ShareProcessNamespace; got != tc.want {
			t.Errorf("%s: shareProcessNamespace %v, want %v", tc.datastore, got, tc.want)
		}
	}
}

// TestServerGOGCUnlessTheClusterSetsIt: the k3s container gets the
// controller's GOGC, the Cluster's own serverEnvs GOGC replaces it, and 0
// sets none.
func TestServerGOGCUnlessTheClusterSetsIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		gogc int
		envs []v1beta1.ServerEnvVar
		want []corev1.EnvVar
	}{
		{"the default", 25, nil, []corev1.EnvVar{{Name: "GOGC", Value: "25"}}},
		{"with other envs", 25, []v1beta1.ServerEnvVar{{Name: "TZ", Value: "UTC"}}, []corev1.EnvVar{{Name: "GOGC", Value: "25"}, {Name: "TZ", Value: "UTC"}}},
		{"the Cluster's own", 25, []v1beta1.ServerEnvVar{{Name: "GOGC", Value: "100"}}, []corev1.EnvVar{{Name: "GOGC", Value: "100"}}},
		{"none", 0, nil, nil},
	} {
		c := sampleCluster()
		c.Spec.ServerEnvs = tc.envs
		cfg := testConfig
		cfg.ServerGOGC = tc.gogc
		s, err := Resolve(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		k3s := DesiredStatefulSet(c, s, cfg, 1, "h").Spec.Template.Spec.Containers[0]
		if diff := cmp.Diff(tc.want, k3s.Env); diff != "" {
			t.Errorf("%s: k3s env (-want +got):\n%s", tc.name, diff)
		}
	}
}
