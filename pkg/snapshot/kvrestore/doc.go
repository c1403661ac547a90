// Package kvrestore writes the keys of a snapshot into a running datastore
// through the etcd KV API, which both of k3k's datastores serve (the SQLite
// one through kine): Load into the empty datastore of a new cluster, Replace
// over a datastore's data in place, and AdvanceRevision to move a new
// datastore's revision past the one its clients hold first.
//
// It is the datastore sidecar's (`datastore restore`) and links the etcd
// client and gRPC for it; the snapshot format itself is pkg/snapshot, which
// k3kcli reads and writes without either. The keys come from a KeySource:
// pkg/snapshot's ReadEtcdKeys or the SQLite datastore's ReadSnapshotKeys.
package kvrestore
