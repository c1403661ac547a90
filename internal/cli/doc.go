// Package cli is k3kcli: commands that create, list and delete virtual clusters
// and fetch their kubeconfigs, built as cobra commands from constructors so tests
// can run them against a real API server with their own output streams.
//
// Errors reach the user as one line with a hint, and every failure maps to a
// documented exit code (see ExitCode and docs/cli.md).
package cli
