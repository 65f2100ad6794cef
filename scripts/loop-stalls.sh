#!/usr/bin/env bash
# Wall-clock latencies of `baton serve` on ONE event loop while the database stalls (issue 25's two
# measurements; Tests/FaultTests/FaultsLoopTests.swift checks the same scenarios by order of answers only).
#
#   scripts/loop-stalls.sh [BATON_BINARY]      default .build/release/baton
#
# It starts a throwaway PostgreSQL (scripts/pg.sh start), the Apple emulator (`baton emulator`) and
# `baton serve` with server.event_loops 1, pool_size 4 and statement_timeout_ms 60000, all on loopback.
# Through the emulator's HTTP control routes it sets up an accepted app transfer with CURRENT users
# (migrated by a first sign-in before anything is measured) and MIGRATING users (a legacy row in
# public.users and a pending row in baton.transfers, loaded with `baton import transfers`), then measures
# with curl's %{time_total}:
#
#   baseline    CURRENT sign-ins one after another, nothing held: p50 (nearest rank) and max.
#   scenario 2  a psql session holds `SELECT ... FROM baton.transfers WHERE transfer_sub = X FOR UPDATE`
#               (X: a migrating user's transfer identifier); that user's sign-in is sent in the background,
#               0.3 s later CURRENT sign-ins one after another (p50, max, and whether the held sign-in was
#               still waiting on the lock when they were done); then the lock is released (pg_cancel_backend)
#               and the held sign-in's latency and answer are printed.
#   scenario 1  every connection named application_name 'baton' is terminated (pg_terminate_backend), then
#               the whole cluster (postmaster and children) is SIGSTOPped; a migrating user's sign-in is sent,
#               0.3 s later 5 /healthz one after another (each latency); the freeze lasts until that sign-in
#               is answered or FREEZE_SECONDS pass, then SIGCONT; the sign-in's latency and answer are printed.
#
# One summary line per figure on stdout (progress on stderr); answers print as HTTP status and the
# `outcome` or `error` field only: no token, key or identifier. Everything started is stopped and deleted
# on every exit path (the cluster is resumed with SIGCONT before it is destroyed).
#
# Environment: CURRENT_SIGNINS (default 20), FREEZE_SECONDS (default 15), KEEP_LOGS=1 keeps the scratch
# directory (logs of the emulator and baton serve) and prints its path.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
baton=${1:-.build/release/baton}
[ -x "$baton" ] || { echo "loop-stalls.sh: no executable baton at $baton (swift build -c release, or give its path)" >&2; exit 2; }
baton=$(cd "$(dirname "$baton")" && pwd)/$(basename "$baton")
# A copied binary without its resource bundle beside it reads the schema migrations from the build directory
# it was compiled in, whatever that holds now.
[ -d "$(dirname "$baton")/Baton_Baton.resources" ] \
    || echo "loop-stalls: note: no Baton_Baton.resources beside $baton; its migrations come from its build directory" >&2
current_count=${CURRENT_SIGNINS:-20}
freeze_seconds=${FREEZE_SECONDS:-15}
migrating_count=3
client_id=com.example.app
for tool in curl jq psql pgrep; do
    command -v "$tool" >/dev/null || { echo "loop-stalls.sh: $tool is required" >&2; exit 2; }
done

work=$(mktemp -d /tmp/baton-stalls.XXXXXX)
pgdir=$(mktemp -d /tmp/baton-stalls-pg.XXXXXX)
emulator_pid= serve_pid= locker_pid= background_pid=

log() { echo "loop-stalls: $*" >&2; }

# The cluster's processes: the postmaster (first line of postmaster.pid), then its children.
cluster_pids() {
    local postmaster
    postmaster=$(head -n 1 "$pgdir/data/postmaster.pid" 2>/dev/null) || return 0
    [ -n "$postmaster" ] || return 0
    echo "$postmaster"
    pgrep -P "$postmaster" || true
}

signal_cluster() {
    local pid
    for pid in $(cluster_pids); do kill "-$1" "$pid" 2>/dev/null || true; done
}

