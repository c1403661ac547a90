package translate

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// plainPod is a pod that meets the restricted level: what a careful tenant
// writes.
func plainPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "shop", UID: "uid-9"},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "app", Image: "app:1",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

func sc(p *corev1.Pod) *corev1.SecurityContext { return p.Spec.Containers[0].SecurityContext }

// escapes are the host escapes a tenant may try, one per case, each with what
// the refusal must say. Every one is refused at the baseline level.
var escapes = []struct {
	name   string
	mutate func(*corev1.Pod)
	want   string
}{
	{"a privileged container", func(p *corev1.Pod) { sc(p).Privileged = ptr.To(true) }, `Pod Security "baseline": privileged (container "app" must not set securityContext.privileged=true)`},
	{"a privileged init container", func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
	}, `container "init" must not set securityContext.privileged=true`},
	{"a privileged sidecar", func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "side", Image: "busybox", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
	}, `container "side" must not set securityContext.privileged=true`},
	{"SYS_ADMIN", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"SYS_ADMIN"} }, `must not include "SYS_ADMIN" in securityContext.capabilities.add`},
	{"SYS_MODULE", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"SYS_MODULE"} }, `"SYS_MODULE"`},
	{"NET_ADMIN", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"NET_ADMIN"} }, `"NET_ADMIN"`},
	{"DAC_READ_SEARCH", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"DAC_READ_SEARCH"} }, `"DAC_READ_SEARCH"`},
	{"SYS_PTRACE", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"SYS_PTRACE"} }, `"SYS_PTRACE"`},
	{"BPF", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"BPF"} }, `"BPF"`},
	{"seccomp Unconfined on the pod", func(p *corev1.Pod) {
		p.Spec.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
	}, `pod must not set securityContext.seccompProfile.type to "Unconfined"`},
	{"seccomp Unconfined on a container", func(p *corev1.Pod) {
		sc(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	}, `seccompProfile.type to "Unconfined"`},
	{"a Localhost seccomp profile on a container", func(p *corev1.Pod) {
		sc(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("tenant.json")}
	}, `container "app": seccomp profile Localhost "tenant.json" is not one the host administrator allowed`},
	{"a Localhost seccomp profile by annotation", func(p *corev1.Pod) {
		p.Annotations = map[string]string{"seccomp.security.alpha.kubernetes.io/pod": "localhost/tenant.json"}
	}, `seccomp profile Localhost "tenant.json" is not one the host administrator allowed`},
	{"a Localhost AppArmor profile on a container", func(p *corev1.Pod) {
		sc(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("tenant")}
	}, `container "app": AppArmor profile Localhost "tenant" is not one the host administrator allowed`},
	{"a Localhost AppArmor profile by annotation", func(p *corev1.Pod) {
		p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/app": "localhost/tenant"}
	}, `AppArmor profile Localhost "tenant" is not one the host administrator allowed`},
	{"AppArmor Unconfined", func(p *corev1.Pod) {
		sc(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	}, `must not set AppArmor profile type to "Unconfined"`},
	{"AppArmor unconfined by annotation", func(p *corev1.Pod) {
		p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}
	}, `AppArmor profile`},
	{"procMount Unmasked", func(p *corev1.Pod) { sc(p).ProcMount = ptr.To(corev1.UnmaskedProcMount) }, `procMount`},
	{"procMount Unmasked in a user namespace", func(p *corev1.Pod) {
		// The standards allow it from 1.35 on; the agent and its guard do not.
		p.Spec.HostUsers = ptr.To(false)
		sc(p).ProcMount = ptr.To(corev1.UnmaskedProcMount)
	}, `container "app" must not set securityContext.procMount to "Unmasked", also in a user namespace`},
	{"SELinux options", func(p *corev1.Pod) {
		p.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t", User: "system_u"}
	}, `seLinuxOptions`},
	{"an unsafe sysctl", func(p *corev1.Pod) {
		p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "65536"}}
	}, `forbidden sysctls (kernel.msgmax)`},
	{"Windows host process", func(p *corev1.Pod) {
		sc(p).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
	}, `hostProcess`},
	{"host network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "hostNetwork"},
	{"host PID", func(p *corev1.Pod) { p.Spec.HostPID = true }, "hostPID"},
	{"host IPC", func(p *corev1.Pod) { p.Spec.HostIPC = true }, "hostIPC"},
	{"a hostPath volume", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	}, `volume "root": hostPath`},
	{"a host port", func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
	}, `container "app": hostPort 8080`},
	{"a runtime class", func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr.To("runc-privileged") }, `runtimeClassName "runc-privileged"`},
	{"a liveness probe against the metadata service", func(p *corev1.Pod) {
		p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Path: "/latest/meta-data/"}}}
	}, `livenessProbe.httpGet host "169.254.169.254"`},
	{"a readiness probe on the node's kubelet port", func(p *corev1.Pod) {
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: "127.0.0.1"}}}
	}, `readinessProbe.tcpSocket host "127.0.0.1"`},
	{"a postStart hook against the node's kubelet", func(p *corev1.Pod) {
		p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Path: "/pods"}}}
	}, `lifecycle.postStart.httpGet host "127.0.0.1"`},
	{"an ephemeral volume bound to an existing volume", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{ephemeral(func(s *corev1.PersistentVolumeClaimSpec) { s.VolumeName = "pv-of-another-tenant" })}
	}, `volume "scratch": ephemeral.volumeClaimTemplate.spec.volumeName`},
	{"an ephemeral volume cloning the server's claim", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{ephemeral(func(s *corev1.PersistentVolumeClaimSpec) {
			s.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "data-k3k-c1-server-0"}
		})}
	}, `ephemeral.volumeClaimTemplate.spec.dataSource`},
	{"an ephemeral volume populated from a snapshot", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{ephemeral(func(s *corev1.PersistentVolumeClaimSpec) {
			s.DataSourceRef = &corev1.TypedObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "server"}
		})}
	}, `ephemeral.volumeClaimTemplate.spec.dataSourceRef`},
	{"an ephemeral volume choosing volumes by label", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{ephemeral(func(s *corev1.PersistentVolumeClaimSpec) {
			s.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "other"}}
		})}
	}, `ephemeral.volumeClaimTemplate.spec.selector`},
	{"an ephemeral volume labelled as a server volume", func(p *corev1.Pod) {
		v := ephemeral(nil)
		v.Ephemeral.VolumeClaimTemplate.Labels = map[string]string{"k3k.io/component": "server"}
		p.Spec.Volumes = []corev1.Volume{v}
	}, `ephemeral.volumeClaimTemplate.metadata.labels`},
	{"an ephemeral volume with annotations", func(p *corev1.Pod) {
		v := ephemeral(nil)
		v.Ephemeral.VolumeClaimTemplate.Annotations = map[string]string{"volume.kubernetes.io/selected-node": "node-1"}
		p.Spec.Volumes = []corev1.Volume{v}
	}, `ephemeral.volumeClaimTemplate.metadata.annotations`},
	{"an ephemeral volume of the empty class, which binds pre-provisioned host volumes", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{ephemeral(func(s *corev1.PersistentVolumeClaimSpec) { s.StorageClassName = ptr.To("") })}
	}, `volume "scratch": storage class "" (no class) would bind a pre-provisioned host volume`},
	{"an ephemeral volume of a storage class not offered", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{ephemeral(func(s *corev1.PersistentVolumeClaimSpec) { s.StorageClassName = ptr.To("premium") })}
	}, `storage class "premium" is not one the host administrator allowed`},
}

