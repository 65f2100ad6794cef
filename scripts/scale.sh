#!/usr/bin/env bash
# Measures every command that walks Baton's tables at N users: a scratch PostgreSQL cluster (scripts/pg.sh)
# holding a users table of N Apple users, `baton.transfers` as late in a transfer (30 % migrated by sign-in,
# 60 % by exchange, 8 % pending, 2 % failed), `baton.events` with a row per migration, then each command under
# `/usr/bin/time -v`, `db migrate` applying 0013 to the full tables, and the sign-in's migration statement in pgbench
# with and without 0013's triggers and with baton.events at 10 million rows. Prints one line per command (wall
# seconds, peak RSS, exit status; tps for pgbench), then the disk Baton's tables take and the report's queries with
# EXPLAIN ANALYZE.
#
#   scripts/scale.sh [N] [BINARY]
#
# BINARY defaults to .build/release/baton (built with `swift build -c release` when missing). The bulk jobs
# against Apple (`transfer-ids`, `exchange`) and the sign-ins are measured by scripts/rehearse-scale.sh N.
# Run it alone on the machine (`nice -n 10`): it loads the cores and the disk.
set -euo pipefail
cd "$(dirname "$0")/.."

users=${1:-1000000}
binary=${2:-.build/release/baton}
. scripts/scale-setup.sh
sql() { psql -X -q -v ON_ERROR_STOP=1 -d "$url" "$@"; }

cat >"$work/baton.json" <<JSON
{"database": {"url": "$url"}, "apple": {"client_ids": ["com.example.app"], "base_url": "http://127.0.0.1:9"},
 "legacy": {"table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email",
            "where": null}}
JSON
config=(--config "$work/baton.json")

# The report's queries with EXPLAIN ANALYZE (EXPLAIN=0 leaves them out): the counts (schema 0013), the migrations of
# the hour under way and at the pace period's edge from the table, the unmatched sign-ins.
explain_report() {
    [ "${EXPLAIN:-1}" = 1 ] || return 0
    sql -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT state, method, sum(count)::bigint FROM baton.transfer_count_totals GROUP BY state, method"
    sql -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT to_char(migrated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), method, count(*) FROM baton.transfers WHERE state = 'migrated' AND migrated_at >= date_trunc('hour', now()) AND migrated_at <= now() GROUP BY 1, 2"
    sql -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT count(*) FROM baton.transfers WHERE state = 'migrated' AND migrated_at > now() - interval '7 days' AND migrated_at < date_trunc('hour', now() - interval '7 days') + interval '1 hour'"
    sql -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT count(DISTINCT e.transfer_sub) FROM baton.events AS e WHERE e.kind = 'unmatched' AND NOT EXISTS (SELECT 1 FROM baton.transfers AS t WHERE t.transfer_sub = e.transfer_sub AND t.state = 'migrated')"
    sql -c "SELECT count(*) AS summary_rows, (SELECT count(*) FROM baton.transfer_count_deltas) AS deltas FROM baton.transfer_counts"
}

rows=()
# Runs "$@" under time -v; records NAME, wall seconds, peak RSS in MiB and the exit status.
measure() {
    local name=$1; shift
    local status=0
    /usr/bin/time -v -o "$work/time.txt" "$@" >"$work/out.txt" 2>"$work/err.txt" || status=$?
    local wall rss
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time.txt" | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.1f", s }')
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time.txt")
    rows+=("$(printf '%-34s %10s %10s %6s' "$name" "$wall" "$((rss / 1024))" "$status")")
    echo "scale: $name wall_s=$wall peak_rss_mib=$((rss / 1024)) exit=$status" >&2
    if [ "$status" -ne 0 ]; then tail -n 3 "$work/err.txt" >&2; fi
}

