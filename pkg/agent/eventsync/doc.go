// Package eventsync shows on each virtual pod what the host cluster says
// about its host pod: the host kubelet's Events (images pulled or not,
// containers created, probes failing, back-offs, kills), the scheduler's
// when no host node can run it, the eviction manager's. Without them a
// tenant's `kubectl describe pod` is silent about why a pod does not start.
//
// One queue of host Event keys (namespace/name) is fed by the host Events
// about pods in the host namespace and, through an index by pod name, by the
// agent's host pods when they appear (an Event can arrive before its pod is
// in the cache). Each key is reconciled level-based: translate.VirtualPodEvent
// decides whether the tenant sees the Event and what it says (an allow-list
// of reasons; messages that would name the host's network, paths, nodes or
// other pods are replaced), and the virtual Event it returns is written under
// a name derived from the host Event's UID, so the host's aggregation (count,
// last seen) carries over to one virtual Event and a restarted agent repeats
// nothing. Events about any other pod of the namespace (the servers', another
// cluster's) are never read past their involved object.
//
// Writes into the virtual cluster pass one token bucket (Config.Rate): a host
// pod in a crash loop, or many at once, cannot flood the virtual API server;
// a key over the limit waits in the queue, where later updates of the same
// host Event fold into it.
//
// It is tested through pkg/agent's suite, against two real kube-apiservers.
package eventsync
