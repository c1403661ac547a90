# End-to-end support: a single-node host cluster on this machine (root, Linux) and
# the project's images as tarballs. See docs/e2e.md.

##@ End to end

HOSTCLUSTER := hack/hostcluster/hostcluster.sh
# TOOLS_DIR comes from the top Makefile; the scripts fall back to ~/.cache/k3k/tools.
E2E_ENV := K3K_TOOLS_DIR=$(TOOLS_DIR)

.PHONY: hostcluster-build hostcluster-up hostcluster-down hostcluster-status images

hostcluster-build: ## Install packages, build the host cluster's binaries and base images (root)
	$(E2E_ENV) $(HOSTCLUSTER) build

hostcluster-up: ## Start the single-node host cluster (root); KUBECONFIG=/tmp/k3k-hostcluster/kubeconfig
	$(E2E_ENV) $(HOSTCLUSTER) up

hostcluster-down: ## Stop the host cluster and remove its state (root)
	$(E2E_ENV) $(HOSTCLUSTER) down

hostcluster-status: ## Show what of the host cluster runs
	$(E2E_ENV) $(HOSTCLUSTER) status

images: ## Build image tarballs and a values.yaml under _output/images (IMAGE_TAG, default dev)
	$(E2E_ENV) hack/images.sh