start=$(date +%s)
sql <<SQL
CREATE TABLE public.users (id bigint PRIMARY KEY, apple_sub text, email text, created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO public.users (id, apple_sub, email)
SELECT i, lpad((i % 1000000)::text, 6, '0') || '.' || md5(i::text) || '.' || lpad((i % 10000)::text, 4, '0'),
       md5('e' || i) || '@privaterelay.appleid.com'
FROM generate_series(1, $users) AS i;
CREATE UNIQUE INDEX ON public.users (apple_sub);
CREATE UNIQUE INDEX ON public.users (email);
SQL
"$binary" db migrate --database-url "$url" >/dev/null
# Late in the transfer: migrated users' rows rewritten as Baton rewrites them (new subject, legacy_key), the
# rest still on the sender's subject. One event per migration, as sign-in and exchange write them.
sql <<SQL
INSERT INTO baton.transfers (old_sub, transfer_sub, new_sub, new_email, is_private_email, state, method, attempts, last_error, migrated_at, legacy_key)
SELECT sub, tr, CASE WHEN b < 90 THEN 'n' || tr END, CASE WHEN b < 90 THEN md5('e' || i) || '@privaterelay.appleid.com' END,
       CASE WHEN b < 90 THEN true END,
       CASE WHEN b < 90 THEN 'migrated' WHEN b < 98 THEN 'pending' ELSE 'failed' END,
       CASE WHEN b < 30 THEN 'signin' WHEN b < 90 THEN 'exchange' END,
       CASE WHEN b < 30 THEN 0 ELSE 1 END, CASE WHEN b >= 98 THEN 'apple: invalid_request' END,
       CASE WHEN b < 90 THEN now() - ((i % 40) || ' days')::interval END, CASE WHEN b < 90 THEN i::text END
FROM (SELECT i, i % 100 AS b, lpad((i % 1000000)::text, 6, '0') || '.' || md5(i::text) || '.' || lpad((i % 10000)::text, 4, '0') AS sub,
             lpad((i % 1000000)::text, 6, '0') || '.' || md5('t' || i) || '.' || lpad((i % 10000)::text, 4, '0') AS tr
      FROM generate_series(1, $users) AS i) AS g;
UPDATE public.users u SET apple_sub = t.new_sub FROM baton.transfers t WHERE t.legacy_key = u.id::text;
INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, transfer_sub)
SELECT 'migrated', method, legacy_key, old_sub, new_sub, transfer_sub FROM baton.transfers WHERE state = 'migrated';
INSERT INTO baton.events (kind, transfer_sub) SELECT 'unmatched', 'u' || i FROM generate_series(1, $users / 100) AS i;
VACUUM ANALYZE;
SQL
echo "scale: $users users generated in $(( $(date +%s) - start )) s" >&2

# The import: a file of N pairs Baton does not hold yet (one company's form).
sql -c "COPY (SELECT 'old_sub', 'transfer_sub' UNION ALL SELECT * FROM (SELECT lpad((i % 1000000)::text, 6, '0') || '.' || md5('i' || i) || '.' || lpad((i % 10000)::text, 4, '0'),
          'imp' || md5('j' || i) FROM generate_series(1, $users) AS i) p) TO STDOUT WITH (FORMAT csv)" >"$work/import.csv"

accepted="--accepted-at $(date -u -d '-40 days' +%Y-%m-%dT%H:%M:%SZ)"
measure "report (table)" "$binary" report "${config[@]}" $accepted
measure "report --format json" "$binary" report "${config[@]}" --format json --out "$work/report.json" $accepted
measure "report --format html" "$binary" report "${config[@]}" --format html --out "$work/report.html" $accepted
measure "report --format csv (every user)" "$binary" report "${config[@]}" --format csv --out "$work/unresolved.csv" $accepted
measure "transfer-ids --export" "$binary" transfer-ids "${config[@]}" --export "$work/export.csv" --yes
if [ "${IMPORT:-1}" = 1 ]; then  # IMPORT=0 leaves the import out (14 minutes at ten million lines)
    measure "import transfers ($users lines)" "$binary" import transfers "${config[@]}" "$work/import.csv"
fi
measure "doctor (Apple unreachable)" "$binary" doctor "${config[@]}"
# db migrate on the full tables: migration 13 (the report's counts) again, its objects dropped and its record removed.
if sql -At -c "SELECT 1 FROM baton.schema_migrations WHERE version = 13" | grep -q 1; then
    sql <<SQL
DROP TRIGGER transfers_count_inserts ON baton.transfers;
DROP TRIGGER transfers_count_updates ON baton.transfers;
DROP TRIGGER transfers_count_deletes ON baton.transfers;
DROP TRIGGER transfers_count_truncates ON baton.transfers;
DROP VIEW baton.transfer_count_totals;
DROP TABLE baton.transfer_counts, baton.transfer_count_deltas;
DROP FUNCTION baton.record_transfer_count_deltas(), baton.clear_transfer_counts(),
              baton.transfer_count_hour(text, timestamptz), baton.transfer_count_reason(text, text);
DELETE FROM baton.schema_migrations WHERE version = 13;
SQL
    measure "db migrate (0013 on full tables)" "$binary" db migrate --database-url "$url"
    measure "report (table), after 0013 again" "$binary" report "${config[@]}" $accepted
fi

