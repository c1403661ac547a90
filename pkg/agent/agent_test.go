package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/agent/node"
	"github.com/k3k-io/k3k/pkg/agent/translate"
	"github.com/k3k-io/k3k/pkg/layout"
)

// The tests share one running agent and run in the order of this file: the
// last two replace the virtual apiserver and the agent's credentials.

// waitTimeout bounds every wait; it is generous because apiservers and other
// builds share a small machine. Nothing asserts how fast anything happens.
const waitTimeout = 90 * time.Second

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	if err := testenv.Poll(waitTimeout, 100*time.Millisecond, f); err != nil {
		log, _ := os.ReadFile(filepath.Join(workDir, "agent.log"))
		lines := strings.Split(strings.TrimSpace(string(log)), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		t.Fatalf("%s: %v\nlast agent log lines:\n%s", what, err, strings.Join(lines, "\n"))
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
	t.Cleanup(cancel)
	return c
}

func virtualNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := virtAdmin.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// boundPod is a virtual pod the virtual scheduler has placed on the agent's
// node (envtest has no scheduler, so the test binds it at creation).
func boundPod(ns, name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "main", Image: "busybox:1"}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func createVirtual(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := virtAdmin.CoreV1().Pods(p.Namespace).Create(ctx(t), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func hostPodName(ns, name string) string { return tr.HostName(translate.KindPod, ns, name) }

func waitHostPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var hp *corev1.Pod
	eventually(t, "host pod for "+ns+"/"+name, func() (err error) {
		hp, err = hostAdmin.CoreV1().Pods(hostNamespace).Get(ctx(t), hostPodName(ns, name), metav1.GetOptions{})
		return err
	})
	return hp
}

// hostKubeletRuns does on the host what the host's scheduler and kubelet
// would: bind the pod to a node and report it running.
func hostKubeletRuns(t *testing.T, name string, mutate func(*corev1.PodStatus)) {
	t.Helper()
	c := ctx(t)
	hp, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hp.Spec.NodeName == "" {
		err := hostAdmin.CoreV1().Pods(hostNamespace).Bind(c, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "host-node-1"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if hp, err = hostAdmin.CoreV1().Pods(hostNamespace).Get(c, name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	now := metav1.Now()
	// The QoS class is the one the host API server gave the pod at creation
	// (immutable; Burstable with the agent's default resources).
	hp.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, HostIP: "192.168.10.1", HostIPs: []corev1.HostIP{{IP: "192.168.10.1"}},
		PodIP: "10.244.1.7", PodIPs: []corev1.PodIP{{IP: "10.244.1.7"}}, StartTime: &now, QOSClass: hp.Status.QOSClass,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	for _, c := range hp.Spec.Containers {
		hp.Status.ContainerStatuses = append(hp.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "sha256:0123", ContainerID: "containerd://" + c.Name, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	if mutate != nil {
		mutate(&hp.Status)
	}
	if _, err := hostAdmin.CoreV1().Pods(hostNamespace).UpdateStatus(c, hp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// countVirtualEvents counts the virtual cluster's Events about object
// ns/name that match.
func countVirtualEvents(c context.Context, ns, name string, match func(corev1.Event) bool) (int, error) {
	evs, err := virtAdmin.CoreV1().Events(ns).List(c, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range evs.Items {
		if match(e) {
			n++
		}
	}
	return n, nil
}

func waitVirtualPhase(t *testing.T, ns, name string, phase corev1.PodPhase, check func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	var vp *corev1.Pod
	eventually(t, fmt.Sprintf("virtual pod %s/%s %s", ns, name, phase), func() (err error) {
		if vp, err = virtAdmin.CoreV1().Pods(ns).Get(ctx(t), name, metav1.GetOptions{}); err != nil {
			return err
		}
		if vp.Status.Phase != phase {
			return fmt.Errorf("phase %q (%s: %s)", vp.Status.Phase, vp.Status.Reason, vp.Status.Message)
		}
		if check != nil {
			return check(vp)
		}
		return nil
	})
	return vp
}

// runVirtual creates a virtual pod, lets the host "kubelet" run its host pod
// and waits until the virtual pod reports Running. It returns the host pod.
func runVirtual(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	createVirtual(t, p)
	hp := waitHostPod(t, p.Namespace, p.Name)
	hostKubeletRuns(t, hp.Name, nil)
	waitVirtualPhase(t, p.Namespace, p.Name, corev1.PodRunning, nil)
	return hp
}

// waitPasses waits for n more completed passes over key, as reconciled
// counts them (theAgent.Reconciled for pods, theAgent.ServiceReconciled for
// Services).
func waitPasses(t *testing.T, reconciled func(key string) uint64, key string, n uint64) {
	t.Helper()
	start := reconciled(key)
	eventually(t, fmt.Sprintf("%d more reconciles of %s", n, key), func() error {
		if reconciled(key) < start+n {
			return errors.New("not yet")
		}
		return nil
	})
}

// expectQuietResyncs lets key be reconciled once more, so that the writes
// earlier changes caused are done, then twice again with nothing changed:
// those two passes may write nothing to either API server (the node's
// heartbeat aside).
func expectQuietResyncs(t *testing.T, reconciled func(key string) uint64, key string) {
	t.Helper()
	waitPasses(t, reconciled, key, 1)
	hostBefore, virtualBefore := hostWrites.count(), virtualWrites.count()
	waitPasses(t, reconciled, key, 2)
	if w := hostWrites.since(hostBefore); len(w) > 0 {
		t.Errorf("writes to the host in steady state: %v", w)
	}
	if w := virtualWrites.since(virtualBefore); len(w) > 0 {
		t.Errorf("writes to the virtual cluster in steady state: %v", w)
	}
}

// stopVirtual stops the virtual apiserver (its pod restarting), so that the
// address the agent uses answers nothing, and waits until the agent notices.
func stopVirtual(t *testing.T) {
	t.Helper()
	virtualAPI.Stop()
	proxy.SetTarget("")
	eventually(t, "agent notices the virtual server is gone", func() error {
		if theAgent.Ready() == nil {
			return errors.New("still ready")
		}
		return nil
	})
}

// restartVirtual starts the virtual apiserver again on the same datastore
// (its files under dir) behind the same address.
func restartVirtual(t *testing.T, dir string) {
	t.Helper()
	restarted, err := startVirtual(ctx(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	virtualAPI = restarted
	virtAdmin = kubernetes.NewForConfigOrDie(restarted.RESTConfig())
	proxy.SetTarget(restarted.URL)
}

func waitGone(t *testing.T, what string, get func() error) {
	t.Helper()
	eventually(t, what+" gone", func() error {
		err := get()
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return errors.New("still exists")
		}
		return err
	})
}

func TestAgentRegistersNodeWithLease(t *testing.T) {
	eventually(t, "node Ready", func() error {
		n, err := virtAdmin.CoreV1().Nodes().Get(ctx(t), nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				if n.Status.Allocatable.Pods().Value() != 110 || n.Labels[node.LabelVirtual] != "true" {
					return fmt.Errorf("allocatable %v labels %v", n.Status.Allocatable, n.Labels)
				}
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", n.Status.Conditions)
	})
	var first *coordinationv1.Lease
	eventually(t, "lease held by the node", func() (err error) {
		first, err = virtAdmin.CoordinationV1().Leases(node.LeaseNamespace).Get(ctx(t), nodeName, metav1.GetOptions{})
		if err == nil && (first.Spec.HolderIdentity == nil || *first.Spec.HolderIdentity != nodeName || len(first.OwnerReferences) != 1) {
			err = fmt.Errorf("lease %+v owners %v", first.Spec, first.OwnerReferences)
		}
		return err
	})
	eventually(t, "lease renewed", func() error {
		l, err := virtAdmin.CoordinationV1().Leases(node.LeaseNamespace).Get(ctx(t), nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !l.Spec.RenewTime.After(first.Spec.RenewTime.Time) {
			return errors.New("not renewed yet")
		}
		return nil
	})
}

func TestAgentPodLifecycle(t *testing.T) {
	c := ctx(t)
	const ns = "shop"
	virtualNamespace(t, ns)
	if _, err := virtAdmin.CoreV1().ServiceAccounts(ns).Create(c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := virtAdmin.CoreV1().ConfigMaps(ns).Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-config"}, Data: map[string]string{"mode": "fast"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := virtAdmin.CoreV1().Secrets(ns).Create(c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "web-env"}, Data: map[string][]byte{"PASSWORD": []byte("s3cret")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := func(p *corev1.Pod) {
		p.Spec.ServiceAccountName = "web"
		p.Spec.Volumes = []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}},
			{Name: "api", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3600))}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			}}}},
		}
		p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-env"}}}}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	}
	vp := createVirtual(t, boundPod(ns, "web-0", web))

	// The host pod: translated name, pointing back, host-scheduled, references
	// renamed, downward values resolved.
	hp := waitHostPod(t, ns, "web-0")
	if k, ok := tr.VirtualKeyOf(hp); !ok || k.UID != string(vp.UID) || k.Name != "web-0" || k.Namespace != ns {
		t.Errorf("host pod does not point back at the virtual pod: %+v %v", k, ok)
	}
	if hp.Spec.NodeName != "" || hp.Spec.ServiceAccountName != "" || *hp.Spec.AutomountServiceAccountToken {
		t.Errorf("host pod placement/identity: node %q sa %q automount %v", hp.Spec.NodeName, hp.Spec.ServiceAccountName, *hp.Spec.AutomountServiceAccountToken)
	}
	hostCM := tr.HostName(translate.KindConfigMap, ns, "web-config")
	hostSecret := tr.HostName(translate.KindSecret, ns, "web-env")
	identity := tr.HostName(translate.KindPodIdentity, ns, "web-0")
	if got := hp.Spec.Volumes[0].ConfigMap.Name; got != hostCM {
		t.Errorf("config volume names %q, want %q", got, hostCM)
	}
	if got := hp.Spec.Containers[0].EnvFrom[0].SecretRef.Name; got != hostSecret {
		t.Errorf("envFrom names %q, want %q", got, hostSecret)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range hp.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	if got := env["POD_NAME"]; got.Value != "web-0" || got.ValueFrom != nil {
		t.Errorf("POD_NAME = %+v, want the virtual name", got)
	}
	// In-cluster clients reach the virtual API, not the host's.
	if got := env[translate.EnvServiceHost].Value; got != virtualAPIService.Host {
		t.Errorf("%s = %q, want %q", translate.EnvServiceHost, got, virtualAPIService.Host)
	}
	if len(hp.Spec.HostAliases) != 1 || hp.Spec.HostAliases[0].IP != virtualAPIService.IP {
		t.Errorf("host aliases %+v, want the API Service's ClusterIP", hp.Spec.HostAliases)
	}
	if len(hp.OwnerReferences) != 1 || hp.OwnerReferences[0].Kind != "Cluster" {
		t.Errorf("host pod owners %v, want the Cluster", hp.OwnerReferences)
	}
	// What the tenant left out got the agent's defaults (main_test.go sets
	// the binary's resource defaults).
	if sc := hp.Spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("host pod security context %+v, want seccomp RuntimeDefault", sc)
	}
	if r := hp.Spec.Containers[0].Resources; r.Limits.Memory().String() != "512Mi" || r.Requests.Memory().String() != "32Mi" || r.Requests.Cpu().String() != "10m" {
		t.Errorf("host container resources %+v, want the default requests and limits", r)
	}

	// The copies exist, carry the virtual content and are owned by the host pod.
	ownedBy := func(meta metav1.ObjectMeta, pods ...*corev1.Pod) error {
		if len(meta.OwnerReferences) != len(pods) {
			return fmt.Errorf("%s owners %v", meta.Name, meta.OwnerReferences)
		}
		for i, p := range pods {
			if meta.OwnerReferences[i].UID != p.UID || meta.OwnerReferences[i].Kind != "Pod" {
				return fmt.Errorf("%s owners %v, want pod %s", meta.Name, meta.OwnerReferences, p.Name)
			}
		}
		return nil
	}
	eventually(t, "host ConfigMap copy", func() error {
		cm, err := hostAdmin.CoreV1().ConfigMaps(hostNamespace).Get(c, hostCM, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.Data["mode"] != "fast" {
			return fmt.Errorf("data %v", cm.Data)
		}
		return ownedBy(cm.ObjectMeta, hp)
	})
	eventually(t, "host Secret copy", func() error {
		s, err := hostAdmin.CoreV1().Secrets(hostNamespace).Get(c, hostSecret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(s.Data["PASSWORD"]) != "s3cret" {
			return errors.New("content differs")
		}
		return ownedBy(s.ObjectMeta, hp)
	})
	var idSecret *corev1.Secret
	eventually(t, "identity Secret", func() (err error) {
		idSecret, err = hostAdmin.CoreV1().Secrets(hostNamespace).Get(c, identity, metav1.GetOptions{})
		return err
	})
	var token, namespace string
	for k, v := range idSecret.Data {
		switch {
		case strings.HasPrefix(k, "token-"):
			token = string(v)
		case strings.HasPrefix(k, "field-"):
			namespace = string(v)
		}
	}
	if namespace != ns {
		t.Errorf("identity namespace = %q, want %q", namespace, ns)
	}
	review, err := virtAdmin.AuthenticationV1().TokenReviews().Create(c, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:shop:web" {
		t.Errorf("projected token authenticates as %+v (%s)", review.Status.User, review.Status.Error)
	}

	// A second pod using the same ConfigMap shares the copy: both own it.
	vp1 := createVirtual(t, boundPod(ns, "web-1", web))
	hp1 := waitHostPod(t, ns, "web-1")
	first, second := hp, hp1
	if second.Name < first.Name {
		first, second = second, first
	}
	eventually(t, "shared ConfigMap owned by both pods", func() error {
		cm, err := hostAdmin.CoreV1().ConfigMaps(hostNamespace).Get(c, hostCM, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return ownedBy(cm.ObjectMeta, first, second)
	})

	// A change of the virtual ConfigMap reaches the copy.
	if _, err := virtAdmin.CoreV1().ConfigMaps(ns).Update(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-config"}, Data: map[string]string{"mode": "slow"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ConfigMap change copied", func() error {
		cm, err := hostAdmin.CoreV1().ConfigMaps(hostNamespace).Get(c, hostCM, metav1.GetOptions{})
		if err == nil && cm.Data["mode"] != "slow" {
			err = fmt.Errorf("data %v", cm.Data)
		}
		return err
	})

	// Deleted, the copy is emptied (the agent may not delete it): the host
	// kubelet takes its keys out of the volume, as for an optional volume
	// whose ConfigMap is gone. Made again, it is copied again.
	if err := virtAdmin.CoreV1().ConfigMaps(ns).Delete(c, "web-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the copy of a deleted ConfigMap emptied", func() error {
		cm, err := hostAdmin.CoreV1().ConfigMaps(hostNamespace).Get(c, hostCM, metav1.GetOptions{})
		if err == nil && (len(cm.Data) != 0 || len(cm.OwnerReferences) == 0) {
			err = fmt.Errorf("data %v owners %v", cm.Data, cm.OwnerReferences)
		}
		return err
	})
	if _, err := virtAdmin.CoreV1().ConfigMaps(ns).Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-config"}, Data: map[string]string{"mode": "slow"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a ConfigMap made again copied again", func() error {
		cm, err := hostAdmin.CoreV1().ConfigMaps(hostNamespace).Get(c, hostCM, metav1.GetOptions{})
		if err == nil && cm.Data["mode"] != "slow" {
			err = fmt.Errorf("data %v", cm.Data)
		}
		return err
	})
	// An Opaque Secret's copy likewise.
	if err := virtAdmin.CoreV1().Secrets(ns).Delete(c, "web-env", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the copy of a deleted Secret emptied", func() error {
		sec, err := hostAdmin.CoreV1().Secrets(hostNamespace).Get(c, tr.HostName(translate.KindSecret, ns, "web-env"), metav1.GetOptions{})
		if err == nil && len(sec.Data) != 0 {
			err = fmt.Errorf("data keys %d", len(sec.Data))
		}
		return err
	})

	// Status flows back once the host kubelet runs the pod.
	hostKubeletRuns(t, hp.Name, nil)
	waitVirtualPhase(t, ns, "web-0", corev1.PodRunning, func(p *corev1.Pod) error {
		s := p.Status
		if s.PodIP != "10.244.1.7" || s.HostIP != "192.168.10.1" || len(s.ContainerStatuses) != 1 || !s.ContainerStatuses[0].Ready {
			return fmt.Errorf("status %+v", s)
		}
		for _, c := range s.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("not Ready: %+v", s.Conditions)
	})
	// The container's start is said as a kubelet says it, once: reconciled
	// again (the resync), nothing new is said.
	started := func() (int, error) {
		return countVirtualEvents(c, ns, "web-0", func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeNormal && e.Reason == "Started" && e.Message == "Started container "+vp.Spec.Containers[0].Name && e.Source.Component == "kubelet"
		})
	}
	eventually(t, "a Started event on the virtual pod", func() error {
		n, err := started()
		if err == nil && n == 0 {
			err = errors.New("none yet")
		}
		return err
	})
	time.Sleep(4 * time.Second) // a resync (3 s in this suite)
	if n, err := started(); err != nil || n != 1 {
		t.Errorf("%d Started events (%v), want 1", n, err)
	}

	// Graceful deletion: the host pod is deleted with the virtual grace period;
	// the virtual pod stays until the host pod is really gone.
	if err := virtAdmin.CoreV1().Pods(ns).Delete(c, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "host pod terminating", func() error {
		p, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{})
		if err == nil && p.DeletionTimestamp == nil {
			err = errors.New("not terminating")
		}
		return err
	})
	if p, err := virtAdmin.CoreV1().Pods(ns).Get(c, "web-0", metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("virtual pod must stay terminating while the host pod exists: %v", err)
	}
	// The host kubelet confirms the containers stopped.
	if err := hostAdmin.CoreV1().Pods(hostNamespace).Delete(c, hp.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "virtual pod web-0", func() error {
		_, err := virtAdmin.CoreV1().Pods(ns).Get(c, "web-0", metav1.GetOptions{})
		return err
	})

	// A virtual pod removed at once (force delete) takes its host pod along.
	if err := virtAdmin.CoreV1().Pods(ns).Delete(c, "web-1", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "host pod of web-1", func() error {
		p, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp1.Name, metav1.GetOptions{})
		if err == nil && p.UID != hp1.UID {
			return fmt.Errorf("replaced by %s", p.UID)
		}
		return err
	})
	_ = vp1
}

func TestAgentFailsPodWhoseHostPodIsLost(t *testing.T) {
	c := ctx(t)
	const ns = "lost"
	virtualNamespace(t, ns)
	hp := runVirtual(t, boundPod(ns, "victim"))

	// A host administrator (or an eviction) removes the host pod.
	if err := hostAdmin.CoreV1().Pods(hostNamespace).Delete(c, hp.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitVirtualPhase(t, ns, "victim", corev1.PodFailed, func(p *corev1.Pod) error {
		if p.Status.Reason != translate.ReasonHostPodLost {
			return fmt.Errorf("reason %q", p.Status.Reason)
		}
		return nil
	})
	// A failed pod is not run again: its controller makes a replacement.
	if _, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("host pod after failure: %v", err)
	}
}

// TestAgentDeletesVirtualPodWhoseHostPodIsEvicted: the host evicts a host
// pod (here as the taint manager does from a node that stopped answering:
// DisruptionTarget, then a deletion no kubelet completes). The virtual pod
// is deleted at once, so that its controller replaces it, and stays
// Terminating until the host pod is gone, as the host pod does.
func TestAgentDeletesVirtualPodWhoseHostPodIsEvicted(t *testing.T) {
	c := ctx(t)
	const ns = "evicted"
	virtualNamespace(t, ns)
	hp := runVirtual(t, boundPod(ns, "on-lost-node"))

	live, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live.Status.Conditions = append(live.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager",
		Message: "Taint manager: deleting due to NoExecute taint", LastTransitionTime: metav1.Now(),
	})
	if _, err := hostAdmin.CoreV1().Pods(hostNamespace).UpdateStatus(c, live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Bound to a node whose kubelet never confirms: it stays Terminating.
	if err := hostAdmin.CoreV1().Pods(hostNamespace).Delete(c, hp.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(30))}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the virtual pod deleted after its host pod's eviction", func() error {
		p, err := virtAdmin.CoreV1().Pods(ns).Get(c, "on-lost-node", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.DeletionTimestamp == nil {
			return errors.New("not being deleted")
		}
		return nil
	})
	eventually(t, "an Evicted event on the virtual pod naming the host's reason", func() error {
		n, err := countVirtualEvents(c, ns, "on-lost-node", func(e corev1.Event) bool {
			return e.Reason == "Evicted" && strings.Contains(e.Message, "DeletionByTaintManager") && !strings.Contains(e.Message, "host-node")
		})
		if err == nil && n == 0 {
			err = errors.New("none yet")
		}
		return err
	})
	if _, err := virtAdmin.CoreV1().Pods(ns).Get(c, "on-lost-node", metav1.GetOptions{}); err != nil {
		t.Fatalf("the virtual pod went before its host pod: %v", err)
	}

	// The node is declared off and the host pod goes: so does the virtual one.
	if err := hostAdmin.CoreV1().Pods(hostNamespace).Delete(c, hp.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "the virtual pod", func() error {
		_, err := virtAdmin.CoreV1().Pods(ns).Get(c, "on-lost-node", metav1.GetOptions{})
		return err
	})
}

func TestAgentRefusesPodsThatWouldReachTheHost(t *testing.T) {
	c := ctx(t)
	const ns = "escape"
	virtualNamespace(t, ns)
	createVirtual(t, boundPod(ns, "rooted", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	}))
	waitVirtualPhase(t, ns, "rooted", corev1.PodFailed, func(p *corev1.Pod) error {
		if p.Status.Reason != translate.ReasonUnsupported || !strings.Contains(p.Status.Message, "hostPath") {
			return fmt.Errorf("reason %q message %q", p.Status.Reason, p.Status.Message)
		}
		return nil
	})
	if _, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hostPodName(ns, "rooted"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a host pod was made for a refused pod: %v", err)
	}
}

