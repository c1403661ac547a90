# Datastore and controller benchmarks and the long crash test. TOOLS_DIR and
# OUTPUT come from the top Makefile; the benchmark binaries are built into
# $(OUTPUT)/bench, never shipped by `make build`.
GO ?= go
DATASTORE_BENCH_DIR ?= /var/tmp
DATASTORE_CRASH_ROUNDS ?= 200
BENCH_CLUSTERS ?= 300
BENCH_WORKERS ?= 1,2,4,8
BACKUP_BENCH_ROUNDS ?= 3
BACKUP_BENCH_OBJECTS ?= 10000

##@ Benchmarks and long tests

.PHONY: bench-datastore bench-backup bench-controller test-datastore-crash

bench-datastore: ## SQLite datastore vs stock kine vs one etcd member, through the etcd API and kube-apiserver (DATASTORE_BENCH_DIR); prints a table.
	@mkdir -p $(OUTPUT)/bench
	CGO_ENABLED=0 $(GO) build -o $(OUTPUT)/bench/datastore ./cmd/datastore
	CGO_ENABLED=0 $(GO) build -o $(OUTPUT)/bench/datastore-bench ./hack/bench/datastore
	K3K_TOOLS_DIR=$(TOOLS_DIR) $(OUTPUT)/bench/datastore-bench --datastore-bin $(OUTPUT)/bench/datastore --dir $(DATASTORE_BENCH_DIR)

bench-backup: ## Snapshot time and size of BACKUP_BENCH_OBJECTS ConfigMaps, restore into a new datastore and in place, sqlite vs one etcd member, over BACKUP_BENCH_ROUNDS rounds (DATASTORE_BENCH_DIR); prints a table.
	@mkdir -p $(OUTPUT)/bench
	CGO_ENABLED=0 $(GO) build -o $(OUTPUT)/bench/datastore ./cmd/datastore
	CGO_ENABLED=0 $(GO) build -o $(OUTPUT)/bench/backup-bench ./hack/bench/backup
	$(OUTPUT)/bench/backup-bench --datastore-bin $(OUTPUT)/bench/datastore --dir $(DATASTORE_BENCH_DIR) \
		--rounds $(BACKUP_BENCH_ROUNDS) --objects $(BACKUP_BENCH_OBJECTS)

bench-controller: ## Cold start of the controller with BENCH_CLUSTERS Clusters for each --workers in BENCH_WORKERS, against envtest; prints a table.
	@mkdir -p $(OUTPUT)/bench
	$(GO) build -o $(OUTPUT)/bench/controller-bench ./hack/bench/controller
	K3K_TOOLS_DIR=$(TOOLS_DIR) $(OUTPUT)/bench/controller-bench --clusters $(BENCH_CLUSTERS) --workers $(BENCH_WORKERS) --crds charts/k3k/crds

test-datastore-crash: ## The kill -9 test with DATASTORE_CRASH_ROUNDS rounds (CI runs fewer).
	K3K_CRASH_ROUNDS=$(DATASTORE_CRASH_ROUNDS) CGO_ENABLED=0 $(GO) test -count=1 -v -timeout 60m \
		-run TestAcknowledgedWritesSurviveKill9 ./cmd/datastore/

AGENT_BENCH_PODS ?= 100
AGENT_BENCH_ROUNDS ?= 9
.PHONY: bench-agent
bench-agent: ## Pods per second of the shared-mode agent with the isolation defaults on and off, AGENT_BENCH_PODS pods over AGENT_BENCH_ROUNDS rounds, against envtest; prints a table.
	@mkdir -p $(OUTPUT)/bench
	$(GO) build -o $(OUTPUT)/bench/agent-bench ./hack/bench/agent
	K3K_TOOLS_DIR=$(TOOLS_DIR) $(OUTPUT)/bench/agent-bench --pods $(AGENT_BENCH_PODS) --rounds $(AGENT_BENCH_ROUNDS)
