// Package batchlog is a kine server.Backend for SQLite that commits
// concurrent writes in one transaction and tells watchers about them from the
// write path, instead of one transaction per write and a poll loop reading
// every write back (kine's logstructured/sqllog). It is the datastore's
// "v2" backend (docs/datastore.md, "Datastore v2: design").
//
// The file stays a standard kine database: every row is written by kine's
// own insert statement (its text taken from kine's generic driver at run
// time, with a RETURNING clause that reads the row back), compaction runs
// kine's statements, and no table or column is added. Stock kine can serve
// the file this package wrote, and the other way round.
//
// A write is answered only once it is durable, and becomes visible to
// readers and watchers at the same moment: readers bound every query by the
// visible revision, so a committed but not yet flushed row is never read.
package batchlog
