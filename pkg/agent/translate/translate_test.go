package translate

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

func newTranslator(t *testing.T, mutate ...func(*Config)) *Translator {
	t.Helper()
	cfg := Config{ClusterName: "c1", HostNamespace: "tenant", NodeName: "k3k-c1-kubelet"}
	for _, m := range mutate {
		m(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

var hashSuffix = regexp.MustCompile(`-[0-9a-f]{10}$`)

func TestHostName(t *testing.T) {
	tr := newTranslator(t)
	other := newTranslator(t, func(c *Config) { c.ClusterName = "c2" })
	long := strings.Repeat("a", 253)
	cases := []struct {
		name      string
		a, b      string
		sameAsB   bool
		wantStart string
	}{
		{"a plain name keeps name and namespace readable", tr.HostName(KindPod, "default", "web"), "", false, "web-default-"},
		{"the same virtual object always gets the same name", tr.HostName(KindPod, "default", "web"), tr.HostName(KindPod, "default", "web"), true, "web-default-"},
		{"names that sanitize alike still differ", tr.HostName(KindPod, "default", "a.b"), tr.HostName(KindPod, "default", "a-b"), false, "a-b-default-"},
		{"namespace and name boundaries cannot be shifted", tr.HostName(KindPod, "b-c", "a"), tr.HostName(KindPod, "c", "a-b"), false, "a-b-c-"},
		{"a pod's identity Secret differs from a user Secret of the same name", tr.HostName(KindPodIdentity, "default", "web"), tr.HostName(KindSecret, "default", "web"), false, "web-default-"},
		{"two clusters sharing a namespace get different names", tr.HostName(KindPod, "default", "web"), other.HostName(KindPod, "default", "web"), false, "web-default-"},
		{"a 253 character name is truncated to 63", tr.HostName(KindConfigMap, "default", long), tr.HostName(KindConfigMap, "default", long+"x"), false, "aaaa"},
		{"upper case and dots become a DNS label", tr.HostName(KindSecret, "Kube-System", "tls.example.com"), "", false, "tls-example-com-kube-system-"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []string{tc.a, tc.b} {
				if n == "" {
					continue
				}
				if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
					t.Errorf("%q is not a DNS label: %v", n, errs)
				}
				if !hashSuffix.MatchString(n) {
					t.Errorf("%q does not end in a 10 digit hash", n)
				}
			}
			if !strings.HasPrefix(tc.a, tc.wantStart) {
				t.Errorf("%q does not start with %q", tc.a, tc.wantStart)
			}
			if tc.b != "" && (tc.a == tc.b) != tc.sameAsB {
				t.Errorf("names %q and %q: same=%v, want %v", tc.a, tc.b, tc.a == tc.b, tc.sameAsB)
			}
		})
	}
}

func TestVirtualKeyOf(t *testing.T) {
	tr := newTranslator(t)
	other := newTranslator(t, func(c *Config) { c.ClusterName = "c2" })
	vpod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"}}
	host, err := tr.HostPod(vpod)
	if err != nil {
		t.Fatal(err)
	}
	renamed := host.DeepCopy()
	renamed.Name = "web-default-0000000000"

	cases := []struct {
		name string
		tr   *Translator
		obj  metav1.Object
		want VirtualKey
		ok   bool
	}{
		{"a host pod names its virtual pod", tr, host, VirtualKey{Kind: KindPod, Namespace: "default", Name: "web", UID: "u1"}, true},
		{"another cluster's agent does not claim it", other, host, VirtualKey{}, false},
		{"an object whose name is not the derived one is not ours", tr, renamed, VirtualKey{}, false},
		{"an unlabeled object is not ours", tr, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "k3k-c1-token"}}, VirtualKey{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.tr.VirtualKeyOf(tc.obj)
			if ok != tc.ok || got != tc.want {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestIsCopyOf(t *testing.T) {
	tr := newTranslator(t)
	vpod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"}}
	host, err := tr.HostPod(vpod)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name                  string
		tr                    *Translator
		kind                  Kind
		namespace, virtualPod string
		want                  bool
	}{
		{"a host pod is the copy of its virtual pod", tr, KindPod, "default", "web", true},
		{"it is not the copy of another pod", tr, KindPod, "default", "api", false},
		{"nor of the same name in another namespace", tr, KindPod, "shop", "web", false},
		{"nor of another kind's object of that name", tr, KindService, "default", "web", false},
		{"nor is it another cluster's agent's copy", newTranslator(t, func(c *Config) { c.ClusterName = "c2" }), KindPod, "default", "web", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tr.IsCopyOf(host, tc.kind, tc.namespace, tc.virtualPod); got != tc.want {
				t.Errorf("IsCopyOf(%s %s/%s) = %v, want %v", tc.kind, tc.namespace, tc.virtualPod, got, tc.want)
			}
		})
	}
}

// apiAccessVolume is what the ServiceAccount admission plugin adds to a pod.
func apiAccessVolume() corev1.Volume {
	return corev1.Volume{Name: "kube-api-access-x", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To(int32(0o644)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To(int64(3607)), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		},
	}}}
}

func fullPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "uid-1", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName:           "k3k-c1-kubelet",
			ServiceAccountName: "web",
			NodeSelector:       map[string]string{"kubernetes.io/os": "linux"},
			Tolerations:        []corev1.Toleration{{Key: "virtual", Operator: corev1.TolerationOpExists}},
			Affinity:           &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}},
			PriorityClassName:  "high",
			Priority:           ptr.To(int32(1000)),
			Subdomain:          "web",
			ReadinessGates:     []corev1.PodReadinessGate{{ConditionType: "example.com/ready"}},
			ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "regcred"}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}},
				{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-tls"}}},
				{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
					{Path: "cpu", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "web", Resource: "limits.cpu"}},
				}}}},
				apiAccessVolume(),
			},
			Containers: []corev1.Container{{
				Name: "web", Image: "nginx:1",
				EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-env"}}}},
				Env: []corev1.EnvVar{
					{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}, Key: "mode"}}},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
					{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				},
			}},
		},
	}
}

func TestHostPod(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "k3k.io/v1beta1", Kind: "Cluster", Name: "c1", UID: "cluster-uid"}
	tr := newTranslator(t, func(c *Config) {
		c.HostNodeSelector = map[string]string{"pool": "tenants"}
		c.OwnerReferences = []metav1.OwnerReference{owner}
	})
	vpod := fullPod()
	before := vpod.DeepCopy()
	host, err := tr.HostPod(vpod)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, vpod); diff != "" {
		t.Fatalf("HostPod changed its input (-before +after):\n%s", diff)
	}
	name := func(k Kind, n string) string { return tr.HostName(k, "shop", n) }
	identity := name(KindPodIdentity, "web-0")

	wantMeta := metav1.ObjectMeta{
		Name: name(KindPod, "web-0"), Namespace: "tenant",
		Labels: map[string]string{LabelManagedBy: ManagedByValue, LabelCluster: "c1", LabelVirtualNamespace: "shop"},
		Annotations: map[string]string{
			AnnotationKind: "pod", AnnotationNamespace: "shop", AnnotationName: "web-0", AnnotationUID: "uid-1",
			// The label APP reads, carried for the host kubelet (fieldenv.go).
			fieldAnnotation("metadata.labels['app']"): "web",
		},
		OwnerReferences: []metav1.OwnerReference{owner},
	}
	if diff := cmp.Diff(wantMeta, host.ObjectMeta); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}

	s := host.Spec
	if s.NodeName != "" || s.Affinity != nil || s.PriorityClassName != "" || s.Priority != nil || s.Subdomain != "" || s.ReadinessGates != nil {
		t.Errorf("virtual placement leaked to the host: %+v", s)
	}
	if diff := cmp.Diff(map[string]string{"pool": "tenants"}, s.NodeSelector); diff != "" {
		t.Errorf("node selector (-want +got):\n%s", diff)
	}
	if len(s.Tolerations) != 0 {
		t.Errorf("tolerations = %v, want the host's (none)", s.Tolerations)
	}
	if s.ServiceAccountName != "" || s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Errorf("host pod may get host credentials: sa=%q automount=%v", s.ServiceAccountName, s.AutomountServiceAccountToken)
	}
	// The virtual FQDN (hostname.subdomain.namespace.svc.domain) resolves in
	// the pod's /etc/hosts, to the pod itself.
	if diff := cmp.Diff([]corev1.HostAlias{{IP: "127.0.1.1", Hostnames: []string{"web-0.web.shop.svc.cluster.local"}}}, s.HostAliases); diff != "" {
		t.Errorf("host aliases (-want +got):\n%s", diff)
	}
	if s.Hostname != "web-0" {
		t.Errorf("hostname = %q, want the virtual pod name", s.Hostname)
	}
	if diff := cmp.Diff([]corev1.LocalObjectReference{{Name: name(KindSecret, "regcred")}}, s.ImagePullSecrets); diff != "" {
		t.Errorf("image pull secrets (-want +got):\n%s", diff)
	}

	wantVolumes := []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name(KindConfigMap, "web-config")}}}},
		{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name(KindSecret, "web-tls")}}},
		{Name: "podinfo", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "cpu", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "web", Resource: "limits.cpu"}}}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: identity}, Items: []corev1.KeyToPath{{Key: fieldKey("metadata.labels"), Path: "labels"}}}},
		}}}},
		{Name: "kube-api-access-x", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To(int32(0o644)),
			Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: identity}, Items: []corev1.KeyToPath{{Key: tokenKey(TokenSpec{ExpirationSeconds: 3607}), Path: "token"}}}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name(KindConfigMap, "kube-root-ca.crt")}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: identity}, Items: []corev1.KeyToPath{{Key: fieldKey("metadata.namespace"), Path: "namespace"}}}},
			},
		}}},
	}
	if diff := cmp.Diff(wantVolumes, s.Volumes); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}

	c := s.Containers[0]
	wantEnv := []corev1.EnvVar{
		{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name(KindConfigMap, "web-config")}, Key: "mode"}}},
		{Name: "POD_NAME", Value: "web-0"},
		{Name: "POD_NAMESPACE", Value: "shop"},
		{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + fieldAnnotation("metadata.labels['app']") + "']"}}},
		{Name: "NODE", Value: "k3k-c1-kubelet"},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
	}
	if diff := cmp.Diff(wantEnv, c.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if got := c.EnvFrom[0].SecretRef.Name; got != name(KindSecret, "web-env") {
		t.Errorf("envFrom secret = %q", got)
	}

	// Every reference in the host pod names a host copy of a reference of the
	// virtual pod, plus the identity Secret.
	vr, hr := PodRefs(&vpod.Spec), PodRefs(&host.Spec)
	var wantCMs, wantSecrets []string
	for _, n := range vr.ConfigMaps {
		wantCMs = append(wantCMs, name(KindConfigMap, n))
	}
	for _, n := range vr.Secrets {
		wantSecrets = append(wantSecrets, name(KindSecret, n))
	}
	wantSecrets = append(wantSecrets, identity)
	if diff := cmp.Diff(PodRefs(&corev1.PodSpec{Volumes: volumesNaming(wantCMs, wantSecrets)}), hr); diff != "" {
		t.Errorf("host refs (-want +got):\n%s", diff)
	}
}

