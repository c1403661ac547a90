package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
	"github.com/k3k-io/k3k/pkg/snapshot"
	"github.com/k3k-io/k3k/pkg/snapshot/kvrestore"
)

type restoreOptions struct {
	endpoint, dialAddress, caFile, certFile, keyFile, tmpDir string
	// replace is the in-place restore: the datastore holds data already.
	replace bool
	// sqliteDataDir is the data dir of the sqlite datastore at endpoint,
	// whose database a replace compacts itself (see sqlite.CompactTo).
	sqliteDataDir string
}

// newRestoreCommand is `datastore restore`: the keys of a snapshot, read from
// stdin, written into this sidecar's datastore while it is still empty.
func newRestoreCommand() *cobra.Command {
	var o restoreOptions
	cmd := &cobra.Command{
		Use:   "restore --endpoint URL --tmp-dir DIR [--replace [--sqlite-data-dir DIR]] [--dial-address HOST:PORT] [--ca-file FILE --cert-file FILE --key-file FILE] < STREAM",
		Short: "Load a snapshot into the empty datastore of a new cluster, or replace a datastore's data with it",
		Long: `Read a k3k snapshot stream (as datastore snapshot writes it) from stdin into a
file in --tmp-dir, check it, and write every live key of it under /registry/ and
/bootstrap/ into the datastore at --endpoint through the etcd API, each only if
it is absent. A datastore that holds any such key already is refused before the
first write. Keys written under a lease (Events) are left out. k3kcli cluster
create --restore-from runs it in the new cluster's first server pod, whose k3s
waits for its token until this is done.

With --replace (k3kcli cluster restore, while no k3s server runs) the datastore
may hold data: every live snapshot key is written, every other key under
/registry/ and /bootstrap/ deleted, all through the etcd API so that every
restored key gets a revision newer than any a client holds, and the datastore
is then compacted at the resulting revision, so that a watch or list from an
older revision is told to relist. The sqlite datastore is compacted in its
database file (--sqlite-data-dir), because kine does not honour a Compact
request exactly; etcd through its Compact API. Running it again after an
interruption finishes the job.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRestore(cmd.Context(), o, cmd.InOrStdin(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.endpoint, "endpoint", "", "the datastore's client URL: http://127.0.0.1:2379 (sqlite) or the member's https URL by its DNS name (etcd) (required)")
	f.StringVar(&o.dialAddress, "dial-address", "", "connect here instead of to the endpoint's host; the certificate is still checked against the endpoint's name")
	f.StringVar(&o.caFile, "ca-file", "", "CA certificate, for an https endpoint")
	f.StringVar(&o.certFile, "cert-file", "", "client certificate, for an https endpoint")
	f.StringVar(&o.keyFile, "key-file", "", "client key, for an https endpoint")
	f.StringVar(&o.tmpDir, "tmp-dir", "", "directory for the snapshot while it is read (required)")
	f.BoolVar(&o.replace, "replace", false, "replace the datastore's data with the snapshot's (in-place restore) instead of refusing a datastore that holds data")
	f.StringVar(&o.sqliteDataDir, "sqlite-data-dir", "", "with --replace into the sqlite datastore: its data dir, whose database is compacted directly")
	_ = cmd.MarkFlagRequired("endpoint")
	_ = cmd.MarkFlagRequired("tmp-dir")
	return cmd
}

func runRestore(ctx context.Context, o restoreOptions, stdin io.Reader, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var tlsConfig *tls.Config
	if o.caFile != "" || o.certFile != "" || o.keyFile != "" {
		var err error
		if tlsConfig, err = loadClientTLS(o.caFile, o.certFile, o.keyFile); err != nil {
			return err
		}
	}
	if o.replace {
		unlock, err := lockRestore(ctx, o.tmpDir, stderr)
		if err != nil {
			return err
		}
		defer unlock()
	}
	path := filepath.Join(o.tmpDir, "restore-"+strconv.Itoa(os.Getpid())+".db")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("creating the file for the snapshot: %w", err)
	}
	defer os.Remove(path)
	m, err := snapshot.ReadStream(stdin, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("receiving the snapshot: %w", err)
	}
	var keys kvrestore.KeySource
	switch m.Datastore {
	case snapshot.SQLite:
		keys = func(fn func(string, []byte, int64) error) error { return sqlite.ReadSnapshotKeys(ctx, path, fn) }
	case snapshot.Etcd:
		if _, err := snapshot.InspectEtcd(path); err != nil {
			return err
		}
		keys = func(fn func(string, []byte, int64) error) error { return snapshot.ReadEtcdKeys(path, fn) }
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{o.endpoint}, TLS: tlsConfig, DialTimeout: 5 * time.Second,
		DialOptions: etcd.DialTo(o.dialAddress), Logger: zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("connecting to the datastore: %w", err)
	}
	defer cli.Close()
	start := time.Now()
	if o.replace {
		return runReplace(ctx, o, cli, keys, m, stderr, start)
	}
	res, err := kvrestore.Load(ctx, cli, keys)
	if err != nil {
		return fmt.Errorf("restoring after %d keys: %w", res.Restored, err)
	}
	fmt.Fprintf(stderr, "restored %d keys of a %s snapshot at revision %d in %s (left out: %d under a lease, %d of the datastore's own)\n",
		res.Restored, m.Datastore, m.Revision, time.Since(start).Round(time.Millisecond), res.Leased, res.Other)
	return nil
}

// runReplace is `restore --replace`: kvrestore.Replace, then the compaction at
// the revision it ended at, checked by asking for the revision before it.
func runReplace(ctx context.Context, o restoreOptions, cli *clientv3.Client, keys kvrestore.KeySource, m snapshot.Manifest, stderr io.Writer, start time.Time) error {
	// The datastore is asked first: etcd and the SQLite datastore's v2
	// backend compact on request. kine's own backend answers the request
	// without compacting while its periodic compaction runs, so a sqlite
	// datastore's file is then compacted directly (a no-op where the request
	// already did it).
	compact := func(rev int64) error {
		if err := compactEtcd(ctx, cli, rev); err != nil {
			return err
		}
		if o.sqliteDataDir != "" {
			_, err := sqlite.CompactTo(ctx, filepath.Join(o.sqliteDataDir, sqlite.DatabaseFile), rev)
			return err
		}
		return nil
	}
	return replaceData(ctx, cli, keys, m, false, compact, stderr, start)
}

// compactEtcd compacts an etcd datastore at rev (already compacted is no
// error).
func compactEtcd(ctx context.Context, cli *clientv3.Client, rev int64) error {
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return err
	}
	return nil
}

// replaceData makes the datastore behind cli exactly the snapshot of m
// (keys): the history before compacted, with aboveSnapshot the revision
// first moved past the snapshot's, every key written, the rest deleted,
// then compacted at the end and checked so. `restore --replace` runs it
// over the etcd API, `etcd --migrate-from-sqlite` in the member's own
// process before k3s may start.
func replaceData(ctx context.Context, cli *clientv3.Client, keys kvrestore.KeySource, m snapshot.Manifest, aboveSnapshot bool, compact func(int64) error, stderr io.Writer, start time.Time) error {
	// The history before the restore first: no server runs, so nothing
	// needs it, and the space it frees takes the restore's writes (an etcd
	// member near its quota would otherwise raise NOSPACE midway).
	head, err := cli.Get(ctx, kvrestore.RestoredPrefixes[0], clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("reading the datastore's revision: %w", err)
	}
	if err := compact(head.Header.Revision); err != nil {
		return fmt.Errorf("compacting the datastore before the restore (nothing replaced yet): %w", err)
	}
	if aboveSnapshot {
		rev, err := kvrestore.AdvanceRevision(ctx, cli, m.Revision)
		if err != nil {
			return fmt.Errorf("%w (nothing replaced yet)", err)
		}
		fmt.Fprintf(stderr, "revision moved from %d to %d, past the snapshot's %d\n", head.Header.Revision, rev, m.Revision)
	}
	res, err := kvrestore.Replace(ctx, cli, keys)
	if err != nil {
		return fmt.Errorf("replacing the datastore's data after %d keys written and %d deleted (run the restore again to finish it): %w", res.Restored, res.Deleted, err)
	}
	if err := compact(res.After); err != nil {
		return fmt.Errorf("data replaced, but not compacted (run the restore again to finish it): %w", err)
	}
	if res.Before < res.After {
		// A datastore that ignored the compaction would serve the
		// pre-restore history to a client at an old revision.
		_, err := cli.Get(ctx, kvrestore.RestoredPrefixes[0], clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(res.Before))
		if !errors.Is(err, rpctypes.ErrCompacted) {
			return fmt.Errorf("data replaced, but revision %d is still served after compacting at %d (%v): is --sqlite-data-dir missing for a sqlite datastore?", res.Before, res.After, err)
		}
	}
	fmt.Fprintf(stderr, "replaced the datastore's data with %d keys of a %s snapshot at revision %d in %s: %d keys deleted, revisions %d to %d, compacted at %d (left out: %d under a lease, %d of the datastore's own)\n",
		res.Restored, m.Datastore, m.Revision, time.Since(start).Round(time.Millisecond), res.Deleted, res.Before+1, res.After, res.After, res.Leased, res.Other)
	return nil
}

// restoreLockFile, in --tmp-dir, is held by a replace for its whole run.
const restoreLockFile = "restore.lock"

// lockRestore takes the sidecar's restore lock, waiting while another
// replace holds it. A replace goes on when the k3kcli that started it went
// away (its exec stream cut), and the user then runs k3kcli again: the second
// replace waits for the first instead of racing it key by key. The kernel
// drops the lock with its process, so a killed replace never leaves it held.
func lockRestore(ctx context.Context, dir string, stderr io.Writer) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, restoreLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the restore lock: %w", err)
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("taking the restore lock: %w", err)
		}
		if !said {
			fmt.Fprintf(stderr, "waiting for another restore in this datastore sidecar to finish\n")
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("another restore in this datastore sidecar did not finish: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
