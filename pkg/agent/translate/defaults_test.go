package translate

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// agentDefaults are the agent's flag defaults for resources.
func agentDefaults(c *Config) {
	c.DefaultRequests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	c.DefaultLimits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}
}

func rl(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		out[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

func TestSeccompDefault(t *testing.T) {
	runtimeDefault := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	allowed := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/audited.json")}
	cases := []struct {
		name          string
		disable       bool
		mutate        func(*corev1.Pod)
		wantPod       *corev1.SeccompProfile
		wantContainer *corev1.SeccompProfile
	}{
		{"a pod without a profile gets RuntimeDefault at pod level", false, func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = nil
		}, runtimeDefault, nil},
		{"a pod without a security context gets one with RuntimeDefault", false, func(p *corev1.Pod) {
			p.Spec.SecurityContext = nil
		}, runtimeDefault, nil},
		{"a container's own profile is kept beside the pod's default", false, func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = nil
			sc(p).SeccompProfile = allowed
		}, runtimeDefault, allowed},
		{"the pod's own profile is kept", false, func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = allowed
		}, allowed, nil},
		{"with the default disabled a pod without a profile stays without", true, func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = nil
		}, nil, nil},
		{"a Windows pod, which may not set one, is left alone", false, func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = nil
			p.Spec.OS = &corev1.PodOS{Name: corev1.Windows}
		}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTranslator(t, func(c *Config) {
				c.DisableSeccompDefault = tc.disable
				c.SeccompLocalhostProfiles = []string{"profiles/audited.json"}
			})
			p := plainPod()
			tc.mutate(p)
			host, err := tr.HostPod(p)
			if err != nil {
				t.Fatal(err)
			}
			var got *corev1.SeccompProfile
			if host.Spec.SecurityContext != nil {
				got = host.Spec.SecurityContext.SeccompProfile
			}
			if diff := cmp.Diff(tc.wantPod, got); diff != "" {
				t.Errorf("pod profile (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantContainer, host.Spec.Containers[0].SecurityContext.SeccompProfile); diff != "" {
				t.Errorf("container profile (-want +got):\n%s", diff)
			}
		})
	}
}

// profileCase is a pod changed by mutate, translated at level with a list
// of allowed Localhost profiles: refused mentioning want, or allowed when
// want is empty.
type profileCase struct {
	name   string
	level  string
	mutate func(*corev1.Pod)
	want   string
}

// runProfileCases translates each case's pod with allow applied to the
// Config.
func runProfileCases(t *testing.T, cases []profileCase, allow func(*Config)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTranslator(t, func(c *Config) {
				c.PodSecurityLevel = tc.level
				allow(c)
			})
			p := plainPod()
			tc.mutate(p)
			host, err := tr.HostPod(p)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ue *UnsupportedError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got host pod %v, err %v; want *UnsupportedError mentioning %q", host != nil, err, tc.want)
			}
		})
	}
}

