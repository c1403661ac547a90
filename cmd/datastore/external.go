package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/k3k-io/k3k/pkg/datastore/external"
	"github.com/k3k-io/k3k/pkg/layout"
)

type checkExternalOptions struct {
	endpointEnv    string
	caFile         string
	certFile       string
	keyFile        string
	retryFor       time.Duration
	timeout        time.Duration
	terminationLog string
}

// exitError carries the exit code `datastore check-external` ends with.
type exitError struct{ code int32 }

func (e *exitError) Error() string { return fmt.Sprintf("exit code %d", e.code) }

// newCheckExternalCommand builds `datastore check-external`, the server pod's
// init container for datastore.type external.
func newCheckExternalCommand() *cobra.Command {
	var o checkExternalOptions
	cmd := &cobra.Command{
		Use:   "check-external",
		Short: "Check that the external datastore accepts k3s's connection",
		Long: `Connect to the external datastore k3s is about to use, with the endpoint from the
environment variable named by --endpoint-env (never a flag: a command line is
visible to every process on the node) and the TLS files k3s gets.

Exit 0 when it accepted the connection. Otherwise write one line saying why to
--termination-log (the container's termination message, which the controller
turns into the Cluster's DatastoreReady condition) and exit with the code of the
reason: 11 unreachable, 12 credentials refused, 13 TLS failed, 14 unusable
endpoint (empty, or a scheme k3s would take for a SQLite file), 10 other. An
unreachable datastore is tried again for --retry-for first. Nothing printed holds
the password or the endpoint as given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCheckExternal(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.endpointEnv, "endpoint-env", layout.ExternalEndpointEnv, "environment variable holding the endpoint")
	f.StringVar(&o.caFile, "cafile", "", "CA file, as k3s's --datastore-cafile")
	f.StringVar(&o.certFile, "certfile", "", "client certificate, as k3s's --datastore-certfile")
	f.StringVar(&o.keyFile, "keyfile", "", "client key, as k3s's --datastore-keyfile")
	f.DurationVar(&o.retryFor, "retry-for", 10*time.Second, "how long to keep trying an unreachable datastore before giving up")
	f.DurationVar(&o.timeout, "timeout", 5*time.Second, "timeout of one connection attempt")
	f.StringVar(&o.terminationLog, "termination-log", "/dev/termination-log", "file the failure reason is written to; empty: none")
	return cmd
}

func runCheckExternal(ctx context.Context, o checkExternalOptions, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	target := external.Target{
		Endpoint: os.Getenv(o.endpointEnv),
		CAFile:   o.caFile, CertFile: o.certFile, KeyFile: o.keyFile,
		Timeout: o.timeout,
	}
	deadline := time.Now().Add(o.retryFor)
	for {
		err := external.Check(ctx, target)
		if err == nil {
			fmt.Fprintln(out, "the external datastore accepted the connection")
			return nil
		}
		var e *external.Error
		if !errors.As(err, &e) {
			e = &external.Error{Reason: external.Failed, Message: err.Error()}
		}
		if e.Reason == external.Unreachable && time.Now().Before(deadline) && ctx.Err() == nil {
			fmt.Fprintf(out, "%s; trying again\n", e)
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
			continue
		}
		fmt.Fprintln(out, e)
		if o.terminationLog != "" {
			// Best effort: the exit code alone still carries the reason.
			_ = os.WriteFile(o.terminationLog, []byte(e.Error()), 0o644)
		}
		return &exitError{code: external.ExitCode(e.Reason)}
	}
}
