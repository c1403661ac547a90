// Command kube-apiserver is Kubernetes' API server as k3s's Kubernetes builds
// it. hack/k3s.sh copies this file into the unpacked k3s tree and links it in
// the same `go build` as k3s, so it costs a link, not a compile of Kubernetes.
//
// It replaces k8s.io/kubernetes/cmd/kube-apiserver, which k3s's fork breaks
// when run on its own: the fork's NewAPIServerCommand takes a stop channel and
// installs the signal handler itself, and the fork's main installs it first,
// so the second install panics ("close of closed channel") before any flag is
// read. k3s, which embeds the command, passes its own context's channel; run
// on its own the command is stopped by the signal context it installs, so the
// channel here is one that never closes.
//
// The directory's name starts with an underscore so that this module's
// ./... (build, vet, staticcheck, go mod tidy) leaves it out: it imports
// k8s.io/kubernetes, which only k3s's module provides.
package main

import (
	"os"
	_ "time/tzdata" // time zones for CronJobs, as upstream's main links them

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand(make(chan struct{}))))
}