# The sign-in's migration statement, as `baton-bench signin` runs it in pgbench (printed by a small run of the bench
# on its own database, serving with BINARY), on 400,000 more users pending a transfer: with and without 0013's
# triggers, then with baton.events grown to EVENTS rows (default 10,000,000). SIGNIN=0 leaves it out.
if [ "${SIGNIN:-1}" = 1 ]; then
    [ -x .build/release/baton-bench ] || swift build -c release --product baton-bench
    # The bench prints its script before its pgbench; a small run may stop later, or (rarely) earlier: tried 3 times.
    for attempt in 1 2 3; do
        .build/release/baton-bench signin --baton "$binary" --database-url "$url" --users 100000 --transfers 60000 --migrations 100 --wrk-migrations 50000 \
            --current-requests 100 --wrk-seconds 1 --pgbench-seconds 1 >"$work/bench.txt" 2>&1 || true
        grep -q '^pgbench script, migrated: ' "$work/bench.txt" && break
    done
    sed -n 's/^pgbench script, migrated: //p' "$work/bench.txt" | python3 -c '
import sys
s = sys.stdin.read().strip().replace(" \\set n", "\n\\set n", 1).replace(" SELECT u.", "\nSELECT u.", 1)
lines = " ;\n".join(s.split(" ; ")).split("\n")
lines[1] = "\\set n :base + (:i - 1) * 8 + :client_id"
print("\n".join(lines))' >"$work/migrate.pgbench"
    sql <<SQL
INSERT INTO public.users (id, apple_sub, email)
SELECT $users + i, 'legacy.' || i, 'n' || i || '@privaterelay.appleid.com' FROM generate_series(1, 400000) AS i;
INSERT INTO baton.transfers (old_sub, transfer_sub) SELECT 'legacy.' || i, 'transfer.' || i FROM generate_series(1, 400000) AS i;
VACUUM ANALYZE public.users, baton.transfers;
SQL
    base=1
    # Runs the migration statement in pgbench for 10 s (8 clients) on the next 60,000 pending users (fewer than 6,000 a second).
    pgbench_migrations() {
        local name=$1 load tps
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        tps=$(pgbench -n -M prepared -D i=0 -D base=$base -f "$work/migrate.pgbench" -c 8 -j 2 -T 10 "$url" 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        rows+=("$(printf '%-34s %10s tps (load %s)' "$name" "$tps" "$load")")
        echo "scale: $name tps=$tps load $load" >&2
        base=$((base + 60000))
    }
    for round in 1 2; do
        pgbench_migrations "migrations, 0013's triggers"
        sql -c "ALTER TABLE baton.transfers DISABLE TRIGGER USER"
        pgbench_migrations "migrations, no trigger"
        sql -c "ALTER TABLE baton.transfers ENABLE TRIGGER USER"
    done
    events=${EVENTS:-10000000}
    sql <<SQL
INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, transfer_sub)
SELECT 'migrated', 'exchange', i::text, 'filler.' || i, 'filler-new.' || i, 'filler-tr.' || i
FROM generate_series(1, GREATEST(0, $events - (SELECT count(*) FROM baton.events))) AS i;
VACUUM ANALYZE baton.events;
SQL
    echo "scale: baton.events holds $(sql -At -c "SELECT count(*) FROM baton.events") rows" >&2
    pgbench_migrations "migrations, events at $events"
    pgbench_migrations "migrations, events at $events"
    deltas=$(sql -At -c "SELECT count(*) FROM baton.transfer_count_deltas")
    measure "report (table), $deltas deltas to fold" "$binary" report "${config[@]}" $accepted
    measure "report (table), events at $events" "$binary" report "${config[@]}" $accepted
fi

echo
printf '%-34s %10s %10s %6s\n' "command ($users users)" "wall s" "peak MiB" "exit"
printf '%s\n' "${rows[@]}"
echo
echo "files: unresolved.csv $(du -h "$work/unresolved.csv" | cut -f1) ($(wc -l <"$work/unresolved.csv") lines), report.html $(du -h "$work/report.html" | cut -f1), export.csv $(du -h "$work/export.csv" | cut -f1)"
sql -c "SELECT relname AS table, pg_size_pretty(pg_table_size(oid)) AS heap, pg_size_pretty(pg_indexes_size(oid)) AS indexes,
               pg_size_pretty(pg_total_relation_size(oid)) AS total
        FROM pg_class WHERE relnamespace = 'baton'::regnamespace AND relkind = 'r' ORDER BY pg_total_relation_size(oid) DESC"
explain_report
