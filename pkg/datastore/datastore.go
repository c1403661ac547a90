// Package datastore defines what every datastore kind offers to the binary that
// serves it: an etcd v3 endpoint, a readiness answer and a status report. The kinds
// live in subpackages (sqlite, etcd, external); this package holds only what they share:
// the interface, the status shape, and the HTTP and Prometheus views of them.
package datastore

import "context"

// Datastore is one running datastore kind as its health and metrics servers see it.
// It is deliberately small: the health server and the metrics collector are its only
// consumers, and each kind keeps its own richer API.
type Datastore interface {
	// Endpoint is the etcd v3 client URL it serves, e.g. http://127.0.0.1:2379.
	Endpoint() string
	// Ready returns nil when the datastore serves the etcd API and accepts writes.
	Ready(ctx context.Context) error
	// Status reports size and revision facts, read now.
	Status(ctx context.Context) (Status, error)
}

// Status is what an operator needs to see about a datastore at a glance: how much
// room it takes and has left, and how far compaction keeps up with writes.
type Status struct {
	// Kind is the datastore kind, e.g. "sqlite".
	Kind string `json:"kind"`
	// Endpoint is the etcd v3 client URL.
	Endpoint string `json:"endpoint"`
	// DBSizeBytes is the size of the database file.
	DBSizeBytes int64 `json:"dbSizeBytes"`
	// DBFreeBytes is the part of DBSizeBytes that is free pages, reused by new writes.
	DBFreeBytes int64 `json:"dbFreeBytes"`
	// WALSizeBytes is the size of the write-ahead log (0 when there is none).
	WALSizeBytes int64 `json:"walSizeBytes"`
	// VolumeSizeBytes and VolumeFreeBytes describe the filesystem holding the data.
	VolumeSizeBytes uint64 `json:"volumeSizeBytes"`
	VolumeFreeBytes uint64 `json:"volumeFreeBytes"`
	// Revision is the current etcd revision.
	Revision int64 `json:"revision"`
	// CompactRevision is the revision history has been compacted up to.
	CompactRevision int64 `json:"compactRevision"`
	// CompactIntervalSeconds is how often the datastore compacts on its own (0: never;
	// the apiserver's own compaction requests still run).
	CompactIntervalSeconds float64 `json:"compactIntervalSeconds"`
}
