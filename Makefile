GO ?= go
FUZZTIME ?= 5s

.PHONY: build install demo test vet fmt fuzz bench release cross abuse soak soak-selftest man figures

# The version stamp: git describe and the commit (internal/version reads them).
VERSION_PKG := github.com/agentmbx/agentmbx/internal/version
GIT_DESC := $(shell git describe --tags --always --dirty 2>/dev/null)
GIT_REV := $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X $(VERSION_PKG).stamped=$(GIT_DESC) -X $(VERSION_PKG).stampedRev=$(GIT_REV)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/agentmbx ./cmd/agentmbx

# The whole thing working, in one command: a relay and two hosts on this machine (see README "Two commands").
demo: build
	./bin/agentmbx demo

# go install into $(go env GOBIN), else $(go env GOPATH)/bin: put that directory on PATH.
install:
	$(GO) install -ldflags "$(LDFLAGS)" ./cmd/agentmbx
	@echo "installed agentmbx in $$($(GO) env GOBIN | grep . || echo $$($(GO) env GOPATH)/bin)"

# A man page for every command (section 1), generated from the commands by cobra/doc, in man/.
# Read one with: man -l man/agentmbx-send.1
man:
	$(GO) run ./cmd/agentmbx gen-man man

vet:
	$(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The race run skips the TestAbuse memory figures (the race detector's shadow memory makes peak
# RSS meaningless); they run again without it, bounded (about a minute on 2 cores).
test: fmt vet
	GORACE=atexit_sleep_ms=0 $(GO) test -race -count=1 -timeout 40m ./...
	$(GO) test -count=1 -timeout 10m -run '^TestAbuse' ./relayserver/ ./lan/

# Each fuzz target for a short time ($(FUZZTIME)).
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The figures README.md and docs/ quote, measured again: the demo, relay bench, the split and
# floor benchmarks, outbox pages, search on 100,000 messages, the abuse peaks, push pacing and
# recovery after an outage, FIGURES_RUNS times each (in turn), into docs/figures.md with the date,
# the machine and the ranges (internal/figures; about 10 minutes a run on a loaded 2-core machine;
# not in CI).
FIGURES_RUNS ?= 3
figures:
	GO=$(GO) $(GO) run ./internal/figures -runs $(FIGURES_RUNS) -out docs/figures.md

# Release builds: static binaries (CGO_ENABLED=0; the SQLite driver is pure Go) for every
# platform we ship, in dist/, with SHA256SUMS. `make cross` runs the same builds and discards
# them (what CI runs: every platform keeps compiling).
PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
RELEASE_VERSION ?= $(GIT_DESC)

release:
	@set -e; mkdir -p dist; for p in $(PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; \
	  out=dist/agentmbx-$(RELEASE_VERSION)-$$os-$$arch; echo "build $$out"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $$out ./cmd/agentmbx; \
	done; cd dist && sha256sum agentmbx-$(RELEASE_VERSION)-* > SHA256SUMS

cross:
	@set -e; for p in $(PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; echo "cross-compile $$os/$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -o /dev/null ./cmd/agentmbx; \
	done

# The abuse figures of issues 9 and 25 (make test asserts them): peak RSS of a relay and a LAN
# server process under each attack (held bodies, header-only holders, over-batch pushes, a
# challenge flood), on loopback, about a minute.
abuse:
	@out=$$($(GO) test -count=1 -v -run '^TestAbuse' ./relayserver/ ./lan/ 2>&1); st=$$?; \
	echo "$$out" | grep -E 'abuse:|^(---|ok|FAIL)|Error'; exit $$st

# The real-process soak (package soak, docs/development.md "Soak"): a relay and three hosts as child processes
# under seeded traffic and faults; ends with one `soak: seed=...` line. Size and seed from
# SOAK_SEED, SOAK_MESSAGES, SOAK_RELAY_KILLS, SOAK_HOST_KILLS (see soak/soak_test.go).
soak:
	$(GO) test -tags soak -count=1 -v -timeout 4h -run '^TestSoak$$' ./soak/

# The soak oracle's self-test: a short soak whose daemons skip the receiver's dedup (a failpoint)
# must be reported duplicated and went_back (about a minute).
soak-selftest:
	$(GO) test -tags soak -count=1 -v -timeout 30m -run '^TestSoakOracleSelfTest$$' ./soak/
