#!/usr/bin/env bash
# Makes a fresh Debian 12 machine ready to build and test Baton: installs the C libraries and
# PostgreSQL with apt-get, only the packages that are missing. The Swift toolchain is assumed.
# chromium (headless) and python3 run the report's browser test (scripts/browser-check.py); python3-venv and
# python3-pip the Django integration tests' virtual environment (scripts/python-env.sh).
# wrk drives `baton-bench signin` from outside; linux-perf profiles `baton serve` under it (docs/performance.md).
# pgbouncer runs the pooler tests; time (/usr/bin/time -v) measures peak memory in scripts/rehearse-scale.sh and
# scripts/scale.sh; curl drives scripts/fuzz-http.sh; curl and jq run docs/emulator.md's walkthrough (its test).
set -euo pipefail

packages=(libssl-dev libpq-dev libmicrohttpd-dev postgresql postgresql-contrib pkg-config chromium python3 python3-venv python3-pip wrk linux-perf pgbouncer time curl jq)
. "$(dirname "$0")/lib.sh"
install_missing install-deps "${packages[@]}"
