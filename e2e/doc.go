// Package e2e holds the end-to-end suite: the chart installed on a real host
// cluster, virtual clusters created with k3kcli, server pods and containers
// killed for real. The tests carry the build tag e2e, so `go test ./...` does
// not run them; `make e2e` (hack/e2e.sh) brings up the host cluster and runs
// `go test -tags e2e ./e2e/`. See docs/e2e.md.
//
// Every scenario makes its own virtual cluster in its own namespace
// (e2e-<name>) and touches nothing of another's, so they run in parallel
// (hack/e2e.sh passes -parallel $E2E_PARALLEL): most of a scenario's time is
// spent waiting for pods to start and stop, not computing. A scenario that
// changes something all clusters share (the controller's Deployment) does not
// call t.Parallel, and Go runs it before the others start.
package e2e