func ephemeral(mutate func(*corev1.PersistentVolumeClaimSpec)) corev1.Volume {
	spec := corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
	if mutate != nil {
		mutate(&spec)
	}
	return corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: spec},
	}}}
}

func TestEveryEscapeIsRefusedAtBaseline(t *testing.T) {
	tr := newTranslator(t)
	if tr.PodSecurityLevel() != "baseline" {
		t.Fatalf("default level %q, want baseline", tr.PodSecurityLevel())
	}
	if _, err := tr.HostPod(plainPod()); err != nil {
		t.Fatalf("the plain pod is refused: %v", err)
	}
	for _, tc := range escapes {
		t.Run(tc.name, func(t *testing.T) {
			p := plainPod()
			tc.mutate(p)
			host, err := tr.HostPod(p)
			var ue *UnsupportedError
			if !errors.As(err, &ue) {
				t.Fatalf("got host pod %v, err %v; want *UnsupportedError", host != nil, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestRestrictedLevel(t *testing.T) {
	tr := newTranslator(t, func(c *Config) { c.PodSecurityLevel = "restricted" })
	cases := []struct {
		name   string
		mutate func(*corev1.Pod)
		want   string // empty: allowed
	}{
		{"the plain pod passes", func(*corev1.Pod) {}, ""},
		{"NET_BIND_SERVICE may be added", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"} }, ""},
		{"root with privilege escalation", func(p *corev1.Pod) {
			p.Spec.SecurityContext.RunAsNonRoot = nil
			p.Spec.SecurityContext.RunAsUser = ptr.To(int64(0))
			sc(p).AllowPrivilegeEscalation = ptr.To(true)
		}, `Pod Security "restricted": allowPrivilegeEscalation != false`},
		{"runAsUser 0", func(p *corev1.Pod) { sc(p).RunAsUser = ptr.To(int64(0)) }, `runAsUser=0`},
		{"no seccomp profile", func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil }, `seccompProfile`},
		{"capabilities not dropped", func(p *corev1.Pod) { sc(p).Capabilities = nil }, `unrestricted capabilities`},
		{"CHOWN added (baseline allows it)", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"CHOWN"} }, `"CHOWN"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := plainPod()
			tc.mutate(p)
			_, err := tr.HostPod(p)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	t.Run("baseline allows what restricted refuses", func(t *testing.T) {
		p := plainPod()
		p.Spec.SecurityContext = nil
		sc(p).AllowPrivilegeEscalation = ptr.To(true)
		sc(p).RunAsUser = ptr.To(int64(0))
		if _, err := newTranslator(t).HostPod(p); err != nil {
			t.Errorf("baseline refused root with escalation: %v", err)
		}
	})
}

// TestPrivilegedLevel: a host administrator who allows the privileged level
// lifts the Pod Security Standards, not the agent's own refusals.
func TestPrivilegedLevel(t *testing.T) {
	tr := newTranslator(t, func(c *Config) { c.PodSecurityLevel = "privileged" })
	for _, tc := range escapes {
		t.Run(tc.name, func(t *testing.T) {
			p := plainPod()
			tc.mutate(p)
			_, err := tr.HostPod(p)
			structural := strings.HasPrefix(tc.name, "host ") || strings.Contains(tc.want, "hostPath") || strings.Contains(tc.want, "hostPort") ||
				strings.Contains(tc.want, "runtimeClassName") || strings.Contains(tc.want, "host \"") || strings.Contains(tc.want, "ephemeral") ||
				strings.Contains(tc.want, "storage class") || strings.Contains(tc.want, "profile Localhost")
			if structural && err == nil {
				t.Errorf("allowed at privileged; the agent refuses it at every level")
			}
			if !structural && err != nil {
				t.Errorf("refused at privileged: %v", err)
			}
		})
	}
	if _, err := New(Config{ClusterName: "c", HostNamespace: "n", NodeName: "x", PodSecurityLevel: "lenient"}); err == nil {
		t.Error("an unknown level was accepted")
	}
}

func TestEphemeralVolumeKeepsOnlyStorage(t *testing.T) {
	tr := newTranslator(t, func(c *Config) { c.StorageClasses = []string{"fast"} })
	p := plainPod()
	p.Spec.Volumes = []corev1.Volume{ephemeral(func(s *corev1.PersistentVolumeClaimSpec) {
		s.StorageClassName = ptr.To("fast")
		s.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
		s.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
	})}
	host, err := tr.HostPod(p)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		StorageClassName: ptr.To("fast"),
		VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
	}}
	if diff := cmp.Diff(want, host.Spec.Volumes[0].Ephemeral.VolumeClaimTemplate); diff != "" {
		t.Errorf("host template (-want +got):\n%s", diff)
	}
}

func TestEphemeralContainersAreReportedNotRun(t *testing.T) {
	tr := newTranslator(t)
	p := plainPod()
	p.Spec.EphemeralContainers = []corev1.EphemeralContainer{
		{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}},
		{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "root", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}},
	}
	host, err := tr.HostPod(p)
	if err == nil || !strings.Contains(err.Error(), `container "root" must not set securityContext.privileged=true`) {
		t.Errorf("a pod created with a privileged ephemeral container: host %v, err %v", host != nil, err)
	}
	got := tr.EphemeralStatuses(p)
	if len(got) != 2 {
		t.Fatalf("%d statuses, want 2", len(got))
	}
	for i, c := range got {
		w := c.State.Waiting
		if w == nil || w.Reason != ReasonUnsupported || !strings.Contains(w.Message, "not run by the shared-mode agent") {
			t.Errorf("status %d: %+v", i, c.State)
		}
	}
	if strings.Contains(got[0].State.Waiting.Message, "Pod Security") {
		t.Errorf("the benign debug container is reported as a violation: %s", got[0].State.Waiting.Message)
	}
	if want := `Pod Security "baseline": privileged (container "root"`; !strings.Contains(got[1].State.Waiting.Message, want) {
		t.Errorf("privileged debug container: %q, want it to mention %q", got[1].State.Waiting.Message, want)
	}
}
