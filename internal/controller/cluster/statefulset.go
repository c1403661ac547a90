package cluster

import (
	"slices"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/layout"
)

// The server StatefulSet: its pod (the datastore sidecar, k3s, the
// kubeconfig publisher), their command lines, and its size. Pure, like
// desired.go.

// serverVolumes are the volumes every server pod has, whatever its
// datastore, and the data volume's claim template (none when ephemeral: the
// data volume is then an emptyDir).
func serverVolumes(c *v1beta1.Cluster, s Settings) ([]corev1.Volume, []corev1.PersistentVolumeClaim) {
	n := layout.NamesFor(c)
	volumes := []corev1.Volume{
		{Name: layout.ConfigVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: n.ServerConfig},
		}}},
		{Name: layout.KubeconfigVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: layout.TmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		// Optional, so a server whose token Secret was deleted still starts and
		// its publisher can restore the Secret from the server's own copy.
		{Name: layout.TokenVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: n.Token, Optional: ptr.To(true),
			Items: []corev1.KeyToPath{{Key: layout.SecretKeyToken, Path: layout.SecretKeyToken}},
		}}},
	}
	if s.Persistence == v1beta1.EphemeralPersistence {
		return append(volumes, corev1.Volume{Name: layout.DataVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}), nil
	}
	return volumes, []corev1.PersistentVolumeClaim{{
		ObjectMeta: metav1.ObjectMeta{Name: layout.DataVolume, Labels: serverLabels(c)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: s.StorageClass,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: s.StorageSize,
			}},
		},
	}}
}

// DesiredStatefulSet is the server StatefulSet running replicas pods (spec.servers,
// or more while etcd members are being removed; see StatefulSetReplicas).
// configHash is ServerConfig's Hash.
func DesiredStatefulSet(c *v1beta1.Cluster, s Settings, cfg Config, replicas int32, configHash string) *appsv1.StatefulSet {
	n := layout.NamesFor(c)
	podLabels := serverLabels(c)
	volumes, claims := serverVolumes(c, s)
	var initContainers []corev1.Container
	server := serverContainer(c, s, cfg)
	switch s.Datastore {
	case v1beta1.SQLiteDatastore:
		initContainers = append(initContainers, datastoreSidecar(cfg))
	case v1beta1.EtcdDatastore:
		initContainers = append(initContainers, etcdSidecar(c, s, cfg))
		volumes = append(volumes, etcdVolumes(c)...)
		server.VolumeMounts = append(server.VolumeMounts, mount(layout.EtcdTLSVolume, layout.EtcdTLSDir, true, ""))
	case v1beta1.ExternalDatastore:
		check, extVolumes := externalServerPod(c, s, cfg, &server)
		initContainers = append(initContainers, check...)
		volumes = append(volumes, extVolumes...)
	}
	sort.Slice(volumes, func(i, j int) bool { return volumes[i].Name < volumes[j].Name })
	var pullSecrets []corev1.LocalObjectReference
	for _, name := range cfg.PullSecrets {
		pullSecrets = append(pullSecrets, corev1.LocalObjectReference{Name: name})
	}
	retention := appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	if c.Spec.Persistence.WhenDeleted == v1beta1.RetainVolumes {
		retention = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}

	return &appsv1.StatefulSet{
		ObjectMeta: objectMeta(c, n.StatefulSet),
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			ServiceName:         n.Headless,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: serverLabels(c)},
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: retention,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			VolumeClaimTemplates: claims,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      podLabels,
					Annotations: map[string]string{AnnotationConfigHash: configHash},
				},
				Spec: corev1.PodSpec{
					ServiceAccountName:           n.ServiceAccount,
					ShareProcessNamespace:        shareProcessNamespace(s),
					AutomountServiceAccountToken: ptr.To(true),
					EnableServiceLinks:           ptr.To(false),
					NodeSelector:                 c.Spec.NodeSelector,
					Affinity:                     serverAffinity(c, s),
					TopologySpreadConstraints:    serverSpreadConstraints(c, s),
					ImagePullSecrets:             pullSecrets,
					SecurityContext: &corev1.PodSecurityContext{
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					InitContainers: initContainers,
					Containers:     []corev1.Container{server, publisherContainer(c, cfg)},
					Volumes:        volumes,
				},
			},
		},
	}
}

