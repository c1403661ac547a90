package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAgentGuardHoldsTheAgentToItsOwnObjects sends real requests as an agent
// ServiceAccount (impersonated) to a kube-apiserver with the agent's Role and
// the guard policy: what the agent does for a workload passes, what would
// reach the cluster's own pods, Secrets and Services is refused with a
// message that says why, and nobody else is affected.
func TestAgentGuardHoldsTheAgentToItsOwnObjects(t *testing.T) {
	ctx := context.Background()
	ns, c, admin, agent := guardedNamespace(t, AgentPodDefaults)
	n := layout.NamesFor(c)
	const (
		ownPod    = "web-0-shop-0123456789"
		ownSecret = "web-env-shop-abcdef0123"
		ownSvc    = "web-shop-9876543210"
		ownClaim  = "data-web-0-shop-0a1b2c3d4e"
	)

	// pod is a host pod as the agent makes one: its own name, its own copies,
	// no token; change adjusts it per case.
	pod := func(name string, change func(*corev1.PodSpec)) *corev1.Pod {
		return agentPod(name, func(s *corev1.PodSpec) {
			s.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: ownSecret}}}}
			s.Volumes = []corev1.Volume{
				{Name: "env", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: ownSecret}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			}
			if change != nil {
				change(s)
			}
		})
	}
	secretVolume := func(name string) func(*corev1.PodSpec) {
		return func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}})
		}
	}
	slice := func(name, service string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.9"}}},
		}
	}
	svc := func(name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	// exec sends the POST of `kubectl exec` (without the upgrade): admission
	// runs first; a request it lets through fails later, since envtest has no
	// kubelet.
	exec := func(pod string) error {
		return agent.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource("exec").
			Param("container", "main").Param("command", "true").Param("stdout", "true").Do(ctx).Error()
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n.StatefulSet + "-0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "k3s", Image: "k3s"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n.Token}, StringData: map[string]string{"token": "secret"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc(n.Service), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The host's RuntimeClass admission refuses unknown classes before the
	// guard is asked; a class that exists shows the guard's answer.
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc-" + ns}, Handler: "runc"}
	if err := k8s.Create(ctx, rc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), rc) })

	// claim is a host claim as the agent makes one: its own name, its labels
	// and annotations, storage only; change adjusts it per case.
	claim := func(name string, change func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Labels:      map[string]string{"app.kubernetes.io/managed-by": "k3k-kubelet", "k3k.io/cluster": c.Name, "k3k.io/virtual-namespace": "shop"},
				Annotations: map[string]string{"k3k.io/virtual-kind": "persistentvolumeclaim", "k3k.io/virtual-name": "data-web-0"},
			},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if change != nil {
			change(pvc)
		}
		return pvc
	}
	createClaim := func(pvc *corev1.PersistentVolumeClaim) error {
		_, err := agent.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
		return err
	}
	// ing is a host Ingress as the agent makes one: routed to its own Service
	// copy, TLS from its own Secret copy.
	prefix := networkingv1.PathTypePrefix
	ing := func(name string, change func(*networkingv1.Ingress)) *networkingv1.Ingress {
		i := &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"k3k.io/virtual-name": "shop"}},
			Spec: networkingv1.IngressSpec{
				Rules: []networkingv1.IngressRule{{Host: "shop.example.com", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &prefix,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: ownSvc, Port: networkingv1.ServiceBackendPort{Number: 80}}},
				}}}}}},
				TLS: []networkingv1.IngressTLS{{Hosts: []string{"shop.example.com"}, SecretName: ownSecret}},
			},
		}
		if change != nil {
			change(i)
		}
		return i
	}
	createIngress := func(i *networkingv1.Ingress) error {
		_, err := agent.NetworkingV1().Ingresses(ns).Create(ctx, i, metav1.CreateOptions{})
		return err
	}
	// The controller's Ingress of the API (spec.expose.ingress).
	if _, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ing("k3k-"+c.Name+"-ingress", func(i *networkingv1.Ingress) {
		i.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name, i.Spec.TLS = n.Service, nil
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serverClaim := "data-" + n.StatefulSet + "-0"
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim(serverClaim, func(p *corev1.PersistentVolumeClaim) { p.Labels, p.Annotations = nil, nil }), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	refused := []struct {
		name    string
		do      func() error
		message string
	}{
		{"a pod mounting the cluster token", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("a-shop-0123456789", secretVolume(n.Token)), metav1.CreateOptions{})
			return err
		}, "ConfigMaps and Secrets the agent copied"},
		{"a pod taking environment from the kubeconfig Secret", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("b-shop-0123456789", func(s *corev1.PodSpec) {
				s.Containers[0].Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: n.Kubeconfig}, Key: "kubeconfig.yaml"}}}}
			}), metav1.CreateOptions{})
			return err
		}, "environment from ConfigMaps and Secrets the agent copied"},
		{"a pod with a host ServiceAccount token", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("c-shop-0123456789", func(s *corev1.PodSpec) { s.AutomountServiceAccountToken = nil }), metav1.CreateOptions{})
			return err
		}, "must not mount a host ServiceAccount token"},
		{"a pod mounting the server's volume claim", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("d-shop-0123456789", func(s *corev1.PodSpec) {
				s.Volumes = append(s.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + n.StatefulSet + "-0"}}})
			}), metav1.CreateOptions{})
			return err
		}, "may only use emptyDir"},
		{"a pod opening a host port", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("e-shop-0123456789", func(s *corev1.PodSpec) {
				s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
			}), metav1.CreateOptions{})
			return err
		}, "must not open host ports"},
		{"a pod probing the cloud metadata address", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("g-shop-0123456789", func(s *corev1.PodSpec) {
				s.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Port: intstr.FromInt32(80)}}}
			}), metav1.CreateOptions{})
			return err
		}, "must not name a host in probes or lifecycle handlers"},
		{"a pod whose postStart hook calls the node's kubelet", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("h-shop-0123456789", func(s *corev1.PodSpec) {
				s.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Port: intstr.FromInt32(10250)}}}
			}), metav1.CreateOptions{})
			return err
		}, "must not name a host in probes or lifecycle handlers"},
		{"a pod with a runtime class", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("i-shop-0123456789", func(s *corev1.PodSpec) { s.RuntimeClassName = ptr.To(rc.Name) }), metav1.CreateOptions{})
			return err
		}, "must not choose a runtime class"},
		{"an ephemeral volume cloning the server's claim", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("j-shop-0123456789", ephemeralVolume(func(t *corev1.PersistentVolumeClaimTemplate) {
				t.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "data-" + n.StatefulSet + "-0"}
			})), metav1.CreateOptions{})
			return err
		}, "may only ask for storage"},
		{"an ephemeral volume bound to a named volume", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("k-shop-0123456789", ephemeralVolume(func(t *corev1.PersistentVolumeClaimTemplate) { t.Spec.VolumeName = "pv-1" })), metav1.CreateOptions{})
			return err
		}, "may only ask for storage"},
		{"an ephemeral volume of the empty class, which binds pre-provisioned volumes", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("n-shop-0123456789", ephemeralVolume(func(t *corev1.PersistentVolumeClaimTemplate) { t.Spec.StorageClassName = ptr.To("") })), metav1.CreateOptions{})
			return err
		}, "may only ask for storage"},
		{"an ephemeral volume choosing volumes by label", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("l-shop-0123456789", ephemeralVolume(func(t *corev1.PersistentVolumeClaimTemplate) {
				t.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
			})), metav1.CreateOptions{})
			return err
		}, "may only ask for storage"},
		{"an ephemeral volume labelled as the controller's", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("m-shop-0123456789", ephemeralVolume(func(t *corev1.PersistentVolumeClaimTemplate) {
				t.Labels = map[string]string{v1beta1.LabelComponent: "server"}
			})), metav1.CreateOptions{})
			return err
		}, "may only ask for storage"},
		{"a pod on the host network", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("f-shop-0123456789", func(s *corev1.PodSpec) { s.HostNetwork = true }), metav1.CreateOptions{})
			return err
		}, "host's network"},
		{"a pod with a name the agent did not derive", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("evil", nil), metav1.CreateOptions{})
			return err
		}, `pods of objects it named (ending in a 10-digit hash); "evil" is not one`},
		{"deleting the server pod", func() error {
			return agent.CoreV1().Pods(ns).Delete(ctx, n.StatefulSet+"-0", metav1.DeleteOptions{})
		}, "may only write pods of objects it named"},
		{"exec into the server pod", func() error { return exec(n.StatefulSet + "-0") }, "may only write pods/exec of objects it named"},
		{"overwriting the cluster token", func() error {
			_, err := agent.CoreV1().Secrets(ns).Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n.Token}, StringData: map[string]string{"token": "mine"}}, metav1.UpdateOptions{})
			return err
		}, "may only write secrets of objects it named"},
		{"deleting the cluster's API Service", func() error {
			return agent.CoreV1().Services(ns).Delete(ctx, n.Service, metav1.DeleteOptions{})
		}, "may only write services of objects it named"},
		{"a claim choosing host volumes by label", func() error {
			return createClaim(claim("a-shop-0a1b2c3d4e", func(p *corev1.PersistentVolumeClaim) {
				p.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "other"}}
			}))
		}, "may only ask for storage"},
		{"a claim cloning the server's claim", func() error {
			return createClaim(claim("b-shop-0a1b2c3d4e", func(p *corev1.PersistentVolumeClaim) {
				p.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: serverClaim}
			}))
		}, "may only ask for storage"},
		{"a claim cloning through dataSourceRef", func() error {
			return createClaim(claim("c-shop-0a1b2c3d4e", func(p *corev1.PersistentVolumeClaim) {
				p.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: serverClaim}
			}))
		}, "may only ask for storage"},
		{"a claim naming a host volume", func() error {
			return createClaim(claim("d-shop-0a1b2c3d4e", func(p *corev1.PersistentVolumeClaim) { p.Spec.VolumeName = "pv-of-another-tenant" }))
		}, "may only ask for storage"},
		{"a claim of the empty class, which binds pre-provisioned volumes", func() error {
			return createClaim(claim("e-shop-0a1b2c3d4e", func(p *corev1.PersistentVolumeClaim) { p.Spec.StorageClassName = ptr.To("") }))
		}, "may only ask for storage"},
		{"a claim choosing its class by the beta annotation", func() error {
			return createClaim(claim("f-shop-0a1b2c3d4e", func(p *corev1.PersistentVolumeClaim) {
				p.Annotations["volume.beta.kubernetes.io/storage-class"] = "premium"
			}))
		}, "may carry only k3k's labels and annotations"},
		{"a claim choosing the node a provisioner uses", func() error {
			return createClaim(claim("g-shop-0a1b2c3d4e", func(p *corev1.PersistentVolumeClaim) {
				p.Annotations["volume.kubernetes.io/selected-node"] = "control-plane"
			}))
		}, "may carry only k3k's labels and annotations"},
		{"a claim labelled as the controller's", func() error {
			return createClaim(claim("h-shop-0a1b2c3d4e", func(p *corev1.PersistentVolumeClaim) { p.Labels["app.kubernetes.io/managed-by"] = "k3k" }))
		}, "may carry only k3k's labels and annotations"},
		{"a claim with the server's name", func() error {
			return createClaim(claim(serverClaim+"-x", nil))
		}, "may only write persistentvolumeclaims of objects it named"},
		{"deleting the server's claim", func() error {
			return agent.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, serverClaim, metav1.DeleteOptions{})
		}, "may only write persistentvolumeclaims of objects it named"},
		{"an Ingress with a default backend (every hostname nobody claimed)", func() error {
			return createIngress(ing("a-shop-0a1b2c3d4e", func(i *networkingv1.Ingress) { i.Spec.DefaultBackend = &i.Spec.Rules[0].HTTP.Paths[0].Backend }))
		}, "may not answer for every hostname of the host's ingress controller"},
		{"an Ingress rule without a host", func() error {
			return createIngress(ing("g-shop-0a1b2c3d4e", func(i *networkingv1.Ingress) { i.Spec.Rules[0].Host = "" }))
		}, "may not answer for every hostname of the host's ingress controller"},
		{"an Ingress TLS entry without hosts (the controller's wildcard)", func() error {
			return createIngress(ing("i-shop-0a1b2c3d4e", func(i *networkingv1.Ingress) { i.Spec.TLS[0].Hosts = nil }))
		}, "may not answer for every hostname of the host's ingress controller"},
		{"an Ingress serving the cluster token as its certificate", func() error {
			return createIngress(ing("b-shop-0a1b2c3d4e", func(i *networkingv1.Ingress) { i.Spec.TLS[0].SecretName = n.Token }))
		}, "may only route to Services the agent copied and use TLS Secrets the agent copied"},
		{"an Ingress with a resource backend", func() error {
			return createIngress(ing("c-shop-0a1b2c3d4e", func(i *networkingv1.Ingress) {
				i.Spec.Rules[0].HTTP.Paths[0].Backend = networkingv1.IngressBackend{Resource: &corev1.TypedLocalObjectReference{Kind: "Secret", Name: ownSecret}}
			}))
		}, "no resource backends"},
		{"an Ingress path routing to the API Service", func() error {
			return createIngress(ing("d-shop-0a1b2c3d4e", func(i *networkingv1.Ingress) {
				i.Spec.Rules[0].HTTP.Paths[0].Backend.Service = &networkingv1.IngressServiceBackend{Name: n.Service, Port: networkingv1.ServiceBackendPort{Number: 443}}
			}))
		}, "may only route to Services the agent copied"},
		{"an Ingress with a configuration snippet", func() error {
			return createIngress(ing("e-shop-0a1b2c3d4e", func(i *networkingv1.Ingress) {
				i.Annotations["nginx.ingress.kubernetes.io/server-snippet"] = "location / { return 200; }"
			}))
		}, "may carry only k3k's annotations"},
		{"deleting an Ingress the agent did not name", func() error {
			return agent.NetworkingV1().Ingresses(ns).Delete(ctx, "k3k-"+c.Name+"-ingress", metav1.DeleteOptions{})
		}, "may only write ingresses of objects it named"},
		{"an EndpointSlice of the cluster's API Service", func() error {
			_, err := agent.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice("web-shop-abcdef0123", n.Service), metav1.CreateOptions{})
			return err
		}, "must belong to a Service the agent copied"},
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			err := tc.do()
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("got %v, want Forbidden containing %q", err, tc.message)
			}
		})
	}

	allowed := []struct {
		name string
		do   func() error
	}{
		{"a Secret copy", func() error {
			_, err := agent.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ownSecret}}, metav1.CreateOptions{})
			return err
		}},
		{"a host pod using it", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod(ownPod, nil), metav1.CreateOptions{})
			return err
		}},
		{"a pod with an ephemeral volume asking only for storage", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("n-shop-0123456789", ephemeralVolume(nil)), metav1.CreateOptions{})
			return err
		}},
		{"a Service copy", func() error {
			_, err := agent.CoreV1().Services(ns).Create(ctx, svc(ownSvc), metav1.CreateOptions{})
			return err
		}},
		{"its EndpointSlice", func() error {
			_, err := agent.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice("web-shop-abcdef0123", ownSvc), metav1.CreateOptions{})
			return err
		}},
		{"a claim copy", func() error { return createClaim(claim(ownClaim, nil)) }},
		{"an Ingress copy", func() error { return createIngress(ing("f-shop-0a1b2c3d4e", nil)) }},
		{"a host pod mounting it", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, pod("p-shop-0123456789", func(s *corev1.PodSpec) {
				s.Volumes = append(s.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ownClaim}}})
			}), metav1.CreateOptions{})
			return err
		}},
		{"deleting its pod", func() error {
			return agent.CoreV1().Pods(ns).Delete(ctx, ownPod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		}},
	}
	for _, tc := range allowed {
		t.Run("allowed: "+tc.name, func(t *testing.T) {
			if err := tc.do(); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
	// An unbound claim's volumeName may be set once; the agent must never
	// use that to bind its claim to a host volume of its choosing.
	t.Run("refused: binding its own claim to a host volume by update", func(t *testing.T) {
		live, err := agent.CoreV1().PersistentVolumeClaims(ns).Get(ctx, ownClaim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		live.Spec.VolumeName = "pv-of-another-tenant"
		_, err = agent.CoreV1().PersistentVolumeClaims(ns).Update(ctx, live, metav1.UpdateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may only ask for storage") {
			t.Errorf("got %v, want Forbidden", err)
		}
	})
	t.Run("refused: annotating its own claim with a node for the provisioner", func(t *testing.T) {
		live, err := agent.CoreV1().PersistentVolumeClaims(ns).Get(ctx, ownClaim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		live.Annotations["volume.kubernetes.io/selected-node"] = "control-plane"
		_, err = agent.CoreV1().PersistentVolumeClaims(ns).Update(ctx, live, metav1.UpdateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may carry only k3k's labels") {
			t.Errorf("got %v, want Forbidden", err)
		}
	})
	t.Run("allowed: updating its claim keeps what the host set", func(t *testing.T) {
		// The host's controllers annotate the claims they bind; the agent's
		// update carries those annotations unchanged.
		live, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, ownClaim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		live.Annotations["pv.kubernetes.io/bind-completed"] = "yes"
		if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Update(ctx, live, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		live, err = agent.CoreV1().PersistentVolumeClaims(ns).Get(ctx, ownClaim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		live.Annotations["k3k.io/desired-hash"] = "changed"
		if _, err := agent.CoreV1().PersistentVolumeClaims(ns).Update(ctx, live, metav1.UpdateOptions{}); err != nil {
			t.Errorf("refused: %v", err)
		}
	})
	t.Run("allowed: exec into its own pod passes admission", func(t *testing.T) {
		if _, err := agent.CoreV1().Pods(ns).Create(ctx, pod(ownPod, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Past admission the apiserver looks for the pod's node.
		if err := exec(ownPod); err == nil || apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "does not have a host assigned") {
			t.Errorf("got %v, want the apiserver's complaint that the pod has no node", err)
		}
	})
	t.Run("nobody else is held: the admin mounts the token", func(t *testing.T) {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod("admin-pod", secretVolume(n.Token)), metav1.CreateOptions{}); err != nil {
			t.Errorf("refused: %v", err)
		}
	})
}

// guardedNamespace makes a namespace holding an agent of a sample Cluster
// (its ServiceAccount, the agent's ClusterRole and RoleBinding) and the agent
// guard with defaults d, bound to that namespace only so that it does not
// reach other tests' requests, and waits until the guard takes effect. It
// returns the namespace, the Cluster, and clients as the admin and as the
// agent (impersonated).
func guardedNamespace(t *testing.T, d PodDefaults) (string, *v1beta1.Cluster, *kubernetes.Clientset, *kubernetes.Clientset) {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t)
	c := sampleCluster()
	c.Namespace = ns
	role := DesiredAgentClusterRole("k3k-agent-" + ns)
	policy, binding := DesiredAgentGuard("k3k-agent-guard-"+ns, d.CEL())
	binding.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}
	for _, obj := range []client.Object{DesiredAgentServiceAccount(c), role, DesiredAgentRoleBinding(c, role.Name), policy, binding} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, obj := range []client.Object{role, policy, binding} {
			_ = k8s.Delete(context.Background(), obj)
		}
	})
	admin := kubernetes.NewForConfigOrDie(restConfig)
	agentConfig := rest.CopyConfig(restConfig)
	agentConfig.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + layout.AgentName(c.Name),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	agent := kubernetes.NewForConfigOrDie(agentConfig)

	// The apiserver loads policies asynchronously: wait until the guard
	// refuses a name it did not derive.
	deadline := time.Now().Add(time.Minute)
	for {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "guard-probe"}}
		_, err := agent.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), "of objects it named") {
			break
		}
		if err == nil {
			_ = admin.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{})
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guard never took effect; last answer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return ns, c, admin, agent
}

// agentPod is a host pod as an agent with AgentPodDefaults makes one: no
// token, a pod-level RuntimeDefault seccomp profile, a memory limit, images
// pulled Always; change adjusts it.
func agentPod(name string, change func(*corev1.PodSpec)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext:              &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "main", Image: "web", ImagePullPolicy: corev1.PullAlways,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}},
			}},
		},
	}
	if change != nil {
		change(&p.Spec)
	}
	return p
}

// ephemeralVolume adds a generic ephemeral volume asking for 1Gi, changed by
// change.
func ephemeralVolume(change func(*corev1.PersistentVolumeClaimTemplate)) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		t := &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}
		if change != nil {
			change(t)
		}
		s.Volumes = append(s.Volumes, corev1.Volume{Name: "eph", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: t}}})
	}
}
