#!/usr/bin/env bash
# HTTP fuzzing: starts `baton emulator --port 0` (or uses FUZZ_URL and FUZZ_PID for a server already
# running, such as `baton serve`), sends FUZZ_REQUESTS (default 100000) random and mutated requests with
# the workbench's `baton-bench fuzz http` ($BATON_BENCH, default the baton-bench beside $BATON), and fails if
# the server went down, answered a well-formed request wrongly, changed its probe answers or grew its memory
# past the bound.
#
#   scripts/fuzz-http.sh                 against a fresh emulator
#   scripts/fuzz-http.sh serve           against `baton serve` on a throwaway PostgreSQL, Apple being an
#                                        emulator (current and legacy apps, so re-linking is on): sign-in and
#                                        link bodies carry tokens it minted (native and web nonces), every error
#                                        must be a code of docs/openapi.yaml; afterwards a real sign-in must succeed
#   FUZZ_URL=http://127.0.0.1:8080 FUZZ_PID=1234 FUZZ_PATHS=/v1/signin,/healthz FUZZ_PROBES=/healthz scripts/fuzz-http.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BATON="${BATON:-.build/debug/baton}"
BATON_BENCH="${BATON_BENCH:-$(dirname "$BATON")/baton-bench}"
REQUESTS="${FUZZ_REQUESTS:-100000}"
SEED="${FUZZ_SEED:-$(date +%s)}"
mode="${1:-emulator}"

if [ "$mode" = serve ] && [ -z "${BATON_TEST_DATABASE_URL:-}" ]; then exec scripts/pg.sh run "$0" "$@"; fi

children=()
work=$(mktemp -d)
cleanup() {
    for pid in "${children[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# Starts "$@" in the background, waits for its "listening on URL" line, and sets $url and $pid.
start_server() {
    local log="$work/$1.log"; shift
    "$@" >"$log" 2>"$log.err" &
    pid=$!
    children+=("$pid")
    for _ in $(seq 1 300); do grep -q "listening on" "$log" && break; sleep 0.1; done
    url=$(sed -n 's/^.*listening on //p' "$log" | head -n 1)
    [ -n "$url" ] || { echo "fuzz-http: $* did not start" >&2; cat "$log" "$log.err" >&2; exit 1; }
}

case "$mode" in
    emulator)
        if [ -z "${FUZZ_URL:-}" ]; then
            start_server emulator "$BATON" emulator --port 0 --log-level error
            FUZZ_URL=$url FUZZ_PID=$pid
        fi ;;
    serve)
        start_server emulator "$BATON" emulator --port 0 --log-level error
        apple=$url
        "$BATON" db migrate --database-url "$BATON_TEST_DATABASE_URL" >/dev/null
        psql "$BATON_TEST_DATABASE_URL" -q -c "CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text UNIQUE, email text)"
        curl -sf -X POST "$apple/emulator/teams" -d '{"team_id":"FUZZTEAM01"}' >/dev/null
        curl -sf -X POST "$apple/emulator/apps" -d '{"client_id":"com.example.fuzz","team_id":"FUZZTEAM01"}' >/dev/null
        curl -sf -X POST "$apple/emulator/teams" -d '{"team_id":"FUZZTEAM02"}' >/dev/null
        curl -sf -X POST "$apple/emulator/apps" -d '{"client_id":"com.example.fuzz.legacy","team_id":"FUZZTEAM02"}' >/dev/null
        users() { curl -sf -X POST "$apple/emulator/users" -d "{\"client_id\":\"$1\",\"count\":$2}" | python3 -c 'import json,sys; print(*[u["id"] for u in json.load(sys.stdin)["users"]])'; }
        read -r user others <<<"$(users com.example.fuzz 5)"
        # Tokens for the fuzzer, `ID_TOKEN NONCE` a line: native (the claim is the nonce's SHA-256 hex) and web
        # (the claim is the nonce) sign-ins of the current app's other users, and legacy-app tokens for links.
        mint() {
            local client=$1 who=$2 nonce claim
            nonce=$(head -c 24 /dev/urandom | base64 | tr '+/' '-_')
            claim=$nonce; [ "$3" = native ] && claim=$(printf %s "$nonce" | sha256sum | cut -d' ' -f1)
            curl -sf -X POST "$apple/emulator/authorize" -d "{\"client_id\":\"$client\",\"user\":\"$who\",\"nonce\":\"$claim\"}" \
                | python3 -c 'import json,sys; print(json.load(sys.stdin)["id_token"], sys.argv[1])' "$nonce" >>"$work/tokens"
        }
        for who in $others; do for flow in native web native web; do mint com.example.fuzz "$who" "$flow"; done; done
        for who in $(users com.example.fuzz.legacy 4); do mint com.example.fuzz.legacy "$who" native; mint com.example.fuzz.legacy "$who" web; done
        codes=$(awk '/^    ErrorCode:/ {open = 1} open && /^      enum:/ {listing = 1; next} listing && /^        - / {print $2; next} listing {exit}' docs/openapi.yaml | paste -sd, -)
        cat >"$work/baton.json" <<JSON
{"listen": "127.0.0.1:0", "database": {"url": "$BATON_TEST_DATABASE_URL", "pool_size": 4},
 "apple": {"base_url": "$apple", "client_ids": ["com.example.fuzz"], "legacy_client_ids": ["com.example.fuzz.legacy"]},
 "legacy": {"table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"}}
JSON
        start_server serve "$BATON" serve --config "$work/baton.json" --log-level error
        FUZZ_URL=$url FUZZ_PID=$pid
        FUZZ_PATHS="${FUZZ_PATHS:-/v1/signin,/v1/credential-state,/v1/link,/v1/link/session,/v1/notifications,/v1/report,/healthz}"
        FUZZ_PROBES="${FUZZ_PROBES:-/healthz /readyz /v1/credential-state?user=001234.nobody.0000}" ;;
    *)
        echo "usage: scripts/fuzz-http.sh [emulator|serve]" >&2; exit 2 ;;
esac

args=(fuzz http --url "$FUZZ_URL" --requests "$REQUESTS" --seed "$SEED")
[ -n "${FUZZ_PID:-}" ] && args+=(--pid "$FUZZ_PID")
[ -n "${FUZZ_PATHS:-}" ] && args+=(--paths "$FUZZ_PATHS")
for probe in ${FUZZ_PROBES:-}; do args+=(--probe "$probe"); done
[ "$mode" = serve ] && args+=(--tokens "$work/tokens" --error-codes "$codes")
echo "fuzz-http: baton-bench ${args[*]}"
"$BATON_BENCH" "${args[@]}"
for child in "${children[@]}"; do
    kill -0 "$child" 2>/dev/null || { echo "fuzz-http: a server exited during the run" >&2; exit 1; }
done

if [ "$mode" = serve ]; then
    # A real sign-in after the storm: a token from the emulator, verified and recorded by the service.
    token=$(curl -sf -X POST "$apple/emulator/authorize" -d "{\"client_id\":\"com.example.fuzz\",\"user\":\"$user\"}" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["id_token"])')
    answer=$(curl -s -w ' %{http_code}' -X POST "$FUZZ_URL/v1/signin" -H 'Content-Type: application/json' -d "{\"id_token\":\"$token\"}")
    echo "fuzz-http: sign-in after fuzzing: $answer"
    case "$answer" in *'"outcome"'*' 200') ;; *) echo "fuzz-http: the sign-in after fuzzing failed" >&2; exit 1 ;; esac
fi
