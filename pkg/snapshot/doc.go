// Package snapshot is the format of a k3k virtual cluster's datastore
// snapshot, and the wire format that carries one from the server pod's
// datastore sidecar to k3kcli.
//
// A snapshot file is an uncompressed tar archive with three entries, in this
// order:
//
//	manifest.json   what the snapshot is (Manifest): cluster, datastore type,
//	                revision, k3s version, time, size and sha256 of the data
//	token           the cluster token: k3s encrypts its bootstrap data (the
//	                cluster's CA keys among them) with it, so the data cannot
//	                be served again without it
//	state.db        the SQLite database (datastore sqlite), or
//	etcd.db         etcd's snapshot database (datastore etcd), as etcd's own
//	                tooling writes and reads it
//
// The file therefore holds every secret of the virtual cluster; whoever can
// read it can impersonate its API server. k3kcli writes it with mode 0600.
//
// The wire format (StreamWriter, ReadStream) exists because the sidecar
// cannot know the size of etcd's snapshot before it has sent it, and a tar
// header needs it first: the data goes in frames, and the manifest, with the
// size and sha256 of what was sent, comes last. Nothing in this package
// talks to a cluster or a datastore: writing a snapshot's keys into a running
// datastore is pkg/snapshot/kvrestore's, so that k3kcli, which only reads
// and writes the format, links no etcd client.
package snapshot
