// Package sqlite serves the etcd v3 API from a SQLite file through kine, in-process
// and in pure Go (with CGO_ENABLED=0 kine uses modernc.org/sqlite).
//
// What it adds on top of kine is what an unattended server pod needs:
//
//   - durability: a write is acknowledged only after it is on stable storage
//     (SyncGroup batches the fsyncs of concurrent writers, SyncCommit lets SQLite
//     fsync every commit); see docs/datastore.md for what holds on power loss;
//   - one owner: an exclusive lock on the data dir, because two writers on a shared
//     volume corrupt SQLite;
//   - a careful start: the data dir must exist and be writable, an existing database
//     passes a bounded integrity check, and a damaged file is never deleted,
//     truncated or recreated;
//   - upkeep and reporting: compaction, a checkpointed WAL on shutdown, sizes and
//     free space for /status and /metrics, and a readiness check that writes.
package sqlite
