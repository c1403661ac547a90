// Package testenv starts real upstream components for tests: a kube-apiserver
// process on any etcd-API endpoint (real etcd, or our kine-backed datastore), with
// its own CA, serving certificate and an admin client certificate, and an etcd
// process for it. Suites that only need an apiserver with k3k's CRDs start
// controller-runtime's envtest once in TestMain with StartEnvtest.
//
// The binaries come from the tools directory that `make tools` fills
// (hack/build-tools.sh builds them from their Go modules). A missing binary is an
// error that says how to build it, never a skipped test.
package testenv
