#!/usr/bin/env bash
# Measures every command that walks Baton's tables at N users: a scratch PostgreSQL cluster (scripts/pg.sh)
# holding a users table of N Apple users, `baton.transfers` as late in a transfer (30 % migrated by sign-in,
# 60 % by exchange, 8 % pending, 2 % failed), `baton.events` with a row per migration, then each command under
# `/usr/bin/time -v`. Prints one line per command (wall seconds, peak RSS, exit status), then the disk
# Baton's tables take and the report's queries with EXPLAIN ANALYZE.
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

# The report's queries with EXPLAIN ANALYZE (EXPLAIN=0 leaves them out).
explain_report() {
    [ "${EXPLAIN:-1}" = 1 ] || return 0
    sql -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT state, method, count(*) FROM baton.transfers GROUP BY state, method"
    sql -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT to_char(migrated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), method, count(*) FROM baton.transfers WHERE state = 'migrated' AND migrated_at <= now() GROUP BY 1, 2"
    sql -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT count(*) FROM baton.transfers WHERE state = 'migrated' AND migrated_at > now() - interval '7 days' AND migrated_at <= now()"
    sql -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT count(DISTINCT e.transfer_sub) FROM baton.events AS e WHERE e.kind = 'unmatched' AND NOT EXISTS (SELECT 1 FROM baton.transfers AS t WHERE t.transfer_sub = e.transfer_sub AND t.state = 'migrated')"
    sql -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT state, COALESCE(left(last_error, 200), 'no error recorded'), count(*) FROM baton.transfers WHERE state IN ('failed', 'unresolvable') OR (state = 'pending' AND last_error IS NOT NULL) GROUP BY 1, 2"
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
measure "import transfers ($users lines)" "$binary" import transfers "${config[@]}" "$work/import.csv"
measure "doctor (Apple unreachable)" "$binary" doctor "${config[@]}"
# db migrate on the full tables: migration 12 (the report's indexes) again, its indexes dropped and its record removed.
if sql -At -c "SELECT 1 FROM baton.schema_migrations WHERE version = 12" | grep -q 1; then
    sql <<SQL
DROP INDEX baton.transfers_state_migrated_at_idx;
CREATE INDEX transfers_migrated_at_idx ON baton.transfers (migrated_at) WHERE state = 'migrated';
DELETE FROM baton.schema_migrations WHERE version = 12;
ANALYZE baton.transfers;
SQL
    measure "report (table), without 0012" "$binary" report "${config[@]}" $accepted
    echo "scale: the report's plans without 0012" >&2
    explain_report
    measure "db migrate (0012 on full tables)" "$binary" db migrate --database-url "$url"
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
