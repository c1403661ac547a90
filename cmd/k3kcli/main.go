// Command k3kcli creates, lists and deletes k3k virtual clusters and fetches
// their kubeconfigs. The commands live in internal/cli; see docs/cli.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/k3k-io/k3k/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, cli.Defaults(), os.Args[1:])
	stop()
	os.Exit(code)
}