func TestAgentFollowsImageChangeAndRecreation(t *testing.T) {
	c := ctx(t)
	const ns = "update"
	virtualNamespace(t, ns)
	vp := createVirtual(t, boundPod(ns, "db-0"))
	hp := waitHostPod(t, ns, "db-0")

	// An image change is the one in-place spec change pods allow.
	vp.Spec.Containers[0].Image = "busybox:2"
	if _, err := virtAdmin.CoreV1().Pods(ns).Update(c, vp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "image change on the host pod", func() error {
		p, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{})
		if err == nil && p.Spec.Containers[0].Image != "busybox:2" {
			err = fmt.Errorf("image %q", p.Spec.Containers[0].Image)
		}
		return err
	})

	// A deadline set on the running pod reaches the host pod, whose kubelet
	// ends it; a shorter one replaces it.
	for _, deadline := range []int64{3600, 600} {
		eventually(t, fmt.Sprintf("activeDeadlineSeconds %d set in the virtual cluster", deadline), func() error {
			p, err := virtAdmin.CoreV1().Pods(ns).Get(c, "db-0", metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Spec.ActiveDeadlineSeconds = ptr.To(deadline)
			_, err = virtAdmin.CoreV1().Pods(ns).Update(c, p, metav1.UpdateOptions{})
			return err
		})
		eventually(t, fmt.Sprintf("activeDeadlineSeconds %d on the host pod", deadline), func() error {
			p, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{})
			if err == nil && ptr.Deref(p.Spec.ActiveDeadlineSeconds, 0) != deadline {
				err = fmt.Errorf("activeDeadlineSeconds %v", p.Spec.ActiveDeadlineSeconds)
			}
			return err
		})
	}

	// An image whose registry is an address is not carried over: the host pod
	// keeps what it runs, and one Warning Event says why.
	eventually(t, "image change to a registry address in the virtual cluster", func() error {
		p, err := virtAdmin.CoreV1().Pods(ns).Get(c, "db-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.Containers[0].Image = "127.0.0.1:10250/probe"
		_, err = virtAdmin.CoreV1().Pods(ns).Update(c, p, metav1.UpdateOptions{})
		return err
	})
	refusals := func() (int, error) {
		return countVirtualEvents(c, ns, "db-0", func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, `image "127.0.0.1:10250/probe" names its registry by address`)
		})
	}
	eventually(t, "a Warning Event about the refused image", func() error {
		n, err := refusals()
		if err == nil && n == 0 {
			err = errors.New("none yet")
		}
		return err
	})
	// Reconciled again (a label change, the resync), the refusal is not said again.
	if err := wait.PollUntilContextTimeout(c, 500*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		p, err := virtAdmin.CoreV1().Pods(ns).Get(c, "db-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels["touched"] = "yes"
		_, err = virtAdmin.CoreV1().Pods(ns).Update(c, p, metav1.UpdateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // the label change's reconcile and a resync (3 s in this suite)
	if n, err := refusals(); err != nil || n != 1 {
		t.Errorf("%d refusal Events (%v), want exactly 1", n, err)
	}
	if p, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if p.Spec.Containers[0].Image != "busybox:2" {
		t.Errorf("host pod image after a refused change: %q, want busybox:2", p.Spec.Containers[0].Image)
	}

	// The pod is replaced under the same name (as a StatefulSet does): the new
	// incarnation gets a new host pod under the same host name.
	if err := virtAdmin.CoreV1().Pods(ns).Delete(c, "db-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	vp2 := createVirtual(t, boundPod(ns, "db-0"))
	eventually(t, "host pod of the new incarnation", func() error {
		p, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Annotations[translate.AnnotationUID] != string(vp2.UID) {
			return fmt.Errorf("host pod still stands for %s", p.Annotations[translate.AnnotationUID])
		}
		return nil
	})
}

// TestAgentSteadyStateWritesNothing lets every pod the agent knows be
// reconciled again (resync) with nothing changed on either side: no write may
// reach either API server, apart from the node's heartbeat.
func TestAgentSteadyStateWritesNothing(t *testing.T) {
	c := ctx(t)
	const ns = "quiet"
	virtualNamespace(t, ns)
	if _, err := virtAdmin.CoreV1().ConfigMaps(ns).Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"a": "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runVirtual(t, boundPod(ns, "app", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{
			{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}},
			{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
		}
	}))
	expectQuietResyncs(t, theAgent.Reconciled, ns+"/app")
}

