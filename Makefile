# jobguard: `make run` starts everything in one process, `make test` runs every check.
GO ?= go
# -vet=off: make vet runs all of go vet first; go test's own vet pass (a subset) compiled and checked
# every package again (110 -> 100 s for one package's cold build, measured).
# -trimpath: without it every compiled package's cache key holds the checkout's directory, so a
# fresh clone elsewhere (as CI makes) compiled everything again, warm cache or not.
# -ldflags=-w: no DWARF in the test binaries (a race report and a panic's trace read the symbol
# table, not DWARF): a link of app/httpapi's took 3.0-3.4 s instead of 4.1, for every test binary.
TEST_FLAGS ?= -race -count=1 -vet=off -trimpath -ldflags=-w -timeout 12m
# vet, staticcheck and compose-check build with the tests' flags, so that all of them share one build
# of every dependency: with an empty cache vet, staticcheck and the tests' compiles took 462 s with
# vet and staticcheck on a plain build of their own, 365 s sharing the race build (2026-12-06).
SHARED_BUILD_FLAGS = -race -trimpath

.PHONY: run test deps vet static-build staticcheck deploy-check compose-check actionlint unit release bench bench-fair bench-peers bench-scripts bench-recovery bench-cluster chaos chaos-long chaos-failover chaos-failover-short chaos-limits chaos-workflows chaos-fair schedule-soak

run:
	$(GO) run ./cmd/jobguard

## test: install redis-server and chromium when missing, then vet, staticcheck, the deploy/, compose
## and workflow checks, and all tests with -race.
# After vet (whose build the rest share), staticcheck and the small checks run beside the tests:
# the tests leave a core idle while they wait on their servers, and staticcheck's analysis took 71 s
# of an empty cache's 494 s when it ran alone (2026-12-06). Not vet beside them: two builds of one
# package at once, each in its own go command, both compile it. With -ldflags=-w (above): 494 ->
# 468 s from an empty cache; with the go.work of the tests' temporary modules (testsupport) and
# static-build beside vet, 455 s with staticcheck's cache empty too (491 before those two).
test: deps
	@$(MAKE) --no-print-directory -j2 vet static-build
	@$(MAKE) --no-print-directory -j2 unit staticcheck deploy-check compose-check actionlint

# static-build compiles, beside vet's race build (a separate build: none of its work is done twice),
# the static build of ./cmd/jobguard that its tests link (the release, the Dockerfile's and the CLI's
# binaries): the tests then start with it in the cache, not with a compile of every package.
static-build:
	CGO_ENABLED=0 $(GO) build -trimpath -o /dev/null ./cmd/jobguard

deps:
	@./scripts/ensure-deps.sh

vet:
	$(GO) vet $(SHARED_BUILD_FLAGS) ./...

# The tool itself is built plainly (go tool -n builds it and prints its path); only the packages it
# loads take the shared flags, through GOFLAGS, which its go list reads.
staticcheck:
	GOFLAGS='$(SHARED_BUILD_FLAGS)' "$$($(GO) tool -n staticcheck)" ./...

## deploy-check: the shipped Prometheus configuration and alert rules parse (promtool from ensure-deps.sh).
deploy-check:
	promtool check config deploy/prometheus/prometheus.yml
	promtool check rules deploy/prometheus/rules.yml

## compose-check: compose.yaml is valid, by `docker compose config -q` where the Compose plugin is
## installed, else against the Compose Specification's JSON schema (deploy/compose-spec/); then its
## invariants: a healthcheck on every service, images pinned, no default password, the dashboard's
## data source a variable (deploy/compose_test.go, which make unit runs too).
COMPOSE_CHECK_ENV = MONITORING_PASSWORD=check GRAFANA_ADMIN_PASSWORD=check POSTGRES_PASSWORD=check
compose-check:
	@if docker compose version >/dev/null 2>&1; then \
		echo '$(COMPOSE_CHECK_ENV) docker compose config -q'; $(COMPOSE_CHECK_ENV) docker compose config -q; \
	else \
		echo 'compose-check: no docker compose plugin here; compose.yaml is checked against the schema'; \
	fi
	$(GO) test $(SHARED_BUILD_FLAGS) -count=1 -run '^TestCompose' ./deploy/

