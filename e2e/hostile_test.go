//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/podsecurity"
)

// escape is one attempt of a virtual cluster's admin to reach the host
// through a pod: what the pod asks for, and what the refusal must say.
type escape struct {
	name   string // the virtual pod's name
	reason string // the virtual pod's status reason
	want   string // in its status message
	mutate func(*corev1.Pod)
}

const unsupported = "UnsupportedPod"

func ctr0(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }

func scOf(c *corev1.Container) *corev1.SecurityContext {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	return c.SecurityContext
}

func psc(p *corev1.Pod) *corev1.PodSecurityContext {
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	return p.Spec.SecurityContext
}

func addCap(c string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		scOf(ctr0(p)).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{corev1.Capability(c)}}
	}
}

// ephemeralVolume adds a generic ephemeral volume changed by change. The
// virtual scheduler waits for the claim to bind, which it never does in the
// virtual cluster, so a non-empty node pins the pod there, as a tenant can.
func ephemeralVolume(node string, change func(*corev1.PersistentVolumeClaimTemplate)) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		t := &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}},
		}}
		change(t)
		p.Spec.NodeName = node
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "eph", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: t}}})
	}
}

func privileged(c *corev1.Container) { scOf(c).Privileged = ptr.To(true) }

// baselineEscapes are tried in a cluster at the default level, baseline.
func baselineEscapes(v *vcluster) []escape {
	const baseline = `Pod Security "baseline": `
	node := "k3k-" + v.name + "-kubelet"
	return []escape{
		{"privileged", unsupported, baseline + `privileged (container "main" must not set securityContext.privileged=true)`, func(p *corev1.Pod) { privileged(ctr0(p)) }},
		{"privileged-init", unsupported, `container "init" must not set securityContext.privileged=true`, func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: toolboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"true"}}}
			privileged(&p.Spec.InitContainers[0])
		}},
		{"privileged-sidecar", unsupported, `container "side" must not set securityContext.privileged=true`, func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "side", Image: toolboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
			privileged(&p.Spec.InitContainers[0])
		}},
		{"cap-sys-admin", unsupported, `must not include "SYS_ADMIN" in securityContext.capabilities.add`, addCap("SYS_ADMIN")},
		{"cap-sys-module", unsupported, `"SYS_MODULE"`, addCap("SYS_MODULE")},
		{"cap-net-admin", unsupported, `"NET_ADMIN"`, addCap("NET_ADMIN")},
		{"cap-dac-read-search", unsupported, `"DAC_READ_SEARCH"`, addCap("DAC_READ_SEARCH")},
		{"cap-sys-ptrace", unsupported, `"SYS_PTRACE"`, addCap("SYS_PTRACE")},
		{"cap-bpf", unsupported, `"BPF"`, addCap("BPF")},
		{"cap-all", unsupported, `"ALL"`, addCap("ALL")},
		{"root-escalation-sys-admin", unsupported, `"SYS_ADMIN"`, func(p *corev1.Pod) {
			// The combination tried on a real node before issue 15.
			sc := scOf(ctr0(p))
			sc.RunAsUser, sc.AllowPrivilegeEscalation = ptr.To(int64(0)), ptr.To(true)
			sc.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN", "SYS_MODULE", "NET_ADMIN", "DAC_READ_SEARCH"}}
			sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}},
		{"host-path", unsupported, `volume "root": hostPath`, func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}},
		{"host-network", unsupported, "hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }},
		{"host-pid", unsupported, "hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }},
		{"host-ipc", unsupported, "hostIPC", func(p *corev1.Pod) { p.Spec.HostIPC = true }},
		{"host-port", unsupported, `container "main": hostPort 10022`, func(p *corev1.Pod) {
			ctr0(p).Ports = []corev1.ContainerPort{{ContainerPort: 22, HostPort: 10022}}
		}},
		{"seccomp-unconfined", unsupported, `pod must not set securityContext.seccompProfile.type to "Unconfined"`, func(p *corev1.Pod) {
			psc(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}},
		{"seccomp-unconfined-container", unsupported, `seccompProfile.type to "Unconfined"`, func(p *corev1.Pod) {
			scOf(ctr0(p)).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}},
		{"apparmor-unconfined", unsupported, `AppArmor profile type to "Unconfined"`, func(p *corev1.Pod) {
			scOf(ctr0(p)).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}},
		{"apparmor-annotation", unsupported, `AppArmor profile`, func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}
		}},
		// Localhost profiles are files or kernel profiles the node's
		// administrator made for their own pods, any of which the Pod
		// Security Standards allow at every level.
		{"seccomp-localhost", unsupported, `pod: seccomp profile Localhost "profiles/permissive.json" is not one the host administrator allowed (none is)`, func(p *corev1.Pod) {
			psc(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/permissive.json")}
		}},
		{"apparmor-localhost", unsupported, `container "main": AppArmor profile Localhost "cri-containerd.apparmor.d" is not one the host administrator allowed (none is)`, func(p *corev1.Pod) {
			scOf(ctr0(p)).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("cri-containerd.apparmor.d")}
		}},
		{"apparmor-localhost-annotation", unsupported, `AppArmor profile Localhost "host-only"`, func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/main": "localhost/host-only"}
		}},
		{"procmount-unmasked", unsupported, `must not set securityContext.procMount to "Unmasked"`, func(p *corev1.Pod) {
			p.Spec.HostUsers = ptr.To(false) // the API allows Unmasked only in a user namespace
			scOf(ctr0(p)).ProcMount = ptr.To(corev1.UnmaskedProcMount)
		}},
		{"sysctl-kernel", unsupported, `forbidden sysctls (kernel.msgmax)`, func(p *corev1.Pod) {
			psc(p).Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "65536"}}
		}},
		{"sysctl-net", unsupported, `forbidden sysctls (net.core.somaxconn)`, func(p *corev1.Pod) {
			psc(p).Sysctls = []corev1.Sysctl{{Name: "net.core.somaxconn", Value: "4096"}}
		}},
		{"selinux-type", unsupported, `seLinuxOptions`, func(p *corev1.Pod) {
			psc(p).SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		}},
		{"selinux-user-role", unsupported, `seLinuxOptions`, func(p *corev1.Pod) {
			scOf(ctr0(p)).SELinuxOptions = &corev1.SELinuxOptions{User: "system_u", Role: "system_r"}
		}},
		{"runtime-class", unsupported, `runtimeClassName "hostile-kata"`, func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr.To("hostile-kata") }},
		{"probe-metadata", unsupported, `livenessProbe.httpGet host "169.254.169.254"`, func(p *corev1.Pod) {
			ctr0(p).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Host: "169.254.169.254", Path: "/latest/meta-data/iam/security-credentials/", Port: intstr.FromInt32(80)}}}
		}},
		{"probe-kubelet-tcp", unsupported, `readinessProbe.tcpSocket host "127.0.0.1"`, func(p *corev1.Pod) {
			ctr0(p).ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: "127.0.0.1", Port: intstr.FromInt32(10250)}}}
		}},
		{"lifecycle-kubelet", unsupported, `lifecycle.postStart.httpGet host "127.0.0.1"`, func(p *corev1.Pod) {
			ctr0(p).Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
				Host: "127.0.0.1", Path: "/pods", Port: intstr.FromInt32(10250), Scheme: corev1.URISchemeHTTPS}}}
		}},
		{"ephemeral-datasource", unsupported, `volume "eph": ephemeral.volumeClaimTemplate.spec.dataSource`, ephemeralVolume(node, func(t *corev1.PersistentVolumeClaimTemplate) {
			t.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "data-" + v.pod()}
		})},
		{"ephemeral-datasourceref", unsupported, `ephemeral.volumeClaimTemplate.spec.dataSourceRef`, ephemeralVolume(node, func(t *corev1.PersistentVolumeClaimTemplate) {
			t.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "data-" + v.pod()}
		})},
		{"ephemeral-volumename", unsupported, `ephemeral.volumeClaimTemplate.spec.volumeName`, ephemeralVolume(node, func(t *corev1.PersistentVolumeClaimTemplate) {
			t.Spec.VolumeName = "pvc-of-another-tenant"
		})},
		{"ephemeral-selector", unsupported, `ephemeral.volumeClaimTemplate.spec.selector`, ephemeralVolume(node, func(t *corev1.PersistentVolumeClaimTemplate) {
			t.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k3k.io/cluster": "another"}}
		})},
		{"ephemeral-labels", unsupported, `ephemeral.volumeClaimTemplate.metadata.labels`, ephemeralVolume(node, func(t *corev1.PersistentVolumeClaimTemplate) {
			t.Labels = map[string]string{"app.kubernetes.io/managed-by": "k3k", "k3k.io/cluster": v.name, "k3k.io/component": "server"}
		})},
		{"ephemeral-annotations", unsupported, `ephemeral.volumeClaimTemplate.metadata.annotations`, ephemeralVolume(node, func(t *corev1.PersistentVolumeClaimTemplate) {
			t.Annotations = map[string]string{"volume.kubernetes.io/selected-node": "elsewhere"}
		})},
		{"ephemeral-empty-storage-class", unsupported, `storage class "" (no class) would bind a pre-provisioned host volume`, ephemeralVolume(node, func(t *corev1.PersistentVolumeClaimTemplate) {
			t.Spec.StorageClassName = ptr.To("")
		})},
		{"ephemeral-storage-class", unsupported, `storage class "premium" is not one the host administrator allowed`, ephemeralVolume(node, func(t *corev1.PersistentVolumeClaimTemplate) {
			t.Spec.StorageClassName = ptr.To("premium")
		})},
		{"nodename-cpu", "OutOfcpu", "Node didn't have enough resource: cpu, requested: 64", func(p *corev1.Pod) {
			p.Spec.NodeName = "k3k-" + v.name + "-kubelet" // skips the virtual scheduler
			ctr0(p).Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
		}},
		{"nodename-memory", "OutOfmemory", "Node didn't have enough resource: memory, requested: 1Ti", func(p *corev1.Pod) {
			p.Spec.NodeName = "k3k-" + v.name + "-kubelet"
			ctr0(p).Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Ti")}
		}},
	}
}