func TestLocalhostSeccompProfiles(t *testing.T) {
	localhost := func(name string) *corev1.SeccompProfile {
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To(name)}
	}
	cases := []profileCase{
		{"a pod-level profile not allowed is refused", "", func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = localhost("evil.json")
		}, `pod: seccomp profile Localhost "evil.json" is not one the host administrator allowed (allowed: profiles/audited.json)`},
		{"a container's profile not allowed is refused, naming the container", "", func(p *corev1.Pod) {
			sc(p).SeccompProfile = localhost("../../../../tmp/mine.json")
		}, `container "app": seccomp profile Localhost "../../../../tmp/mine.json"`},
		{"an init container's is refused", "", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", SecurityContext: &corev1.SecurityContext{SeccompProfile: localhost("x.json")}}}
		}, `container "init": seccomp profile Localhost "x.json"`},
		{"an ephemeral container's is refused", "", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "busybox", SecurityContext: &corev1.SecurityContext{SeccompProfile: localhost("x.json")},
			}}}
		}, `container "debug": seccomp profile Localhost "x.json"`},
		{"the legacy pod annotation is refused", "", func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.SeccompPodAnnotationKey: "localhost/evil.json"}
		}, `pod (annotation "seccomp.security.alpha.kubernetes.io/pod"): seccomp profile Localhost "evil.json"`},
		{"the legacy container annotation is refused, naming the container", "", func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.SeccompContainerAnnotationKeyPrefix + "app": "localhost/evil.json"}
		}, `container "app" (annotation "container.seccomp.security.alpha.kubernetes.io/app"): seccomp profile Localhost "evil.json"`},
		{"a profile not allowed is refused at the privileged level too", "privileged", func(p *corev1.Pod) {
			sc(p).SeccompProfile = localhost("evil.json")
		}, `container "app": seccomp profile Localhost "evil.json"`},
		{"an allowed profile passes", "", func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = localhost("profiles/audited.json")
		}, ""},
		{"an allowed profile passes by annotation", "", func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.SeccompPodAnnotationKey: "localhost/profiles/audited.json"}
		}, ""},
		{"a runtime/default annotation is no Localhost profile", "", func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.SeccompPodAnnotationKey: "runtime/default"}
		}, ""},
	}
	runProfileCases(t, cases, func(c *Config) { c.SeccompLocalhostProfiles = []string{"profiles/audited.json"} })
	t.Run("none is allowed by default", func(t *testing.T) {
		p := plainPod()
		p.Spec.SecurityContext.SeccompProfile = localhost("profiles/audited.json")
		_, err := newTranslator(t).HostPod(p)
		if want := `pod: seccomp profile Localhost "profiles/audited.json" is not one the host administrator allowed (none is)`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to mention %q", err, want)
		}
	})
}

// TestLocalhostAppArmorProfiles: a Localhost AppArmor profile is held to
// the host administrator's list like a seccomp one, in each place a pod can
// name it (pod, container, ephemeral container, the deprecated annotation),
// at every level.
func TestLocalhostAppArmorProfiles(t *testing.T) {
	localhost := func(name string) *corev1.AppArmorProfile {
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To(name)}
	}
	cases := []profileCase{
		{"a pod-level profile not allowed is refused", "", func(p *corev1.Pod) {
			p.Spec.SecurityContext.AppArmorProfile = localhost("cri-containerd.apparmor.d")
		}, `pod: AppArmor profile Localhost "cri-containerd.apparmor.d" is not one the host administrator allowed (allowed: k3k-audited)`},
		{"a container's profile not allowed is refused, naming the container", "", func(p *corev1.Pod) {
			sc(p).AppArmorProfile = localhost("unconfined-ish")
		}, `container "app": AppArmor profile Localhost "unconfined-ish"`},
		{"an init container's is refused", "", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", SecurityContext: &corev1.SecurityContext{AppArmorProfile: localhost("x")}}}
		}, `container "init": AppArmor profile Localhost "x"`},
		{"an ephemeral container's is refused", "", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "busybox", SecurityContext: &corev1.SecurityContext{AppArmorProfile: localhost("x")},
			}}}
		}, `container "debug": AppArmor profile Localhost "x"`},
		{"the deprecated annotation is refused, naming the container", "", func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app": "localhost/evil"}
		}, `container "app" (annotation "container.apparmor.security.beta.kubernetes.io/app"): AppArmor profile Localhost "evil"`},
		{"a profile not allowed is refused at the privileged level too", "privileged", func(p *corev1.Pod) {
			sc(p).AppArmorProfile = localhost("evil")
		}, `container "app": AppArmor profile Localhost "evil"`},
		{"a seccomp profile of the allowed AppArmor name is still refused", "", func(p *corev1.Pod) {
			sc(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("k3k-audited")}
		}, `container "app": seccomp profile Localhost "k3k-audited" is not one the host administrator allowed (none is)`},
		{"an allowed profile passes", "", func(p *corev1.Pod) {
			p.Spec.SecurityContext.AppArmorProfile = localhost("k3k-audited")
		}, ""},
		{"an allowed profile passes by annotation", "", func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app": "localhost/k3k-audited"}
		}, ""},
		{"RuntimeDefault is no Localhost profile", "", func(p *corev1.Pod) {
			sc(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
			p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app": "runtime/default"}
		}, ""},
	}
	runProfileCases(t, cases, func(c *Config) { c.AppArmorLocalhostProfiles = []string{"k3k-audited"} })
	t.Run("none is allowed by default", func(t *testing.T) {
		p := plainPod()
		p.Spec.SecurityContext.AppArmorProfile = localhost("k3k-audited")
		_, err := newTranslator(t).HostPod(p)
		if want := `pod: AppArmor profile Localhost "k3k-audited" is not one the host administrator allowed (none is)`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to mention %q", err, want)
		}
	})
	t.Run("an annotation the API server turned into the field is reported once", func(t *testing.T) {
		p := plainPod()
		p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app": "localhost/evil"}
		sc(p).AppArmorProfile = localhost("evil")
		_, err := newTranslator(t).HostPod(p)
		var ue *UnsupportedError
		if !errors.As(err, &ue) || len(ue.Reasons) != 1 || !strings.Contains(ue.Reasons[0], `container "app": AppArmor profile Localhost "evil"`) {
			t.Errorf("err = %v, want one reason, for the container's field", err)
		}
	})
	t.Run("an allowed profile reaches the host pod as written", func(t *testing.T) {
		tr := newTranslator(t, func(c *Config) { c.AppArmorLocalhostProfiles = []string{"k3k-audited"} })
		p := plainPod()
		sc(p).AppArmorProfile = localhost("k3k-audited")
		host, err := tr.HostPod(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := host.Spec.Containers[0].SecurityContext.AppArmorProfile; got == nil || ptr.Deref(got.LocalhostProfile, "") != "k3k-audited" {
			t.Errorf("host container's AppArmor profile = %+v, want Localhost k3k-audited", got)
		}
	})
}