// shareProcessNamespace gives the server pod one PID namespace (the pod's pause
// process its PID 1) with the sqlite and etcd datastores. As its container's
// PID 1, k3s re-executes itself and stays behind as a `k3s init` process that
// only reaps children, which a server without an agent never starts: about
// 21 MiB of private memory per server for nothing (docs/footprint.md). Shared,
// the containers can read each other's /proc/<pid>/environ and
// /proc/<pid>/root, as the same uid without capabilities; with these
// datastores that exposes nothing a container does not hold already
// (docs/security.md, "One PID namespace per server pod"). With an external
// datastore k3s's environment holds the datastore's endpoint and its
// credentials, which the publisher must not read, so that pod keeps one
// namespace per container and k3s its reaper.
func shareProcessNamespace(s Settings) *bool {
	if s.Datastore == v1beta1.ExternalDatastore {
		return nil
	}
	return ptr.To(true)
}

// DatastoreArgs is the sidecar's command line for the sqlite datastore.
func DatastoreArgs() []string {
	return []string{
		"/usr/local/bin/datastore", "sqlite",
		"--data-dir=" + layout.DatastoreDataDir,
		"--listen-address=127.0.0.1:" + strconv.Itoa(layout.DatastoreClientPort),
		"--health-address=:" + strconv.Itoa(layout.DatastoreHealthPort),
		"--metrics-address=:" + strconv.Itoa(layout.DatastoreMetricsPort),
		"--pod-dir=" + layout.DatastorePodDir,
		"--k3s-data-dir=" + layout.K3sDataDir,
	}
}

// PublisherArgs is the kubeconfig publisher's command line.
func PublisherArgs(c *v1beta1.Cluster) []string {
	n := layout.NamesFor(c)
	return []string{
		"/usr/local/bin/datastore", "publish-kubeconfig",
		"--kubeconfig-path=" + layout.KubeconfigPath,
		"--server-url=" + layout.Endpoint(c),
		"--namespace=" + c.Namespace,
		"--secret-name=" + n.Kubeconfig,
		"--token-path=" + layout.ServerTokenPath,
		"--token-secret-name=" + n.Token,
		"--health-address=:" + strconv.Itoa(layout.PublisherHealthPort),
		"--identity=$(POD_NAME)",
	}
}

// ServerArgs is the k3s container's command line: the generated config file,
// then the user's serverArgs, which k3s lets override it.
func ServerArgs(c *v1beta1.Cluster) []string {
	args := []string{"/bin/k3s", "server", "--config=" + layout.ConfigPath}
	return append(args, c.Spec.ServerArgs...)
}

// restrictedContext drops every capability and privilege escalation and keeps
// the root filesystem read-only. The containers run as uid 0 without
// capabilities: the files k3s writes on the shared volume are root-owned with
// mode 0600 and hostPath-backed volumes ignore fsGroup, so a non-root uid could
// not read the token it must restore.
func restrictedContext(readOnlyRoot bool) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(readOnlyRoot),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func httpProbe(path string, port int32, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTP,
		}},
		PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 2,
	}
}

func mount(volume, path string, readOnly bool, subPath string) corev1.VolumeMount {
	return corev1.VolumeMount{Name: volume, MountPath: path, ReadOnly: readOnly, SubPath: subPath}
}