func TestAgentSurvivesVirtualAPIServerRestart(t *testing.T) {
	c := ctx(t)
	const ns = "steady"
	virtualNamespace(t, ns)
	hp := runVirtual(t, boundPod(ns, "app"))

	// The virtual server goes away (its pod restarting): the Service address
	// answers nothing.
	stopVirtual(t)
	// Meanwhile the workload lives on: the host pod is untouched, and its
	// container restarts once.
	if p, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{}); err != nil || p.UID != hp.UID || p.DeletionTimestamp != nil {
		t.Fatalf("host pod disturbed while the virtual server was down: %v", err)
	}
	hostKubeletRuns(t, hp.Name, func(s *corev1.PodStatus) { s.ContainerStatuses[0].RestartCount = 1 })

	// The server comes back on the same datastore, behind the same address.
	restartVirtual(t, "virtual-2")

	waitVirtualPhase(t, ns, "app", corev1.PodRunning, func(p *corev1.Pod) error {
		if p.Status.ContainerStatuses[0].RestartCount != 1 {
			return errors.New("restart during the outage not mirrored yet")
		}
		return nil
	})
	if p, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{}); err != nil || p.UID != hp.UID || p.DeletionTimestamp != nil {
		t.Fatalf("host pod replaced or deleted across the restart: %v", err)
	}
	createVirtual(t, boundPod(ns, "after"))
	waitHostPod(t, ns, "after")
	eventually(t, "agent ready again", theAgent.Ready)
}