func TestDefaultResources(t *testing.T) {
	container := func(name string, req, lim corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: name, Image: "app:1", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
	}
	sidecar := func(c corev1.Container) corev1.Container {
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		return c
	}
	type want struct{ req, lim corev1.ResourceList }
	cases := []struct {
		name       string
		config     func(*Config)
		spec       corev1.PodSpec
		want       []want // init containers, then containers
		wantPodLim corev1.ResourceList
	}{
		{"a container that sets nothing gets the default requests and limits", agentDefaults,
			corev1.PodSpec{Containers: []corev1.Container{container("app", nil, nil)}},
			[]want{{rl("cpu", "10m", "memory", "32Mi"), rl("memory", "512Mi")}}, nil},
		{"init containers and sidecars get them too", agentDefaults,
			corev1.PodSpec{
				InitContainers: []corev1.Container{container("init", nil, nil), sidecar(container("side", nil, nil))},
				Containers:     []corev1.Container{container("app", nil, nil)},
			},
			[]want{
				{rl("cpu", "10m", "memory", "32Mi"), rl("memory", "512Mi")},
				{rl("cpu", "10m", "memory", "32Mi"), rl("memory", "512Mi")},
				{rl("cpu", "10m", "memory", "32Mi"), rl("memory", "512Mi")},
			}, nil},
		{"what a container sets is kept, what it leaves is filled", agentDefaults,
			corev1.PodSpec{Containers: []corev1.Container{container("app", rl("cpu", "2"), rl("cpu", "4"))}},
			[]want{{rl("cpu", "2", "memory", "32Mi"), rl("cpu", "4", "memory", "512Mi")}}, nil},
		{"a container with its own limit but no request gets no request of it", agentDefaults,
			corev1.PodSpec{Containers: []corev1.Container{container("app", nil, rl("memory", "256Mi"))}},
			[]want{{rl("cpu", "10m"), rl("memory", "256Mi")}}, nil},
		{"a default request is never above the container's limit", func(c *Config) {
			c.DefaultRequests = rl("memory", "1Gi")
			c.DefaultLimits = rl("memory", "512Mi")
		},
			corev1.PodSpec{Containers: []corev1.Container{container("app", nil, nil)}},
			[]want{{rl("memory", "512Mi"), rl("memory", "512Mi")}}, nil},
		{"a default limit below the container's own request is raised to it", agentDefaults,
			corev1.PodSpec{Containers: []corev1.Container{container("app", rl("memory", "2Gi"), nil)}},
			[]want{{rl("cpu", "10m", "memory", "2Gi"), rl("memory", "2Gi")}}, nil},
		{"without defaults a container is left as it is", nil,
			corev1.PodSpec{Containers: []corev1.Container{container("app", nil, nil)}},
			[]want{{nil, nil}}, nil},
		{"a resource limited at pod level is left to the pod level", agentDefaults,
			corev1.PodSpec{
				Resources:  &corev1.ResourceRequirements{Requests: rl("memory", "64Mi"), Limits: rl("memory", "128Mi")},
				Containers: []corev1.Container{container("a", nil, nil), container("b", nil, nil)},
			},
			[]want{{rl("cpu", "10m"), nil}, {rl("cpu", "10m"), nil}}, rl("memory", "128Mi")},
		{"a pod-level request without a limit gets the default limit at pod level", agentDefaults,
			corev1.PodSpec{
				Resources:  &corev1.ResourceRequirements{Requests: rl("memory", "1Mi")},
				Containers: []corev1.Container{container("a", nil, nil), container("b", nil, nil)},
			},
			[]want{{rl("cpu", "10m"), nil}, {rl("cpu", "10m"), nil}}, rl("memory", "512Mi")},
		{"that pod-level limit is raised to the pod's request and a container's own limit", agentDefaults,
			corev1.PodSpec{
				Resources:  &corev1.ResourceRequirements{Requests: rl("memory", "600Mi")},
				Containers: []corev1.Container{container("a", nil, rl("memory", "1Gi")), container("b", nil, nil)},
			},
			[]want{{rl("cpu", "10m"), rl("memory", "1Gi")}, {rl("cpu", "10m"), nil}}, rl("memory", "1Gi")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mutate []func(*Config)
			if tc.config != nil {
				mutate = append(mutate, tc.config)
			}
			tr := newTranslator(t, mutate...)
			p := plainPod()
			p.Spec.InitContainers, p.Spec.Containers, p.Spec.Resources = tc.spec.InitContainers, tc.spec.Containers, tc.spec.Resources
			before := p.DeepCopy()
			host, err := tr.HostPod(p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, p); diff != "" {
				t.Fatalf("HostPod changed its input (-before +after):\n%s", diff)
			}
			all := append(append([]corev1.Container(nil), host.Spec.InitContainers...), host.Spec.Containers...)
			if len(all) != len(tc.want) {
				t.Fatalf("%d containers, want %d", len(all), len(tc.want))
			}
			for i, c := range all {
				if diff := cmp.Diff(tc.want[i].req, c.Resources.Requests); diff != "" {
					t.Errorf("container %q requests (-want +got):\n%s", c.Name, diff)
				}
				if diff := cmp.Diff(tc.want[i].lim, c.Resources.Limits); diff != "" {
					t.Errorf("container %q limits (-want +got):\n%s", c.Name, diff)
				}
				// What the host's validation demands.
				for name, req := range c.Resources.Requests {
					if lim, ok := c.Resources.Limits[name]; ok && req.Cmp(lim) > 0 {
						t.Errorf("container %q requests %s %s above its limit %s", c.Name, name, req.String(), lim.String())
					}
				}
			}
			var podLim corev1.ResourceList
			if host.Spec.Resources != nil {
				podLim = host.Spec.Resources.Limits
			}
			if diff := cmp.Diff(tc.wantPodLim, podLim); diff != "" {
				t.Errorf("pod-level limits (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMemoryEmptyDirsGetASize(t *testing.T) {
	memory := func(size string) corev1.Volume {
		v := corev1.Volume{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}
		if size != "" {
			v.EmptyDir.SizeLimit = ptr.To(resource.MustParse(size))
		}
		return v
	}
	limited := func(name, memory string) corev1.Container {
		return corev1.Container{Name: name, Image: "app:1", Resources: corev1.ResourceRequirements{Limits: rl("memory", memory)}}
	}
	cases := []struct {
		name     string
		config   func(*Config)
		spec     corev1.PodSpec
		wantSize string // empty: no sizeLimit
	}{
		{"sized at the sum of the containers' limits after defaults", agentDefaults, corev1.PodSpec{
			Volumes:    []corev1.Volume{memory("")},
			Containers: []corev1.Container{{Name: "a", Image: "app:1"}, limited("b", "256Mi")},
		}, "768Mi"},
		{"a sidecar's limit counts, a plain init container's does not", nil, corev1.PodSpec{
			Volumes: []corev1.Volume{memory("")},
			InitContainers: []corev1.Container{
				limited("init", "4Gi"),
				func() corev1.Container {
					c := limited("side", "128Mi")
					c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
					return c
				}(),
			},
			Containers: []corev1.Container{limited("app", "256Mi")},
		}, "384Mi"},
		{"a container without a memory limit leaves the volume alone", nil, corev1.PodSpec{
			Volumes:    []corev1.Volume{memory("")},
			Containers: []corev1.Container{limited("a", "256Mi"), {Name: "b", Image: "app:1"}},
		}, ""},
		{"a pod-level memory limit is the size", agentDefaults, corev1.PodSpec{
			Resources:  &corev1.ResourceRequirements{Limits: rl("memory", "300Mi")},
			Volumes:    []corev1.Volume{memory("")},
			Containers: []corev1.Container{{Name: "a", Image: "app:1"}, {Name: "b", Image: "app:1"}},
		}, "300Mi"},
		{"the volume's own size is kept", agentDefaults, corev1.PodSpec{
			Volumes:    []corev1.Volume{memory("2Gi")},
			Containers: []corev1.Container{{Name: "a", Image: "app:1"}},
		}, "2Gi"},
		{"a disk-backed emptyDir is left alone", agentDefaults, corev1.PodSpec{
			Volumes:    []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{Name: "a", Image: "app:1"}},
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mutate []func(*Config)
			if tc.config != nil {
				mutate = append(mutate, tc.config)
			}
			p := plainPod()
			p.Spec.Volumes, p.Spec.InitContainers, p.Spec.Containers, p.Spec.Resources = tc.spec.Volumes, tc.spec.InitContainers, tc.spec.Containers, tc.spec.Resources
			host, err := newTranslator(t, mutate...).HostPod(p)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if q := host.Spec.Volumes[0].EmptyDir.SizeLimit; q != nil {
				got = q.String()
			}
			if got != tc.wantSize {
				t.Errorf("sizeLimit %q, want %q", got, tc.wantSize)
			}
		})
	}
}

func TestGracePeriodCap(t *testing.T) {
	year := int64(31536000)
	cases := []struct {
		name      string
		cap       int64 // 0: the default
		grace     *int64
		probe     *int64
		want      *int64
		wantProbe *int64
	}{
		{"a year is cut to the default cap of 300 s", 0, ptr.To(year), nil, ptr.To(int64(300)), nil},
		{"a grace period within the cap is kept", 0, ptr.To(int64(60)), nil, ptr.To(int64(60)), nil},
		{"unset stays unset: the host's 30 s is within the cap", 0, nil, nil, nil, nil},
		{"unset becomes a cap below 30 s", 10, nil, nil, ptr.To(int64(10)), nil},
		{"a liveness probe's own grace period is capped too", 0, ptr.To(int64(30)), ptr.To(year), ptr.To(int64(30)), ptr.To(int64(300))},
		{"a probe's grace period within the cap is kept", 0, nil, ptr.To(int64(5)), nil, ptr.To(int64(5))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTranslator(t, func(c *Config) { c.MaxTerminationGracePeriodSeconds = tc.cap })
			p := plainPod()
			p.Spec.TerminationGracePeriodSeconds = tc.grace
			if tc.probe != nil {
				p.Spec.Containers[0].LivenessProbe = &corev1.Probe{
					ProbeHandler:                  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
					TerminationGracePeriodSeconds: tc.probe,
				}
			}
			host, err := tr.HostPod(p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, host.Spec.TerminationGracePeriodSeconds); diff != "" {
				t.Errorf("terminationGracePeriodSeconds (-want +got):\n%s", diff)
			}
			if tc.probe != nil {
				if diff := cmp.Diff(tc.wantProbe, host.Spec.Containers[0].LivenessProbe.TerminationGracePeriodSeconds); diff != "" {
					t.Errorf("probe terminationGracePeriodSeconds (-want +got):\n%s", diff)
				}
			}
			if tc.grace != nil && *p.Spec.TerminationGracePeriodSeconds != *tc.grace {
				t.Error("HostPod changed its input")
			}
		})
	}
	if tr := newTranslator(t); tr.Config().MaxTerminationGracePeriodSeconds != DefaultMaxTerminationGracePeriodSeconds {
		t.Errorf("default cap %d", tr.Config().MaxTerminationGracePeriodSeconds)
	}
	if _, err := New(Config{ClusterName: "c", HostNamespace: "n", NodeName: "x", MaxTerminationGracePeriodSeconds: -1}); err == nil {
		t.Error("a negative cap was accepted")
	}
}

func TestUserNamespaces(t *testing.T) {
	block := func(p *corev1.Pod) {
		p.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/xvda"}}
		p.Spec.Volumes = []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "raw"}}}}
	}
	cases := []struct {
		name    string
		on      bool
		level   string
		mutate  func(*corev1.Pod)
		want    *bool  // the host pod's hostUsers
		refused string // when not empty, the refusal must say this
	}{
		{"off: a pod keeps the node's users", false, "", func(*corev1.Pod) {}, nil, ""},
		{"on: a pod that says nothing gets a user namespace", true, "", func(*corev1.Pod) {}, ptr.To(false), ""},
		{"on: a pod that asks for one keeps it", true, "", func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(false) }, ptr.To(false), ""},
		{"on: a restricted pod gets one too", true, "restricted", func(*corev1.Pod) {}, ptr.To(false), ""},
		{"on: hostUsers true is refused below privileged", true, "", func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(true) }, nil,
			"hostUsers: true: the host runs this cluster's pods in user namespaces"},
		{"on: volumeDevices are refused below privileged", true, "", block, nil,
			`container "app": volumeDevices cannot be used in a user namespace`},
		{"on, privileged: hostUsers true is kept", true, "privileged", func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(true) }, ptr.To(true), ""},
		{"on, privileged: a pod that says nothing gets one", true, "privileged", func(*corev1.Pod) {}, ptr.To(false), ""},
		{"on, privileged: volumeDevices keep the node's users", true, "privileged", block, nil, ""},
		{"on: a Windows pod is left alone", true, "", func(p *corev1.Pod) {
			p.Spec.OS = &corev1.PodOS{Name: corev1.Windows}
			p.Spec.SecurityContext = nil
		}, nil, ""},
		{"off: hostUsers true passes through", false, "", func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(true) }, ptr.To(true), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTranslator(t, func(c *Config) {
				c.UserNamespaces = tc.on
				c.PodSecurityLevel = tc.level
			})
			p := plainPod()
			tc.mutate(p)
			host, err := tr.HostPod(p)
			if tc.refused != "" {
				var ue *UnsupportedError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("want a refusal saying %q, got %v", tc.refused, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, host.Spec.HostUsers); diff != "" {
				t.Errorf("hostUsers (-want +got):\n%s", diff)
			}
		})
	}
}
