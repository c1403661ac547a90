# End-to-end support: a single-node host cluster on this machine (root, Linux) and
# the project's images as tarballs. See docs/e2e.md.

##@ End to end

HOSTCLUSTER := hack/hostcluster/hostcluster.sh
# The upstream k3s source the e2e suite's server image is built from (../shared/k3s/README.md).
K3S_SOURCE ?= $(abspath $(CURDIR)/../shared/k3s/k3s-4035a25a.tar.gz)
export K3S_SOURCE
# TOOLS_DIR comes from the top Makefile; the scripts fall back to ~/.cache/k3k/tools.
E2E_ENV := K3K_TOOLS_DIR=$(TOOLS_DIR)

.PHONY: hostcluster-build hostcluster-up hostcluster-down hostcluster-status images k3s

hostcluster-build: ## Install packages, build the host cluster's binaries and base images (root)
	$(E2E_ENV) $(HOSTCLUSTER) build

hostcluster-up: ## Start the single-node host cluster (root); KUBECONFIG=/tmp/k3k-hostcluster/kubeconfig
	$(E2E_ENV) $(HOSTCLUSTER) up

hostcluster-down: ## Stop the host cluster and remove its state (root)
	$(E2E_ENV) $(HOSTCLUSTER) down

hostcluster-status: ## Show what of the host cluster runs
	$(E2E_ENV) $(HOSTCLUSTER) status

images: ## Build image tarballs (k3s from K3S_SOURCE too) and a values.yaml under _output/images (IMAGE_TAG, default dev)
	$(E2E_ENV) hack/images.sh

k3s: ## Build the real k3s server from K3S_SOURCE (cached by the tarball's hash in TOOLS_DIR/k3s)
	$(E2E_ENV) hack/k3s.sh binary $(K3S_SOURCE)

.PHONY: e2e e2e-etcd demo demo-down

# E2E_SERVER_IMAGE=rancher/k3s:v1.34.2-k3s1 runs the suite with real k3s where it
# can be pulled; E2E_CLUSTER=existing uses $KUBECONFIG instead of the host cluster.
E2E_ARGS ?=

e2e: ## The end-to-end suite on real k3s: host cluster up, images, helm install, go test -tags e2e ./e2e/, then two nodes join for the node-loss scenarios, host cluster down (root)
	$(E2E_ENV) hack/e2e.sh test $(E2E_ARGS)

e2e-etcd: ## Scenario 6 only (etcd HA, 3 servers), part of `make e2e` too (root)
	$(E2E_ENV) hack/e2e.sh test -run TestEtcdHA $(E2E_ARGS)

demo: ## Host cluster, chart and one virtual cluster "demo"; prints its kubeconfig (root)
	$(E2E_ENV) hack/e2e.sh demo

demo-down: ## Remove everything `make demo` made (root)
	$(E2E_ENV) hack/e2e.sh demo-down

.PHONY: bench-footprint

# FOOTPRINT_VARIANTS, FOOTPRINT_PODS, FOOTPRINT_IDLE, FOOTPRINT_SETTLE: see e2e/footprint_test.go.
bench-footprint: ## Private memory (PSS, anonymous) of every container of one virtual cluster, idle and with 100 pods: a table (host cluster, root; docs/footprint.md)
	$(E2E_ENV) E2E_EXTRA_TAGS=footprint hack/e2e.sh test -run '^TestFootprint$$' $(E2E_ARGS)

.PHONY: conformance conformance-build

# CONFORMANCE_FOCUS, CONFORMANCE_SKIP, CONFORMANCE_PARALLEL: see hack/conformance.sh.
conformance: ## The Kubernetes conformance suite (v1.34.3) against make demo's virtual cluster: JUnit and a summary under _output/conformance (root; hours for all of it)
	$(E2E_ENV) hack/conformance.sh run

conformance-build: ## Build e2e.test, ginkgo and the conformance test images only (cached in TOOLS_DIR/conformance)
	$(E2E_ENV) hack/conformance.sh build
