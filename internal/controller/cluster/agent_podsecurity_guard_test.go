package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// podSecurityGuard installs the Pod Security guard (allowPrivileged as the
// chart would render it) bound to namespace ns only, and returns an agent
// client of cluster c.
func podSecurityGuard(t *testing.T, ns, allowPrivileged string, c *v1beta1.Cluster) kubernetes.Interface {
	return installPodSecurityGuard(t, ns, ns, allowPrivileged, c, true)
}

// installPodSecurityGuard installs the guard under names ending in suffix,
// bound to ns only or, as the chart binds it, to every namespace.
func installPodSecurityGuard(t *testing.T, suffix, ns, allowPrivileged string, c *v1beta1.Cluster, onlyNS bool) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	role := DesiredAgentClusterRole("k3k-agent-" + suffix)
	policy, binding := DesiredAgentPodSecurityGuard("k3k-agent-pod-security-"+suffix, allowPrivileged)
	if onlyNS {
		binding.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}
	}
	for _, obj := range []client.Object{c, DesiredAgentServiceAccount(c), role, DesiredAgentRoleBinding(c, role.Name), policy, binding} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, obj := range []client.Object{role, policy, binding} {
			_ = k8s.Delete(context.Background(), obj)
		}
	})
	return agentClient(c)
}

// hostPod is a host pod as the agent makes one, changed by change.
func hostPod(name string, change func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{Name: "main", Image: "web", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			}}},
		},
	}
	if change != nil {
		change(p)
	}
	return p
}

