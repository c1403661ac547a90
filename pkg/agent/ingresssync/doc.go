// Package ingresssync copies a virtual cluster's Ingresses into the host
// namespace, where the host's ingress controller serves them, when the
// Cluster asks for it (spec.ingresses.enabled; the agent's --sync-ingresses).
//
// One queue of virtual Ingress keys (namespace/name) is fed by the virtual
// Ingresses, their host copies (by their annotations) and the virtual Secrets
// their TLS entries name. Each key is reconciled level-based: the host Ingress
// (translate.HostIngress: class mapped, backends pointed at the host copies of
// the virtual Services, TLS Secrets at their host copies, no annotations) is
// written when its hash differs, the TLS Secrets are copied blind as podsync
// copies Secrets (the agent may not read host Secrets) and owned by the host
// Ingress, and the host Ingress's load balancer addresses are mirrored onto
// the virtual one. A refused Ingress (translate.IngressProblems) gets a
// Warning Event and no host copy; a host copy of an Ingress that is gone,
// confirmed by a live read, is deleted, and its TLS copies with it by the
// host's garbage collector.
//
// It is tested through pkg/agent's suite, against two real kube-apiservers.
package ingresssync
