package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/etcd/member"
	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
	"github.com/k3k-io/k3k/pkg/snapshot"
)

// The load of `datastore etcd --migrate-from-sqlite DIR`: the migration from
// SQLite to etcd (docs/backup.md, "Migrate SQLite to etcd"). The controller
// makes server pod 0 again with this sidecar bootstrapping etcd member 0 and
// the SQLite directory of the same volume mounted read-only. Before the
// sidecar reports started (its startup probe; k3s starts only after it), it
// copies the SQLite database, moves etcd's revision past the SQLite
// revision, writes every live key (replaceData, what `restore --replace`
// does, with the revision moved first), compacts, and writes the completion
// marker (etcd.MigrationMarkerKey). So k3s never starts on an empty etcd, and
// the SQLite file is never written: it is the way back until the switch.

// migrationTmpDir is where the SQLite database is copied, beside etcd's data
// dir on the same volume (the SQLite directory is read-only, the root
// filesystem too).
func migrationTmpDir(dataDir string) string {
	return filepath.Join(filepath.Dir(filepath.Clean(dataDir)), "migrate-from-sqlite")
}

// loadFromSQLite loads the SQLite data of dir into the running member m,
// unless there is nothing to load: the cluster has more members than m (the
// migration's load was done before it grew), or the marker says the SQLite
// data at its present revision was loaded already. A load interrupted before
// the marker is done again: the replace makes etcd exactly the SQLite data.
func loadFromSQLite(ctx context.Context, m *member.Member, dir, dataDir string, stderr io.Writer) error {
	// The member's own view of the membership, not an API call: a learner
	// (members 1 and 2, joining after the switch) refuses most requests.
	if n := len(m.Embedded().Server.Cluster().Members()); n > 1 {
		fmt.Fprintf(stderr, "migration from sqlite: the cluster has %d members, so its data was loaded before it grew: nothing to load\n", n)
		return nil
	}
	// Started is not ready: the member has elected itself and published
	// its name only once ReadyNotify is closed.
	select {
	case <-m.ReadyNotify():
	case <-ctx.Done():
		return ctx.Err()
	}
	cli := v3client.New(m.Embedded().Server)
	defer cli.Close()
	return migrateInto(ctx, cli, dir, migrationTmpDir(dataDir), stderr)
}

// migrateInto is loadFromSQLite on a client of member 0, alone in its
// cluster.
func migrateInto(ctx context.Context, cli *clientv3.Client, dir, tmp string, stderr io.Writer) error {
	marker, err := cli.Get(ctx, etcd.MigrationMarkerKey)
	if err != nil {
		return fmt.Errorf("reading the migration's marker: %w", err)
	}
	loaded := ""
	if len(marker.Kvs) > 0 {
		loaded = string(marker.Kvs[0].Value)
	}
	db := filepath.Join(dir, sqlite.DatabaseFile)
	if _, err := os.Stat(db); err != nil {
		if loaded != "" && errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "migration from sqlite: loaded at SQLite revision %s, and the SQLite database is gone since: nothing to load\n", loaded)
			return nil
		}
		return fmt.Errorf("the SQLite database to migrate: %w", err)
	}
	files, err := sqliteFilesStat(db)
	if err != nil {
		return fmt.Errorf("the SQLite database to migrate: %w", err)
	}
	if loaded != "" {
		seen, err := cli.Get(ctx, etcd.MigrationFilesKey)
		if err != nil {
			return fmt.Errorf("reading the migration's marker: %w", err)
		}
		if len(seen.Kvs) > 0 && string(seen.Kvs[0].Value) == files {
			fmt.Fprintf(stderr, "migration from sqlite: the SQLite data at revision %s was loaded already and its files are unchanged since (%s): nothing to load\n", loaded, files)
			return nil
		}
	}
	start := time.Now()
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("clearing %s: %w", tmp, err)
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// No process writes the SQLite files: the SQLite sidecar ran in the pod
	// this one replaced, and the directory is mounted read-only here. A copy
	// of the database and its WAL is the last state that sidecar
	// acknowledged; SQLite recovers the committed part of the WAL on opening
	// the copy. The original stays as it is, even its -shm file.
	copied := filepath.Join(tmp, sqlite.DatabaseFile)
	for _, suffix := range []string{"", "-wal"} {
		if err := copyFile(db+suffix, copied+suffix); err != nil && !(suffix != "" && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("copying the SQLite database: %w", err)
		}
	}
	snap := filepath.Join(tmp, "snapshot.db")
	info, err := sqlite.Snapshot(ctx, copied, snap)
	if err != nil {
		return fmt.Errorf("reading the SQLite database: %w", err)
	}
	if loaded == strconv.FormatInt(info.Revision, 10) {
		fmt.Fprintf(stderr, "migration from sqlite: the SQLite data at revision %d was loaded already (marker %s): nothing to load\n", info.Revision, etcd.MigrationMarkerKey)
		// A marker written before the files were recorded: record them, so
		// the next start needs no copy.
		if _, err := cli.Put(ctx, etcd.MigrationFilesKey, files); err != nil {
			return fmt.Errorf("recording the SQLite files: %w", err)
		}
		return nil
	}
	if loaded != "" {
		fmt.Fprintf(stderr, "migration from sqlite: etcd was loaded at SQLite revision %s, the SQLite data is at %d now (the migration was undone and the SQLite data served since): loading again\n", loaded, info.Revision)
	}
	keys := func(fn func(string, []byte, int64) error) error { return sqlite.ReadSnapshotKeys(ctx, snap, fn) }
	m := snapshot.Manifest{Datastore: snapshot.SQLite, Revision: info.Revision}
	compact := func(rev int64) error { return compactEtcd(ctx, cli, rev) }
	if err := replaceData(ctx, cli, keys, m, true, compact, stderr, start); err != nil {
		return err
	}
	// The files first: a marker without them only costs the next start a copy.
	if _, err := cli.Put(ctx, etcd.MigrationFilesKey, files); err != nil {
		return fmt.Errorf("data loaded, but recording the SQLite files: %w", err)
	}
	if _, err := cli.Put(ctx, etcd.MigrationMarkerKey, strconv.FormatInt(info.Revision, 10)); err != nil {
		return fmt.Errorf("data loaded, but writing the marker: %w", err)
	}
	fmt.Fprintf(stderr, "migration from sqlite: loaded the SQLite data at revision %d into etcd in %s; marker %s written\n", info.Revision, time.Since(start).Round(time.Millisecond), etcd.MigrationMarkerKey)
	return nil
}

// sqliteFilesStat is the size and modification time (ns) of the database
// db and of its WAL ("none" when there is none): any write of a SQLite
// datastore changes one of them, and after the migration none is written.
func sqliteFilesStat(db string) (string, error) {
	var parts []string
	for _, name := range []string{db, db + "-wal"} {
		fi, err := os.Stat(name)
		switch {
		case err == nil:
			parts = append(parts, fmt.Sprintf("%s %d bytes mtime %d", filepath.Base(name), fi.Size(), fi.ModTime().UnixNano()))
		case errors.Is(err, os.ErrNotExist) && name != db:
			parts = append(parts, filepath.Base(name)+" none")
		default:
			return "", err
		}
	}
	return strings.Join(parts, ", "), nil
}

// copyFile copies src to dst, which it creates, and syncs it.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