// waitForLevel creates probe pods until the guard answers as it should for
// a pod with change: admission policies and their parameters are loaded
// asynchronously.
func waitForLevel(t *testing.T, agent kubernetes.Interface, ns string, change func(*corev1.Pod), refused bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		name := "probe-shop-" + strings.Repeat("0", 9) + string(rune('a'+i%6))
		_, err := agent.CoreV1().Pods(ns).Create(context.Background(), hostPod(name, change), metav1.CreateOptions{})
		if err == nil {
			_ = agent.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		}
		if refused == (err != nil && strings.Contains(err.Error(), "must meet Pod Security level")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guard never answered refused=%v; last answer: %v", refused, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func sc(p *corev1.Pod) *corev1.SecurityContext { return p.Spec.Containers[0].SecurityContext }

// guardedAgent makes a Cluster at level in a new namespace, binds the Pod
// Security guard there (allowPrivileged as the chart renders it), waits
// until it is in force, and returns the namespace, the Cluster and an agent
// client of the Cluster.
func guardedAgent(t *testing.T, allowPrivileged string, level v1beta1.PodSecurityLevel) (string, *v1beta1.Cluster, kubernetes.Interface) {
	t.Helper()
	ns := newNamespace(t)
	c := sampleCluster()
	c.Namespace = ns
	c.Spec.PodSecurityLevel = level
	agent := podSecurityGuard(t, ns, allowPrivileged, c)
	waitForLevel(t, agent, ns, privileged, level != v1beta1.PodSecurityPrivileged || allowPrivileged != "true")
	return ns, c, agent
}

// privileged makes the first container privileged (which the API allows
// only without allowPrivilegeEscalation false).
func privileged(p *corev1.Pod) {
	sc(p).Privileged = ptr.To(true)
	sc(p).AllowPrivilegeEscalation = nil
}

var rootWithEscalation = func(p *corev1.Pod) {
	p.Spec.SecurityContext = nil
	sc(p).AllowPrivilegeEscalation = ptr.To(true)
	sc(p).RunAsUser = ptr.To(int64(0))
	sc(p).Capabilities = nil
}

// TestAgentPodSecurityGuard sends real pod creations as an agent to a
// kube-apiserver with the Pod Security guard: at its Cluster's level
// (baseline by default) each escape is refused with the level and the rule
// in the message; restricted refuses root with privilege escalation;
// privileged holds only where the chart allowed it; another cluster's agent
// in the same namespace is held to its own Cluster's level.
func TestAgentPodSecurityGuard(t *testing.T) {
	ctx := context.Background()
	ns, c, agent := guardedAgent(t, "false", "")

	baseline := []struct {
		name   string
		change func(*corev1.Pod)
		want   string
	}{
		{"a privileged container", privileged, "no privileged containers"},
		{"a privileged init container", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "x", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
		}, "no privileged containers"},
		{"SYS_ADMIN", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"SYS_ADMIN"} }, "no capabilities added beyond the default set"},
		{"DAC_READ_SEARCH", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"DAC_READ_SEARCH"} }, "no capabilities added"},
		{"seccomp Unconfined", func(p *corev1.Pod) {
			sc(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, "no seccomp profile Unconfined"},
		{"AppArmor Unconfined", func(p *corev1.Pod) {
			sc(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}, "no AppArmor profile Unconfined"},
		{"AppArmor unconfined by annotation", func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}
		}, "no AppArmor profile Unconfined"},
		{"an SELinux type", func(p *corev1.Pod) { p.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} }, "no SELinux user or role"},
		{"an SELinux user", func(p *corev1.Pod) { sc(p).SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"} }, "no SELinux user or role"},
		{"procMount Unmasked", func(p *corev1.Pod) {
			// The API allows Unmasked only in a user namespace.
			p.Spec.HostUsers = ptr.To(false)
			sc(p).ProcMount = ptr.To(corev1.UnmaskedProcMount)
		}, "no procMount other than Default"},
		{"an unsafe sysctl", func(p *corev1.Pod) {
			p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "1"}}
		}, "only safe sysctls"},
	}
	for i, tc := range baseline {
		t.Run("baseline refuses "+tc.name, func(t *testing.T) {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, hostPod("b"+string(rune('a'+i))+"-shop-0123456789", tc.change), metav1.CreateOptions{})
			want := "must meet Pod Security level baseline: " + tc.want
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "for cluster "+c.Name) {
				t.Errorf("got %v, want Forbidden containing %q", err, want)
			}
		})
	}
	t.Run("a grace period beyond the cap is refused at every level", func(t *testing.T) {
		if agentDefaultMaxGrace != translate.DefaultMaxTerminationGracePeriodSeconds {
			t.Fatalf("the guard's default cap %d differs from the agent's %d", agentDefaultMaxGrace, translate.DefaultMaxTerminationGracePeriodSeconds)
		}
		want := "for cluster " + c.Name + " may have grace periods of at most 300 s"
		for i, change := range []func(*corev1.Pod){
			func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(31536000)) },
			func(p *corev1.Pod) {
				p.Spec.Containers[0].LivenessProbe = &corev1.Probe{
					ProbeHandler:                  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
					TerminationGracePeriodSeconds: ptr.To(int64(86400)),
				}
			},
		} {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, hostPod("g"+string(rune('a'+i))+"-shop-0123456789", change), metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v, want Forbidden containing %q", err, want)
			}
		}
		if _, err := agent.CoreV1().Pods(ns).Create(ctx, hostPod("gc-shop-0123456789", func(p *corev1.Pod) {
			p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(300))
		}), metav1.CreateOptions{}); err != nil {
			t.Errorf("a grace period at the cap was refused: %v", err)
		}
	})

	t.Run("baseline allows a safe sysctl, NET_BIND_SERVICE and root with escalation", func(t *testing.T) {
		p := hostPod("ok-shop-0123456789", func(p *corev1.Pod) {
			rootWithEscalation(p)
			sc(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}
			p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_local_port_range", Value: "1024 65000"}}}
		})
		if _, err := agent.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Errorf("refused: %v", err)
		}
	})

	// Another cluster in the same namespace, restricted: its agent is held to
	// restricted, this one stays at baseline.
	other := sampleCluster()
	other.Name, other.Namespace = "strict", ns
	other.Spec.PodSecurityLevel = v1beta1.PodSecurityRestricted
	t.Run("a restricted cluster's agent is refused root with privilege escalation", func(t *testing.T) {
		for _, obj := range []client.Object{other, DesiredAgentServiceAccount(other), DesiredAgentRoleBinding(other, "k3k-agent-"+ns)} {
			if err := k8s.Create(ctx, obj); err != nil {
				t.Fatalf("creating %s: %v", obj.GetName(), err)
			}
		}
		strict := agentClient(other)
		waitForLevel(t, strict, ns, rootWithEscalation, true)
		_, err := strict.CoreV1().Pods(ns).Create(ctx, hostPod("r1-shop-0123456789", rootWithEscalation), metav1.CreateOptions{})
		for _, want := range []string{"must meet Pod Security level restricted", "for cluster strict"} {
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v, want Forbidden containing %q", err, want)
			}
		}
		if _, err := strict.CoreV1().Pods(ns).Create(ctx, hostPod("r2-shop-0123456789", nil), metav1.CreateOptions{}); err != nil {
			t.Errorf("a restricted pod was refused: %v", err)
		}
		if _, err := agent.CoreV1().Pods(ns).Create(ctx, hostPod("r3-shop-0123456789", rootWithEscalation), metav1.CreateOptions{}); err != nil {
			t.Errorf("the baseline cluster's agent was held to the other's level: %v", err)
		}
	})

	t.Run("privileged is baseline where the chart did not allow it", func(t *testing.T) {
		live := &v1beta1.Cluster{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), live); err != nil {
			t.Fatal(err)
		}
		live.Spec.PodSecurityLevel = v1beta1.PodSecurityPrivileged
		if err := k8s.Update(ctx, live); err != nil {
			t.Fatal(err)
		}
		// Give the parameter informer the change, then the answer must
		// still be baseline's.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, hostPod("p1-shop-0123456789", privileged), metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), "must meet Pod Security level baseline: no privileged containers") {
				t.Fatalf("got %v, want baseline's refusal", err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})

	t.Run("privileged holds where the chart allowed it", func(t *testing.T) {
		ns2, trusted, a := guardedAgent(t, "true", v1beta1.PodSecurityPrivileged)
		if _, err := a.CoreV1().Pods(ns2).Create(ctx, hostPod("p2-shop-0123456789", func(p *corev1.Pod) {
			sc(p).Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		}), metav1.CreateOptions{}); err != nil {
			t.Errorf("refused at an allowed privileged level: %v", err)
		}

		// Its Cluster deleted while another stays in the namespace: the
		// agent (its ServiceAccount not yet collected) matches no param of
		// its own, and the other Cluster's param holds it to baseline.
		neighbour := sampleCluster()
		neighbour.Name, neighbour.Namespace = "neighbour", ns2
		if err := k8s.Create(ctx, neighbour); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Delete(ctx, trusted); err != nil {
			t.Fatal(err)
		}
		tryUntil(t, a, ns2, "p3-", privileged, refusedSaying("must meet Pod Security level baseline: no privileged containers"),
			"an agent whose Cluster is gone still ran a privileged pod beside another Cluster")
	})

}

