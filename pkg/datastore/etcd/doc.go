// Package etcd manages the membership of a virtual cluster's etcd the way the
// safest operators do, as a library the controller calls once per reconcile:
//
//   - Observe asks every member (by its client URL, a DNS name) for its status,
//     its view of the member list and the alarms;
//   - Plan is a pure function from what was observed and what is desired to at
//     most one Action (one membership change per reconcile, projected against
//     quorum before it is chosen);
//   - Execute performs that one Action through the small Client interface, and
//     treats "already done" as success, so a retried reconcile is harmless;
//   - CanReleasePod is the pure decision behind the server pods' finalizer, built
//     so that it can never deadlock when every member is down.
//
// Identity is always the member name (the pod name) and its DNS peer URL, never an
// IP: a member that comes back on another address is the same member.
//
// The member itself (the sidecar that runs etcd) is in the member subpackage; this
// package only talks to members over the etcd v3 API, so the controller does not
// link the etcd server.
package etcd
