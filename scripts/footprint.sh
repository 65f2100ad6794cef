#!/usr/bin/env bash
# The footprint of a whole transfer in the application's database: N users seeded in the emulator and in
# public.users (scripts/emulator-setup.sh), then `baton transfer-ids` and `baton exchange` against the emulator,
# unthrottled. Right after the jobs (no manual VACUUM; autovacuum as configured) prints, per table and per index of
# schema baton, the bytes per user the transfer added (size after minus size after `db migrate`:
# pg_relation_size for a heap or an index, pg_indexes_size, pg_total_relation_size with TOAST, free space and
# visibility maps) and the index's scans during the jobs (pg_stat_user_indexes.idx_scan: 0 means nothing read it),
# then the WAL each phase wrote per user (pg_wal_lsn_diff of pg_current_wal_lsn() around it; full_page_writes on).
#
#   scripts/footprint.sh [N] [BINARY]
#
# N defaults to 20000; BINARY to .build/release/baton (built when missing). WORKERS (default 32) sets --workers.
set -euo pipefail
cd "$(dirname "$0")/.."

users=${1:-20000}
binary=${2:-.build/release/baton}
workers=${WORKERS:-32}
. scripts/emulator-setup.sh

sql -At -c "CHECKPOINT" >/dev/null
sql <<'SQL'
CREATE TABLE public.footprint_before AS
SELECT c.oid, c.relname, pg_relation_size(c.oid) AS rel, pg_total_relation_size(c.oid) AS total,
       CASE WHEN c.relkind = 'r' THEN pg_indexes_size(c.oid) END AS indexes
FROM pg_class c WHERE c.relnamespace = 'baton'::regnamespace AND c.relkind IN ('r', 'i');
SELECT pg_stat_reset() \gset
SQL
lsn() { sql -At -c "SELECT pg_current_wal_lsn()"; }
lsn0=$(lsn)
start=$(date +%s.%N)
"$binary" transfer-ids "${config[@]}" --yes --workers "$workers" --rate 100000 >"$work/transfer-ids.log" 2>&1 \
    || { tail -n 5 "$work/transfer-ids.log" >&2; exit 1; }
lsn1=$(lsn)
mid=$(date +%s.%N)
"$binary" exchange "${config[@]}" --workers "$workers" --rate 100000 >"$work/exchange.log" 2>&1 \
    || { tail -n 5 "$work/exchange.log" >&2; exit 1; }
lsn2=$(lsn)
end=$(date +%s.%N)
sleep 1  # the statistics collector's last report

migrated=$(sql -At -c "SELECT count(*) FROM baton.transfers WHERE state = 'migrated'")
echo "footprint: $users users, $migrated migrated; transfer-ids $(printf '%.1f' "$(echo "$mid - $start" | bc)") s, exchange $(printf '%.1f' "$(echo "$end - $mid" | bc)") s, --workers $workers, binary $binary"
[ "$migrated" = "$users" ] || { echo "footprint: not every user was migrated" >&2; exit 1; }
echo
sql -v users="$users" <<'SQL'
\pset footer off
\echo Bytes per user added to each table of schema baton (after the jobs minus after db migrate)
SELECT c.relname AS "table", c.reltuples::bigint AS "rows (est.)",
       round((pg_relation_size(c.oid) - b.rel)::numeric / :users, 1) AS heap,
       round((pg_indexes_size(c.oid) - b.indexes)::numeric / :users, 1) AS indexes,
       round((pg_total_relation_size(c.oid) - b.total)::numeric / :users, 1) AS total
FROM pg_class c JOIN public.footprint_before b ON b.oid = c.oid
WHERE c.relkind = 'r' AND pg_total_relation_size(c.oid) <> b.total
ORDER BY pg_total_relation_size(c.oid) - b.total DESC;
SELECT round(sum(pg_total_relation_size(c.oid) - b.total)::numeric / :users, 1) AS "all of schema baton, bytes per user"
FROM pg_class c JOIN public.footprint_before b ON b.oid = c.oid WHERE c.relkind = 'r';
\echo Each index of schema baton: bytes per user added, scans during the two jobs
SELECT s.relname AS "table", s.indexrelname AS "index",
       round((pg_relation_size(s.indexrelid) - b.rel)::numeric / :users, 1) AS "bytes/user",
       s.idx_scan AS scans
