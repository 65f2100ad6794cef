#!/usr/bin/env bash
# HTTP fuzzing: starts `baton emulator --port 0` (or uses FUZZ_URL and FUZZ_PID for a server already
# running, such as `baton serve`), sends FUZZ_REQUESTS (default 100000) random and mutated requests with
# `baton fuzz http`, and fails if the server went down, answered a well-formed request wrongly, changed its
# probe answers or grew its memory past the bound.
#
#   scripts/fuzz-http.sh                                   against a fresh emulator
#   FUZZ_URL=http://127.0.0.1:8080 FUZZ_PID=1234 FUZZ_PATHS=/v1/signin,/healthz FUZZ_PROBES=/healthz scripts/fuzz-http.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BATON="${BATON:-.build/debug/baton}"
REQUESTS="${FUZZ_REQUESTS:-100000}"
SEED="${FUZZ_SEED:-$(date +%s)}"

started=""
cleanup() { if [ -n "$started" ]; then kill "$started" 2>/dev/null || true; wait "$started" 2>/dev/null || true; fi; rm -f "${log:-}"; }
trap cleanup EXIT

if [ -z "${FUZZ_URL:-}" ]; then
    log=$(mktemp)
    "$BATON" emulator --port 0 --log-level error >"$log" 2>&1 &
    started=$!
    for _ in $(seq 1 100); do grep -q "listening on" "$log" && break; sleep 0.1; done
    FUZZ_URL=$(sed -n 's/^emulator listening on //p' "$log")
    [ -n "$FUZZ_URL" ] || { echo "fuzz-http: the emulator did not start" >&2; cat "$log" >&2; exit 1; }
    FUZZ_PID=$started
fi

args=(fuzz http --url "$FUZZ_URL" --requests "$REQUESTS" --seed "$SEED")
[ -n "${FUZZ_PID:-}" ] && args+=(--pid "$FUZZ_PID")
[ -n "${FUZZ_PATHS:-}" ] && args+=(--paths "$FUZZ_PATHS")
for probe in ${FUZZ_PROBES:-}; do args+=(--probe "$probe"); done
echo "fuzz-http: baton ${args[*]}"
"$BATON" "${args[@]}"
if [ -n "$started" ] && ! kill -0 "$started" 2>/dev/null; then echo "fuzz-http: the emulator exited" >&2; exit 1; fi
