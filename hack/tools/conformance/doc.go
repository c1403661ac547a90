// Package conformance holds only the test binary of the Kubernetes
// conformance suite: see conformance_test.go.
package conformance
