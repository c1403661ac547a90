package agent_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// TestAgentRefusesEachEscapeClass creates one virtual pod per refusal class
// (Pod Security baseline, a host field outside Pod Security, an ephemeral
// volume template, a Localhost seccomp or AppArmor profile, a pod beyond the node's
// capacity or asking for a GPU the node does not have, pinned with nodeName):
// each is failed with its reason and a message naming the field, an Event
// says the same, and no host pod is made. Every request the agent makes runs
// under the agent guard (main_test.go).
func TestAgentRefusesEachEscapeClass(t *testing.T) {
	c := ctx(t)
	const ns = "hostile"
	virtualNamespace(t, ns)
	// The virtual apiserver's RuntimeClass admission refuses unknown classes;
	// a tenant can make one in their own cluster.
	if _, err := virtAdmin.NodeV1().RuntimeClasses().Create(c, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata"}, Handler: "kata"}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cases := []struct {
		name, reason, want string
		mutate             func(*corev1.Pod)
	}{
		{"privileged", translate.ReasonUnsupported, `Pod Security "baseline": privileged (container "main" must not set securityContext.privileged=true)`, func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}},
		{"sys-admin", translate.ReasonUnsupported, `must not include "SYS_ADMIN" in securityContext.capabilities.add`, func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		}},
		{"unconfined", translate.ReasonUnsupported, `seccompProfile.type to "Unconfined"`, func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		}},
		{"metadata-probe", translate.ReasonUnsupported, `livenessProbe.httpGet host "169.254.169.254"`, func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Port: intstr.FromInt32(80)}}}
		}},
		{"runtime-class", translate.ReasonUnsupported, `runtimeClassName "kata"`, func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr.To("kata") }},
		{"clone", translate.ReasonUnsupported, `volume "data": ephemeral.volumeClaimTemplate.spec.dataSource`, func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
					DataSource:  &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "data-k3k-c1-server-0"},
				},
			}}}}}
		}},
		{"too-big", "OutOfcpu", "Node didn't have enough resource: cpu, requested: 9", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("9")}
		}},
		{"gpu", "OutOfnvidia.com/gpu", "Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 0, capacity: 0", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		}},
		{"localhost-seccomp", translate.ReasonUnsupported, `container "main": seccomp profile Localhost "tenant.json" is not one the host administrator allowed`, func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("tenant.json")}}
		}},
		{"localhost-apparmor", translate.ReasonUnsupported, `container "main": AppArmor profile Localhost "tenant" is not one the host administrator allowed`, func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("tenant")}}
		}},
	}
	for _, tc := range cases {
		createVirtual(t, boundPod(ns, tc.name, tc.mutate))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vp := waitVirtualPhase(t, ns, tc.name, corev1.PodFailed, func(p *corev1.Pod) error {
				if p.Status.Reason != tc.reason || !strings.Contains(p.Status.Message, tc.want) {
					return fmt.Errorf("reason %q message %q", p.Status.Reason, p.Status.Message)
				}
				return nil
			})
			eventually(t, "a Warning Event on "+tc.name, func() error {
				evs, err := virtAdmin.CoreV1().Events(ns).List(c, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(vp.UID)})
				if err != nil {
					return err
				}
				for _, e := range evs.Items {
					if e.Type == corev1.EventTypeWarning && e.Reason == tc.reason && strings.Contains(e.Message, tc.want) {
						return nil
					}
				}
				return fmt.Errorf("events %v", evs.Items)
			})
			if _, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hostPodName(ns, tc.name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("a host pod was made for a refused pod: %v", err)
			}
		})
	}
	t.Run("a benign pod of the same namespace still runs", func(t *testing.T) {
		runVirtual(t, boundPod(ns, "benign"))
	})
}

// TestAgentReportsEphemeralContainers adds a privileged debug container to a
// running pod, as `kubectl debug --profile=sysadmin` does: the host pod never
// gets it, and the virtual pod says why.
func TestAgentReportsEphemeralContainers(t *testing.T) {
	c := ctx(t)
	const ns = "debugged"
	virtualNamespace(t, ns)
	hp := runVirtual(t, boundPod(ns, "app"))
	vp, err := virtAdmin.CoreV1().Pods(ns).Get(c, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vp.Spec.EphemeralContainers = append(vp.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debugger", Image: "busybox:1", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
	}})
	if _, err := virtAdmin.CoreV1().Pods(ns).UpdateEphemeralContainers(c, "app", vp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the debug container's status", func() error {
		p, err := virtAdmin.CoreV1().Pods(ns).Get(c, "app", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range p.Status.EphemeralContainerStatuses {
			if w := s.State.Waiting; s.Name == "debugger" && w != nil && w.Reason == translate.ReasonUnsupported &&
				strings.Contains(w.Message, `Pod Security "baseline": privileged (container "debugger"`) {
				return nil
			}
		}
		return fmt.Errorf("statuses %+v", p.Status.EphemeralContainerStatuses)
	})
	host, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(host.Spec.EphemeralContainers) != 0 {
		t.Errorf("the host pod got ephemeral containers: %+v", host.Spec.EphemeralContainers)
	}
	if p, _ := virtAdmin.CoreV1().Pods(ns).Get(c, "app", metav1.GetOptions{}); p.Status.Phase != corev1.PodRunning {
		t.Errorf("the pod stopped running: %s", p.Status.Phase)
	}
}

