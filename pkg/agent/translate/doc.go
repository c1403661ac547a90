// Package translate turns a virtual cluster's objects into the host objects that
// run them, and host pod status back into virtual pod status. Every function here
// is pure: no client, no clock, no randomness, so the sync loops can recompute
// the desired host objects on every pass and compare, and the rules can be
// table-tested.
//
// Naming. All of one virtual cluster's objects land in one host namespace, which
// may also hold the cluster's own server objects and other clusters' objects. A
// host name is "<name>-<namespace>" (sanitized, truncated) followed by ten hex
// digits of a SHA-256 over the cluster, the kind, the virtual namespace and the
// virtual name. The readable part helps operators; the hash keeps names unique
// when truncation or sanitizing would merge two virtual names, and keeps them
// from ever equalling a name the controller uses (those never end in a 10-digit
// hex segment). Host names are at most 63 characters, so they are valid DNS
// labels, label values and pod hostnames. Labels and annotations on every host
// object name the virtual object it stands for; the agent never touches a host
// object whose annotations name a different virtual object.
//
// Pods. The virtual scheduler has already placed the pod on the agent's node, so
// everything about placement (nodeName, nodeSelector, affinity, tolerations,
// topology spread, priority) is replaced by the host placement the agent is
// configured with. References to ConfigMaps and Secrets are renamed to the host
// copies. What the host cannot know about the virtual pod (its name, namespace,
// uid, labels, ServiceAccount token) is delivered through one per-pod "identity"
// Secret: downward API fields and projected ServiceAccount tokens become
// projections of that Secret. Features that would let a tenant reach the host
// (hostPath, host namespaces, privileged containers, host ports) or that need
// host objects the agent does not sync (resource claims) are refused with an
// UnsupportedError that names them. PersistentVolumeClaim volumes are renamed
// to the host copies of their claims (HostClaim), which keep only size, access
// modes, volume mode and an allowed storage class. Containers are pointed
// at the virtual API (APIServer) instead of the host's, which the host kubelet
// would inject. What the tenant leaves out gets a safe value rather than the
// host's default: a RuntimeDefault seccomp profile, default resource requests
// and limits, a size for memory-backed emptyDirs, and a grace period no
// longer than the configured cap; Localhost seccomp profiles the host
// administrator did not allow are refused.
//
// Services. A virtual Service becomes a selectorless ClusterIP (or headless)
// host Service asking for the virtual ClusterIP; its EndpointSlices become host
// slices whose endpoints are the host pods the agent runs for the virtual pods
// they name, and nothing else, so a tenant cannot aim a host Service at an
// arbitrary address.
package translate
