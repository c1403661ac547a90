# The Helm chart (charts/k3k) and the CLI (cmd/k3kcli). See docs/chart.md and docs/cli.md.

HELM := $(TOOLS_DIR)/helm

.PHONY: helm chart-lint chart-test cli-test

helm: ## Build helm (a tool directive of go.mod) into TOOLS_DIR
	hack/build-tools.sh $(TOOLS_DIR) helm

chart-lint: helm ## helm lint --strict charts/k3k
	$(HELM) lint --strict charts/k3k

chart-test: helm ## Chart tests: lint, template, schema, server-side dry run, RBAC, CRDs
	hack/build-tools.sh $(TOOLS_DIR) kube-apiserver etcd controller-gen
	$(GO) test $(GO_TEST_FLAGS) ./internal/charttest/...

cli-test: ## k3kcli tests against envtest
	hack/build-tools.sh $(TOOLS_DIR) kube-apiserver etcd
	$(GO) test $(GO_TEST_FLAGS) ./internal/cli/...