func volumesNaming(cms, secrets []string) []corev1.Volume {
	var vs []corev1.Volume
	for _, n := range cms {
		vs = append(vs, corev1.Volume{VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}}})
	}
	for _, n := range secrets {
		vs = append(vs, corev1.Volume{VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: n}}})
	}
	return vs
}

func TestPodRefs(t *testing.T) {
	got := PodRefs(&fullPod().Spec)
	want := Refs{ConfigMaps: []string{"kube-root-ca.crt", "web-config"}, Secrets: []string{"regcred", "web-env", "web-tls"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestHostPodRefusesWhatWouldReachTheHost(t *testing.T) {
	tr := newTranslator(t)
	cases := []struct {
		name   string
		mutate func(*corev1.PodSpec)
		want   string
	}{
		{"host network", func(s *corev1.PodSpec) { s.HostNetwork = true }, "hostNetwork"},
		{"host PID", func(s *corev1.PodSpec) { s.HostPID = true }, "hostPID"},
		{"hostPath volume", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}, `volume "root": hostPath`},
		{"an NFS volume", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "10.0.0.1", Path: "/"}}})
		}, `volume "data": only emptyDir, configMap, secret, downwardAPI, projected, ephemeral, persistentVolumeClaim and image volumes`},
		{"privileged container", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}, `privileged (container "web" must not set securityContext.privileged=true)`},
		{"host port", func(s *corev1.PodSpec) {
			s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}
		}, "hostPort 80"},
		{"an unknown downward API field in env", func(s *corev1.PodSpec) {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.generateName"}}})
		}, `field path "metadata.generateName" is not supported`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := fullPod()
			tc.mutate(&p.Spec)
			_, err := tr.HostPod(p)
			var ue *UnsupportedError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v, want *UnsupportedError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestHostPodDNS(t *testing.T) {
	tr := newTranslator(t, func(c *Config) { c.ClusterDNS = "10.43.0.10" })
	cases := []struct {
		name       string
		policy     corev1.DNSPolicy
		wantPolicy corev1.DNSPolicy
		wantNS     []string
	}{
		{"ClusterFirst uses the virtual cluster's DNS", corev1.DNSClusterFirst, corev1.DNSNone, []string{"10.43.0.10"}},
		{"an empty policy is ClusterFirst", "", corev1.DNSNone, []string{"10.43.0.10"}},
		{"Default keeps the node's resolver", corev1.DNSDefault, corev1.DNSDefault, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := fullPod()
			p.Spec.DNSPolicy = tc.policy
			host, err := tr.HostPod(p)
			if err != nil {
				t.Fatal(err)
			}
			if host.Spec.DNSPolicy != tc.wantPolicy {
				t.Errorf("policy = %q, want %q", host.Spec.DNSPolicy, tc.wantPolicy)
			}
			var ns []string
			if host.Spec.DNSConfig != nil {
				ns = host.Spec.DNSConfig.Nameservers
				if got := host.Spec.DNSConfig.Searches[0]; got != "shop.svc.cluster.local" {
					t.Errorf("first search domain = %q", got)
				}
			}
			if diff := cmp.Diff(tc.wantNS, ns); diff != "" {
				t.Errorf("nameservers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHostIdentitySecret(t *testing.T) {
	tr := newTranslator(t)
	p := fullPod()
	p.Annotations = map[string]string{"b": "2", "a": "say \"hi\""}
	id := PodIdentity(&p.Spec)
	tok := tokenKey(TokenSpec{ExpirationSeconds: 3607})
	if diff := cmp.Diff(map[string]TokenSpec{tok: {ExpirationSeconds: 3607}}, id.Tokens); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	s, err := tr.HostIdentitySecret(p, id, map[string][]byte{tok: []byte("jwt")})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{
		fieldKey("metadata.labels"):    []byte(`app="web"`),
		fieldKey("metadata.namespace"): []byte("shop"),
		tok:                            []byte("jwt"),
	}
	if diff := cmp.Diff(want, s.Data); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
	if s.Name != tr.HostName(KindPodIdentity, "shop", "web-0") {
		t.Errorf("name = %q", s.Name)
	}
	if got, _ := tr.FieldValue(p, "metadata.annotations"); got != "a=\"say \\\"hi\\\"\"\nb=\"2\"" {
		t.Errorf("annotations rendered as %q", got)
	}
}

func TestHostSecretAndConfigMap(t *testing.T) {
	tr := newTranslator(t)
	cases := []struct {
		name     string
		in       corev1.SecretType
		wantType corev1.SecretType
	}{
		{"a ServiceAccount token Secret becomes Opaque so the host's token controller ignores it", corev1.SecretTypeServiceAccountToken, corev1.SecretTypeOpaque},
		{"an image pull Secret keeps its type, which kubelet reads", corev1.SecretTypeDockerConfigJson, corev1.SecretTypeDockerConfigJson},
		{"an untyped Secret is Opaque", "", corev1.SecretTypeOpaque},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "shop", UID: "s-uid"}, Type: tc.in, Data: map[string][]byte{"k": []byte("v")}}
			h := tr.HostSecret(v)
			if h.Type != tc.wantType || string(h.Data["k"]) != "v" || h.Namespace != "tenant" {
				t.Errorf("got type %q data %q in %q", h.Type, h.Data, h.Namespace)
			}
			if k, ok := tr.VirtualKeyOf(h); !ok || k != (VirtualKey{Kind: KindSecret, Namespace: "shop", Name: "s", UID: "s-uid"}) {
				t.Errorf("VirtualKeyOf = %+v, %v", k, ok)
			}
		})
	}
	cm := tr.HostConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "shop"}, Data: map[string]string{"a": "b"}, Immutable: ptr.To(true)})
	if cm.Immutable != nil || cm.Data["a"] != "b" || cm.Name != tr.HostName(KindConfigMap, "shop", "c") {
		t.Errorf("config map copy: %+v", cm)
	}
}

