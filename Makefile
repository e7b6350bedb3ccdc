GO ?= go
FUZZTIME ?= 5s

.PHONY: build test vet fmt fuzz bench

build:
	$(GO) build -o bin/agentmbx ./cmd/agentmbx

vet:
	$(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

test: fmt vet
	GORACE=atexit_sleep_ms=0 $(GO) test -race -count=1 -timeout 20m ./...

# Each fuzz target for a short time ($(FUZZTIME)).
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
