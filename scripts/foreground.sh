#!/usr/bin/env bash
# The application's own workload beside `baton exchange` (issue 42, "the foreground cost"): N users seeded in the
# emulator and in public.users (scripts/emulator-setup.sh), their transfer identifiers made by `baton transfer-ids`,
# then pgbench at a fixed rate (-R, no --latency-limit) on the application's statements, on the same database:
#
#   the lookup of a user by subject     SELECT … FROM public.users WHERE apple_sub = <a random user's current subject>
#   an update of the application's own  UPDATE public.users SET last_seen_at = now() WHERE id = <the same user>
#   column (added here; Baton never touches it)
#
# in three kinds of phase, ROUNDS times in turn (alone, full, throttled, …) and alone once more at the end, so
# that the machine's noise shows:
#   alone      pgbench only;
#   full       beside `baton exchange --workers W --rate 100000 --max-replica-lag 0 --max-active-backends 0`
#              (no limit of Baton's);
#   throttled  beside `baton exchange --workers W --rate 100000 V`, one phase for each variant V of THROTTLED
#              (options separated by ";", a --rate of V's replacing 100000).
# An exchange phase starts the exchange, waits WARMUP seconds, runs pgbench for SECONDS_PER_RUN seconds, counts
# the rows migrated meanwhile, and stops the exchange with SIGTERM (the rows it leased are given back). The
# latencies come from pgbench's per-transaction log (-l): with -R each is measured from the transaction's
# scheduled start, so a transaction held up by a stalled predecessor counts its wait. Prints one line per phase
# and a table: the workload's p50, p99, max and tps, the exchange's migrations per second, the time it spent
# paused in the window (from its log's "pausing" and "database clear" lines) and its pauses, and the one-minute
# load average before and after the phase.
#
#   scripts/foreground.sh [N] [BINARY]
#
# N defaults to 250000 (enough pending users for every exchange phase); BINARY to .build/release/baton (built when
# missing). RATE (pgbench transactions per second, default 200), CLIENTS (default 4), WORKERS (the exchange's
# --workers, default 32), THROTTLED (default "--max-active-backends 2; --max-active-backends 2 --rate 200"),
# ROUNDS (default 3), SECONDS_PER_RUN (default 30), WARMUP (default 3), LATENCY_MS (injected into every call of
# the emulator's, default 0: the exchange as fast as this machine allows).
set -euo pipefail
cd "$(dirname "$0")/.."

users=${1:-250000}
binary=${2:-.build/release/baton}
rate=${RATE:-200}
clients=${CLIENTS:-4}
workers=${WORKERS:-32}
throttled=${THROTTLED:---max-active-backends 2; --max-active-backends 2 --rate 200}
rounds=${ROUNDS:-3}
window=${SECONDS_PER_RUN:-30}
warmup=${WARMUP:-3}
latency=${LATENCY_MS:-0}
. scripts/emulator-setup.sh

"$binary" transfer-ids "${config[@]}" --yes --workers 32 --rate 100000 >"$work/transfer-ids.log" 2>&1 \
    || { tail -n 5 "$work/transfer-ids.log" >&2; exit 1; }
[ "$latency" = 0 ] || emulator POST /emulator/faults "{\"latency_ms\": $latency}" >/dev/null
sql -c 'ALTER TABLE public.users ADD COLUMN last_seen_at timestamptz' -c 'ANALYZE public.users'
cat >"$work/workload.sql" <<SQL
\\set id random(1, $users)
BEGIN;
SELECT id, email, created_at FROM public.users WHERE apple_sub = (SELECT apple_sub FROM public.users WHERE id = :id);
UPDATE public.users SET last_seen_at = now() WHERE id = :id;
END;
SQL