// datastoreSidecar is the sqlite datastore as a native sidecar: an init
// container that keeps running, whose startup probe holds back k3s until the
// datastore answers.
func datastoreSidecar(cfg Config) corev1.Container {
	return corev1.Container{
		Name:            "datastore",
		Image:           cfg.DatastoreImage,
		ImagePullPolicy: cfg.PullPolicy,
		Command:         DatastoreArgs(),
		RestartPolicy:   ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports: []corev1.ContainerPort{
			{Name: "ds-health", ContainerPort: layout.DatastoreHealthPort, Protocol: corev1.ProtocolTCP},
			{Name: "ds-metrics", ContainerPort: layout.DatastoreMetricsPort, Protocol: corev1.ProtocolTCP},
		},
		StartupProbe:   httpProbe("/readyz", layout.DatastoreHealthPort, 1, 300),
		ReadinessProbe: httpProbe("/readyz", layout.DatastoreHealthPort, 5, 3),
		LivenessProbe:  httpProbe("/healthz", layout.DatastoreHealthPort, 10, 6),
		VolumeMounts: []corev1.VolumeMount{
			mount(layout.DataVolume, layout.DatastoreDataDir, false, "datastore"),
			mount(layout.TmpVolume, layout.DatastorePodDir, false, "datastore"),
			// k3s's own directory, for the first start in a pod to set aside
			// certificates a k3s that died on its very first start left
			// half-written (cmd/datastore/unfinishedtls.go).
			mount(layout.DataVolume, layout.K3sDataDir, false, "k3s"),
		},
		SecurityContext: restrictedContext(true),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
		}},
	}
}

// serverContainer runs `k3s server`.
func serverContainer(c *v1beta1.Cluster, s Settings, cfg Config) corev1.Container {
	tcpProbe := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(layout.APIPort)}},
			PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 2,
		}
	}
	ctr := corev1.Container{
		Name:            "k3s",
		Image:           s.ServerImage,
		ImagePullPolicy: cfg.PullPolicy,
		Command:         ServerArgs(c),
		Env:             serverEnv(c, cfg),
		Ports:           []corev1.ContainerPort{{Name: "https", ContainerPort: layout.APIPort, Protocol: corev1.ProtocolTCP}},
		StartupProbe:    tcpProbe(1, 600),
		ReadinessProbe:  serverReadinessProbe(),
		LivenessProbe:   tcpProbe(10, 6),
		VolumeMounts: []corev1.VolumeMount{
			mount(layout.DataVolume, layout.K3sDataDir, false, "k3s"),
			mount(layout.ConfigVolume, layout.ConfigDir, true, ""),
			mount(layout.KubeconfigVolume, layout.KubeconfigDir, false, ""),
			mount(layout.TokenVolume, layout.TokenDir, true, ""),
			mount(layout.TmpVolume, "/tmp", false, ""),
		},
		SecurityContext: restrictedContext(false),
	}
	if c.Spec.ServerResources != nil {
		ctr.Resources = *c.Spec.ServerResources.DeepCopy()
	}
	return ctr
}

// serverEnv is the k3s container's environment: GOGC from cfg.ServerGOGC
// unless spec.serverEnvs sets it, then spec.serverEnvs.
//
// k3s keeps about 110 MB of live heap when idle (OpenAPI specs, API
// handlers, informers), and Go's default GOGC of 100 lets the heap grow to
// twice that between collections: an idle server's private memory swings
// between ~120 and ~280 MiB with when it last collected. A lower GOGC
// collects sooner and keeps it near the live heap, for more GC work under
// load; docs/footprint.md has the measurements behind the default.
func serverEnv(c *v1beta1.Cluster, cfg Config) []corev1.EnvVar {
	var env []corev1.EnvVar
	if cfg.ServerGOGC > 0 && !slices.ContainsFunc(c.Spec.ServerEnvs, func(e v1beta1.ServerEnvVar) bool { return e.Name == "GOGC" }) {
		env = append(env, corev1.EnvVar{Name: "GOGC", Value: strconv.Itoa(cfg.ServerGOGC)})
	}
	for _, e := range c.Spec.ServerEnvs {
		env = append(env, e.EnvVar())
	}
	return env
}

