# Baton: make demo | make test | make bench
SHELL := /bin/bash
export PATH := $(PATH):/opt/swift/usr/bin

SWIFT_BUILD_FLAGS ?=
BATON := .build/debug/baton

.PHONY: deps build test faults demo bench fuzz fuzz-http dist install-test alerts-test clean

deps:
	@scripts/install-deps.sh

build: deps
	swift build $(SWIFT_BUILD_FLAGS)

## Builds, starts a throwaway PostgreSQL, runs every test against it, removes it; then the Django framework tests
## (integrations/python, in a virtual environment scripts/python-env.sh keeps in .build) against the built baton.
## Tests run one at a time: on a 2-core machine Swift's cooperative pool has two threads, and tests that
## wait on child processes would starve the in-process servers other tests talk to.
## The build's own temporary files go in a directory removed afterwards, like the tests' (scripts/pg.sh).
test: deps
	@scratch=$$(mktemp -d /tmp/baton-build.XXXXXX); trap 'rm -rf "$$scratch"' EXIT; \
	set -e; export TMPDIR="$$scratch"; \
	swift build $(SWIFT_BUILD_FLAGS); \
	swift build --build-tests $(SWIFT_BUILD_FLAGS); \
	scripts/pg.sh run swift test --skip-build --no-parallel $(SWIFT_BUILD_FLAGS); \
	scripts/pg.sh run scripts/python-test.sh "$$(swift build $(SWIFT_BUILD_FLAGS) --show-bin-path)/baton"

## The fault suite's long form (repeated kills, longer loads and outages); `make test` runs its short form.
## Each scenario starts PostgreSQL clusters of its own; the disk-full scenario mounts a small tmpfs (root).
faults: build
	swift build --build-tests $(SWIFT_BUILD_FLAGS)
	BATON_FAULTS=long scripts/pg.sh run swift test --skip-build --no-parallel --filter FaultTests $(SWIFT_BUILD_FLAGS)

## The one-command demo: builds (debug: the fastest to produce on a fresh machine), starts a throwaway
## PostgreSQL, runs `baton demo` (the emulator, the service and the jobs in-process on 127.0.0.1), writes
## report.html here, and deletes the database; Ctrl-C cleans up too. DEMO_FLAGS passes options (--users N, …).
DEMO_FLAGS ?=
demo: build
	scripts/pg.sh run bash -c '$(BATON) demo --database-url "$$BATON_TEST_DATABASE_URL" $(DEMO_FLAGS)'

## Runs every benchmark of the workbench (`baton-bench`, never shipped) in release mode against the release `baton`,
## and writes bench-results/latest.json.
bench: deps
	swift build -c release
	scripts/bench.sh

## Fuzzes the token verifier and the JSON reader with libFuzzer, FUZZ_SECONDS (default 60) each.
fuzz: deps
	scripts/fuzz.sh run

## Sends FUZZ_REQUESTS (default 100,000) random and mutated requests to `baton emulator` with the workbench's
## `baton-bench fuzz http`, then checks it.
fuzz-http: build
	scripts/fuzz-http.sh

## A self-contained build and its Debian package (scripts/dist.sh): `baton` in release mode with the Swift runtime
## linked in (its only run-time dependencies are Debian 12 libraries), then dist/baton_VERSION_ARCH.deb with the
## binary, a sample configuration in /etc/baton, the systemd unit, the manual page, bash completion and the alerting
## rules; its Depends read off the binary by dpkg-shlibdeps. VERSION=… names the version.
dist: deps
	scripts/dist.sh

## Installs dist/'s package as an operator would, in a fresh Debian 12 root without the Swift toolchain
## (debootstrap) and in an image built from packaging/Containerfile (podman), and runs doctor, serve and a sign-in
## there against a throwaway PostgreSQL and the emulator; checks the unit and the alerting rules. Slow: CI runs it.
install-test: dist
	scripts/install-test.sh

## The alerting rules alone: promtool check and test (scripts/install-test.sh also checks them against a live scrape).
alerts-test:
	scripts/alerts-test.sh

clean:
	rm -rf .build dist
