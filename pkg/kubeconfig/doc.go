// Package kubeconfig parses, validates and rewrites the admin kubeconfig that k3s
// writes with --write-kubeconfig, so that it can be published in a Secret and used
// from outside the server pod.
//
// k3s writes the server address as https://127.0.0.1:6443, which only works inside
// the server pod. Rewrite points it at the cluster's Service instead, keeping the
// embedded CA and client certificate, and renders a canonical document: the same
// input always gives byte-identical output, so republishing an unchanged kubeconfig
// never changes the Secret.
//
// Validate is a pure function of the bytes and a clock. The publisher uses it before
// publishing, the controller uses it on the Secret's content to derive the
// KubeconfigPublished condition, and agents use it before switching credentials.
//
// Nothing in this package logs, and no error it returns contains key material or
// any other part of the kubeconfig's content; Kubeconfig's String method redacts.
package kubeconfig