// restrictedEscapes are tried after the Cluster is switched to restricted:
// what baseline allows and restricted does not.
var restrictedEscapes = []escape{
	{"restricted-root-escalation", unsupported, `Pod Security "restricted": allowPrivilegeEscalation != false`, func(p *corev1.Pod) {
		sc := scOf(ctr0(p))
		sc.RunAsUser, sc.AllowPrivilegeEscalation = ptr.To(int64(0)), ptr.To(true)
	}},
	{"restricted-run-as-root", unsupported, `runAsUser=0`, func(p *corev1.Pod) { scOf(ctr0(p)).RunAsUser = ptr.To(int64(0)) }},
	{"restricted-chown", unsupported, `"CHOWN"`, addCap("CHOWN")},
}

// hostilePod is the toolbox sleeping, changed by mutate.
func hostilePod(ns, name string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: toolboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
			}},
		},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

// madeByAgent gives p what the agent gives every host pod under the e2e
// chart's values (no token, a user namespace, a pod-level RuntimeDefault
// seccomp profile where it names none, a memory limit where a container sets
// none), so that the agent guard judges p by the one setting a case is about,
// not by a default it leaves out.
func madeByAgent(p *corev1.Pod) *corev1.Pod {
	p.Spec.AutomountServiceAccountToken = ptr.To(false)
	// A user namespace, where the node's runtime supports them (the e2e
	// host's does: the Cluster's UserNamespaces condition is True); the API
	// refuses one beside a host namespace.
	if p.Spec.HostUsers == nil && !p.Spec.HostNetwork && !p.Spec.HostPID && !p.Spec.HostIPC {
		p.Spec.HostUsers = ptr.To(false)
	}
	if psc(p).SeccompProfile == nil {
		psc(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
			if c.Resources.Limits == nil {
				c.Resources.Limits = corev1.ResourceList{}
			}
			c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("512Mi")
		}
	}
	return p
}

