package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
	"github.com/k3k-io/k3k/pkg/snapshot"
)

// newSnapshotCommand is `datastore snapshot`: a consistent snapshot of the
// running datastore, written to stdout in snapshot's wire format. k3kcli runs
// it inside the datastore sidecar through the host API's pods/exec, with the
// user's own rights; it opens no port.
func newSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Write a consistent snapshot of the running datastore to stdout",
		Long: `Write a consistent snapshot of the datastore this sidecar serves to stdout, as
a k3k snapshot stream (package pkg/snapshot): the data in frames, then a manifest
with its revision, size and sha256. Progress and errors go to stderr. It is run
by k3kcli cluster snapshot through pods/exec; the datastore keeps serving.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSQLiteSnapshotCommand(), newEtcdSnapshotCommand())
	return cmd
}

func newSQLiteSnapshotCommand() *cobra.Command {
	var dataDir, tmpDir string
	cmd := &cobra.Command{
		Use:   "sqlite --data-dir DIR --tmp-dir DIR",
		Short: "Snapshot the SQLite database with VACUUM INTO",
		Long: `Copy the SQLite database in --data-dir with SQLite's VACUUM INTO (one read
transaction: the database as of one commit, while kine keeps writing) into a file
in --tmp-dir, check it, stream it to stdout and remove it. --tmp-dir must not be
on the data volume's file system when that may be nearly full.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSQLiteSnapshot(cmd.Context(), dataDir, tmpDir, cmd.OutOrStdout(), cmd.ErrOrStderr(), time.Now)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the datastore's data directory (required)")
	cmd.Flags().StringVar(&tmpDir, "tmp-dir", "", "directory for the copy while it is sent (required)")
	_ = cmd.MarkFlagRequired("data-dir")
	_ = cmd.MarkFlagRequired("tmp-dir")
	return cmd
}

func runSQLiteSnapshot(ctx context.Context, dataDir, tmpDir string, stdout, stderr io.Writer, now func() time.Time) error {
	if ctx == nil {
		ctx = context.Background()
	}
	dst := filepath.Join(tmpDir, "snapshot-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(now().UnixNano(), 36)+".db")
	defer os.Remove(dst)
	taken := now().UTC()
	info, err := sqlite.Snapshot(ctx, filepath.Join(dataDir, sqlite.DatabaseFile), dst)
	if err != nil {
		return err
	}
	f, err := os.Open(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	sw := snapshot.NewStreamWriter(stdout)
	if _, err := io.Copy(sw, f); err != nil {
		return fmt.Errorf("sending the snapshot: %w", err)
	}
	m := snapshot.Manifest{Datastore: snapshot.SQLite, Revision: info.Revision, CompactRevision: info.CompactRevision, CreatedAt: taken}
	if err := sw.Finish(m); err != nil {
		return fmt.Errorf("sending the snapshot: %w", err)
	}
	fmt.Fprintf(stderr, "snapshot of SQLite database at revision %d sent\n", info.Revision)
	return nil
}

type etcdSnapshotOptions struct {
	endpoint, dialAddress, caFile, certFile, keyFile string
}

func newEtcdSnapshotCommand() *cobra.Command {
	var o etcdSnapshotOptions
	cmd := &cobra.Command{
		Use:   "etcd --endpoint URL [--dial-address HOST:PORT] --ca-file FILE --cert-file FILE --key-file FILE",
		Short: "Stream the etcd member's maintenance snapshot",
		Long: `Ask the etcd member at --endpoint for its maintenance snapshot (etcd's own
point-in-time copy of its backend, with the sha256 etcd appends) and stream it
to stdout as it arrives; nothing is written to disk. The revision is read from
the snapshot by whoever receives it (k3kcli).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEtcdSnapshot(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr(), time.Now)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.endpoint, "endpoint", "", "the member's client URL by the DNS name in its certificate (required)")
	f.StringVar(&o.dialAddress, "dial-address", "", "connect here instead of to the endpoint's host, e.g. 127.0.0.1:2379; the certificate is still checked against the endpoint's name")
	f.StringVar(&o.caFile, "ca-file", "", "cluster CA certificate (required)")
	f.StringVar(&o.certFile, "cert-file", "", "client certificate (required)")
	f.StringVar(&o.keyFile, "key-file", "", "client key (required)")
	for _, name := range []string{"endpoint", "ca-file", "cert-file", "key-file"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func runEtcdSnapshot(ctx context.Context, o etcdSnapshotOptions, stdout, stderr io.Writer, now func() time.Time) error {
	if ctx == nil {
		ctx = context.Background()
	}
	tlsConfig, err := loadClientTLS(o.caFile, o.certFile, o.keyFile)
	if err != nil {
		return err
	}
	taken := now().UTC()
	sw := snapshot.NewStreamWriter(stdout)
	version, err := etcd.StreamSnapshot(ctx, etcd.SnapshotConfig{Endpoint: o.endpoint, DialAddress: o.dialAddress, TLS: tlsConfig}, sw)
	if err != nil {
		return err
	}
	if err := sw.Finish(snapshot.Manifest{Datastore: snapshot.Etcd, EtcdVersion: version, CreatedAt: taken}); err != nil {
		return fmt.Errorf("sending the snapshot: %w", err)
	}
	fmt.Fprintf(stderr, "snapshot of etcd member %s sent\n", o.endpoint)
	return nil
}

// loadClientTLS is an etcd client configuration from PEM files.
func loadClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the client certificate: %w", err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the CA file holds no certificate")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}