FROM pg_stat_user_indexes s JOIN public.footprint_before b ON b.oid = s.indexrelid
WHERE s.schemaname = 'baton'
ORDER BY pg_relation_size(s.indexrelid) - b.rel DESC, s.relname, s.indexrelname;
SQL
echo "WAL per user: transfer-ids $(sql -At -c "SELECT round(pg_wal_lsn_diff('$lsn1', '$lsn0') / $users)") bytes, exchange $(sql -At -c "SELECT round(pg_wal_lsn_diff('$lsn2', '$lsn1') / $users)") bytes, whole transfer $(sql -At -c "SELECT round(pg_wal_lsn_diff('$lsn2', '$lsn0') / $users)") bytes (public.users' rewrite included; full_page_writes on, a checkpoint before)"

# EXPLAIN=1: the plans of the statements a dropped index could slow, on the finished transfer's tables: the jobs'
# claims, the sign-in's lookups of a transfer by either subject or its transfer identifier, the link flow's and
# rollback's reads of the audit trail.
if [ "${EXPLAIN:-0}" = 1 ]; then
    sub=$(sql -At -c "SELECT old_sub FROM baton.transfers LIMIT 1")
    sql -c "ANALYZE baton.transfers, baton.events"
    for statement in \
        "SELECT id FROM baton.transfers WHERE state = 'pending' AND transfer_sub IS NOT NULL AND (lease_expires_at IS NULL OR lease_expires_at < now()) AND next_attempt_at IS NULL AND id > 0 ORDER BY next_attempt_at NULLS FIRST, id LIMIT 500 FOR UPDATE SKIP LOCKED" \
        "SELECT id FROM baton.transfers WHERE state = 'pending' AND transfer_sub IS NULL AND (lease_expires_at IS NULL OR lease_expires_at < now()) AND (next_attempt_at IS NULL OR next_attempt_at <= now()) ORDER BY next_attempt_at NULLS FIRST, id LIMIT 500 FOR UPDATE SKIP LOCKED" \
        "SELECT * FROM baton.transfers WHERE old_sub = '$sub'" \
        "SELECT * FROM baton.transfers WHERE transfer_sub = (SELECT transfer_sub FROM baton.transfers WHERE old_sub = '$sub')" \
        "SELECT * FROM baton.transfers WHERE new_sub = (SELECT new_sub FROM baton.transfers WHERE old_sub = '$sub')" \
        "SELECT 1 FROM baton.events WHERE kind = 'migrated' AND new_sub = '$sub'" \
        "SELECT id FROM baton.events WHERE kind = 'migrated' AND legacy_key = '1' AND new_sub IS NOT NULL"; do
        sql -c "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) $statement"
    done
fi

# AFTER_VACUUM=1: the same per-table figures after a VACUUM of schema baton's tables, to tell the live rows from the
# dead versions the jobs' updates left (the figures above are the ones right after the jobs).
if [ "${AFTER_VACUUM:-0}" = 1 ]; then
    sql -At -c "SELECT 'VACUUM baton.' || quote_ident(relname) FROM pg_class WHERE relnamespace = 'baton'::regnamespace AND relkind = 'r'" \
        | while read -r statement; do sql -c "$statement"; done
    sql -v users="$users" <<'SQL'
\pset footer off
\echo After VACUUM: bytes per user (heap and indexes keep their pages; live rows and free space)
SELECT c.relname AS "table", round((pg_total_relation_size(c.oid) - b.total)::numeric / :users, 1) AS total,
       s.n_live_tup AS live, s.n_dead_tup AS dead,
       round((COALESCE((SELECT sum(pg_column_size(t.*)) FROM baton.transfers t WHERE c.relname = 'transfers'), 0)
            + COALESCE((SELECT sum(pg_column_size(e.*)) FROM baton.events e WHERE c.relname = 'events'), 0))::numeric / :users, 1) AS "live tuple bytes/user"
FROM pg_class c JOIN public.footprint_before b ON b.oid = c.oid JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relkind = 'r' AND pg_total_relation_size(c.oid) <> b.total ORDER BY 2 DESC;
SQL
fi