migrated() { sql -At -c "SELECT count(*) FROM baton.transfers WHERE state = 'migrated'"; }
load() { cut -d ' ' -f 1 /proc/loadavg; }
rows=()
# phase NUMBER LABEL [EXCHANGE OPTION…]: one window of pgbench, beside `baton exchange` given options (none: alone).
phase() {
    local n=$1 label=$2 pid="" m0=0 m1=0 t0 t1 l0 l1 log="$work/transactions-$1" exchange_log="$work/exchange-$1.log"
    shift 2
    : >"$exchange_log"
    l0=$(load)
    if [ $# -gt 0 ]; then
        case " $* " in *" --rate "*) ;; *) set -- --rate 100000 "$@" ;; esac
        "$binary" exchange "${config[@]}" --workers "$workers" "$@" >"$exchange_log" 2>&1 &
        pid=$!
        sleep "$warmup"
        m0=$(migrated)
    fi
    t0=$(date +%s.%N)
    pgbench -n -M prepared -f "$work/workload.sql" -R "$rate" -c "$clients" -j 2 -T "$window" \
        -l --log-prefix="$log" "$url" >"$work/pgbench-$n.out" 2>&1 || { cat "$work/pgbench-$n.out" >&2; exit 1; }
    t1=$(date +%s.%N)
    if [ -n "$pid" ]; then
        m1=$(migrated)
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" || true
    fi
    l1=$(load)
    local line
    line=$(python3 - "$n" "$label" "$window" "$m0" "$m1" "$t0" "$t1" "$l0" "$l1" "$exchange_log" "$log".* <<'PYEOF'
import re, sys
from datetime import datetime, timezone
n, label, window, m0, m1, t0, t1, l0, l1, exchange_log = sys.argv[1:11]
t0, t1 = float(t0), float(t1)
latencies, failed = [], 0
for path in sys.argv[11:]:
    for line in open(path):
        fields = line.split()
        # client transaction time script epoch microseconds schedule_lag: time is in µs, from the scheduled start
        if fields[2].isdigit():
            latencies.append(int(fields[2]) / 1000)
        else:
            failed += 1
latencies.sort()
def pct(p):
    return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))]
# The exchange's pauses within the window, from the timestamps of its "pausing" and "database clear" lines.
held, pauses, since = 0.0, 0, None
for line in open(exchange_log):
    stamp = re.match(r"ts=(\S+)", line)
    if not stamp or ("pausing: claiming no new work" not in line and "database clear; going on" not in line):
        continue
    at = datetime.fromisoformat(stamp.group(1)).replace(tzinfo=timezone.utc).timestamp()
    if "pausing" in line:
        since = at
        pauses += 1
    elif since is not None:
        held += max(0.0, min(at, t1) - max(since, t0))
        since = None
if since is not None:
    held += max(0.0, t1 - max(since, t0))
alone = m0 == m1 == "0" and not open(exchange_log).read()
rate = "–" if alone else f"{(int(m1) - int(m0)) / (t1 - t0):.0f}"
throttled = "–" if alone else f"{held:.1f} s ({pauses})"
print(f"| {n} | {label} | {pct(50):.2f} | {pct(99):.2f} | {latencies[-1]:.1f} | {len(latencies) / float(window):.0f} | {failed} | {rate} | {throttled} | {l0} → {l1} |")
PYEOF
)
    echo "foreground: $line" >&2
    rows+=("$line")
}

n=0
for _ in $(seq "$rounds"); do
    phase $((n += 1)) alone
    phase $((n += 1)) full --max-replica-lag 0 --max-active-backends 0
    IFS=';' read -ra variants <<<"$throttled"
    for variant in "${variants[@]}"; do
        # shellcheck disable=SC2086  # a variant is a list of options
        phase $((n += 1)) "throttled: ${variant# }" $variant
    done
done
phase $((n += 1)) alone
left=$(sql -At -c "SELECT count(*) FROM baton.transfers WHERE state = 'pending'")
echo
echo "$users users; pgbench -R $rate -c $clients -T $window -M prepared (lookup by subject + update of the user's row); exchange --workers $workers --rate 100000, ${warmup} s of warm-up before each window; emulator latency $latency ms; binary $binary; $(nproc) cores; $left users still pending at the end"
echo
echo "| # | exchange | p50 ms | p99 ms | max ms | tps | failed | migrations /s | throttled (pauses) | load (1 min) |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"
printf '%s\n' "${rows[@]}"