## actionlint: every workflow lints clean (pinned; fetched through the Go module proxy).
ACTIONLINT ?= github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
actionlint:
	$(GO) run $(ACTIONLINT) $(wildcard .github/workflows/*.yml .github/workflows/*.yaml)

unit:
	$(GO) test $(TEST_FLAGS) ./...

## release: static linux binaries of ./cmd/jobguard for RELEASE_ARCHES in DIST, with VERSION and
## COMMIT stamped as the Dockerfile stamps them, and DIST/SHA256SUMS; the release workflow runs it
## with the tag. jobguard version prints what was stamped.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
RELEASE_ARCHES ?= amd64 arm64
DIST ?= dist
RELEASE_LDFLAGS = -s -w -X github.com/jobguard/jobguard/app.version=$(VERSION) -X github.com/jobguard/jobguard/app.commit=$(COMMIT)
release:
	@mkdir -p $(DIST)
	@set -e; for arch in $(RELEASE_ARCHES); do \
		echo "CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' -o $(DIST)/jobguard-$(VERSION)-linux-$$arch ./cmd/jobguard"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' -o $(DIST)/jobguard-$(VERSION)-linux-$$arch ./cmd/jobguard; \
	done
	cd $(DIST) && sha256sum jobguard-$(VERSION)-linux-* > SHA256SUMS

## bench: the benchmarks that back the README's figures, each printing its sides, interleaved, with
## medians and spreads; then one table of every headline figure (BENCH_TABLE collects the rows).
BENCH_TABLE ?= /tmp/jobguard-bench-table.md
bench: deps
	@rm -f $(BENCH_TABLE)
	$(GO) test -run '^$$' -bench 'LeaseVsRedsync|KeeperTick' -benchtime 3000x ./...
	BENCH_TABLE=$(BENCH_TABLE) $(GO) test -run '^$$' -bench 'EnqueueEndpoint' -benchtime 1x ./app/httpapi/
	BENCH_TABLE=$(BENCH_TABLE) $(GO) test -run '^$$' -bench 'StackVsBareAsynq|LimitNeverReached' -benchtime 1x -timeout 30m ./internal/engine/
	BENCH_TABLE=$(BENCH_TABLE) $(GO) test -run '^$$' -bench 'RetainedJobMemory' -benchtime 2000x ./internal/engine/
	BENCH_TABLE=$(BENCH_TABLE) $(GO) test -run '^$$' -bench 'LeaseVsBareAsynq' -benchtime 1x -timeout 30m ./middleware/
	@printf '\nSummary (commit %s, %s; medians and min-max over the interleaved rounds)\n' "$$(git rev-parse --short HEAD 2>/dev/null)" "$$(date -u +%F)"
	@printf '| benchmark | measure | baseline | jobguard | jobguard / baseline |\n|---|---|---|---|---|\n'
	@cat $(BENCH_TABLE)

## bench-fair: fair dispatch against today's bounce-based cap and asynq's FIFO (docs/FAIRNESS.md, about 3
## minutes): tenant A enqueues 10,000 jobs, then tenant B 20 one after another (start latency p50/p99,
## bounces per job); weights 5:1 (start shares) and a lone key's handlers; 50,000 keys x 2 jobs drained
## with and without fair dispatch (throughput ratio, Redis bytes per waiting job).
bench-fair: deps
	JOBGUARD_FAIRNESS_BACKLOG=10000 JOBGUARD_FAIRNESS_PROBES=20 $(GO) test -count=1 -run 'TestFairnessBetweenTenants' -v -timeout 30m ./internal/engine/
	JOBGUARD_FAIR_KEYS=50000 $(GO) test -count=1 -run '^$$' -bench 'FairWeights|FairManyKeys' -benchtime 1x -timeout 30m ./internal/engine/

## bench-peers: jobguard against bare asynq, BullMQ (Node, installed with npm into a temporary
## directory; skipped without node) and River (PostgreSQL the run starts; skipped without it), the
## systems interleaved over BENCH_ROUNDS rounds (default 3; BENCH_JOBS, BENCH_INSERTS: see
## docs/BENCHMARKS.md). About 6-10 minutes at the default sizes; not part of make test.
bench-peers: deps
	$(GO) run ./internal/benchpeers/cmd/benchpeers

## bench-scripts: Redis instructions per call of each of the run's scripts, under valgrind's callgrind
## (a count, not a time: the same on a loaded machine; about 40 s).
bench-scripts: deps
	$(GO) test -run '^$$' -bench 'ScriptInstructions' -benchtime 1x ./internal/engine/jobstore/

## bench-cluster: a sharded queue's load on local clusters of 3 and 6 masters: each master's share of
## Redis CPU and commands, the hottest against the mean, Redis CPU per job (BENCH_CLUSTER_MASTERS,
## BENCH_CLUSTER_JOBS, BENCH_CLUSTER_FAIR=n: the jobs dispatched fairly by tenant, admission in n shards;
## docs/SCALING.md).
bench-cluster: deps
	$(GO) test -run '^$$' -bench ClusterSpread -benchtime 1x -timeout 30m ./middleware/

## bench-saturation: the capacity model against one redis-server driven to its core: one job's life
## (and an idle server's background) recorded on a real run, replayed for many distinct jobs, Redis pinned
## to core 0 and the driver to core 1 (BENCH_SAT_SERVERS, BENCH_SAT_NICE; docs/SCALING.md); then the Redis CPU a
## fair type's one admission slot takes per job (about 2 minutes in all).
bench-saturation: deps
	$(GO) test -run '^$$' -bench 'Saturation|FairSlot' -benchtime 1x -timeout 10m ./middleware/

## bench-recovery: kill -9 recovery, bare asynq against jobguard (about 5 minutes).
bench-recovery: deps
	$(GO) test -run '^$$' -bench RecoveryAfterKill -benchtime 1x -timeout 30m ./cmd/jobguard/

## schedule-soak: the three-scheduler test of schedule/ for 5 minutes of @every 1s ticks (make test
## runs one round of its faults, about 25 s); SCHEDULE_SOAK=15m make schedule-soak for longer.
SCHEDULE_SOAK ?= 5m
schedule-soak: deps
	SCHEDULE_SOAK=$(SCHEDULE_SOAK) $(GO) test -race -count=1 -v -run '^TestOneJobPerTickAcrossLeaders$$' -timeout 60m ./schedule/

## chaos: the fault-injection suite, short variant (about 2 minutes), the example asynq application
## at lease level (examples/asynqapp, about 2 minutes), then its PostgreSQL mode (about 2 minutes
## more); CI runs it after make test.
chaos: deps
	CHAOS=short $(GO) test -count=1 -v -run '^TestChaos$$' -timeout 10m ./chaos/
	CHAOS=lease $(GO) test -count=1 -v -run '^TestChaosLeaseLevel$$' -timeout 10m ./chaos/
	CHAOS=postgres $(GO) test -count=1 -v -run '^TestChaosPostgres$$' -timeout 10m ./chaos/

## chaos-long: at least 15 minutes of faults.
chaos-long: deps
	CHAOS=long $(GO) test -count=1 -v -run '^TestChaos$$' -timeout 40m ./chaos/

## chaos-failover: the load against Sentinel then Cluster, in the default mode and in durable mode
## (DURABLE_REPLICAS=1): a minority-master partition (Sentinel), then per topology a kill (-9), a
## stall (SIGSTOP until a promotion), a kill restarted at once after the promotion and a kill, with
## the failover figures per mode (8-11 minutes).
chaos-failover: deps
	CHAOS=failover $(GO) test -count=1 -v -run '^TestChaosFailover$$' -timeout 30m ./chaos/

## chaos-failover-short: one master kill per topology in the default mode, and under Sentinel in
## durable mode (under 3 minutes); CI runs it after make chaos.
chaos-failover-short: deps
	CHAOS=failover-short $(GO) test -count=1 -v -run '^TestChaosFailover$$' -timeout 10m ./chaos/

## chaos-workflows: 200 workflows (diamonds, fan-out 20/fan-in, chains of 10, diamond+chain+clean-up)
## and 50 batches with on_success/on_complete, under worker kills (-9), pauses past the lease and
## Redis restarts (AOF always), about 2 minutes: every node's effect once, none started before its
## parents ended or twice, none stuck, each callback once (two runs: 0 of each; 22-23 kills, 5 pauses,
## 4 Redis restarts; the last workflow ended 12.6 s and 8.7 s after the last fault).
chaos-workflows: deps
	CHAOS=workflows $(GO) test -count=1 -v -run '^TestChaosWorkflows$$' -timeout 10m ./chaos/

## chaos-fair: fair sequences per tenant under worker kills (-9), pauses past the lease and Redis
## restarts from its AOF, 100 tenants x 100 jobs (about 2 minutes; 50 jobs a key drained in 35 s once
## handlers stopped idling between a sequence's jobs, too short for more than three faults of each kind):
## every job done, and per key no job started before its predecessor's done (CHAOS_FAIR_SHARDS=n: the
## admission state in n shards).
chaos-fair: deps
	CHAOS=fair CHAOS_FAIR_JOBS=$${CHAOS_FAIR_JOBS:-100} $(GO) test -count=1 -v -run '^TestChaosFair$$' -timeout 15m ./chaos/

## chaos-limits: the limits per key across worker processes (about 3 minutes): concurrency 3 per key
## on five workers while holders are killed (-9), paused and cut off past the lease, then a rate of
## 10 per second of one key on three workers for over a minute; CI runs it after chaos-failover-short.
chaos-limits: deps
	CHAOS=limits $(GO) test -count=1 -v -run '^TestChaosLimit(Concurrency|Rate)$$' -timeout 15m ./chaos/
