# waitroom — the two commands a new machine needs: `make run` and `make test`.
SHELL := /bin/bash
GO    ?= go
MODULES := $(shell $(GO) list -m -f '{{.Dir}}' 2>/dev/null)
PKGS    := $(addsuffix /...,$(MODULES))
# compose-check runs the composecheck module's test; unit runs the rest.
UNIT_PKGS := $(filter-out %/deploy/composecheck/...,$(PKGS))
# Fuzz budgets are counts of executions, not durations: with a duration, go1.26's
# fuzz coordinator can report its own deadline as a failure ("context deadline
# exceeded", no failing input; golang/go#75804, fixed in go1.27). A count has no
# deadline to race. 8000 runs take 0.3-4 s per target here (make fuzz FUZZTIME=200000x
# explores longer).
FUZZTIME ?= 8000x
# golangci-lint, pinned: `go install` builds it once into bin/ (measured at 8.5 min cold on a
# 2-core machine at load 20, 3 min of CPU; 35 s from a warm build cache), named with its
# version so that a bump builds the new one. GOLANGCI_LINT=/path/to/golangci-lint uses another.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT ?= $(CURDIR)/bin/golangci-lint-$(GOLANGCI_LINT_VERSION)

.PHONY: cluster chaos chaos-ci chaos-nodeloss soak-chaos run test test-all deps scripts-test compose-check vet lint unit unit-cluster fuzz race topics build clean help k6 k6-test load spike spike-ci soak soak-ci ceiling steer-stack

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

run: ## start the whole stack locally: embedded Kafka, Redis, every service (Ctrl-C stops it; exits 0)
	$(GO) build -o bin/waitroom-dev ./services/dev
	@# Not `go run` (it reports the signal as a failure). An inner shell with `set -m`
	@# runs the stack as a job of its own that holds the terminal, so Ctrl-C reaches
	@# the stack only: it stops cleanly and exits 0, and make, never interrupted,
	@# exits with it. A shell defers its traps while a foreground job runs, so this
	@# recipe's shell waits on the inner one with `wait` instead and forwards a
	@# SIGTERM (make sends it to this shell when make itself is killed) to the
	@# stack, whose own group would outlive make otherwise. `env --default-signal`
	@# undoes the SIGINT a background job is started ignoring; without a terminal
	@# (no job control) the inner shell simply waits.
	@pidf=$$(mktemp); trap 'rm -f "$$pidf"' EXIT; \
	env --default-signal=INT,QUIT bash -c 'set -m 2>/dev/null; bin/waitroom-dev & echo $$! >"$$0"; \
	  if [[ $$- == *m* ]]; then fg %1 >/dev/null; else wait $$!; fi' "$$pidf" & job=$$!; \
	trap 'for _ in {1..50}; do [ -s "$$pidf" ] && break; sleep 0.1; done; kill -TERM "$$(<"$$pidf")" 2>/dev/null' TERM; \
	rc=0; wait $$job || rc=$$?; while kill -0 $$job 2>/dev/null; do rc=0; wait $$job || rc=$$?; done; exit $$rc

test: deps ## everything CI runs: installs what is missing (deps), then vet, lint, unit + integration tests (real redis-server, kfake, chromium), the Redis-touching ones again on a 3-master Redis Cluster (unit-cluster), compose-check, script tests, short fuzzing, a short k6 spike, the short chaos run, the Redis Cluster node-loss chaos run, the steering loop against the slow demo shop
	@$(MAKE) --no-print-directory test-all

# A sub-make, so nothing of the suite starts before deps has finished, even under -j.
test-all: vet lint unit unit-cluster compose-check scripts-test fuzz load chaos-ci chaos-nodeloss steer-stack

deps: ## check the tools the tests need (scripts/test-deps.list); as root install the missing ones with apt-get, else name the command; then the pinned npm packages (scripts/npm-deps.sh: npm ci once, offline after); golangci-lint is built into bin/ meanwhile when missing
	@# The golangci-lint build (CPU) runs beside apt-get and npm (network, disk):
	@# on a fresh machine the two overlap. Its output is shown when it fails.
	@mkdir -p bin; $(MAKE) --no-print-directory $(GOLANGCI_LINT) >bin/.golangci-lint-build.log 2>&1 & lint=$$!; \
	rc=0; scripts/test-deps.sh && scripts/npm-deps.sh || rc=$$?; \
	if ! wait $$lint; then cat bin/.golangci-lint-build.log; echo "deps: building golangci-lint failed"; exit 1; fi; exit $$rc

scripts-test: ## tests of the scripts in scripts/
	@scripts/test-deps_test.sh
	@scripts/dockerfile-replay_test.sh
	@scripts/make-run_test.sh
	@scripts/readme_test.sh
	@scripts/kit-outside_test.sh

