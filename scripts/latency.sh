#!/usr/bin/env bash
# `baton exchange` against Apple's latency: N users seeded in the emulator and in public.users
# (scripts/emulator-setup.sh), their transfer identifiers made by `baton transfer-ids` (no latency), then for each
# injected latency (the emulator's faults, `latency_ms` on every /auth/* call) and each --workers count, one
# `baton exchange --workers W --rate RATE` run for SECONDS seconds and stopped with SIGTERM (a background job of a script ignores SIGINT). The rate is the emulator's
# count of /auth/usermigrationinfo calls answered 200 between a warm-up of WARMUP seconds and the end of the window,
# over the window; Little's law expects min(W / latency, RATE). Prints one line per run and a table.
#
#   scripts/latency.sh [N] [BINARY]
#
# N defaults to 60000 (enough pending users for every run); BINARY to .build/release/baton (built when missing).
# LATENCIES (ms, default "100 300"), WORKERS (default "8 32 128"), RATE (default 100000: no limit of Baton's),
# SECONDS_PER_RUN (default 15), WARMUP (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."

users=${1:-60000}
binary=${2:-.build/release/baton}
latencies=${LATENCIES:-100 300}
workers_list=${WORKERS:-8 32 128}
rate=${RATE:-100000}
window=${SECONDS_PER_RUN:-15}
warmup=${WARMUP:-3}
. scripts/emulator-setup.sh

"$binary" transfer-ids "${config[@]}" --yes --workers 32 --rate 100000 >"$work/transfer-ids.log" 2>&1 \
    || { tail -n 5 "$work/transfer-ids.log" >&2; exit 1; }
# 200 answers of the exchange endpoint so far, and the migrated rows.
answered() { emulator GET /emulator/stats | jq '.endpoints["/auth/usermigrationinfo"].statuses["200"] // 0'; }
migrated() { sql -At -c "SELECT count(*) FROM baton.transfers WHERE state = 'migrated'"; }
rows=()
for latency in $latencies; do
    emulator POST /emulator/faults "{\"latency_ms\": $latency}" >/dev/null
    for workers in $workers_list; do
        "$binary" exchange "${config[@]}" --workers "$workers" --rate "$rate" >"$work/exchange.log" 2>&1 &
        pid=$!
        sleep "$warmup"
        a0=$(answered); m0=$(migrated); t0=$(date +%s.%N)
        sleep "$window"
        a1=$(answered); m1=$(migrated); t1=$(date +%s.%N)
        kill -TERM $pid 2>/dev/null || true
        wait $pid || true
        line=$(python3 - "$latency" "$workers" "$rate" "$a0" "$a1" "$m0" "$m1" "$t0" "$t1" <<'PYEOF'
import sys
latency, workers, rate, a0, a1, m0, m1, t0, t1 = sys.argv[1:]
s = float(t1) - float(t0)
calls = (int(a1) - int(a0)) / s
rows = (int(m1) - int(m0)) / s
little = min(int(workers) / (int(latency) / 1000), float(rate))
print(f"| {latency} | {workers} | {little:.0f} | {calls:.0f} | {rows:.0f} | {calls / little:.2f} |")
PYEOF
)
        echo "latency: $line" >&2
        rows+=("$line")
    done
done
left=$(sql -At -c "SELECT count(*) FROM baton.transfers WHERE state = 'pending'")
echo
echo "$users users, --rate $rate, window ${window} s after ${warmup} s of warm-up, binary $binary; $left users still pending at the end"
echo
echo "| latency ms | workers | workers ÷ latency /s | exchange calls /s | migrations /s | measured ÷ expected |"
echo "|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