// serverReadinessProbe makes the server pod Ready, and so an endpoint of the
// API Service, only while its API answers /readyz. k3s opens port 6443 and
// writes its kubeconfig seconds before its API serves, so a TCP probe would
// route clients to a server that refuses them; and k3s turns anonymous auth
// off, so the kubelet cannot ask /readyz itself (401). The publisher asks it
// with the admin kubeconfig k3s wrote and answers on its health port. Startup
// and liveness stay on the cheap TCP check: a slow API makes the pod unready,
// it never gets the container restarted.
func serverReadinessProbe() *corev1.Probe {
	p := httpProbe("/readyz", layout.PublisherHealthPort, 1, 3)
	p.TimeoutSeconds = 4 // the publisher's own request to /readyz times out after 3s
	return p
}

// publisherContainer copies the kubeconfig k3s writes into the kubeconfig
// Secret and restores the token Secret from the server's own copy.
func publisherContainer(c *v1beta1.Cluster, cfg Config) corev1.Container {
	return corev1.Container{
		Name:            "kubeconfig-publisher",
		Image:           cfg.DatastoreImage,
		ImagePullPolicy: cfg.PullPolicy,
		Command:         PublisherArgs(c),
		Env:             []corev1.EnvVar{podNameEnv()},
		Ports:           []corev1.ContainerPort{{Name: "pub-health", ContainerPort: layout.PublisherHealthPort, Protocol: corev1.ProtocolTCP}},
		LivenessProbe:   httpProbe("/healthz", layout.PublisherHealthPort, 10, 6),
		VolumeMounts: []corev1.VolumeMount{
			mount(layout.KubeconfigVolume, layout.KubeconfigDir, true, ""),
			mount(layout.DataVolume, layout.K3sDataDir, true, "k3s"),
		},
		SecurityContext: restrictedContext(true),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
		}},
	}
}

// podNameEnv is POD_NAME from the downward API: a server's identity as an etcd
// member and as a kubeconfig publisher.
func podNameEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
	}}
}

// serverReplicas is the one place the server StatefulSet's size is decided:
// spec.servers; none while paused (the claims stay: whenScaled is Retain);
// with etcd, once the StatefulSet exists (live), as many as StatefulSetReplicas
// keeps for the members still listed.
func serverReplicas(c *v1beta1.Cluster, o *observation, live *appsv1.StatefulSet) int32 {
	if o.settings.Datastore == v1beta1.EtcdDatastore && live != nil {
		current := ptr.Deref(live.Spec.Replicas, 0)
		observed := o.etcd.observed
		if observed == nil || !observed.AnyReachable() || len(observed.Members) == 0 {
			return StatefulSetReplicas(o.settings.Servers, nil, false, current)
		}
		return StatefulSetReplicas(o.settings.Servers, memberOrdinals(c, *observed), true, current)
	}
	if paused(c, o.settings) {
		return 0
	}
	return o.settings.Servers
}

// StatefulSetReplicas is how many server pods run with the etcd datastore. A
// member is removed from etcd before its pod goes, so while members with an
// ordinal at or above spec.servers remain, their pods keep running:
// scaling down one removal at a time keeps quorum with every remaining pod up.
// members are the ordinals of the listed members; known is false when no member
// answered, and then the running count is kept (current).
func StatefulSetReplicas(servers int32, members []int, known bool, current int32) int32 {
	n := servers
	if !known {
		return max(n, current)
	}
	for _, i := range members {
		n = max(n, int32(i)+1)
	}
	return n
}

// memberOrdinals maps the observed members to server pod ordinals: by name for
// a member that has started, by peer URL for one that was added but has not.
func memberOrdinals(c *v1beta1.Cluster, o etcd.Observed) []int {
	var out []int
	for _, m := range o.Members {
		for i := range MaxServers {
			p := EtcdPeer(c, i)
			if m.Name == p.Name || (!m.Started() && slices.Contains(m.PeerURLs, p.PeerURL)) {
				out = append(out, i)
				break
			}
		}
	}
	sort.Ints(out)
	return out
}
