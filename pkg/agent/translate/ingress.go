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
//     and name, which the agent cannot translate or bound;
//   - a hostname the Cluster does not allow (Config.IngressHosts), in a rule
//     or a TLS entry: the host's ingress controller serves every tenant and
//     the host's own sites, and the first Ingress to claim a name (or a TLS
//     certificate for it) takes its traffic;
//   - a rule without a host, a default backend, and a TLS entry without
//     hosts (its hosts default to the controller's wildcard): they answer,
//     or serve their certificate, for every name the controller serves that
//     no other Ingress claims.
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
	} else if b != nil {
		r = append(r, "spec.defaultBackend: a default backend would answer for every hostname of the host's ingress controller")
	}
	allowed := allowedHosts(t.cfg.IngressHosts)
	for i, rule := range v.Spec.Rules {
		switch {
		case rule.Host == "":
			r = append(r, fmt.Sprintf("spec.rules[%d]: a rule without a host would answer for every hostname of the host's ingress controller", i))
		case !IngressHostAllowed(t.cfg.IngressHosts, rule.Host):
			r = append(r, fmt.Sprintf("spec.rules[%d].host %q is not a hostname this cluster may claim (%s)", i, rule.Host, allowed))
		}
	}
	for i, tls := range v.Spec.TLS {
		if len(tls.Hosts) == 0 {
			r = append(r, fmt.Sprintf("spec.tls[%d]: a TLS entry without hosts would serve its certificate for every hostname of the host's ingress controller", i))
		}
		for j, h := range tls.Hosts {
			if !IngressHostAllowed(t.cfg.IngressHosts, h) {
				r = append(r, fmt.Sprintf("spec.tls[%d].hosts[%d] %q is not a hostname this cluster may claim (%s)", i, j, h, allowed))
			}
		}
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

// IngressHostAllowed says whether host (an Ingress rule's or TLS entry's
// host, itself possibly a wildcard like *.shop.example.com) is one the
// patterns allow: a pattern is a name, equal to the host, or *.suffix,
// which allows every name ending in .suffix at any depth (and wildcards
// under it) but not suffix itself. Both are lowercase: Kubernetes admits no
// other Ingress host, and the Cluster's validation no other pattern. The
// agent guard's CEL (internal/controller/cluster, DesiredAgentIngressGuard)
// says the same.
func IngressHostAllowed(patterns []string, host string) bool {
	for _, p := range patterns {
		if suffix, ok := strings.CutPrefix(p, "*"); ok && strings.HasPrefix(suffix, ".") {
			if strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
				return true
			}
		} else if host == p {
			return true
		}
	}
	return false
}

func allowedHosts(patterns []string) string {
	if len(patterns) == 0 {
		return "none: the Cluster's spec.ingresses.hosts is empty"
	}
	return "allowed: " + strings.Join(patterns, ", ")
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