// TestAgentPodSecurityGuardLeavesNamespacesWithoutAClusterAlone binds the Pod
// Security guard to every namespace, as the chart does. The API server looks a
// binding's params up before it evaluates the policy's match condition, so a
// binding that denied where no param exists refused every pod of every
// namespace without a Cluster to everyone: seen on a real node, where the
// controller's own ReplicaSet could no longer make its pod in k3k-system.
func TestAgentPodSecurityGuardLeavesNamespacesWithoutAClusterAlone(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := sampleCluster()
	c.Namespace = ns
	agent := installPodSecurityGuard(t, "everywhere", ns, "false", c, false)
	// The binding is in force once it refuses the agent of the Cluster.
	waitForLevel(t, agent, ns, privileged, true)

	other := newNamespace(t)
	if _, err := kubernetes.NewForConfigOrDie(restConfig).CoreV1().Pods(other).Create(ctx, hostPod("plain-0123456789", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a pod in a namespace without a Cluster was refused: %v", err)
	}
}

// setUserNamespaces writes c's UserNamespaces condition as the controller
// would, True or False.
func setUserNamespaces(t *testing.T, c *v1beta1.Cluster, on bool) {
	t.Helper()
	ctx := context.Background()
	live := &v1beta1.Cluster{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), live); err != nil {
		t.Fatal(err)
	}
	cond := userNamespacesCondition(UserNamespacesOff, nil)
	if on {
		cond = userNamespacesCondition(UserNamespacesOn, nil)
	}
	status := metav1.ConditionFalse
	if cond.ok {
		status = metav1.ConditionTrue
	}
	live.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionUserNamespaces, Status: status, Reason: cond.reason, Message: cond.message, LastTransitionTime: metav1.Now()}}
	if err := k8s.Status().Update(ctx, live); err != nil {
		t.Fatal(err)
	}
}

// TestAgentPodSecurityGuardHoldsUserNamespaces: while a Cluster's
// UserNamespaces condition is True, its agent's pods must run in a user
// namespace (hostUsers: false) below the privileged level, as a working
// agent makes them; a subverted one that leaves the field out or asks for
// the node's users is refused by the host API. Another Cluster's condition
// holds only its own agent, and the condition turned False lets pods keep
// the node's users again.
func TestAgentPodSecurityGuardHoldsUserNamespaces(t *testing.T) {
	ctx := context.Background()
	ns, c, agent := guardedAgent(t, "false", "")
	setUserNamespaces(t, c, true)

	const want = "must run in a user namespace (hostUsers: false): its UserNamespaces condition is True"
	inUserNS := func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(false) }
	// The parameter informer takes the status change asynchronously.
	tryUntil(t, agent, ns, "u", nil, refusedSaying(want), "a pod without hostUsers was never refused")
	_, err := agent.CoreV1().Pods(ns).Create(ctx, hostPod("ua-shop-0123456789", func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(true) }), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "for cluster "+c.Name) {
		t.Errorf("hostUsers true: got %v, want Forbidden containing %q", err, want)
	}
	created, err := agent.CoreV1().Pods(ns).Create(ctx, hostPod("ub-shop-0123456789", inUserNS), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a pod in a user namespace was refused: %v", err)
	}
	if created.Spec.HostUsers == nil || *created.Spec.HostUsers {
		t.Fatalf("the API server did not keep hostUsers false (feature gate UserNamespacesSupport off?): %v", created.Spec.HostUsers)
	}

	// A neighbour without user namespaces in the same namespace is not held.
	other := sampleCluster()
	other.Name, other.Namespace = "neighbour", ns
	for _, obj := range []client.Object{other, DesiredAgentServiceAccount(other), DesiredAgentRoleBinding(other, "k3k-agent-"+ns)} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}
	neighbour := agentClient(other)
	waitForLevel(t, neighbour, ns, privileged, true)
	if _, err := neighbour.CoreV1().Pods(ns).Create(ctx, hostPod("uc-shop-0123456789", nil), metav1.CreateOptions{}); err != nil {
		t.Errorf("the neighbour's agent was held to this cluster's user namespaces: %v", err)
	}

	// Turned off: the node's users are allowed again.
	setUserNamespaces(t, c, false)
	tryUntil(t, agent, ns, "ud", nil, func(err error) bool { return err == nil }, "with the condition False a pod without hostUsers is still refused")
}

