// Package podsync runs a virtual cluster's pods as host pods and keeps both
// sides in step: the job kubelet does for the pods bound to its node.
//
// One queue of virtual pod keys (namespace/name) is fed by three sources: the
// virtual pods bound to the agent's node, the host pods the agent made (their
// annotations name the virtual pod), and virtual ConfigMaps and Secrets (which
// enqueue the pods that use them). Each key is reconciled level-based:
//
//   - virtual pod running or pending: create the host pod if there is none
//     (translate.HostPod), write the host copies of the ConfigMaps and Secrets it
//     uses and its identity Secret, patch changed images, and mirror the host
//     pod's status onto the virtual pod;
//   - virtual pod being deleted: delete the host pod with the same grace period,
//     capped; once it is gone, remove the virtual pod (grace period 0, UID
//     precondition), which is kubelet's acknowledgement that the containers are
//     stopped;
//   - virtual pod gone: delete the host pod, after a live read confirms the
//     virtual pod is really gone (a cache may lag; a host pod is never deleted
//     on a cache's word alone); one already terminating with a grace period
//     above the cap is deleted again with the cap;
//   - host pod gone while the virtual pod had been running: fail the virtual
//     pod (HostPodLost), as the node lifecycle controller would for a lost node,
//     so its controller replaces it.
//
// Every host pod deletion is held to the Translator's
// MaxTerminationGracePeriodSeconds (hostDeletion): a tenant's pod that ignores
// SIGTERM would otherwise stay on the host for the grace period the tenant
// chose, up to a year, after its virtual pod is gone.
//
// Host copies are owned by the host pods that use them (owner references), so
// the host's garbage collector deletes a copy when the last pod using it is
// gone. That lets the agent work without reading host Secrets at all: its Role
// grants create and update on Secrets, never get, list or watch, so the
// agent's credentials cannot read the cluster's token or kubeconfig Secrets in
// the same namespace. Because it cannot read them back, it remembers a hash of
// what it wrote and writes again only when that changes (or after
// RewriteInterval, which repairs a copy deleted behind its back).
//
// Run holds one set of virtual credentials. When they change, the caller
// cancels Run and starts it again with new clients; the Syncer's memory of
// written copies and issued tokens survives the restart.
//
// The package is tested through pkg/agent's suite, which runs it against two
// real kube-apiservers; the grace period decision (hostDeletion) also by a
// unit test.
package podsync
