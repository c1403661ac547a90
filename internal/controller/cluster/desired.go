package cluster

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// Everything in this file is a pure function of the Cluster and the controller's
// Config: no client, no clock, no randomness (the token is generated in
// controller.go). That is what makes the builders table-testable and a second
// reconcile of an unchanged Cluster a no-op.

// commonLabels returns the labels every object of c carries.
func commonLabels(c *v1beta1.Cluster) map[string]string {
	return map[string]string{v1beta1.LabelManagedBy: v1beta1.ManagedByValue, v1beta1.LabelCluster: c.Name}
}

// serverLabels select c's server pods.
func serverLabels(c *v1beta1.Cluster) map[string]string {
	l := commonLabels(c)
	l[v1beta1.LabelComponent] = v1beta1.ComponentServer
	return l
}

func objectMeta(c *v1beta1.Cluster, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: commonLabels(c)}
}

// DesiredTokenSecret is the generated token Secret holding token.
func DesiredTokenSecret(c *v1beta1.Cluster, token string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).Token),
		Type:       corev1.SecretTypeOpaque,
	}
	if token != "" {
		s.Data = map[string][]byte{layout.SecretKeyToken: []byte(token)}
	}
	return s
}

// DesiredKubeconfigSecret is the empty Secret the publisher fills. The
// controller creates it so the server pod never needs the create verb.
func DesiredKubeconfigSecret(c *v1beta1.Cluster) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).Kubeconfig),
		Type:       corev1.SecretTypeOpaque,
	}
}

// DesiredService is the API Service, shaped by spec.expose.
func DesiredService(c *v1beta1.Cluster) *corev1.Service {
	port := corev1.ServicePort{
		Name: "https", Protocol: corev1.ProtocolTCP, Port: layout.ServicePort,
		TargetPort: intstr.FromInt32(layout.APIPort),
	}
	svc := &corev1.Service{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).Service),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: serverLabels(c),
		},
	}
	if e := c.Spec.Expose; e != nil {
		switch {
		case e.NodePort != nil:
			svc.Spec.Type = corev1.ServiceTypeNodePort
			if e.NodePort.ServerPort != nil {
				port.NodePort = *e.NodePort.ServerPort
			}
		case e.LoadBalancer != nil:
			svc.Spec.Type = corev1.ServiceTypeLoadBalancer
			if e.LoadBalancer.ServerPort != nil {
				port.Port = *e.LoadBalancer.ServerPort
			}
		}
	}
	svc.Spec.Ports = []corev1.ServicePort{port}
	return svc
}

// DesiredHeadlessService gives every server pod a stable DNS name. It publishes
// not-ready addresses so etcd peers can find each other while they start.
func DesiredHeadlessService(c *v1beta1.Cluster) *corev1.Service {
	tcp := func(name string, p int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: p, TargetPort: intstr.FromInt32(p)}
	}
	return &corev1.Service{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).Headless),
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 serverLabels(c),
			Ports: []corev1.ServicePort{
				tcp("https", layout.APIPort), tcp("etcd-client", layout.DatastoreClientPort), tcp("etcd-peer", layout.DatastorePeerPort),
			},
		},
	}
}

// DesiredIngress routes spec.expose.ingress.host to the API Service, or is nil.
func DesiredIngress(c *v1beta1.Cluster) *networkingv1.Ingress {
	if c.Spec.Expose == nil || c.Spec.Expose.Ingress == nil {
		return nil
	}
	in := c.Spec.Expose.Ingress
	pathType := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: objectMeta(c, layout.NamesFor(c).Ingress),
		Spec: networkingv1.IngressSpec{
			IngressClassName: in.IngressClassName,
			Rules: []networkingv1.IngressRule{{
				Host: in.Host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path: "/", PathType: &pathType,
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: layout.NamesFor(c).Service, Port: networkingv1.ServiceBackendPort{Number: layout.ServicePort},
						}},
					}},
				}},
			}},
		},
	}
	if len(in.Annotations) > 0 {
		ing.Annotations = map[string]string{}
		for k, v := range in.Annotations {
			ing.Annotations[k] = v
		}
	}
	return ing
}

// DesiredServiceAccount is the server pod's identity on the host.
func DesiredServiceAccount(c *v1beta1.Cluster) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: objectMeta(c, layout.NamesFor(c).ServiceAccount)}
}

// DesiredRole lets the server pod read and update exactly two Secrets: the
// kubeconfig it publishes and the token it may restore. No create, no list, no
// other Secret.
func DesiredRole(c *v1beta1.Cluster) *rbacv1.Role {
	n := layout.NamesFor(c)
	return &rbacv1.Role{
		ObjectMeta: objectMeta(c, n.ServiceAccount),
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"secrets"},
			ResourceNames: []string{n.Kubeconfig, n.Token},
			Verbs:         []string{"get", "update", "patch"},
		}},
	}
}

// DesiredRoleBinding binds DesiredRole to DesiredServiceAccount.
func DesiredRoleBinding(c *v1beta1.Cluster) *rbacv1.RoleBinding {
	n := layout.NamesFor(c)
	return &rbacv1.RoleBinding{
		ObjectMeta: objectMeta(c, n.ServiceAccount),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: n.ServiceAccount},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: n.ServiceAccount, Namespace: c.Namespace}},
	}
}
