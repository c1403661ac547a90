package translate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// Kinds of the host copies of Ingresses and of the TLS Secrets they name.
// The TLS copies are a kind of their own: a Secret a pod also uses has a host
// copy owned by those pods, and two writers of one object with different
// owners would undo each other.
const (
	KindIngress    Kind = "ingress"
	KindIngressTLS Kind = "ingress-tls"
)

// IngressProblems lists why a virtual Ingress does not get a host copy:
//
//   - a class the host administrator did not map (Config.IngressClasses);
//     an Ingress without a class gets the host's default class;
//   - resource backends (spec.defaultBackend.resource, a path's
//     backend.resource): they name any object of the host namespace by kind
//     and name, which the agent cannot translate or bound.
//
// Annotations are never copied, so there is nothing to refuse in them: they
// configure the host's ingress controller (ingress-nginx's *-snippet
// annotations run configuration in it), which serves every namespace.
func (t *Translator) IngressProblems(v *networkingv1.Ingress) []string {
	var r []string
	if c := v.Spec.IngressClassName; c != nil {
		if _, ok := t.cfg.IngressClasses[*c]; !ok {
			r = append(r, fmt.Sprintf("ingress class %q is not one the host administrator mapped (%s)", *c, mappedClasses(t.cfg.IngressClasses)))
		}
	}
	if b := v.Spec.DefaultBackend; b != nil && b.Resource != nil {
		r = append(r, "spec.defaultBackend.resource: resource backends would name host objects")
	}
	for i, rule := range v.Spec.Rules {
		if rule.HTTP == nil {
			continue
		}
		for j, p := range rule.HTTP.Paths {
			if p.Backend.Resource != nil {
				r = append(r, fmt.Sprintf("spec.rules[%d].http.paths[%d].backend.resource: resource backends would name host objects", i, j))
			}
		}
	}
	return r
}

func mappedClasses(m map[string]string) string {
	if len(m) == 0 {
		return "none: only Ingresses without a class, which get the host's default class"
	}
	pairs := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, k+" → "+m[k])
	}
	return strings.Join(pairs, ", ")
}

// HostIngress is the host copy of a virtual Ingress: the agent's labels and
// annotations and the Cluster as owner; the class mapped to the host's;
// hosts, paths and path types kept; every Service backend pointed at the
// host copy of the virtual Service (same port, by number or name: the host
// copy keeps the ports' names); every TLS Secret at its host copy
// (HostIngressSecret). It returns an *UnsupportedError when IngressProblems
// finds any. The hash annotation covers what the agent decides.
func (t *Translator) HostIngress(v *networkingv1.Ingress) (*networkingv1.Ingress, error) {
	if r := t.IngressProblems(v); len(r) > 0 {
		return nil, &UnsupportedError{Reasons: r}
	}
	ns := v.Namespace
	spec := *v.Spec.DeepCopy()
	if c := spec.IngressClassName; c != nil {
		host := t.cfg.IngressClasses[*c]
		spec.IngressClassName = &host
	}
	backend := func(b *networkingv1.IngressBackend) {
		if b != nil && b.Service != nil {
			b.Service.Name = t.HostName(KindService, ns, b.Service.Name)
		}
	}
	backend(spec.DefaultBackend)
	for i := range spec.Rules {
		if spec.Rules[i].HTTP == nil {
			continue
		}
		for j := range spec.Rules[i].HTTP.Paths {
			backend(&spec.Rules[i].HTTP.Paths[j].Backend)
		}
	}
	for i := range spec.TLS {
		if spec.TLS[i].SecretName != "" {
			spec.TLS[i].SecretName = t.HostName(KindIngressTLS, ns, spec.TLS[i].SecretName)
		}
	}
	meta := t.hostMeta(KindIngress, ns, v.Name, string(v.UID))
	meta.OwnerReferences = append(meta.OwnerReferences, t.cfg.OwnerReferences...)
	h := &networkingv1.Ingress{ObjectMeta: meta, Spec: spec}
	h.Annotations[AnnotationHash] = fingerprint(h.Labels, h.Annotations, h.OwnerReferences, h.Spec)
	return h, nil
}

// IngressSecrets are the virtual Secrets an Ingress's TLS entries name,
// sorted, without duplicates.
func IngressSecrets(v *networkingv1.Ingress) []string {
	seen := map[string]bool{}
	for _, tls := range v.Spec.TLS {
		if tls.SecretName != "" {
			seen[tls.SecretName] = true
		}
	}
	return sortedKeys(seen)
}

// HostIngressSecret is the host copy of a TLS Secret a virtual Ingress
// names, made like any other Secret copy (HostSecret) under a name of its
// own kind. The caller sets the owner (the host Ingress), so the host's
// garbage collector removes it with the Ingress.
func (t *Translator) HostIngressSecret(v *corev1.Secret) *corev1.Secret {
	h := t.HostSecret(v)
	h.ObjectMeta = t.hostMeta(KindIngressTLS, v.Namespace, v.Name, string(v.UID))
	return h
}

// IngressStatus is the virtual Ingress's status with the host Ingress's load
// balancer addresses; ok is false when it already says that.
func IngressStatus(v, h *networkingv1.Ingress) (networkingv1.IngressStatus, bool) {
	s := networkingv1.IngressStatus{LoadBalancer: *h.Status.LoadBalancer.DeepCopy()}
	return s, !equality.Semantic.DeepEqual(v.Status, s)
}