compose-check: ## deploy/ without Docker: the compose file against the services' config (compose-go), a replay of the Dockerfile's build stage, and promtool on the alert rules
	$(GO) test -count=1 ./deploy/composecheck/...
	scripts/dockerfile-replay.sh
	cd deploy/prometheus && promtool check config prometheus.yml && promtool test rules alerts_test.yml

# The bench tools are modules of their own, outside go.work (no dependency
# of theirs reaches the services): vetted and tested on their own.
BENCH_MODULES = bench/openloop bench/capacity bench/ceiling

vet:
	$(GO) vet $(PKGS)
	@for m in $(BENCH_MODULES); do (cd $$m && GOWORK=off $(GO) vet ./...) || exit 1; done
	@test -z "$$(gofmt -l $(MODULES))" || { echo "gofmt needed:"; gofmt -l $(MODULES); exit 1; }

# One run over go.work's modules (golangci-lint loads them like go vet), one over
# k6/, which is outside go.work. The config is .golangci.yml at the root.
lint: $(GOLANGCI_LINT) ## golangci-lint with .golangci.yml (funlen: no function over 80 lines; dupl) on every module of go.work and on k6/; tests and generated code are not linted
	$(GOLANGCI_LINT) run $(PKGS)
	cd k6 && GOWORK=off $(GOLANGCI_LINT) run ./...

$(CURDIR)/bin/golangci-lint-%:
	GOBIN=$(CURDIR)/bin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$*
	mv $(CURDIR)/bin/golangci-lint $@

unit:
	$(GO) test -count=1 -timeout 10m $(UNIT_PKGS)
	@for m in $(BENCH_MODULES); do (cd $$m && GOWORK=off $(GO) test -count=1 ./...) || exit 1; done

# The packages whose tests reach Redis through testenv.Redis / RedisBackend:
# the line's scripts, the view, the rebuild, the consumer, the schedulers and
# the end-to-end stack suite.
CLUSTER_PKGS := ./pkg/store/queue/... ./pkg/redisview/view/... ./pkg/redisview/rebuild/... ./pkg/redisview/linesnap/... ./pkg/redisview/retention/... ./pkg/store/sitehealth/... \
	./services/consumer/... ./services/scheduler/... ./services/dev/stack/...

unit-cluster: ## the Redis-touching tests again, against a 3-master Redis Cluster (WR_TEST_REDIS=cluster: each test's own, or its package's, emptied for it); not the browser tests
	@# The browser tests (*InBrowser) check the page and the console; the Redis
	@# work under them is the other stack tests', which do run on the cluster.
	WR_TEST_REDIS=cluster $(GO) test -count=1 -timeout 10m -skip 'InBrowser$$' $(CLUSTER_PKGS)

steer-stack: ## the steering controller against the slow demo shop on the dev stack, over the kit and the api's signal route (docs/steering.md; ~2 min; the last step of make test)
	WR_TEST_STEER=1 $(GO) test -count=1 -timeout 6m -run '^TestSteeringHoldsTheSlowDemoShop' -v ./services/dev/stack/

race: ## the test suite under the race detector (slower)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

