package etcd

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The migration from SQLite to etcd (docs/backup.md): etcd member 0's
// sidecar (`datastore etcd --migrate-from-sqlite DIR`) loads the SQLite data
// of the server volume into the new member before k3s may start, and the
// controller records the switch once the member is healthy and holds the
// completion marker.

// MigrationMarkerKey is written by the sidecar once the SQLite data is in
// etcd, compacted: its value is the SQLite revision that was loaded (decimal).
// It is outside the keys a restore writes or deletes (/registry/,
// /bootstrap/), so a replace never touches it. A sidecar that finds it, with
// the SQLite file still at that revision, never loads again: after the load,
// k3s writes to etcd, and loading again would drop those writes.
const MigrationMarkerKey = "/k3k/migrated-from-sqlite"

// MigrationFilesKey is written with the marker: the size and modification
// time of the SQLite database and its WAL when they were loaded. A sidecar
// restarted after the migration (every restart of a single-member cluster's
// server) that finds the files as they were knows the marker's revision is
// still theirs without copying the database to read it.
const MigrationFilesKey = "/k3k/migrated-from-sqlite-files"

// MigrationFailedMessage starts the termination message of a sidecar whose
// load of the SQLite data failed; the controller reports what follows it in
// the Migrating condition (MigrationFailed).
const MigrationFailedMessage = "the migration from sqlite failed: "

// MigrationFailedReport is the termination message for a failed load.
func MigrationFailedReport(err error) string {
	msg := MigrationFailedMessage + err.Error()
	if len(msg) > 3500 { // the kubelet keeps 4096 bytes at most
		msg = msg[:3500]
	}
	return msg
}

// ParseMigrationFailedReport returns what a termination message reports as
// the failure of a migration's load, and false for any other message.
func ParseMigrationFailedReport(msg string) (string, bool) {
	_, rest, ok := strings.Cut(msg, MigrationFailedMessage)
	return strings.TrimSpace(rest), ok
}

// MigrationMarker returns the value of MigrationMarkerKey as the member at
// endpoint serves it (a linearizable read: the member has quorum), and ""
// when it is not there yet.
func (c *EtcdClient) MigrationMarker(ctx context.Context, endpoint string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	var value string
	err := c.do(endpoint, func(cl *clientv3.Client) error {
		resp, err := cl.Get(ctx, MigrationMarkerKey)
		if err == nil && len(resp.Kvs) > 0 {
			value = string(resp.Kvs[0].Value)
		}
		return err
	})
	return value, err
}
