package charttest

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// metricsServiceName is the metrics Service the chart renders for release.
const metricsServiceName = release + "-metrics"

// serviceMonitor is the part of a monitoring.coreos.com/v1 ServiceMonitor the
// chart writes.
type serviceMonitor struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

func TestMetricsServiceFrontsTheControllersMetricsPort(t *testing.T) {
	objs := render(t, "")
	u := find(objs, "Service", releaseNS, metricsServiceName)
	if u == nil {
		t.Fatalf("no Service %s with metrics on; kinds: %v", metricsServiceName, kinds(objs))
	}
	svc := typed[corev1.Service](t, u)
	pod := deployment(t, objs).Spec.Template
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service selector %v does not select the controller pods (labels %v)", svc.Spec.Selector, pod.Labels)
	}
	var containerPort int32
	for _, p := range pod.Spec.Containers[0].Ports {
		if p.Name == "metrics" {
			containerPort = p.ContainerPort
		}
	}
	want := []corev1.ServicePort{{Name: "metrics", Port: 8080, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP}}
	if diff := cmp.Diff(want, svc.Spec.Ports); diff != "" || containerPort != 8080 {
		t.Errorf("Service ports (-want +got):\n%s\ncontainer port metrics: %d, want 8080", diff, containerPort)
	}
	if sm := kinds(objs)["ServiceMonitor"]; sm != 0 {
		t.Errorf("%d ServiceMonitors by default; the chart must not need the monitoring.coreos.com CRD unless asked", sm)
	}

	// metricsPort 0: no metrics, so neither the port nor a Service for it.
	if n := kinds(render(t, "scheduling.yaml"))["Service"]; n != 0 {
		t.Errorf("%d Services rendered with metricsPort 0", n)
	}
}

// TestServiceMonitorSelectsTheMetricsService renders the ServiceMonitor,
// checks that it points at the metrics Service's port by name, and creates
// both for real on the test API server (with the ServiceMonitor CRD): the
// API server accepts the ServiceMonitor under strict field validation, and a
// list with the ServiceMonitor's own selector and namespaces, answered by the
// API server, returns the metrics Service and nothing else.
func TestServiceMonitorSelectsTheMetricsService(t *testing.T) {
	ctx := context.Background()
	objs := render(t, "observability.yaml")
	if n := kinds(objs)["ServiceMonitor"]; n != 1 {
		t.Fatalf("%d ServiceMonitors rendered with metrics.serviceMonitor.enabled, want 1", n)
	}
	smu := find(objs, "ServiceMonitor", releaseNS, release)
	if smu == nil {
		t.Fatalf("no ServiceMonitor %s/%s", releaseNS, release)
	}
	if smu.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %s", smu.GetAPIVersion())
	}
	if smu.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v lack metrics.serviceMonitor.labels (release: prometheus)", smu.GetLabels())
	}
	sm := typed[serviceMonitor](t, smu)
	svcu := find(objs, "Service", releaseNS, metricsServiceName)
	if svcu == nil {
		t.Fatalf("no metrics Service rendered")
	}
	svc := typed[corev1.Service](t, svcu)
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("%d endpoints, want 1", len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	if len(svc.Spec.Ports) != 1 || ep.Port != svc.Spec.Ports[0].Name {
		t.Errorf("endpoint port %q does not name the Service's port %v", ep.Port, svc.Spec.Ports)
	}
	if ep.Path != "/metrics" || ep.Scheme != "http" || ep.Interval != "30s" || ep.ScrapeTimeout != "10s" {
		t.Errorf("endpoint %+v, want http /metrics every 30s, timeout 10s", ep)
	}
	if !cmp.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{releaseNS}) {
		t.Errorf("namespaceSelector %v, want the release namespace only", sm.Spec.NamespaceSelector.MatchNames)
	}

	installMonitoringCRD(t)
	ensureNamespace(t, releaseNS)
	for _, o := range []*unstructured.Unstructured{svcu, smu} {
		o := o.DeepCopy()
		// Another test may have left the release's Service (applyRendered).
		if err := k8s.Delete(ctx, o.DeepCopy()); err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			t.Fatal(err)
		}
		if err := k8s.Create(ctx, o, client.FieldValidation("Strict")); err != nil {
			t.Fatalf("kube-apiserver refuses %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() {
			if err := k8s.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		})
	}
	// Another Service beside it, of the same release but another component,
	// must not be scraped.
	other := &corev1.Service{}
	other.Name, other.Namespace = "k3k-other", releaseNS
	other.Labels = map[string]string{"app.kubernetes.io/name": "k3k", "app.kubernetes.io/instance": release, "app.kubernetes.io/component": "webhook"}
	other.Spec.Ports = []corev1.ServicePort{{Name: "metrics", Port: 9090}}
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), other) })

	var selected []string
	for _, ns := range sm.Spec.NamespaceSelector.MatchNames {
		list := &corev1.ServiceList{}
		if err := k8s.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(sm.Spec.Selector.MatchLabels)); err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Items {
			selected = append(selected, s.Namespace+"/"+s.Name)
		}
	}
	if want := []string{releaseNS + "/" + metricsServiceName}; !cmp.Equal(selected, want) {
		t.Errorf("the ServiceMonitor's selector finds %v, want %v", selected, want)
	}
}
