// Package snapshotter takes a snapshot of a running virtual cluster the way
// `kubectl exec` would reach it: it picks the server pod, runs the datastore
// sidecar's own snapshot command (`datastore snapshot sqlite|etcd`) through
// the host API's pods/exec, checks the stream (pkg/snapshot), and writes the
// snapshot file through a temporary file, durable before it takes its name.
// k3kcli's `cluster snapshot` and the scheduled backup Job (`datastore
// backup`) both take their snapshots here, so the two cannot drift apart.
//
// Dir keeps the backup Job's snapshots in a directory: the names it writes,
// and the rotation that deletes the oldest of them and nothing else.
//
// It talks to the host API through client-go only (no controller-runtime), so
// the datastore binary can carry it.
package snapshotter
