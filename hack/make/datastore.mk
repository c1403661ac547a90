# Datastore and controller benchmarks and the long crash test. TOOLS_DIR and
# OUTPUT come from the top Makefile; the benchmark binaries are built into
# $(OUTPUT)/bench, never shipped by `make build`.
GO ?= go
DATASTORE_BENCH_DIR ?= /var/tmp
DATASTORE_CRASH_ROUNDS ?= 200
BENCH_CLUSTERS ?= 300
BENCH_WORKERS ?= 1,2,4,8

##@ Benchmarks and long tests

.PHONY: bench-datastore bench-controller test-datastore-crash

bench-datastore: ## SQLite datastore vs stock kine vs one etcd member, through the etcd API and kube-apiserver (DATASTORE_BENCH_DIR); prints a table.
	@mkdir -p $(OUTPUT)/bench
	CGO_ENABLED=0 $(GO) build -o $(OUTPUT)/bench/datastore ./cmd/datastore
	CGO_ENABLED=0 $(GO) build -o $(OUTPUT)/bench/datastore-bench ./hack/bench/datastore
	K3K_TOOLS_DIR=$(TOOLS_DIR) $(OUTPUT)/bench/datastore-bench --datastore-bin $(OUTPUT)/bench/datastore --dir $(DATASTORE_BENCH_DIR)

bench-controller: ## Cold start of the controller with BENCH_CLUSTERS Clusters for each --workers in BENCH_WORKERS, against envtest; prints a table.
	@mkdir -p $(OUTPUT)/bench
	$(GO) build -o $(OUTPUT)/bench/controller-bench ./hack/bench/controller
	K3K_TOOLS_DIR=$(TOOLS_DIR) $(OUTPUT)/bench/controller-bench --clusters $(BENCH_CLUSTERS) --workers $(BENCH_WORKERS) --crds charts/k3k/crds

test-datastore-crash: ## The kill -9 test with DATASTORE_CRASH_ROUNDS rounds (CI runs fewer).
	K3K_CRASH_ROUNDS=$(DATASTORE_CRASH_ROUNDS) CGO_ENABLED=0 $(GO) test -count=1 -v -timeout 60m \
		-run TestAcknowledgedWritesSurviveKill9 ./cmd/datastore/
