// Package e2e holds the end-to-end suite: the chart installed on a real host
// cluster, virtual clusters created with k3kcli, server pods and containers
// killed for real. The tests carry the build tag e2e, so `go test ./...` does
// not run them; `make e2e` (hack/e2e.sh) brings up the host cluster and runs
// `go test -tags e2e ./e2e/`. See docs/e2e.md.
package e2e
