// Module k3s-standin is the test-only stand-in for the k3s server image, used by
// the end-to-end suite where the real image cannot be pulled. It is its own module
// so nothing in it can reach the product's build; it never ships in the chart.
module github.com/k3k-io/k3k/e2e/k3s-standin

go 1.26

require go.yaml.in/yaml/v3 v3.0.4
