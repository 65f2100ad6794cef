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

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
status=0
/usr/bin/time -v -o "$work/time.txt" "$binary" rehearse --config "$work/baton.json" --from "$url" --rate 50 --processes 2 \
    ${CONCURRENCY:+--concurrency "$CONCURRENCY"} --json "$work/rehearsal.json" || status=$?
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cat "$work/rehearsal.json" 2>/dev/null || true
wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time.txt")
rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time.txt")
cpu=$(sed -n 's/.*\(User\|System\) time (seconds): //p' "$work/time.txt" | awk '{ s += $1 } END { printf "%.0f", s }')
echo "rehearse-scale: users=$users binary=$binary exit=$status wall=$wall peak_rss_mib=$((rss / 1024)) cpu_s=$cpu load_before=\"$load_before\" load_after=\"$load_after\" nproc=$(nproc)"
exit $status