func TestAgentFollowsCredentialChange(t *testing.T) {
	// New credentials: another client certificate, and an address the old
	// kubeconfig does not name. The old address stops answering, so only the
	// new kubeconfig can work.
	client, err := virtualCA.Issue(testenv.CertSpec{CommonName: "k3k-rotated", Organization: []string{"system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := testenv.K3sKubeconfig(virtualAPI.URL, virtualCA.Cert, client)
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetTarget("")
	if err := credentials.Write(map[string][]byte{layout.SecretKeyKubeconfig: kc}); err != nil {
		t.Fatal(err)
	}
	const ns = "rotated"
	virtualNamespace(t, ns)
	runVirtual(t, boundPod(ns, "app"))
	eventually(t, "agent ready with the new credentials", theAgent.Ready)
}

// TestAgentCarriesWhatVariablesReadToTheHostPod: a variable read from an
// annotation points at the host pod's annotation that carries it, and a
// change of the virtual annotation reaches that host annotation, from which
// the host kubelet resolves the variable when the container next starts.
func TestAgentCarriesWhatVariablesReadToTheHostPod(t *testing.T) {
	c := ctx(t)
	const ns = "fieldenv"
	virtualNamespace(t, ns)
	createVirtual(t, boundPod(ns, "sub", func(p *corev1.Pod) {
		p.Annotations = map[string]string{"mysubpath": "mypath/.."}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "SUB", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['mysubpath']"}}}}
	}))
	hp := waitHostPod(t, ns, "sub")
	var key string
	for _, e := range hp.Spec.Containers[0].Env {
		if e.Name == "SUB" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			key, _ = strings.CutPrefix(e.ValueFrom.FieldRef.FieldPath, "metadata.annotations['")
			key, _ = strings.CutSuffix(key, "']")
		}
	}
	if !strings.HasPrefix(key, "k3k.io/field-") || hp.Annotations[key] != "mypath/.." {
		t.Fatalf("SUB reads host annotation %q = %q, want a k3k.io/field- annotation carrying mypath/..", key, hp.Annotations[key])
	}
	if _, ok := hp.Annotations["mysubpath"]; ok {
		t.Error("the tenant's annotation itself reached the host pod")
	}
	eventually(t, "the annotation changed in the virtual cluster", func() error {
		p, err := virtAdmin.CoreV1().Pods(ns).Get(c, "sub", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Annotations["mysubpath"] = "mypath/foo"
		_, err = virtAdmin.CoreV1().Pods(ns).Update(c, p, metav1.UpdateOptions{})
		return err
	})
	eventually(t, "the host annotation follows", func() error {
		p, err := hostAdmin.CoreV1().Pods(hostNamespace).Get(c, hp.Name, metav1.GetOptions{})
		if err == nil && p.Annotations[key] != "mypath/foo" {
			err = fmt.Errorf("host annotation %q = %q", key, p.Annotations[key])
		}
		return err
	})
}
