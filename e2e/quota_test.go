//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// TestQuota bounds a virtual cluster's namespace to one pod more than its
// server and agent use, then asks the virtual cluster for two: the host
// admits one and refuses the other, and the refused virtual pod says why.
func TestQuota(t *testing.T) {
	t.Parallel()
	v := createCluster(t, "quota")
	waitAgentNode(t, v)
	ctx := context.Background()

	// The quota counts every pod of the namespace (docs/security.md).
	running := 0
	pods, err := host.CoreV1().Pods(v.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			running++
		}
	}
	limit := running + 1
	crc := clusterClient(t)
	c := &v1beta1.Cluster{}
	if err := crc.Get(ctx, types.NamespacedName{Namespace: v.namespace, Name: v.name}, c); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Quota = &v1beta1.QuotaConfig{Hard: map[corev1.ResourceName]resource.Quantity{corev1.ResourcePods: *resource.NewQuantity(int64(limit), resource.DecimalSI)}}
	if err := crc.Patch(ctx, c, patch); err != nil {
		t.Fatalf("setting spec.quota: %v", err)
	}
	quotaName := "k3k-" + v.name + "-quota"
	eventually(t, time.Minute, fmt.Sprintf("ResourceQuota %s with pods=%d counting %d pods", quotaName, limit, running), func(ctx context.Context) (bool, error) {
		q, err := host.CoreV1().ResourceQuotas(v.namespace).Get(ctx, quotaName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		hard, used := q.Status.Hard[corev1.ResourcePods], q.Status.Used[corev1.ResourcePods]
		if hard.Value() != int64(limit) || used.Value() != int64(running) {
			return false, fmt.Errorf("status hard %v used %v", q.Status.Hard, q.Status.Used)
		}
		return true, nil
	})
	t.Logf("quota %s: pods %d (server and agent use %d)", quotaName, limit, running)

	const ns = "fill"
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "fill"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "fill", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       idlePod("fill").Spec,
			},
		},
	}
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// The host admits one: one virtual pod runs, the namespace is at its
	// quota, and the other virtual pod has no host pod.
	var pending *corev1.Pod
	eventually(t, 3*time.Minute, "one virtual pod running, the namespace at its pod quota", func(ctx context.Context) (bool, error) {
		list, err := v.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=fill"})
		if err != nil {
			return false, err
		}
		var run int
		pending = nil
		var states []string
		for i := range list.Items {
			p := &list.Items[i]
			states = append(states, fmt.Sprintf("%s: %s", p.Name, p.Status.Phase))
			switch p.Status.Phase {
			case corev1.PodRunning:
				run++
			case corev1.PodPending:
				pending = p
			}
		}
		q, err := host.CoreV1().ResourceQuotas(v.namespace).Get(ctx, quotaName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		used := q.Status.Used[corev1.ResourcePods]
		if run != 1 || pending == nil || used.Value() != int64(limit) {
			return false, fmt.Errorf("virtual pods: %s; quota used %s of %d", strings.Join(states, "; "), used.String(), limit)
		}
		return true, nil
	})
	if _, ok := findHostCopy(ctx, v, "pods", ns, pending.Name); ok {
		t.Fatalf("the virtual pod %s beyond the quota has a host pod", pending.Name)
	}
	list, err := host.CoreV1().Pods(v.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) > limit {
		t.Fatalf("%d host pods in %s, quota pods=%d", len(list.Items), v.namespace, limit)
	}
	t.Logf("virtual pod %s/%s has no host pod: the namespace is at its quota of %d pods", ns, pending.Name, limit)

	t.Run("the virtual pod beyond the quota says why", func(t *testing.T) {
		eventually(t, 2*time.Minute, "virtual pod "+pending.Name+" naming the exceeded quota", func(ctx context.Context) (bool, error) {
			p, err := v.client.CoreV1().Pods(ns).Get(ctx, pending.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !strings.Contains(podMessages(p), "exceeded quota") {
				return false, fmt.Errorf("status %s, reason %q, messages %q", p.Status.Phase, p.Status.Reason, podMessages(p))
			}
			t.Logf("virtual pod %s: %s", p.Name, podMessages(p))
			return true, nil
		})
	})

	// What the agent copies is counted too (the chart's defaults count
	// ConfigMaps, Secrets, EndpointSlices and Ingresses): with the
	// namespace's ConfigMaps at their quota, a pod's ConfigMap is not
	// copied, and the tenant is told on the pod.
	t.Run("a ConfigMap copy beyond the quota is said on the pod", func(t *testing.T) {
		if err := retry(func(ctx context.Context) error {
			return v.client.AppsV1().Deployments(ns).Delete(ctx, "fill", metav1.DeleteOptions{})
		}); err != nil {
			t.Fatal(err)
		}
		q, err := host.CoreV1().ResourceQuotas(v.namespace).Get(ctx, quotaName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		used, ok := q.Status.Used[corev1.ResourceConfigMaps]
		if !ok {
			t.Fatalf("the quota does not count ConfigMaps (hard %v): the chart's default is missing", q.Status.Hard)
		}
		if err := crc.Get(ctx, types.NamespacedName{Namespace: v.namespace, Name: v.name}, c); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(c.DeepCopy())
		c.Spec.Quota.Hard[corev1.ResourceConfigMaps] = used.DeepCopy()
		if err := crc.Patch(ctx, c, patch); err != nil {
			t.Fatalf("setting spec.quota: %v", err)
		}
		eventually(t, time.Minute, "the quota's configmaps at "+used.String()+" and a free pod", func(ctx context.Context) (bool, error) {
			q, err := host.CoreV1().ResourceQuotas(v.namespace).Get(ctx, quotaName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			hard, pods := q.Status.Hard[corev1.ResourceConfigMaps], q.Status.Used[corev1.ResourcePods]
			if hard.Cmp(used) != 0 || pods.Value() >= int64(limit) {
				return false, fmt.Errorf("hard %v used %v", q.Status.Hard, q.Status.Used)
			}
			return true, nil
		})
		if err := retry(func(ctx context.Context) error {
			_, err := v.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		reader := idlePod("reader")
		reader.Namespace = ns
		reader.Spec.Volumes = []corev1.Volume{{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}}
		reader.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "settings", MountPath: "/settings"}}
		createVirtualPod(t, v, reader)
		eventually(t, 2*time.Minute, "a Warning Event on pod reader about the refused ConfigMap copy", func(ctx context.Context) (bool, error) {
			evs, err := v.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=reader"})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && e.Reason == "HostCopyForbidden" && strings.Contains(e.Message, "ConfigMap settings") && strings.Contains(e.Message, "exceeded quota") {
					t.Logf("pod reader: %s: %s", e.Reason, e.Message)
					return true, nil
				}
			}
			return false, fmt.Errorf("%d events", len(evs.Items))
		})
		p, err := v.client.CoreV1().Pods(ns).Get(ctx, "reader", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodRunning {
			t.Errorf("pod reader runs without its ConfigMap")
		}
	})
}

// podMessages joins a pod's status reason, message and condition messages.
func podMessages(p *corev1.Pod) string {
	parts := []string{p.Status.Reason, p.Status.Message}
	for _, c := range p.Status.Conditions {
		parts = append(parts, c.Reason, c.Message)
	}
	return strings.Join(parts, " ")
}
