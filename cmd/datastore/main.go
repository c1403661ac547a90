// Command datastore is the server pod's sidecar binary: `datastore sqlite` serves
// the virtual cluster's datastore over the etcd v3 API, `datastore etcd` runs an
// etcd member for HA clusters, `datastore publish-kubeconfig` copies the
// kubeconfig k3s writes into the cluster's Secret, `datastore check-external`
// checks an external datastore before k3s starts on it, and `datastore
// snapshot` writes a consistent snapshot of the running datastore to stdout,
// `datastore restore` loads one into the empty datastore of a new cluster, and
// `datastore etcd-alarm` lists and disarms an HA cluster's etcd alarms, and
// `datastore backup` takes one scheduled snapshot into a directory, and
// `datastore restore-from-file` restores a snapshot file into a new cluster.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		var exit *exitError
		if errors.As(err, &exit) {
			// The command has said why already; the code is the reason.
			os.Exit(int(exit.code))
		}
		fmt.Fprintln(os.Stderr, "datastore:", err)
		os.Exit(1)
	}
}

// newRootCommand builds the datastore command. Its subcommands are listed here
// and nowhere else.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "datastore",
		Short:         "The k3k server pod's sidecars: the datastore and the kubeconfig publisher",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newSQLiteCommand(),
		newEtcdCommand(),
		newPublishKubeconfigCommand(),
		newCheckExternalCommand(),
		newSnapshotCommand(),
		newRestoreCommand(),
		newEtcdAlarmCommand(),
		newBackupCommand(),
		newRestoreFromFileCommand(),
	)
	return root
}
