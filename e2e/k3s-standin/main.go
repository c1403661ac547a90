// Command k3s is a test-only stand-in for `k3s server`, for machines that cannot
// pull the real k3s image. It accepts exactly the subset of k3s server flags and
// config-file keys the k3k controller emits, refuses anything else, and behaves
// like k3s for them: it keeps its CA and token under the data dir, serves the
// Kubernetes API on the https listen port with every tls-san in its serving
// certificate, writes the admin kubeconfig, and runs the upstream kube-apiserver,
// kube-controller-manager and kube-scheduler binaries shipped next to it against
// the given etcd-API datastore.
//
// It is not k3s: there is no agent, no packaged manifests (CoreDNS included), no
// bootstrap data in the datastore beyond the CAs and the service-account key that
// HA servers share (bootstrap.go), and only http(s) etcd endpoints as datastores.
// See docs/e2e.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is what `k3s --version` prints; the Kubernetes part matches the
// binaries the image ships.
const version = "v1.34.2+standin"

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-v") {
		fmt.Printf("k3s version %s (k3k test stand-in)\n", version)
		return
	}
	cfg, err := ParseArgs(os.Args[1:], os.ReadFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "k3s stand-in: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := Run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "k3s stand-in: %v\n", err)
		os.Exit(1)
	}
}
