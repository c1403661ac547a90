package cluster

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// TestAgentGuardHoldsAgentPodsToTheDefaults sends, as an agent, pods that
// each drop one of the defaults every agent gives a workload (seccomp,
// memory bounds, pull policy, registries by name) to a real kube-apiserver
// with the guard: with the chart's defaults each is refused with its reason
// while the pod a working agent makes passes; an image update naming an
// address is refused on a running pod and an ordinary one passes; with the
// defaults turned off the same pods pass, except a Localhost profile the
// host did not allow.
func TestAgentGuardHoldsAgentPodsToTheDefaults(t *testing.T) {
	ctx := context.Background()
	const allowedProfile, otherProfile = "profiles/audit.json", "profiles/permissive.json"
	const allowedAppArmor, otherAppArmor = "k3k-audited", "cri-containerd.apparmor.d"
	on := AgentPodDefaults
	on.SeccompLocalhostProfiles = []string{allowedProfile}
	on.AppArmorLocalhostProfiles = []string{allowedAppArmor}
	onNS, _, _, onAgent := guardedNamespace(t, on)
	offNS, _, _, offAgent := guardedNamespace(t, PodDefaults{AllowRegistryAddresses: true})
	// The chart's placeholders and this test's defaults must agree with what
	// the agent binary does.
	if got := PodDefaultsOf(translate.Config{
		DefaultLimits:    corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		AlwaysPullImages: true,
	}); got.SeccompDefault != AgentPodDefaults.SeccompDefault || got.MemoryLimit != AgentPodDefaults.MemoryLimit ||
		got.AlwaysPullImages != AgentPodDefaults.AlwaysPullImages || got.AllowRegistryAddresses != AgentPodDefaults.AllowRegistryAddresses {
		t.Errorf("PodDefaultsOf(the agent's flag defaults) = %+v, want %+v", got, AgentPodDefaults)
	}

	localhost := func(profile string) *corev1.SeccompProfile {
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To(profile)}
	}
	memoryVolume := func(size *resource.Quantity) func(*corev1.PodSpec) {
		return func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: size}}})
		}
	}
	withoutDefaults := []struct {
		name    string
		change  func(*corev1.PodSpec)
		message string
	}{
		{"no pod-level seccomp profile", func(s *corev1.PodSpec) { s.SecurityContext = nil }, "must carry a pod-level seccomp profile"},
		{"a container without a memory limit", func(s *corev1.PodSpec) { s.Containers[0].Resources = corev1.ResourceRequirements{} }, "must bound its memory"},
		{"an init container without a memory limit", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "init", Image: "web", ImagePullPolicy: corev1.PullAlways}}
		}, "must bound its memory"},
		{"a Memory emptyDir without a size", memoryVolume(nil), "sizeLimit"},
		{"a container pulling IfNotPresent", func(s *corev1.PodSpec) { s.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent }, "must pull every image Always"},
		{"an image from the node's kubelet port", func(s *corev1.PodSpec) { s.Containers[0].Image = "10.0.0.1:10250/probe:1" }, "must not name an image registry by address"},
		{"an image from localhost", func(s *corev1.PodSpec) { s.Containers[0].Image = "LocalHost/x" }, "must not name an image registry by address"},
		{"an image from an IPv6 address", func(s *corev1.PodSpec) { s.Containers[0].Image = "[::1]:2379/x" }, "must not name an image registry by address"},
		{"an image from inet_aton's short form of 127.0.0.1", func(s *corev1.PodSpec) { s.Containers[0].Image = "127.1:6443/x" }, "must not name an image registry by address"},
		{"an image from a one-label host", func(s *corev1.PodSpec) { s.Containers[0].Image = "control-plane:5000/x" }, "must not name an image registry by address"},
	}
	create := func(agent *kubernetes.Clientset, ns, name string, change func(*corev1.PodSpec)) error {
		_, err := agent.CoreV1().Pods(ns).Create(ctx, agentPod(name, change), metav1.CreateOptions{})
		return err
	}
	for i, tc := range withoutDefaults {
		name := "d" + string(rune('a'+i)) + "-shop-0123456789"
		t.Run("refused with the defaults: "+tc.name, func(t *testing.T) {
			if err := create(onAgent, onNS, name, tc.change); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("got %v, want Forbidden containing %q", err, tc.message)
			}
		})
		t.Run("allowed without them: "+tc.name, func(t *testing.T) {
			if err := create(offAgent, offNS, name, tc.change); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}

	appArmor := func(profile string) *corev1.AppArmorProfile {
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To(profile)}
	}
	const seccompRefused, appArmorRefused = "Localhost seccomp profiles the host administrator allowed", "Localhost AppArmor profiles the host administrator allowed"
	localhostCases := []struct {
		name    string
		change  func(*corev1.PodSpec)
		refused string // empty: allowed
	}{
		{"the allowed Localhost profile on a container", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: localhost(allowedProfile)}
		}, ""},
		{"another Localhost profile on a container", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: localhost(otherProfile)}
		}, seccompRefused},
		{"another Localhost profile for the pod", func(s *corev1.PodSpec) { s.SecurityContext.SeccompProfile = localhost(otherProfile) }, seccompRefused},
		{"the allowed Localhost AppArmor profile on a container", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: appArmor(allowedAppArmor)}
		}, ""},
		{"another Localhost AppArmor profile on a container", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: appArmor(otherAppArmor)}
		}, appArmorRefused},
		{"another Localhost AppArmor profile for the pod", func(s *corev1.PodSpec) { s.SecurityContext.AppArmorProfile = appArmor(otherAppArmor) }, appArmorRefused},
		{"the seccomp profile's name as an AppArmor profile", func(s *corev1.PodSpec) { s.SecurityContext.AppArmorProfile = appArmor(allowedProfile) }, appArmorRefused},
	}
	for i, tc := range localhostCases {
		name := "l" + string(rune('a'+i)) + "-shop-0123456789"
		t.Run(tc.name, func(t *testing.T) {
			err := create(onAgent, onNS, name, tc.change)
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.refused)):
				t.Errorf("got %v, want Forbidden containing %q", err, tc.refused)
			}
		})
	}
	t.Run("a Localhost profile is held to the list with the defaults off too", func(t *testing.T) {
		err := create(offAgent, offNS, "lz-shop-0123456789", localhostCases[1].change)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "Localhost seccomp profiles") {
			t.Errorf("got %v, want Forbidden", err)
		}
		err = create(offAgent, offNS, "ly-shop-0123456789", localhostCases[4].change)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "Localhost AppArmor profiles") {
			t.Errorf("AppArmor: got %v, want Forbidden", err)
		}
	})
	for i, tc := range []struct {
		name, value, refused string
	}{
		{"an AppArmor annotation naming another Localhost profile is refused", "localhost/" + otherAppArmor, appArmorRefused},
		{"an AppArmor annotation naming the allowed profile passes", "localhost/" + allowedAppArmor, ""},
		{"an AppArmor annotation for the runtime's default passes", "runtime/default", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := agentPod("n"+string(rune('a'+i))+"-shop-0123456789", nil)
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/main": tc.value}
			_, err := onAgent.CoreV1().Pods(onNS).Create(ctx, p, metav1.CreateOptions{})
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.refused)):
				t.Errorf("got %v, want Forbidden containing %q", err, tc.refused)
			}
		})
	}
	t.Run("a legacy seccomp annotation is refused", func(t *testing.T) {
		p := agentPod("la-shop-abcdef0123", nil)
		p.Annotations = map[string]string{"container.seccomp.security.alpha.kubernetes.io/main": "localhost/" + allowedProfile}
		_, err := onAgent.CoreV1().Pods(onNS).Create(ctx, p, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "no seccomp annotation") {
			t.Errorf("got %v, want Forbidden", err)
		}
	})

	allowed := []struct {
		name   string
		change func(*corev1.PodSpec)
	}{
		{"the pod a working agent makes", nil},
		{"a pod bounded at pod level, its containers not", func(s *corev1.PodSpec) {
			s.Containers[0].Resources = corev1.ResourceRequirements{}
			s.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		}},
		{"a sized Memory emptyDir", memoryVolume(ptr.To(resource.MustParse("512Mi")))},
		{"a registry by name with a port", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example.com:5000/team/web:1" }},
	}
	for i, tc := range allowed {
		t.Run("allowed with the defaults: "+tc.name, func(t *testing.T) {
			if err := create(onAgent, onNS, "a"+string(rune('a'+i))+"-shop-0123456789", tc.change); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}

	// An image is the one thing of a pod that changes: the registry rule
	// holds for updates, the others (fields that cannot change) do not ask.
	t.Run("an image update to an address is refused, another passes", func(t *testing.T) {
		live, err := onAgent.CoreV1().Pods(onNS).Get(ctx, "aa-shop-0123456789", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		live.Spec.Containers[0].Image = "[fe80::1]:5000/web:2"
		if _, err := onAgent.CoreV1().Pods(onNS).Update(ctx, live, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "registry by address") {
			t.Errorf("got %v, want Forbidden", err)
		}
		live.Spec.Containers[0].Image = "registry.example.com/web:2"
		if _, err := onAgent.CoreV1().Pods(onNS).Update(ctx, live, metav1.UpdateOptions{}); err != nil {
			t.Errorf("refused: %v", err)
		}
	})
}
