//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/pki"
)

// TestWebhookAndAggregatedAPI: a validating webhook and an APIService whose
// Service is backed by a pod of the virtual cluster, which the shared agent
// runs on the host, are called by the virtual API server. The virtual
// Service's ClusterIP exists only inside the virtual cluster; the server's
// kube-apiserver reaches the pod on its endpoint address (the host pod's IP)
// because k3k turns enable-aggregator-routing on (docs/architecture.md).
func TestWebhookAndAggregatedAPI(t *testing.T) {
	t.Parallel()
	image := os.Getenv("E2E_WEBHOOK_IMAGE")
	if image == "" {
		image = "k3k-io/k3k-e2e-webhook:dev" // hack/images.sh e2e-webhook
	}
	v := sharedCluster(t)
	const ns, svcName = "hooks", "e2e-webhook"
	waitAgentNode(t, v)

	// The webhook's TLS: a CA of the test's own, a serving certificate for the
	// Service's names, which the apiserver checks against caBundle.
	now := time.Now()
	ca, err := pki.NewCA("e2e-webhook-ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.Issue(ca, pki.CertSpec{CommonName: svcName, Server: true, Validity: time.Hour,
		DNSNames: []string{svcName + "." + ns + ".svc", svcName + "." + ns + ".svc.cluster.local"}}, now)
	if err != nil {
		t.Fatal(err)
	}

	labels := map[string]string{"app": svcName}
	create := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		if err := retry(func(ctx context.Context) error {
			if err := f(ctx); !apierrors.IsAlreadyExists(err) {
				return err
			}
			return nil
		}); err != nil {
			t.Fatalf("creating %s: %v", what, err)
		}
	}
	create("namespace "+ns, func(ctx context.Context) error {
		_, err := v.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: map[string]string{"e2e.k3k.io/webhook": "on"}}}, metav1.CreateOptions{})
		return err
	})
	create("the webhook Deployment", func(ctx context.Context) error {
		_, err := v.client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{
						Name: "server", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						Env: []corev1.EnvVar{
							{Name: "TLS_CERT", Value: string(serving.CertPEM)},
							{Name: "TLS_KEY", Value: string(serving.KeyPEM)},
						},
						Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/healthz", Port: intstr.FromInt32(8443), Scheme: corev1.URISchemeHTTPS}}, PeriodSeconds: 2},
					}}},
				},
			},
		}, metav1.CreateOptions{})
		return err
	})
	create("the webhook Service", func(ctx context.Context) error {
		_, err := v.client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{
				Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)}}},
		}, metav1.CreateOptions{})
		return err
	})
	var pod *corev1.Pod
	eventually(t, 5*time.Minute, "the webhook's virtual pod Running and Ready", func(ctx context.Context) (bool, error) {
		pods, err := v.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + svcName})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning && podReady(p) {
				pod = p
				return true, nil
			}
		}
		return false, fmt.Errorf("%d pods, none Running and Ready", len(pods.Items))
	})
	t.Logf("webhook pod %s Ready on %s, IP %s", pod.Name, pod.Spec.NodeName, pod.Status.PodIP)

	t.Run("a validating webhook served by the pod is called", func(t *testing.T) {
		create("the ValidatingWebhookConfiguration", func(ctx context.Context) error {
			_, err := v.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: "e2e-deny"},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{{
					Name: "deny.e2e.k3k.io",
					ClientConfig: admissionregistrationv1.WebhookClientConfig{
						Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svcName, Path: ptr.To("/validate"), Port: ptr.To(int32(443))},
						CABundle: ca.CertPEM,
					},
					Rules: []admissionregistrationv1.RuleWithOperations{{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
					}},
					NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"e2e.k3k.io/webhook": "on"}},
					FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
					SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
					AdmissionReviewVersions: []string{"v1"},
					TimeoutSeconds:          ptr.To(int32(10)),
				}},
			}, metav1.CreateOptions{})
			return err
		})
		// failurePolicy Fail: until the apiserver reaches the webhook, every
		// ConfigMap is refused ("failed calling webhook"); until it has loaded
		// the configuration, every ConfigMap is allowed. Neither proves the
		// webhook is called, so wait for its own refusal: a Ready pod may still
		// be unreachable from the server pod for a moment while the host's
		// NetworkPolicy controller adds it to its rules (kube-router answers
		// "connection refused" meanwhile; CI saw it once).
		n := 0
		var err error
		eventually(t, 3*time.Minute, "the webhook to refuse a labelled ConfigMap", func(ctx context.Context) (bool, error) {
			n++
			_, err = v.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("refused-%d", n), Labels: map[string]string{"e2e.k3k.io/deny": "true"}}}, metav1.CreateOptions{})
			if err == nil {
				return false, fmt.Errorf("refused-%d was created: the configuration is not loaded yet", n)
			}
			if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "denied by the e2e webhook served by") {
				return true, nil
			}
			return false, err
		})
		if _, err := v.client.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "allowed"}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating a ConfigMap the webhook allows: %v", err)
		}
		t.Logf("the virtual API server called the webhook: %v", err)
		if _, err := v.client.CoreV1().ConfigMaps(ns).Get(context.Background(), fmt.Sprintf("refused-%d", n), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the denied ConfigMap refused-%d exists (err %v)", n, err)
		}
	})

	t.Run("an APIService served by the pod is available and answers", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(restConfig(t, v.kubeconfig))
		if err != nil {
			t.Fatal(err)
		}
		apiServices := dyn.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"})
		create("the APIService", func(ctx context.Context) error {
			_, err := apiServices.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
				"metadata": map[string]any{"name": "v1alpha1.e2e.k3k.io"},
				"spec": map[string]any{
					"group": "e2e.k3k.io", "version": "v1alpha1",
					"service":              map[string]any{"namespace": ns, "name": svcName, "port": int64(443)},
					"caBundle":             base64.StdEncoding.EncodeToString(ca.CertPEM),
					"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
				},
			}}, metav1.CreateOptions{})
			return err
		})
		eventually(t, 3*time.Minute, "APIService v1alpha1.e2e.k3k.io Available", func(ctx context.Context) (bool, error) {
			u, err := apiServices.Get(ctx, "v1alpha1.e2e.k3k.io", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Available" {
					if m["status"] == "True" {
						return true, nil
					}
					return false, fmt.Errorf("Available=%v: %v %v", m["status"], m["reason"], m["message"])
				}
			}
			return false, fmt.Errorf("no Available condition yet")
		})
		var body []byte
		eventually(t, time.Minute, "GET a ping through the virtual API server", func(ctx context.Context) (bool, error) {
			body, err = v.client.Discovery().RESTClient().Get().AbsPath("/apis/e2e.k3k.io/v1alpha1/namespaces", ns, "pings", "hello").DoRaw(ctx)
			return err == nil, err
		})
		var ping struct {
			Kind     string `json:"kind"`
			ServedBy string `json:"servedBy"`
			User     string `json:"user"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(body, &ping); err != nil {
			t.Fatalf("the ping is not JSON: %v: %s", err, body)
		}
		if ping.Kind != "Ping" || ping.Metadata.Name != "hello" || ping.ServedBy == "" {
			t.Fatalf("GET pings/hello answered %s; want the e2e server's Ping named hello", body)
		}
		// The aggregator proxies with its front-proxy identity and names the
		// user in X-Remote-User: the kubeconfig's admin.
		if ping.User == "" {
			t.Errorf("the aggregated API was not told the user (X-Remote-User): %s", body)
		}
		t.Logf("the virtual API server proxied GET pings/hello to %s for user %q", ping.ServedBy, ping.User)
		_, err = v.client.Discovery().ServerResourcesForGroupVersion("e2e.k3k.io/v1alpha1")
		if err != nil {
			t.Errorf("discovery of e2e.k3k.io/v1alpha1: %v", err)
		}
	})
}