// refusedSaying is an answer of the guard that refuses with want in its
// message.
func refusedSaying(want string) func(error) bool {
	return func(err error) bool { return err != nil && strings.Contains(err.Error(), want) }
}

// tryUntil creates pods with change as agent, named prefix and a count, until
// done says the answer is the awaited one: admission policies and their
// parameters are loaded asynchronously. It fails the test with failure after
// a minute.
func tryUntil(t *testing.T, agent kubernetes.Interface, ns, prefix string, change func(*corev1.Pod), done func(error) bool, failure string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		_, err := agent.CoreV1().Pods(ns).Create(context.Background(), hostPod(fmt.Sprintf("%s%d-shop-0123456789", prefix, i), change), metav1.CreateOptions{})
		if done(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s; last answer: %v", failure, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAgentPodSecurityGuardUserNamespacesPrivileged: a Cluster at an allowed
// privileged level may keep the node's users (translate lets such a pod opt
// out), even while its condition is True.
func TestAgentPodSecurityGuardUserNamespacesPrivileged(t *testing.T) {
	ctx := context.Background()
	ns, c, agent := guardedAgent(t, "true", v1beta1.PodSecurityPrivileged)
	setUserNamespaces(t, c, true)
	// The condition changes nothing here that shows, so a later change of
	// the same Cluster that does show (a grace cap of 10 s) proves the
	// guard reads a version with the condition True.
	live := &v1beta1.Cluster{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), live); err != nil {
		t.Fatal(err)
	}
	live.Spec.MaxTerminationGracePeriodSeconds = ptr.To(int64(10))
	if err := k8s.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	tryUntil(t, agent, ns, "ug", func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(20)) },
		refusedSaying("may have grace periods of at most 10 s"), "the guard never read the Cluster's later version")
	if _, err := agent.CoreV1().Pods(ns).Create(ctx, hostPod("uh-shop-0123456789", func(p *corev1.Pod) {
		p.Spec.HostUsers = ptr.To(true)
		p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(10))
	}), metav1.CreateOptions{}); err != nil {
		t.Errorf("a privileged cluster's pod with the node's users was refused: %v", err)
	}
}

// TestAgentPodSecurityGuardHoldsThePolicyBounds: a Cluster made privileged
// (allowed by the chart) before its namespace was bound to a policy keeps
// that level in its stored spec; the bounds the controller records in its
// status (status.policyBounds: restricted, a 30 s grace cap) are what the
// guard holds its agent's pods to.
func TestAgentPodSecurityGuardHoldsThePolicyBounds(t *testing.T) {
	ctx := context.Background()
	ns, c, agent := guardedAgent(t, "true", v1beta1.PodSecurityPrivileged)
	live := &v1beta1.Cluster{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), live); err != nil {
		t.Fatal(err)
	}
	live.Status.PolicyBounds = &v1beta1.PolicyBounds{PodSecurityLevel: v1beta1.PodSecurityRestricted, MaxTerminationGracePeriodSeconds: ptr.To(int64(30))}
	if err := k8s.Status().Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	// The parameter informer takes the status change asynchronously.
	tryUntil(t, agent, ns, "pb", rootWithEscalation, refusedSaying("must meet Pod Security level restricted"), "a root pod was never refused at the policy's level")
	_, err := agent.CoreV1().Pods(ns).Create(ctx, hostPod("pc-shop-0123456789", func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(60)) }), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "grace periods of at most 30 s") {
		t.Errorf("a 60 s grace period under a 30 s policy bound: %v, want refused", err)
	}
	if _, err := agent.CoreV1().Pods(ns).Create(ctx, hostPod("pd-shop-0123456789", nil), metav1.CreateOptions{}); err != nil {
		t.Errorf("a restricted pod was refused: %v", err)
	}
}
