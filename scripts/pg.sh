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
# Failover (a primary and a streaming standby on loopback TCP as well as their sockets, durable commits):
#   scripts/pg.sh primary DIR       start a cluster like `start`, also on 127.0.0.1, synchronous_commit on;
#                                   prints its URL
#   scripts/pg.sh standby PDIR DIR  make DIR a streaming standby of the primary in PDIR (pg_basebackup -R,
#                                   application_name baton_standby) and start it; prints its URL
#   scripts/pg.sh synchronous PDIR  make the primary wait for the standby's flush on every commit
#                                   (synchronous_standby_names = 'baton_standby')
#   scripts/pg.sh crash DIR         stop the server at once (pg_ctl stop -m immediate), as a machine failure would
#   scripts/pg.sh promote DIR       promote the standby in DIR to primary
#   scripts/pg.sh tcp-port DIR      print the cluster's port (TCP on 127.0.0.1, and the socket's)
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
    # Socket only (no TCP), durability traded for speed: the cluster lives for one test run. A failover
    # cluster (see `primary`, `standby`) also listens on 127.0.0.1 and commits durably (synchronous_commit on).
    local listen synchronous
    listen=$(cat "$dir/listen" 2>/dev/null || true)
    synchronous=$(cat "$dir/synchronous_commit" 2>/dev/null || echo off)
    as_owner "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-k $dir -p $(cat "$dir/port") -c listen_addresses=$listen -c fsync=off -c synchronous_commit=$synchronous -c full_page_writes=off -c max_connections=300" \
        start >/dev/null
}

primary() {
    local dir=$1
    echo 127.0.0.1 >"$dir/listen"
    echo on >"$dir/synchronous_commit"
    start "$dir"
}

standby() {
    local primary_dir=$1 dir=$2
    if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
    chmod 700 "$dir"
    echo 127.0.0.1 >"$dir/listen"
    echo on >"$dir/synchronous_commit"
    free_port >"$dir/port"
    as_owner "$pgbin/pg_basebackup" -h "$primary_dir" -p "$(cat "$primary_dir/port")" -U postgres -D "$dir/data" -R -X stream --no-sync \
        >"$dir/basebackup.log" 2>&1 || { cat "$dir/basebackup.log" >&2; return 1; }
    # -R wrote primary_conninfo and standby.signal; the later line names the standby for synchronous_standby_names.
    echo "primary_conninfo = 'host=$primary_dir port=$(cat "$primary_dir/port") user=postgres application_name=baton_standby'" \
        | as_owner tee -a "$dir/data/postgresql.auto.conf" >/dev/null
    restart "$dir"
    url_of "$dir"
}

psql_as_owner() {
    local dir=$1 sql=$2
    as_owner "$pgbin/psql" -h "$dir" -p "$(cat "$dir/port")" -U postgres -d postgres -v ON_ERROR_STOP=1 -qAtc "$sql"
}

synchronous() {
    local dir=$1
    psql_as_owner "$dir" "ALTER SYSTEM SET synchronous_standby_names = 'baton_standby'" >/dev/null
    psql_as_owner "$dir" "SELECT pg_reload_conf()" >/dev/null
}

crash() {
    local dir=$1
    as_owner "$pgbin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
}

promote() {
    local dir=$1
    as_owner "$pgbin/pg_ctl" -D "$dir/data" -w -t 60 promote >/dev/null
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
    primary) primary "$2" ;;
    standby) standby "$2" "$3" ;;
    synchronous) synchronous "$2" ;;
    crash) crash "$2" ;;
    promote) promote "$2" ;;
    tcp-port) cat "$2/port" ;;
    *)
        echo "usage: scripts/pg.sh run CMD… | start DIR | stop DIR | restart DIR | destroy DIR | primary DIR | standby PDIR DIR | synchronous PDIR | crash DIR | promote DIR | tcp-port DIR" >&2
        exit 2
        ;;
esac
