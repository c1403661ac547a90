// Package kubeletapi serves the part of the kubelet API the virtual cluster's
// apiserver calls on the agent's node: container logs (`kubectl logs`),
// answered from the host pod's log through the host API, and exec, attach and
// port-forward, forwarded to the host pod's subresources of the host API
// (stream.go).
//
// Who may call: the virtual apiserver connects with a client certificate
// (k3s's kube-apiserver-kubelet-client). The server verifies it against the
// client CA the virtual apiserver publishes in ConfigMap
// kube-system/extension-apiserver-authentication, then asks the virtual
// cluster whether that user may use nodes/proxy on this node
// (SubjectAccessReview), the checks a kubelet in webhook mode makes.
//
// Which pod: the host pod is found by the name derived from the virtual
// namespace and name, in a host namespace shared with the cluster's server
// pods and possibly other clusters. Before serving, the handler reads the
// virtual pod and the host pod and serves only this agent's copy of that very
// pod: the virtual pod is bound to this node, the host pod carries this
// agent's labels and the annotations naming the virtual pod, its UID
// included (hostPodOf). Anything else is a 404 about the virtual pod; no
// answer names a host object.
//
// The serving certificate comes from the virtual cluster itself: a
// CertificateSigningRequest for signer kubernetes.io/kubelet-serving, which the
// agent approves with its admin credentials and k3s's controller-manager signs
// with the server CA the apiserver trusts for kubelets. Serve obtains it,
// serves TLS with it and renews it at RenewAt while it serves (serve.go).
//
// Forwarding streams needs pods/exec, pods/attach and pods/portforward in the
// host namespace, where the cluster's server pods also run. RBAC cannot limit
// those to the agent's own pods; the chart's admission policy does
// (internal/controller/cluster.DesiredAgentGuard, docs/agent.md).
package kubeletapi