// TestAPodTheHostQuotaRefusesSaysWhyAndStartsOnceThereIsRoom holds the host
// namespace to a ResourceQuota with no room for pods: the virtual pod stays
// Pending and says the host refused it and why (the tenant cannot see the host),
// no host pod exists; once the quota has room, the agent's retries make the
// host pod.
func TestAPodTheHostQuotaRefusesSaysWhyAndStartsOnceThereIsRoom(t *testing.T) {
	c := ctx(t)
	const ns = "quota"
	virtualNamespace(t, ns)
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "no-room", Namespace: hostNamespace},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}},
	}
	if _, err := hostAdmin.CoreV1().ResourceQuotas(hostNamespace).Create(c, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hostAdmin.CoreV1().ResourceQuotas(hostNamespace).Delete(c, quota.Name, metav1.DeleteOptions{})
	})
	// The quota admission plugin counts only once the quota's status is set;
	// envtest runs no controller-manager, so the test sets it.
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	if _, err := hostAdmin.CoreV1().ResourceQuotas(hostNamespace).UpdateStatus(c, quota, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	vp := createVirtual(t, boundPod(ns, "over-quota"))
	eventually(t, "the virtual pod naming the exceeded quota", func() error {
		p, err := virtAdmin.CoreV1().Pods(ns).Get(c, vp.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodPending || p.Status.Reason != translate.ReasonHostForbidden || !strings.Contains(p.Status.Message, "exceeded quota: no-room") {
			return fmt.Errorf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		return nil
	})
	if _, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hostPodName(ns, vp.Name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a host pod for a pod the quota refused (get: %v)", err)
	}

	if err := hostAdmin.CoreV1().ResourceQuotas(hostNamespace).Delete(c, quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a host pod once the quota is gone", func() error {
		_, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hostPodName(ns, vp.Name), metav1.GetOptions{})
		return err
	})
}

// TestAgentCapsGracePeriods runs a pod that asks for a year to shut down, as
// one that ignores SIGTERM would: its host pod gets the agent's cap (300 s by
// default), its graceful deletion is passed on capped, and a host pod
// already terminating with a year (deleted before the cap existed) is
// deleted again with the cap once its virtual pod is gone.
func TestAgentCapsGracePeriods(t *testing.T) {
	c := ctx(t)
	const ns = "deaf"
	year := int64(31536000)
	limit := translate.DefaultMaxTerminationGracePeriodSeconds
	virtualNamespace(t, ns)
	deaf := func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To(year) }

	hp := runVirtual(t, boundPod(ns, "graceful", deaf))
	if g := ptr.Deref(hp.Spec.TerminationGracePeriodSeconds, 0); g != limit {
		t.Errorf("host terminationGracePeriodSeconds %d, want the cap %d", g, limit)
	}
	if sc := hp.Spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("host pod security context %+v, want seccomp RuntimeDefault", sc)
	}
	if err := virtAdmin.CoreV1().Pods(ns).Delete(c, "graceful", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "host pod terminating with the cap", func() error {
		p, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{})
		if err == nil && (p.DeletionTimestamp == nil || ptr.Deref(p.DeletionGracePeriodSeconds, 0) != limit) {
			err = fmt.Errorf("deletion %v grace %v", p.DeletionTimestamp, p.DeletionGracePeriodSeconds)
		}
		return err
	})
	// The host kubelet confirms the containers stopped.
	if err := hostAdmin.CoreV1().Pods(hostNamespace).Delete(c, hp.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}

	old := runVirtual(t, boundPod(ns, "before-the-cap", deaf))
	// What an agent without the cap did: the host pod deleted with the
	// virtual pod's year.
	if err := hostAdmin.CoreV1().Pods(hostNamespace).Delete(c, old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(year)}); err != nil {
		t.Fatal(err)
	}
	// The virtual pod is removed at once. The agent usually finds it gone
	// and deletes the host pod again with the cap; it may instead still see
	// the force deletion's last update (deleting, grace period 0) and pass
	// that on, which removes the host pod. Either is within the cap; an
	// agent without it leaves the year.
	if err := virtAdmin.CoreV1().Pods(ns).Delete(c, "before-the-cap", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the year shortened to the cap", func() error {
		p, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, old.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case ptr.Deref(p.DeletionGracePeriodSeconds, year) > limit:
			return fmt.Errorf("grace %v", p.DeletionGracePeriodSeconds)
		}
		return nil
	})
	err := hostAdmin.CoreV1().Pods(hostNamespace).Delete(c, old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