func TestVirtualStatus(t *testing.T) {
	start := metav1.Now()
	scheduled := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, Reason: "virtual"}
	vpod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Generation: 3, UID: types.UID("v")},
		Status:     corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort, Conditions: []corev1.PodCondition{scheduled}},
	}
	running := &corev1.Pod{Status: corev1.PodStatus{
		Phase: corev1.PodRunning, HostIP: "192.168.1.5", HostIPs: []corev1.HostIP{{IP: "192.168.1.5"}},
		PodIP: "10.42.0.7", PodIPs: []corev1.PodIP{{IP: "10.42.0.7"}}, StartTime: &start, QOSClass: corev1.PodQOSBestEffort,
		ObservedGeneration: 1,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, Reason: "host"},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, ObservedGeneration: 1},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, ContainerID: "containerd://abc", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}}}},
	}}
	cases := []struct {
		name string
		host *corev1.Pod
		want corev1.PodStatus
	}{
		{"a host pod with no status yet is Pending", &corev1.Pod{}, corev1.PodStatus{
			Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort, Conditions: []corev1.PodCondition{scheduled},
		}},
		{"a running host pod's IPs, conditions and containers flow back, PodScheduled stays virtual", running, corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: "192.168.1.5", HostIPs: []corev1.HostIP{{IP: "192.168.1.5"}},
			PodIP: "10.42.0.7", PodIPs: []corev1.PodIP{{IP: "10.42.0.7"}}, StartTime: &start, QOSClass: corev1.PodQOSBestEffort,
			ObservedGeneration: 3,
			Conditions:         []corev1.PodCondition{scheduled, {Type: corev1.PodReady, Status: corev1.ConditionTrue, ObservedGeneration: 3}},
			ContainerStatuses:  running.Status.ContainerStatuses,
		}},
		{"the virtual pod keeps its QoS class when a host LimitRange made the host pod Burstable", &corev1.Pod{Status: corev1.PodStatus{
			Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable,
		}}, corev1.PodStatus{
			Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort, Conditions: []corev1.PodCondition{scheduled},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, VirtualStatus(vpod, tc.host)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestImagePatch(t *testing.T) {
	v := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "a:2"}, {Name: "b", Image: "b:1"}}}}
	h := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "a:1"}, {Name: "b", Image: "b:1"}}}}
	if diff := cmp.Diff(map[string]string{"a": "a:2"}, ImagePatch(v, h)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestActiveDeadlinePatch(t *testing.T) {
	pod := func(d *int64) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{ActiveDeadlineSeconds: d}} }
	cases := []struct {
		name          string
		virtual, host *int64
		want          *int64
	}{
		{"none on either side", nil, nil, nil},
		{"set on the running virtual pod", ptr.To(int64(30)), nil, ptr.To(int64(30))},
		{"shortened", ptr.To(int64(30)), ptr.To(int64(60)), ptr.To(int64(30))},
		{"already there", ptr.To(int64(30)), ptr.To(int64(30)), nil},
		{"never lengthened (the host refuses it)", ptr.To(int64(90)), ptr.To(int64(60)), nil},
		{"never removed", nil, ptr.To(int64(60)), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ActiveDeadlinePatch(pod(tc.virtual), pod(tc.host))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestServiceLinkEnv: the variables a kubelet writes for a pod's namespace's
// Services (k8s.io/kubernetes pkg/kubelet/envvars), with the addresses given.
func TestServiceLinkEnv(t *testing.T) {
	links := []ServiceLink{
		{Name: "redis-master", IP: "10.43.0.7", Ports: []corev1.ServicePort{{Name: "redis", Port: 6379}, {Port: 53, Protocol: corev1.ProtocolUDP}}},
		{Name: "api", IP: "fd00::1", Ports: []corev1.ServicePort{{Port: 443}}},
		{Name: "pending", Ports: []corev1.ServicePort{{Port: 80}}},
	}
	want := []corev1.EnvVar{
		{Name: "API_SERVICE_HOST", Value: "fd00::1"},
		{Name: "API_SERVICE_PORT", Value: "443"},
		{Name: "API_PORT", Value: "tcp://[fd00::1]:443"},
		{Name: "API_PORT_443_TCP", Value: "tcp://[fd00::1]:443"},
		{Name: "API_PORT_443_TCP_PROTO", Value: "tcp"},
		{Name: "API_PORT_443_TCP_PORT", Value: "443"},
		{Name: "API_PORT_443_TCP_ADDR", Value: "fd00::1"},
		{Name: "REDIS_MASTER_SERVICE_HOST", Value: "10.43.0.7"},
		{Name: "REDIS_MASTER_SERVICE_PORT", Value: "6379"},
		{Name: "REDIS_MASTER_SERVICE_PORT_REDIS", Value: "6379"},
		{Name: "REDIS_MASTER_PORT", Value: "tcp://10.43.0.7:6379"},
		{Name: "REDIS_MASTER_PORT_6379_TCP", Value: "tcp://10.43.0.7:6379"},
		{Name: "REDIS_MASTER_PORT_6379_TCP_PROTO", Value: "tcp"},
		{Name: "REDIS_MASTER_PORT_6379_TCP_PORT", Value: "6379"},
		{Name: "REDIS_MASTER_PORT_6379_TCP_ADDR", Value: "10.43.0.7"},
		{Name: "REDIS_MASTER_PORT_53_UDP", Value: "udp://10.43.0.7:53"},
		{Name: "REDIS_MASTER_PORT_53_UDP_PROTO", Value: "udp"},
		{Name: "REDIS_MASTER_PORT_53_UDP_PORT", Value: "53"},
		{Name: "REDIS_MASTER_PORT_53_UDP_ADDR", Value: "10.43.0.7"},
	}
	if diff := cmp.Diff(want, ServiceLinkEnv(links)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	t.Run("a container's own variable wins", func(t *testing.T) {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{{Name: "API_SERVICE_HOST", Value: "mine"}}}}}}
		AddServiceLinks(p, links[1:2])
		env := p.Spec.Containers[0].Env
		if len(env) != 7 || env[len(env)-1].Value != "mine" || slices.ContainsFunc(env[:6], func(e corev1.EnvVar) bool { return e.Name == "API_SERVICE_HOST" }) {
			t.Errorf("env = %v, want the six link variables but API_SERVICE_HOST, then the container's own", env)
		}
	})
}

