package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
	"github.com/k3k-io/k3k/pkg/snapshot"
)

type restoreOptions struct {
	endpoint, dialAddress, caFile, certFile, keyFile, tmpDir string
}

// newRestoreCommand is `datastore restore`: the keys of a snapshot, read from
// stdin, written into this sidecar's datastore while it is still empty.
func newRestoreCommand() *cobra.Command {
	var o restoreOptions
	cmd := &cobra.Command{
		Use:   "restore --endpoint URL --tmp-dir DIR [--dial-address HOST:PORT] [--ca-file FILE --cert-file FILE --key-file FILE] < STREAM",
		Short: "Load a snapshot into the empty datastore of a new cluster",
		Long: `Read a k3k snapshot stream (as datastore snapshot writes it) from stdin into a
file in --tmp-dir, check it, and write every live key of it under /registry/ and
/bootstrap/ into the datastore at --endpoint through the etcd API, each only if
it is absent. A datastore that holds any such key already is refused before the
first write. Keys written under a lease (Events) are left out. k3kcli cluster
create --restore-from runs it in the new cluster's first server pod, whose k3s
waits for its token until this is done.`,
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
	var keys snapshot.KeySource
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
	res, err := snapshot.Load(ctx, cli, keys)
	if err != nil {
		return fmt.Errorf("restoring after %d keys: %w", res.Restored, err)
	}
	fmt.Fprintf(stderr, "restored %d keys of a %s snapshot at revision %d in %s (left out: %d under a lease, %d of the datastore's own)\n",
		res.Restored, m.Datastore, m.Revision, time.Since(start).Round(time.Millisecond), res.Leased, res.Other)
	return nil
}