// restrictedPod meets the restricted level.
func restrictedPod(p *corev1.Pod) {
	psc(p).RunAsNonRoot, psc(p).RunAsUser = ptr.To(true), ptr.To(int64(65534))
	psc(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	sc := scOf(ctr0(p))
	sc.AllowPrivilegeEscalation = ptr.To(false)
	sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
}

// TestHostilePods runs the hostile-pod suite of issue 15 in one virtual
// cluster: every escape is tried as a virtual pod and must be failed with a
// clear reason and an Event, no host pod may carry it (every host pod of the
// cluster is inspected with the upstream Pod Security evaluator and the
// agent's own rules), and a benign pod keeps running and new ones start. The
// agent guard is tried too, as the agent's own ServiceAccount on the host.
// Then the Cluster is switched to restricted and what baseline allows but
// restricted refuses is tried.
func TestHostilePods(t *testing.T) {
	t.Parallel()
	v := createCluster(t, "hostile")
	waitAgentNode(t, v)
	const ns = "attack"
	for _, create := range []func(ctx context.Context) error{
		func(ctx context.Context) error {
			_, err := v.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		},
		// A tenant can make a RuntimeClass in their own cluster; the virtual
		// apiserver's RuntimeClass admission then lets the pod through.
		func(ctx context.Context) error {
			_, err := v.client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "hostile-kata"}, Handler: "kata"}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := retry(func(ctx context.Context) error {
			if err := create(ctx); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Pods are admitted only once the namespace's ServiceAccount exists.
	eventually(t, 2*time.Minute, "ServiceAccount "+ns+"/default", func(ctx context.Context) (bool, error) {
		_, err := v.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
	createVirtualPod(t, v, hostilePod(ns, "benign", nil))
	waitPodPhase(t, v, ns, "benign", corev1.PodRunning)

	escapes := baselineEscapes(v)
	runEscapes(t, v, ns, escapes)
	if len(escapes)+len(restrictedEscapes)+1 < 25 {
		t.Fatalf("only %d escapes tried", len(escapes)+len(restrictedEscapes)+1)
	}

	t.Run("a privileged ephemeral container added later (kubectl debug) never reaches the host", func(t *testing.T) {
		var hostUID types.UID
		if hp, ok := findHostCopy(context.Background(), v, "pods", ns, "benign"); ok {
			hostUID = hp.(*corev1.Pod).UID
		}
		if err := retry(func(ctx context.Context) error {
			p, err := v.client.CoreV1().Pods(ns).Get(ctx, "benign", metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debugger", Image: toolboxImage, ImagePullPolicy: corev1.PullNever, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				Command: []string{"sh"}, Stdin: true, TTY: true,
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
			}})
			_, err = v.client.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, "benign", p, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var msg string
		eventually(t, 2*time.Minute, "the debug container reported as refused", func(ctx context.Context) (bool, error) {
			p, err := v.client.CoreV1().Pods(ns).Get(ctx, "benign", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, s := range p.Status.EphemeralContainerStatuses {
				if w := s.State.Waiting; s.Name == "debugger" && w != nil && w.Reason == unsupported &&
					strings.Contains(w.Message, `Pod Security "baseline": privileged (container "debugger"`) {
					msg = w.Message
					return true, nil
				}
			}
			return false, fmt.Errorf("ephemeral statuses %+v", p.Status.EphemeralContainerStatuses)
		})
		t.Logf("escape ephemeral-container-privileged: refused (%s: %s)", unsupported, msg)
		hp, ok := findHostCopy(context.Background(), v, "pods", ns, "benign")
		if !ok {
			t.Fatal("the benign pod's host pod is gone")
		}
		if h := hp.(*corev1.Pod); len(h.Spec.EphemeralContainers) != 0 || h.UID != hostUID {
			t.Errorf("host pod %s: ephemeral containers %d, replaced %v", h.Name, len(h.Spec.EphemeralContainers), h.UID != hostUID)
		}
	})

	t.Run("the agent guard refuses the same at the host API, as the agent's own identity", func(t *testing.T) {
		agent := asAgent(t, v)
		tries := []struct {
			name, want string
			mutate     func(*corev1.Pod)
		}{
			{"privileged", "must meet Pod Security level baseline: no privileged containers", func(p *corev1.Pod) { privileged(ctr0(p)) }},
			{"SYS_ADMIN", "must meet Pod Security level baseline: no capabilities added", addCap("SYS_ADMIN")},
			{"seccomp Unconfined", "no seccomp profile Unconfined", func(p *corev1.Pod) {
				psc(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
			}},
			{"host network", "must not use the host's network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }},
			{"the node's users", "must run in a user namespace (hostUsers: false): its UserNamespaces condition is True", func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(true) }},
			{"probe host", "must not name a host in probes", func(p *corev1.Pod) {
				ctr0(p).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Port: intstr.FromInt32(80)}}}
			}},
			{"ephemeral volume cloning the server's claim", "may only ask for storage", ephemeralVolume("", func(t *corev1.PersistentVolumeClaimTemplate) {
				t.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "data-" + v.pod()}
			})},
		}
		for i, try := range tries {
			p := madeByAgent(hostilePod(v.namespace, fmt.Sprintf("guard%d-attack-012345678%d", i, i), try.mutate))
			_, err := agent.CoreV1().Pods(v.namespace).Create(context.Background(), p, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), try.want) {
				t.Errorf("guard, %s: got %v, want Forbidden containing %q", try.name, err, try.want)
				continue
			}
			t.Logf("guard escape %s as the agent: refused (%v)", try.name, err)
		}
	})

	inspectHostPods(t, v, podsecurity.Baseline)

	t.Run("a benign pod still runs, and a new one starts", func(t *testing.T) {
		waitPodPhase(t, v, ns, "benign", corev1.PodRunning)
		createVirtualPod(t, v, hostilePod(ns, "benign-after", nil))
		waitPodPhase(t, v, ns, "benign-after", corev1.PodRunning)
	})

	t.Run("restricted", func(t *testing.T) {
		setPodSecurityLevel(t, v, "restricted")
		waitAgentNode(t, v)
		// The guard reads the Cluster directly: as the agent, root with
		// privilege escalation is now refused at the host API too.
		agent := asAgent(t, v)
		eventually(t, time.Minute, "the guard at restricted", func(ctx context.Context) (bool, error) {
			p := madeByAgent(hostilePod(v.namespace, "guardr-attack-0123456789", func(p *corev1.Pod) {
				scOf(ctr0(p)).RunAsUser, scOf(ctr0(p)).AllowPrivilegeEscalation = ptr.To(int64(0)), ptr.To(true)
			}))
			_, err := agent.CoreV1().Pods(v.namespace).Create(ctx, p, metav1.CreateOptions{})
			if err == nil {
				_ = host.CoreV1().Pods(v.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
				return false, fmt.Errorf("allowed")
			}
			if !strings.Contains(err.Error(), "must meet Pod Security level restricted") {
				return false, err
			}
			return true, nil
		})
		runEscapes(t, v, ns, restrictedEscapes)
		createVirtualPod(t, v, hostilePod(ns, "benign-restricted", restrictedPod))
		waitPodPhase(t, v, ns, "benign-restricted", corev1.PodRunning)
		inspectHostPods(t, v, podsecurity.Baseline)
	})
}

// runEscapes creates every escape's pod at once, then checks each.
func runEscapes(t *testing.T, v *vcluster, ns string, escapes []escape) {
	t.Helper()
	for _, e := range escapes {
		createVirtualPod(t, v, hostilePod(ns, e.name, e.mutate))
	}
	for _, e := range escapes {
		t.Run("escape "+e.name, func(t *testing.T) {
			var vp *corev1.Pod
			eventually(t, 3*time.Minute, "virtual pod "+e.name+" refused", func(ctx context.Context) (bool, error) {
				p, err := v.client.CoreV1().Pods(ns).Get(ctx, e.name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				vp = p
				if p.Status.Phase != corev1.PodFailed {
					return false, fmt.Errorf("phase %s", p.Status.Phase)
				}
				if p.Status.Reason != e.reason || !strings.Contains(p.Status.Message, e.want) {
					return false, fmt.Errorf("reason %q message %q, want %q containing %q", p.Status.Reason, p.Status.Message, e.reason, e.want)
				}
				return true, nil
			})
			eventually(t, time.Minute, "a Warning Event on "+e.name, func(ctx context.Context) (bool, error) {
				evs, err := v.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(vp.UID)})
				if err != nil {
					return false, err
				}
				for _, ev := range evs.Items {
					if ev.Type == corev1.EventTypeWarning && ev.Reason == e.reason {
						return true, nil
					}
				}
				return false, fmt.Errorf("%d events, none %s", len(evs.Items), e.reason)
			})
			if hp, ok := findHostCopy(context.Background(), v, "pods", ns, e.name); ok {
				t.Errorf("host pod %s exists for refused pod %s", hp.(*corev1.Pod).Name, e.name)
			}
			t.Logf("escape %s: refused (%s: %s)", e.name, vp.Status.Reason, vp.Status.Message)
		})
	}
}

// inspectHostPods lists every pod in the cluster's host namespace and checks
// each the agent made against level with the upstream evaluator, and against
// what the agent refuses at every level.
func inspectHostPods(t *testing.T, v *vcluster, level string) {
	t.Helper()
	eval, err := podsecurity.New(level)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := host.CoreV1().Pods(v.namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentPods := 0
	for _, p := range pods.Items {
		if p.Labels["app.kubernetes.io/managed-by"] != "k3k-kubelet" {
			continue
		}
		agentPods++
		var bad []string
		bad = append(bad, eval.Check(&p.ObjectMeta, &p.Spec)...)
		if p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC {
			bad = append(bad, "host namespaces")
		}
		if p.Spec.RuntimeClassName != nil {
			bad = append(bad, "runtimeClassName")
		}
		if len(p.Spec.EphemeralContainers) > 0 {
			bad = append(bad, "ephemeral containers")
		}
		for _, vol := range p.Spec.Volumes {
			if vol.HostPath != nil {
				bad = append(bad, "hostPath")
			}
			if e := vol.Ephemeral; e != nil && e.VolumeClaimTemplate != nil {
				s := e.VolumeClaimTemplate.Spec
				if s.DataSource != nil || s.DataSourceRef != nil || s.VolumeName != "" || s.Selector != nil ||
					len(e.VolumeClaimTemplate.Labels)+len(e.VolumeClaimTemplate.Annotations) > 0 {
					bad = append(bad, "ephemeral volume template beyond storage")
				}
			}
		}
		for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
			for _, port := range c.Ports {
				if port.HostPort != 0 {
					bad = append(bad, "hostPort")
				}
			}
		}
		if len(bad) > 0 {
			t.Errorf("host pod %s (virtual %s/%s) carries: %s", p.Name, p.Annotations["k3k.io/virtual-namespace"], p.Annotations["k3k.io/virtual-name"], strings.Join(bad, "; "))
		}
	}
	if agentPods == 0 {
		t.Errorf("no agent pods in %s: the inspection saw nothing", v.namespace)
	}
	t.Logf("inspected %d host pods of the agent in %s: none carries a refused setting", agentPods, v.namespace)
}

// asAgent is a host client impersonating the cluster's agent ServiceAccount.
func asAgent(t *testing.T, v *vcluster) kubernetes.Interface {
	t.Helper()
	rc := rest.CopyConfig(restConfig(t, cfg.hostKubeconfig))
	rc.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + v.namespace + ":k3k-" + v.name + "-kubelet",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + v.namespace, "system:authenticated"},
	}
	return kubernetes.NewForConfigOrDie(rc)
}

