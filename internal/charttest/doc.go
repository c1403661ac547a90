// Package charttest holds the tests of the Helm chart in charts/k3k: helm lint,
// helm template over several value sets, the schema's rejections, server-side
// dry runs of the rendered manifests against a real kube-apiserver, the
// controller running on exactly the RBAC the chart grants, and the chart's CRDs
// against freshly generated ones. It has no code of its own: the chart is the
// product, these tests are its checks.
//
// helm is built at the version go.mod pins (its tool directive) by
// `make helm`; a missing binary fails the tests with that hint.
package charttest