fuzz: ## run every fuzz target briefly (FUZZTIME=8000x executions each; a duration such as 30s works too)
	@set -e; for t in $$(grep -rhoE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' $(MODULES) | sort -u | sed 's/func //'); do \
	  dir=$$(grep -rlE --include='*_test.go' "^func $$t\(" $(MODULES) | head -1 | xargs dirname); \
	  echo "fuzz $$t in $$dir"; (cd $$dir && $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -timeout 5m .); \
	done

load: k6-test spike-ci ## the k6 extension's tests and a short spike on a fresh stack (thresholds enforced)

k6: ## build bin/k6: k6 with our SSE extension k6/x/sse (module k6/, outside go.work; the first build takes minutes)
	cd k6 && GOWORK=off $(GO) build -o ../bin/k6 ./cmd/k6

k6-test: ## vet, gofmt and tests of the k6 extension
	cd k6 && GOWORK=off $(GO) vet ./... && test -z "$$(gofmt -l .)" && GOWORK=off $(GO) test -count=1 ./...

spike: k6 ## ticket-drop spike on a fresh dev stack (200 VUs, ramp 10s, hold 20s); summary in bench/results/
	bench/run.sh spike

spike-ci: k6 ## the short spike CI runs (50 VUs, 5s + 10s)
	VUS=50 RAMP=5s HOLD=10s bench/run.sh spike

soak: k6 ## RATE=50/s for DURATION=10m with SSE listeners; memory and the ledger in bench/results/
	bench/run.sh soak

soak-ci: k6 ## a 30 s soak
	DURATION=30s bench/run.sh soak

ceiling: ## register and status on the api beside a plain net/http server (the ceiling), same wrk load, same run: ratios (needs wrk; ~1 min; not part of test)
	bench/ceiling.sh

build: ## build every service binary into bin/
	@mkdir -p bin
	$(GO) build -o bin/waitroom-api ./services/api
	$(GO) build -o bin/waitroom-consumer ./services/consumer
	$(GO) build -o bin/waitroom-scheduler ./services/scheduler
	$(GO) build -o bin/waitroom-notifier ./services/notifier
	$(GO) build -o bin/waitroomctl ./services/ctl
	$(GO) build -o bin/waitroom-dev ./services/dev
	$(GO) build -o bin/waitroom-kafka ./services/dev/cmd/waitroom-kafka
	$(GO) build -o bin/waitroom-cluster ./services/dev/cmd/waitroom-cluster
	$(GO) build -o bin/waitroom-chaos ./services/dev/cmd/waitroom-chaos

cluster: build ## the production shape on one machine: Kafka, redis-server, 2 api, 2 consumer, 3 scheduler, 2 notifier processes behind Caddy (Ctrl-C stops it; exits 0)
	@set -m; bin/waitroom-cluster; rc=$$?; exit $$rc

chaos: build ## the chaos suite against a fresh cluster, each service in its own network namespace: steady load, every fault (kill -9 of each process kind, Kafka and Redis restarts, a frozen leader, a consumer cut off from Redis), then 2 min of nemesis (overlapping slow, squeezed, held, reset and cut links; WR_CHAOS_SEED replays one), invariants throughout; a table, exit 1 on any violation (see RELIABILITY.md)
	bin/waitroom-chaos

chaos-ci: build ## the short chaos run make test includes (five process faults and the loss of zone a, 3 s of load between them, then the 60 s nemesis of seed 12; recovery aims x2 on a busy CI machine)
	WR_CHAOS_SETTLE=3s WR_CHAOS_AIM_SLACK=2 WR_CHAOS_SENTINEL=true WR_CHAOS_FAULTS=consumer,scheduler,kafka,redis-empty,scheduler-stop,zone-a WR_CHAOS_SEED=12 WR_CHAOS_NEMESIS=60s bin/waitroom-chaos

chaos-nodeloss: build ## issue 23 on the production shape: Redis as a 3-master Redis Cluster, each service its own process; a master holding some of the load's items (not the view's marker) killed -9 and restarted empty, then the one holding the scheduler's epoch counter: their items 503 until rebuilt, never a position the view no longer backs, the line's order kept with newcomers behind, the other items admitting throughout, the fence never backwards (see RELIABILITY.md)
	WR_CHAOS_BASE_PORT=$${WR_CHAOS_BASE_PORT:-19400} WR_CHAOS_REDIS_CLUSTER=true WR_CHAOS_ISOLATE=false WR_CHAOS_NEMESIS=0 WR_CHAOS_SKEW=0 WR_CHAOS_SETTLE=3s WR_CHAOS_AIM_SLACK=2 WR_CHAOS_DEADLINE=4m WR_CHAOS_FAULTS=redis-node-empty,redis-epoch-node-empty bin/waitroom-chaos

soak-chaos: build ## one hour of steady load under the nemesis (not in make test): every process's RSS, goroutines and (WR_CHAOS_PPROF) live heap and runtime memory in use after a forced GC each minute (printed, meter.csv and heap/ profiles in the run's dir); the nemesis is calm for the 3 minutes before minute 20 and before the end (WR_CHAOS_CALM), read four times a minute once calm, and the run fails when the floor of a process's calm readings grew past x1.1 and past a slack (2 MiB of live heap: a Redis pool a fault filled; 8 goroutines) from minute 20 to the end (a Go service judged on its live heap after two collections and its goroutines, not RSS: GOGC=400's headroom and the runtime's spans sized for past peaks are not kept memory), or on any violation. The apis' position cache is bounded below the hour's people (WR_STATUS_TOKENS), so a full cache is not taken for a leak
	WR_STATUS_TOKENS=10000 WR_CHAOS_PPROF=true WR_CHAOS_CALM=3m WR_CHAOS_FAULTS=none WR_CHAOS_NEMESIS=60m WR_CHAOS_METER=1m WR_CHAOS_MAX_PEOPLE=100000 WR_CHAOS_DEADLINE=90m bin/waitroom-chaos

topics: ## create or verify the Kafka topics on WR_KAFKA_BROKERS
	$(GO) run ./services/ctl topics ensure

clean: ## remove bin/ and .data/ (the dev stack's Kafka and Redis data: the next `make run` starts empty)
	rm -rf bin .data
