# The library is the root module; examples/ and bench/ are modules of their own
# so that their dependencies never reach the library's go.mod.
GO           ?= go
STATICCHECK  := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME     ?= 30s
N            ?= 100000
MODULES      := . $(wildcard examples) $(wildcard bench)
# A race-enabled test binary sleeps 1 s as it exits, so that a race between
# goroutines that outlive the tests is still reported; the library's and
# the examples' TestMain fail on such goroutines (relLeaks, goleak), and
# make test runs six such binaries.
GORACE       ?= atexit_sleep_ms=0
export GORACE

.PHONY: test fmt-check vet unit cover lint demo bench storm fuzz soak ci-smoke

## test: gofmt check, go vet and the tests of every module, race-enabled but bench's.
test: fmt-check vet unit

fmt-check:
	@out="$$(gofmt -l $(MODULES))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

unit:
	$(GO) test -race -count=1 ./...
	@if [ -d examples ]; then cd examples && $(GO) test -race -count=1 ./...; fi
	@if [ -d bench ]; then cd bench && $(GO) test -count=1 -parallel 16 -run=Test ./...; fi

## cover: statement coverage of the library.
cover:
	$(GO) test -count=1 -coverprofile=coverage.out .
	$(GO) tool cover -func=coverage.out | tail -1

## lint: staticcheck at a pinned version, over every module; go vet of the library for other systems.
lint:
	@for m in $(MODULES); do (cd $$m && $(GO) run $(STATICCHECK) ./...) || exit 1; done
	@# the library on the other systems Go builds it for: errno names differ
	@for p in windows/amd64 darwin/arm64 freebsd/amd64 wasip1/wasm js/wasm; do \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) vet . || { echo "vet failed for $$p"; exit 1; }; done

## demo: the flaky-server demo (examples/demo).
demo:
	cd examples && $(GO) run ./demo

## bench: the side-by-side benchmarks and the storm simulator; writes bench/RESULTS.md.
bench:
	cd bench && $(GO) run ./cmd/report

## storm: the retry-storm simulator's default scenario.
storm:
	cd bench && $(GO) run ./cmd/storm

## fuzz: every fuzz target for FUZZTIME each (a time, or executions such as
## 20000x; before Go 1.27 a time budget can fail at its limit without a
## failing input, golang/go#75804: a real finding is written to testdata/fuzz).
fuzz:
	@for f in $$($(GO) test -list '^Fuzz' . | grep '^Fuzz'); do \
		echo "== $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) . || exit 1; done

## soak: the soak test with N logical requests.
soak:
	HTTPRETRY_SOAK_N=$(N) $(GO) test -race -count=1 -run='^TestSoak$$' -timeout=60m -v .

## ci-smoke: what CI runs beyond make test, kept short: each benchmark once,
## a short storm run and a few seconds of each fuzz target.
ci-smoke:
	@if [ -d bench ]; then cd bench && $(GO) test -run='^$$' -bench=. -benchtime=1x ./... && $(GO) run ./cmd/storm -smoke; fi
	@# A budget of executions, not of time: a time budget can fail at its
	@# limit without a failing input (golang/go#75804, fixed in Go 1.27).
	$(MAKE) fuzz FUZZTIME=20000x
