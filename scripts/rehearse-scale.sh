#!/usr/bin/env bash
# Measures `baton rehearse` on a large source: a scratch PostgreSQL cluster (scripts/pg.sh) holding a users table
# of N Apple users (generate_series; default 1,000,000, Apple-shaped subjects, relay emails, unique indexes), then
# `/usr/bin/time -v baton rehearse --from URL` with the emulator unthrottled. Prints the rehearsal's own lines,
# then one summary line: users, wall seconds, peak RSS (time -v's "Maximum resident set size"), the CPU seconds
# time -v counts (user and system, `baton` and the children it waited for) and the load.
#
#   scripts/rehearse-scale.sh [N] [BINARY]
#
# BINARY defaults to .build/release/baton (built with `swift build -c release` when missing).
# CROSS_COMPANY=1 makes every row a recipient's row: NULL subject, a transfer identifier in transfer_sub.
# CONCURRENCY=N passes --concurrency N (devices and job workers in flight; the rehearsal's default otherwise).
# Every phase's line is followed by `rehearse-scale: cpu phase=NAME baton_s=B postgres_s=P`: the CPU seconds `baton`
# and its throwaway cluster's PostgreSQL (the postmaster, its backends and the ones that exited) used in that phase,
# sampled from /proc every second, so a phase's cost is seen apart from the load of whatever shares the cores.
set -euo pipefail
cd "$(dirname "$0")/.."

users=${1:-1000000}
binary=${2:-.build/release/baton}
. scripts/scale-setup.sh

if [ "${CROSS_COMPANY:-0}" = 1 ]; then
    rows="SELECT i, NULL::text, NULL::text, 'tr' || lpad(i::text, 6, '0') || '.' || md5('t' || i) || '.' || lpad((i % 10000)::text, 4, '0')"
    transfer='"transfer_column": "transfer_sub", "email_policy": "always",'
else
    rows="SELECT i, lpad((i % 1000000)::text, 6, '0') || '.' || md5(i::text) || '.' || lpad((i % 10000)::text, 4, '0'),
                 md5('e' || i) || '@privaterelay.appleid.com', NULL::text"
    transfer=''
fi
generate_start=$(date +%s)
psql -X -q -v ON_ERROR_STOP=1 -d "$url" <<SQL
CREATE TABLE public.users (id bigint PRIMARY KEY, apple_sub text, email text, transfer_sub text, created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO public.users (id, apple_sub, email, transfer_sub) $rows FROM generate_series(1, $users) AS i;
CREATE UNIQUE INDEX ON public.users (apple_sub);
CREATE UNIQUE INDEX ON public.users (email);
CREATE UNIQUE INDEX ON public.users (transfer_sub);
VACUUM ANALYZE public.users;
SQL
echo "source: $users rows generated in $(( $(date +%s) - generate_start )) s" >&2

cat >"$work/baton.json" <<JSON
{"database": {"url": "postgresql:///unused"}, "apple": {"client_ids": ["com.example.app"]},
 "legacy": {"table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email", $transfer
            "where": null}}
JSON

# CPU ticks of a process and of its children it reaped (fields 14 to 17 of /proc/PID/stat).
ticks() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Reads the rehearsal's standard error; after each phase's line, that phase's CPU (baton's pid in $work/pid).
phase_cpu() {
    local hz baton postgres last_baton=0 last_postgres=0 line
    hz=$(getconf CLK_TCK)
    while IFS= read -r line; do
        printf '%s\n' "$line" >&2
        case $line in
            "rehearse phase="*)
                baton=$(ticks "$(cat "$work/pid")")
                postgres=$(cat "$work/postgres" 2>/dev/null || echo 0)
                printf 'rehearse-scale: cpu phase=%s baton_s=%.1f postgres_s=%.1f\n' "$(sed 's/^rehearse phase=\(.*\) seconds=.*/\1/' <<<"$line")" \
                    "$(( baton - last_baton ))e-2" "$(( postgres - last_postgres ))e-2" >&2
                last_baton=$baton last_postgres=$postgres ;;
        esac
    done
}
# Every second, the throwaway cluster's CPU so far into $work/postgres (its postmaster runs `postgres -D /tmp/baton-rehearse.*`).
sample_postgres() {
    local postmaster total child
    while sleep 1; do
        postmaster=$(pgrep -f "^[^ ]*postgres -D $1" | head -1) || continue
        total=0
        for child in "$postmaster" $(pgrep -P "$postmaster"); do total=$(( total + $(ticks "$child") )); done
        echo "$total" >"$work/postgres.new" && mv "$work/postgres.new" "$work/postgres"
    done
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
status=0
clusters_before=$(ls -d /tmp/baton-rehearse.* 2>/dev/null || true)
(
    /usr/bin/time -v -o "$work/time.txt" "$binary" rehearse --config "$work/baton.json" --from "$url" --rate 50 --processes 2 \
        ${CONCURRENCY:+--concurrency "$CONCURRENCY"} --json "$work/rehearsal.json" 2>&1 >&3 &
    echo $! >"$work/time-pid"
    wait $!
) 3>&1 | phase_cpu &
reader=$!
until [ -s "$work/time-pid" ] && pgrep -P "$(cat "$work/time-pid")" >"$work/pid"; do sleep 0.1; done
until cluster=$(comm -13 <(echo "$clusters_before") <(ls -d /tmp/baton-rehearse.* 2>/dev/null || true) | head -1) && [ -n "$cluster" ]; do
    kill -0 "$(cat "$work/pid")" 2>/dev/null || break
    sleep 0.2
done
[ -n "${cluster:-}" ] && { sample_postgres "$cluster" & sampler=$!; }
wait "$reader" || true
[ -n "${sampler:-}" ] && kill "$sampler"
status=$(sed -n 's/.*Exit status: //p' "$work/time.txt")
status=${status:-1}
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cat "$work/rehearsal.json" 2>/dev/null || true
wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time.txt")
rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time.txt")
cpu=$(sed -n 's/.*\(User\|System\) time (seconds): //p' "$work/time.txt" | awk '{ s += $1 } END { printf "%.0f", s }')
echo "rehearse-scale: users=$users binary=$binary exit=$status wall=$wall peak_rss_mib=$((rss / 1024)) cpu_s=$cpu load_before=\"$load_before\" load_after=\"$load_after\" nproc=$(nproc)"
exit $status