stop_child() {
    local pid=$1
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    # Resumed whatever the exit path: a stopped postmaster would never stop.
    signal_cluster CONT
    stop_child "$background_pid"
    stop_child "$locker_pid"
    stop_child "$serve_pid"
    stop_child "$emulator_pid"
    "$root/scripts/pg.sh" destroy "$pgdir" >/dev/null 2>&1 || true
    if [ "${KEEP_LOGS:-0}" = 1 ]; then log "logs kept in $work"; else rm -rf "$work"; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits for a line matching "listening on http://HOST:PORT" in FILE and prints HOST:PORT.
listening_address() {
    local file=$1 pid=$2 address
    for _ in $(seq 300); do
        address=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$file" 2>/dev/null | head -n 1 | sed 's|.*http://||') || true
        if [ -n "$address" ]; then echo "$address"; return 0; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "loop-stalls.sh: no 'listening on' line from pid $pid; its output:" >&2
    sed -e 's/^/  /' "$file" >&2
    return 1
}

# The emulator's control API: emulator METHOD PATH [JSON].
emulator() {
    local method=$1 path=$2 body=${3:-}
    if [ -n "$body" ]; then
        curl -sf -X "$method" -H 'Content-Type: application/json' -d "$body" "http://$emulator_address$path"
    else
        curl -sf -X "$method" "http://$emulator_address$path"
    fi
}

# Writes the sign-in body of emulated user ID (a fresh identity token from the receiving team's app) to FILE.
signin_body() {
    emulator POST /emulator/authorize "$(jq -nc --arg c "$client_id" --arg u "$1" '{client_id: $c, user: $u}')" \
        | jq -c '{id_token}' >"$2"
}

# Sends the sign-in in FILE; writes the answer's body to FILE.answer and prints "STATUS SECONDS".
signin() {
    curl -s -o "$1.answer" -w '%{http_code} %{time_total}\n' --max-time 120 -H 'Content-Type: application/json' \
        -d @"$1" "http://$serve_address/v1/signin" || true
}

# "STATUS outcome" or "STATUS error" of the answer in FILE (status given).
answer_of() {
    local status=$1 file=$2 field
    field=$(jq -r '.outcome // .error // empty' "$file" 2>/dev/null || true)
    echo "$status ${field:-(no JSON body)}"
}

ms() { awk -v s="$1" 'BEGIN { printf "%.1f", s * 1000 }'; }

# p50 (nearest rank) and max of the millisecond figures on stdin: "p50 X ms, max Y ms".
summary() {
    sort -n | awk '{ v[NR] = $1 } END { r = int((NR + 1) / 2); printf "p50 %.1f ms, max %.1f ms (n=%d)", v[r], v[NR], NR }'
}

sql() { psql "$database_url" -v ON_ERROR_STOP=1 -qAtc "$1"; }

# --- PostgreSQL, schema, application table -----------------------------------------------------------
log "starting PostgreSQL in $pgdir"
server_url=$("$root/scripts/pg.sh" start "$pgdir")
psql "$server_url" -v ON_ERROR_STOP=1 -qc 'CREATE DATABASE stalls'
database_url=${server_url/\/postgres\?//stalls?}
"$baton" db migrate --database-url "$database_url" >"$work/migrate.log" 2>&1 \
    || { cat "$work/migrate.log" >&2; exit 1; }

# --- The emulator and the transfer ------------------------------------------------------------------------
"$baton" emulator --port 0 --log-level warning >"$work/emulator.log" 2>&1 &
emulator_pid=$!
emulator_address=$(listening_address "$work/emulator.log" "$emulator_pid")
log "emulator on $emulator_address"

emulator POST /emulator/teams '{}' >"$work/sender.json"
emulator POST /emulator/teams '{}' >"$work/recipient.json"
( umask 077
  jq -r .private_key_pem "$work/sender.json" >"$work/sender.p8"
  jq -r .private_key_pem "$work/recipient.json" >"$work/recipient.p8" )
sender_team=$(jq -r .team_id "$work/sender.json")
recipient_team=$(jq -r .team_id "$work/recipient.json")
emulator POST /emulator/apps "$(jq -nc --arg c "$client_id" --arg t "$sender_team" '{client_id: $c, team_id: $t}')" >/dev/null
total=$((current_count + migrating_count))
emulator POST /emulator/users "$(jq -nc --arg c "$client_id" --argjson n "$total" '{client_id: $c, count: $n, private_email: true}')" \
    >"$work/users.json"
emulator POST /emulator/transfers "$(jq -nc --arg c "$client_id" --arg t "$recipient_team" '{client_id: $c, to_team_id: $t}')" >/dev/null
emulator GET "/emulator/transfer-identifiers?client_id=$client_id" >"$work/transfer-subs.json"
accepted_at=$(emulator POST /emulator/transfers/accept "$(jq -nc --arg c "$client_id" '{client_id: $c}')" | jq -r .accepted_at)

# Every user has a legacy row under the sending team's identifier and a pending transfer.
sql 'CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text UNIQUE, email text, transfer_sub text)'
jq -r '.users[] | [.user_identifier, .email] | @csv' "$work/users.json" \
    | psql "$database_url" -v ON_ERROR_STOP=1 -qc '\copy public.users (apple_sub, email) FROM STDIN WITH (FORMAT csv)'
{ echo old_sub,transfer_sub; jq -r '.transfer_subs | to_entries[] | "\(.key),\(.value)"' "$work/transfer-subs.json"; } >"$work/transfers.csv"
"$baton" import transfers --database-url "$database_url" "$work/transfers.csv" >"$work/import.log" 2>&1 \
    || { cat "$work/import.log" >&2; exit 1; }

mapfile -t user_ids < <(jq -r '.users[].id' "$work/users.json")
current_ids=("${user_ids[@]:0:current_count}")
held_id=${user_ids[current_count]}
frozen_id=${user_ids[current_count + 1]}
held_old_sub=$(jq -r --argjson i "$current_count" '.users[$i].user_identifier' "$work/users.json")
held_transfer_sub=$(jq -r --arg s "$held_old_sub" '.transfer_subs[$s]' "$work/transfer-subs.json")

# --- baton serve on one event loop ------------------------------------------------------------------------
jq -n --arg db "$database_url" --arg apple "http://$emulator_address" --arg c "$client_id" --arg at "$accepted_at" \
    --slurpfile s "$work/sender.json" --slurpfile r "$work/recipient.json" '{
    listen: "127.0.0.1:0",
    server: {event_loops: 1},
    database: {url: $db, pool_size: 4, statement_timeout_ms: 60000},
    apple: {base_url: $apple, client_ids: [$c], transfer: {client_id: $c, accepted_at: $at,
        sender: {team_id: $s[0].team_id, key_id: $s[0].key_id, private_key_path: "sender.p8"},
        recipient: {team_id: $r[0].team_id, key_id: $r[0].key_id, private_key_path: "recipient.p8"}}},
    legacy: {table: "public.users", key_column: "id", subject_column: "apple_sub", email_column: "email"}
}' >"$work/baton.json"
"$baton" serve --config "$work/baton.json" --log-level warning >"$work/serve.log" 2>&1 &
serve_pid=$!
serve_address=$(listening_address "$work/serve.log" "$serve_pid")
for _ in $(seq 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$serve_address/healthz" || true)" = 200 ] && break
    sleep 0.1
done
log "baton serve on $serve_address (one event loop)"

# Tokens for every user, fetched before anything is timed.
for i in "${!current_ids[@]}"; do signin_body "${current_ids[i]}" "$work/current-$i.json"; done
signin_body "$held_id" "$work/held.json"
signin_body "$frozen_id" "$work/frozen.json"

# The first sign-in migrates each of the current users; from then on they are current.
for i in "${!current_ids[@]}"; do
    read -r status _ < <(signin "$work/current-$i.json")
    outcome=$(jq -r '.outcome // .error // empty' "$work/current-$i.json.answer" 2>/dev/null || true)
    [ "$status" = 200 ] && [ "$outcome" = migrated ] \
        || { log "setup: a first sign-in answered $status ${outcome:-?}, expected 200 migrated"; sed -e 's/^/  /' "$work/serve.log" >&2; exit 1; }
done

# CURRENT sign-ins one after another; each "STATUS SECONDS" is appended to FILE; fails unless each was
# 200 current.
current_signins() {
    local file=$1 i status seconds outcome
    : >"$file"
    for i in "${!current_ids[@]}"; do
        read -r status seconds < <(signin "$work/current-$i.json")
        outcome=$(jq -r '.outcome // .error // empty' "$work/current-$i.json.answer" 2>/dev/null || true)
        echo "$status $seconds $outcome" >>"$file"
    done
}

report_current() {
    local label=$1 file=$2 unexpected
    unexpected=$(awk '$1 != 200 || $3 != "current"' "$file" | wc -l)
    echo "$label: $(awk '{ printf "%.3f\n", $2 * 1000 }' "$file" | summary); answers not '200 current': $unexpected"
}

# --- baseline -----------------------------------------------------------------------------------------------
current_signins "$work/baseline.txt"
report_current "baseline: $current_count current sign-ins, nothing held" "$work/baseline.txt"

# --- scenario 2: a migrating user's baton.transfers row locked FOR UPDATE -----------------------------------
psql "$database_url" -v ON_ERROR_STOP=1 -qc "SET application_name = 'stalls_row_locker'; BEGIN;
    SELECT 1 FROM baton.transfers WHERE transfer_sub = '$held_transfer_sub' FOR UPDATE; SELECT pg_sleep(300); COMMIT;" \
    >"$work/locker.log" 2>&1 &
locker_pid=$!
for _ in $(seq 200); do
    [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'stalls_row_locker' AND wait_event = 'PgSleep'")" -gt 0 ] && break
    sleep 0.05
done
started=$(date +%s.%N)
signin "$work/held.json" >"$work/held.result" &
background_pid=$!
sleep 0.3
current_signins "$work/locked.txt"
waiting=$(sql "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
report_current "scenario 2: $current_count current sign-ins from 0.3 s after the held sign-in, row locked" "$work/locked.txt"
echo "scenario 2: sessions waiting on a lock after those sign-ins (the held sign-in still waiting: 1): $waiting"
released=$(date +%s.%N)
sql "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE application_name = 'stalls_row_locker'" >/dev/null
wait "$locker_pid" 2>/dev/null || true
locker_pid=
wait "$background_pid" || true
background_pid=
read -r status seconds <"$work/held.result"
echo "scenario 2: held user's sign-in: $(ms "$seconds") ms, answered $(answer_of "$status" "$work/held.json.answer"); lock released $(ms "$(echo "$released - $started" | bc)") ms after it was sent"

# --- scenario 1: the pipeline's backend terminated, then the whole cluster frozen ---------------------------
terminated=$(sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'baton'")
signal_cluster STOP
# A backend forked between the postmaster's list and its stop is caught by a second pass.
signal_cluster STOP
frozen_at=$(date +%s.%N)
signin "$work/frozen.json" >"$work/frozen.result" &
background_pid=$!
sleep 0.3
for n in 1 2 3 4 5; do
    read -r status seconds < <(curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 60 "http://$serve_address/healthz" || true)
    echo "scenario 1: /healthz $n of 5 during the freeze ($terminated 'baton' backends terminated, cluster SIGSTOPped): $(ms "$seconds") ms, HTTP $status"
done
while kill -0 "$background_pid" 2>/dev/null \
    && [ "$(echo "$(date +%s.%N) - $frozen_at < $freeze_seconds" | bc)" = 1 ]; do
    sleep 0.1
done
answered_frozen=$(kill -0 "$background_pid" 2>/dev/null && echo no || echo yes)
signal_cluster CONT
resumed=$(date +%s.%N)
wait "$background_pid" || true
background_pid=
read -r status seconds <"$work/frozen.result"
echo "scenario 1: sign-in sent during the freeze: $(ms "$seconds") ms, answered $(answer_of "$status" "$work/frozen.json.answer"); answered while still frozen: $answered_frozen; cluster resumed $(ms "$(echo "$resumed - $frozen_at" | bc)") ms after the freeze began"
read -r status seconds < <(curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 60 "http://$serve_address/healthz" || true)
echo "scenario 1: /healthz after SIGCONT: $(ms "$seconds") ms, HTTP $status"
