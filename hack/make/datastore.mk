# Datastore targets (issue 3). TOOLS_DIR comes from the top Makefile.
GO ?= go
DATASTORE_BENCH_DIR ?= /var/tmp
DATASTORE_CRASH_ROUNDS ?= 200

.PHONY: bench-datastore test-datastore-crash

# bench-datastore: our SQLite datastore, stock kine and one etcd member side by
# side on the disk under DATASTORE_BENCH_DIR, through the etcd API and through
# kube-apiserver; prints a markdown table (see docs/datastore.md).
bench-datastore:
	@mkdir -p $(CURDIR)/bin
	CGO_ENABLED=0 $(GO) build -o $(CURDIR)/bin/datastore ./cmd/datastore
	CGO_ENABLED=0 $(GO) build -o $(CURDIR)/bin/datastore-bench ./cmd/datastore/internal/bench
	K3K_TOOLS_DIR=$(TOOLS_DIR) $(CURDIR)/bin/datastore-bench --datastore-bin $(CURDIR)/bin/datastore --dir $(DATASTORE_BENCH_DIR)

# test-datastore-crash: the kill -9 test with many more rounds than CI runs.
test-datastore-crash:
	K3K_CRASH_ROUNDS=$(DATASTORE_CRASH_ROUNDS) CGO_ENABLED=0 $(GO) test -count=1 -v -timeout 60m \
		-run TestAcknowledgedWritesSurviveKill9 ./cmd/datastore/
