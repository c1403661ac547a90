# k3k — make help lists the targets.
#
# Pinned tool versions (built from this module's go.mod, its tool directives, or
# from their own module, hack/tools/*/go.mod):
#   Go                1.26 (go.mod)
#   kube-apiserver    v1.34.3+k3s1 (k3s's Kubernetes, built with k3s by hack/k3s.sh) — envtest
#                     and, with the other Kubernetes commands, the e2e host cluster
#   etcd              v3.7.3   (go.mod, hack/tools/_main/etcd) — envtest storage
#   controller-gen    v0.20.0  (go.mod tool)
#   helm              v3.22.0  (go.mod tool)         — chart tests
#   staticcheck       v0.8.2   (hack/tools/staticcheck)
#   actionlint        v1.7.12  (hack/tools/actionlint)  — .github/workflows in make verify
#   coredns           v1.14.7  (go.mod, hack/tools/_main/coredns) — the e2e host cluster's DNS
#   k3s               v1.34.3+k3s1 (../shared/k3s/k3s-4035a25a.tar.gz, hack/k3s.sh) — the e2e server,
#                     and its containerd v2.1.5 (the k3s binary run as containerd) the e2e node's runtime
#   containerd shim   v2.1.5   (hack/tools/containerd-shim) — containerd-shim-runc-v2 of the e2e node
#   runc              v1.4.0   (hack/tools/runc, cgo + libseccomp) — the e2e node's OCI runtime
#   e2e.test          v1.34.3  (hack/tools/conformance: k8s.io/kubernetes, its ginkgo v2.21.0,
#                     agnhost and sample-apiserver) — make conformance, not part of make check
#   Libraries: controller-runtime v0.25.2, client-go v0.37.0, kine v0.17.5,
#   etcd server/client v3.7.3 (go.mod).

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
# Every Go command of this module builds one way: without cgo and with
# -trimpath, as the release binaries and images are built. Each other way
# (cgo on for the tests, paths kept for vet) compiled every dependency once
# more, and the datastore suites ran twice, once on a cgo SQLite driver that
# no binary ships (pkg/datastore/sqlite/sidedriver_cgo.go); a cold CI run paid
# all of it (docs/e2e.md, "CI time").
export CGO_ENABLED := 0
export GOFLAGS := -trimpath $(GOFLAGS)
# Built tools are cached here; it survives between runs on the same machine.
TOOLS_DIR ?= $(HOME)/.cache/k3k/tools
OUTPUT    ?= _output
export K3K_TOOLS_DIR := $(TOOLS_DIR)
export KUBEBUILDER_ASSETS := $(TOOLS_DIR)

CONTROLLER_GEN := $(TOOLS_DIR)/controller-gen
STATICCHECK    := $(TOOLS_DIR)/staticcheck
ACTIONLINT     := $(TOOLS_DIR)/actionlint
# Packages whose tests run in `make test`; e2e/ has its own target.
TEST_PKGS ?= ./...
# -p 4: the suites mostly wait on their kube-apiservers and processes (a warm
# `make test` kept two cores 40% busy at go test's default of -p 2); four
# packages at a time took it from 487 s to 354 s on 2 cores.
GO_TEST_FLAGS ?= -count=1 -timeout=30m -p 4

##@ General

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_.-]+:.*##/ {printf "  \033[36m%-22s\033[0m %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)

##@ Development

.PHONY: build
build: ## Build static binaries of every command into _output/bin.
	$(GO) build -o $(OUTPUT)/bin/ ./cmd/...

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code, the CRDs (charts/k3k/crds), the chart's agent guard policy and agent ClusterRole, and docs/reference.
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=charts/k3k/crds
	@# The chart renders the CRDs from files/crds (templates/crds.yaml), so helm upgrade updates them.
	rm -f charts/k3k/files/crds/*.yaml && mkdir -p charts/k3k/files/crds && cp charts/k3k/crds/*.yaml charts/k3k/files/crds/
	$(GO) run ./hack/agentguard
	@# The CLI reference from the command tree, the CRD reference from charts/k3k/crds.
	$(GO) run ./hack/docgen

# GENERATED are the paths `make generate` writes, which make verify requires
# to be committed as generated.
GENERATED := api charts docs/reference

.PHONY: verify
verify: generate $(ACTIONLINT) ## Fail when generated files, go.mod, formatting or the CI workflows are stale.
	$(GO) mod tidy
	$(ACTIONLINT) -shellcheck= -pyflakes= .github/workflows/*.yaml
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@if ! git diff --quiet -- $(GENERATED) go.mod go.sum || [ -n "$$(git status --porcelain --untracked-files=all -- $(GENERATED))" ]; then \
		echo "generated files or go.mod are stale; run 'make generate' and 'go mod tidy' and commit:"; \
		git status --short -- $(GENERATED) go.mod go.sum; git diff --stat -- $(GENERATED) go.mod go.sum; exit 1; fi
	@echo "verify: generated files, go.mod and formatting are up to date"

.PHONY: lint
lint: $(STATICCHECK) ## go vet and staticcheck, the e2e suite's package included.
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags e2e ./e2e/

.PHONY: tools
# TOOLS are what `make test` needs. kube-apiserver comes from the k3s build
# (hack/k3s.sh, cgo): CI builds the others first (TOOLS="etcd controller-gen
# helm") so that verify and lint run while k3s still compiles.
TOOLS ?= kube-apiserver etcd controller-gen helm
tools: ## Build kube-apiserver (with k3s), etcd, helm and the generators from source (cached in TOOLS_DIR).
	hack/build-tools.sh $(TOOLS_DIR) $(TOOLS)

$(CONTROLLER_GEN) $(STATICCHECK) $(ACTIONLINT): hack/build-tools.sh
	hack/build-tools.sh $(TOOLS_DIR) $(notdir $@)

##@ Tests

.PHONY: test
test: tools ## Unit, datastore and envtest suites against a kube-apiserver built from source.
	$(GO) test $(GO_TEST_FLAGS) $(TEST_PKGS)

# PHASE times a step of `make check` for the table CI prints (hack/phase.sh).
PHASE := hack/phase.sh run

.PHONY: check
check: ## Everything CI checks, in its order: verify, lint, test, then the end-to-end suite (root); prints a phase table.
	@# .ci/run records its set-up phases first (CI_PHASES=1); alone, start a new table.
	@[ -n "$${CI_PHASES:-}" ] || hack/phase.sh reset
	$(PHASE) verify $(MAKE) --no-print-directory verify
	$(PHASE) lint $(MAKE) --no-print-directory lint
	@# lint ran go vet with every analyzer; go test's own vet pass (a subset,
	@# so a different cache key) would analyse every dependency once more.
	$(PHASE) test $(MAKE) --no-print-directory test GO_TEST_FLAGS="$(GO_TEST_FLAGS) -vet=off"
	$(PHASE) e2e $(MAKE) --no-print-directory e2e
	@hack/phase.sh table

.PHONY: bench
bench: ## Every benchmark; each prints a table.
	$(MAKE) bench-datastore
	$(MAKE) bench-backup
	$(MAKE) bench-controller
	$(MAKE) bench-agent

##@ Run

.PHONY: run
run: tools ## Run the controller against the cluster in $$KUBECONFIG (CRDs applied first).
	$(GO) run ./hack/applycrds charts/k3k/crds
	$(GO) run ./cmd/controller --leader-elect=false --metrics-bind-address=0 --health-probe-bind-address=:8081

-include hack/make/*.mk