// setPodSecurityLevel sets the Cluster's spec.podSecurityLevel and waits for
// the agent Deployment to run with it.
func setPodSecurityLevel(t *testing.T, v *vcluster, level string) {
	t.Helper()
	patchClusterForAgent(t, v, `{"spec":{"podSecurityLevel":"`+level+`"}}`, "--pod-security-level="+level)
}

// patchClusterForAgent merge-patches the Cluster's spec and waits for the
// agent Deployment to have rolled out with flag on its command line.
func patchClusterForAgent(t *testing.T, v *vcluster, patch, flag string) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(restConfig(t, cfg.hostKubeconfig))
	gvr := schema.GroupVersionResource{Group: "k3k.io", Version: "v1beta1", Resource: "clusters"}
	if _, err := dyn.Resource(gvr).Namespace(v.namespace).Patch(context.Background(), v.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching Cluster %s with %s: %v", v.name, patch, err)
	}
	eventually(t, 3*time.Minute, "the agent running with "+flag, func(ctx context.Context) (bool, error) {
		d, err := host.AppsV1().Deployments(v.namespace).Get(ctx, "k3k-"+v.name+"-kubelet", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !strings.Contains(strings.Join(d.Spec.Template.Spec.Containers[0].Command, " "), flag) {
			return false, fmt.Errorf("agent command %v", d.Spec.Template.Spec.Containers[0].Command)
		}
		if s := d.Status; s.ObservedGeneration < d.Generation || s.UpdatedReplicas != 1 || s.ReadyReplicas != 1 || s.Replicas != 1 {
			return false, fmt.Errorf("rollout %+v", s)
		}
		return true, nil
	})
}

func waitPodPhase(t *testing.T, v *vcluster, ns, name string, phase corev1.PodPhase) {
	t.Helper()
	eventually(t, 5*time.Minute, "virtual pod "+name+" "+string(phase), func(ctx context.Context) (bool, error) {
		p, err := v.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase != phase {
			return false, fmt.Errorf("phase %s (%s: %s)", p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		return true, nil
	})
}