func TestStartedContainers(t *testing.T) {
	t1, t2 := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	running := func(name string, at metav1.Time) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}}
	}
	exited := func(name string, at metav1.Time) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: at}}}
	}
	waiting := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	cases := []struct {
		name       string
		prev, next corev1.PodStatus
		want       []string
	}{
		{"nothing yet", corev1.PodStatus{}, corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting}}, nil},
		{"from waiting to running", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting}},
			corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running("app", t1)}}, []string{"app"}},
		{"still running: said before", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running("app", t1)}},
			corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running("app", t1)}}, nil},
		{"ran and exited between two looks", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting}},
			corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{exited("app", t1)}}, []string{"app"}},
		{"exited after it was seen running", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running("app", t1)}},
			corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{exited("app", t1)}}, nil},
		{"restarted", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{exited("app", t1)}},
			corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running("app", t2)}}, []string{"app"}},
		{"never started", corev1.PodStatus{}, corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{exited("app", metav1.Time{})}}, nil},
		{"init containers first", corev1.PodStatus{},
			corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{exited("init", t1)}, ContainerStatuses: []corev1.ContainerStatus{running("app", t2)}},
			[]string{"init", "app"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, StartedContainers(tc.prev, tc.next)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestFieldAnnotations: the labels and annotations a pod's variables read
// are carried in host annotations of their own, the values kept current; a
// missing one is carried empty, as a kubelet resolves it.
func TestFieldAnnotations(t *testing.T) {
	ref := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	vpod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"mysubpath": "mypath/foo"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Env: []corev1.EnvVar{{Name: "GONE", ValueFrom: ref("metadata.annotations['gone']")}}}},
			Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{
				{Name: "APP", ValueFrom: ref("metadata.labels['app']")},
				{Name: "SUB", ValueFrom: ref("metadata.annotations['mysubpath']")},
				{Name: "NAME", ValueFrom: ref("metadata.name")},
			}}},
		},
	}
	want := map[string]string{
		fieldAnnotation("metadata.labels['app']"):            "web",
		fieldAnnotation("metadata.annotations['mysubpath']"): "mypath/foo",
		fieldAnnotation("metadata.annotations['gone']"):      "",
	}
	if diff := cmp.Diff(want, FieldAnnotations(vpod)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	host := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: want}}
	if p := FieldAnnotationsPatch(vpod, host); p != nil {
		t.Errorf("patch %v for a host pod that carries them all", p)
	}
	vpod.Annotations["mysubpath"] = "mypath/bar"
	if diff := cmp.Diff(map[string]string{fieldAnnotation("metadata.annotations['mysubpath']"): "mypath/bar"}, FieldAnnotationsPatch(vpod, host)); diff != "" {
		t.Errorf("patch after a change (-want +got):\n%s", diff)
	}
}
