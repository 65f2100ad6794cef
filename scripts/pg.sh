#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on a private Unix socket.
#
#   scripts/pg.sh run CMD [ARGS…]   start a cluster, run CMD with BATON_TEST_DATABASE_URL (and
#                                   BATON_TEST_PG_DIR) set and TMPDIR private, stop and delete the
#                                   cluster and TMPDIR, exit with CMD's status
#   scripts/pg.sh start DIR         start a cluster in the empty directory DIR; prints its URL
#   scripts/pg.sh stop DIR          stop it (the data stays, for a restart)
#   scripts/pg.sh restart DIR       start it again after a stop
#   scripts/pg.sh destroy DIR       stop it and delete DIR
#
# PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user.
set -euo pipefail

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$pgbin" ]; then
    echo "pg.sh: PostgreSQL server binaries not found; run scripts/install-deps.sh" >&2
    exit 2
fi

as_owner() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

url_of() {
    local dir=$1
    echo "postgresql://postgres@/postgres?host=$dir&port=$(cat "$dir/port")"
}

start() {
    local dir=$1
    if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
    chmod 700 "$dir"
    as_owner "$pgbin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; return 1; }
    free_port >"$dir/port"
    restart "$dir"
    url_of "$dir"
}

restart() {
    local dir=$1
    # Socket only (no TCP), durability traded for speed: the cluster lives for one test run.
    as_owner "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-k $dir -p $(cat "$dir/port") -c listen_addresses= -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
        start >/dev/null
}

stop() {
    local dir=$1
    as_owner "$pgbin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
}

destroy() {
    local dir=$1
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_owner "$pgbin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
}

case "${1:-}" in
    run)
        shift
        dir=$(mktemp -d /tmp/baton-pg.XXXXXX)
        # The command's temporary files (TMPDIR) go in a directory of their own, deleted with the cluster.
        scratch=$(mktemp -d /tmp/baton-tmp.XXXXXX)
        trap 'destroy "$dir"; rm -rf "$scratch"' EXIT
        trap 'exit 130' INT TERM
        url=$(start "$dir")
        echo "PostgreSQL running at $url" >&2
        status=0
        TMPDIR="$scratch" BATON_TEST_DATABASE_URL="$url" BATON_TEST_PG_DIR="$dir" "$@" || status=$?
        exit $status
        ;;
    start) start "$2" ;;
    stop) stop "$2" ;;
    restart) restart "$2" ;;
    destroy) destroy "$2" ;;
    *)
        echo "usage: scripts/pg.sh run CMD… | start DIR | stop DIR | restart DIR | destroy DIR" >&2
        exit 2
        ;;
esac
