#!/usr/bin/env bash
# Installs Baton's Debian package as an operator would and runs it, on loopback only (CI runs this, as root).
#
#   scripts/install-test.sh [dist/baton_VERSION_ARCH.deb]      default: the one `make dist` left in dist/
#
# 1. A clean Debian 12 root from Debian's archive (debootstrap --variant=minbase): no Swift toolchain in it.
# 2. `apt-get install ./baton_….deb` there, which brings its Depends from the archive; the package's files,
#    user and permissions; `ldd` finds every library inside the root; the bash completion answers; the unit
#    passes `systemd-analyze verify`.
# 3. A throwaway PostgreSQL (scripts/pg.sh, on 127.0.0.1) and the emulator (the packaged `baton emulator`) with
#    an accepted transfer; the application's table with three users; /etc/baton/baton.json is the shipped one
#    with the transfer's values put in, the keys and admin token go in /etc/baton/keys (owner baton, mode 600),
#    BATON_DATABASE_URL in /etc/baton/baton.env, as the runbook's deployment section says.
# 4. Inside the root, as the unit runs it (user baton, no new privileges, no capabilities, the root file system
#    read-only but a private /tmp): `baton --version`, `baton db migrate`, `baton import transfers`,
#    `baton doctor`, `baton serve`; then /healthz, /readyz, a sign-in that migrates a user (checked in the
#    table), the same user's next sign-in (current), a bad token (401), /metrics; SIGTERM stops the service with
#    exit 0.
# 5. Where podman runs: the image of packaging/Containerfile, FROM the same clean root imported as the base (the
#    registry's debian:bookworm-slim is out of reach here), run with the host's loopback: its user, its health
#    check, /healthz, a sign-in; `baton --version` inside it. Where podman cannot run, it says why and goes on.
# 6. `baton exchange --metrics-file` as the unit's user; the alerting rules checked against /metrics and that file
#    (scripts/alerts-test.sh --scrape twice).
#
# Prints one line per check ("ok …") and a closing "install-test: N passed, 0 failed". Everything started is
# stopped and removed on every exit path. KEEP=1 keeps the scratch directory; DEBOOTSTRAP_CACHE=FILE.tar keeps the
# clean root there for the next run (CI makes a fresh one).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
repo=$PWD

[ "$(id -u)" -eq 0 ] || { echo "install-test: run as root (debootstrap, chroot, mounts)" >&2; exit 2; }
deb=${1:-$(ls dist/baton_*.deb 2>/dev/null | head -n 1)}
[ -f "$deb" ] || { echo "install-test: no package: run 'make dist' first, or give its path" >&2; exit 2; }
deb=$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# What this script needs on the host (the package itself needs nothing from the host).
install_missing install-test debootstrap curl jq postgresql python3 podman runc

work=$(mktemp -d /tmp/baton-install-test.XXXXXX)
root=$work/root
# PostgreSQL's own directory: the server runs as postgres, which cannot enter $work (mode 700).
pgdir=$(mktemp -d /tmp/baton-install-pg.XXXXXX)
passed=0
pids=()
image= container= base_image=

log() { echo "install-test: $*" >&2; }
ok() { passed=$((passed + 1)); echo "ok  $*"; }
fail() { echo "FAIL $*" >&2; echo "install-test: $passed passed, 1 failed"; exit 1; }

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    local pid
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    if [ -n "$container" ]; then podman rm -f "$container" >/dev/null 2>&1 || true; fi
    if [ -n "$image" ]; then podman rmi -f $image >/dev/null 2>&1 || true; fi
    if [ -n "$base_image" ]; then podman rmi -f "$base_image" >/dev/null 2>&1 || true; fi
    local mount
    for mount in dev/pts dev sys proc ""; do
        mountpoint -q "$root/$mount" 2>/dev/null && umount -l "$root/$mount" 2>/dev/null || true
    done
    "$repo/scripts/pg.sh" destroy "$pgdir" >/dev/null 2>&1 || true
    if [ "${KEEP:-0}" = 1 ]; then log "kept $work"; else rm -rf "$work"; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 1. a clean Debian 12 root ---------------------------------------------------------------------------------
started=$(date +%s)
cache=${DEBOOTSTRAP_CACHE:-}   # a tarball of the clean root, made by the first run that names it (for reruns)
if [ -n "$cache" ] && [ -f "$cache" ]; then
    mkdir -p "$root" && tar -C "$root" -xf "$cache"
    ok "a clean Debian $(cat "$root/etc/debian_version") root from $cache (debootstrapped earlier)"
else
    log "debootstrap bookworm (minbase) from $mirror"
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
        || { tail -n 20 "$work/debootstrap.log" >&2; fail "debootstrap from $mirror"; }
    if [ -n "$cache" ]; then tar -C "$root" -cf "$cache" .; fi
    ok "a clean Debian $(cat "$root/etc/debian_version") root from $mirror in $(( $(date +%s) - started )) s"
fi
[ ! -e "$root/opt/swift" ] && ! chroot "$root" sh -c 'command -v swift swiftc' >/dev/null 2>&1 \
    || fail "the clean root holds a Swift toolchain"
ok "no Swift toolchain in the root"

# The pristine root is the image's base (before anything below changes it).
podman_reason=
podman_flags=()
if ! command -v podman >/dev/null; then
    podman_reason="podman is not installed"
else
    # This machine's sandbox: no CAP_SYS_RESOURCE (the OCI runtime may only lower rlimits), cgroups v1 (crun
    # refuses a hybrid hierarchy; runc takes it). The host's loopback is the only network the test uses.
    podman_flags=(--runtime runc --ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=4096:4096" --network host)
    base_image=localhost/baton-install-test-base:$$
    # Like debian:bookworm-slim, without the packages debootstrap downloaded.
    if ! tar -C "$root" --exclude='./var/cache/apt/archives/*.deb' --exclude='./var/cache/apt/*.bin' \
            --exclude='./var/lib/apt/lists/*' -c . | podman import - "$base_image" >"$work/podman-import.log" 2>&1; then
        podman_reason="podman import failed: $(tail -n 1 "$work/podman-import.log")"; base_image=
    elif ! podman run --rm "${podman_flags[@]}" "$base_image" true >"$work/podman-probe.log" 2>&1; then
        podman_reason="podman cannot run a container here: $(tail -n 1 "$work/podman-probe.log")"
    fi
fi

# --- 2. the package, with its dependencies from the archive ----------------------------------------------------
mount --bind "$root" "$root"      # a mount point of its own, so the service's view of it can be made read-only
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount --bind /sys "$root/sys"
cp /etc/resolv.conf "$root/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"   # nothing starts services in the root
chmod 0755 "$root/usr/sbin/policy-rc.d"
cp "$deb" "$root/tmp/"
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 "$@"; }
in_root apt-get update -qq >"$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get update in the root"; }
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "/tmp/$(basename "$deb")" >>"$work/apt.log" 2>&1 \
    || { tail -n 30 "$work/apt.log" >&2; fail "apt-get install the package in the root"; }
new_packages=$(grep -c '^Setting up ' "$work/apt.log" || true)
ok "apt-get install ./$(basename "$deb"): $new_packages packages set up, Depends: $(in_root dpkg-query -W -f='${Depends}' baton)"
ok "installed size $(in_root dpkg-query -W -f='${Installed-Size}' baton) KiB; /usr/lib/baton/baton $(stat -c %s "$root/usr/lib/baton/baton") bytes"

libraries=$(in_root ldd /usr/bin/baton)
grep -q 'not found' <<<"$libraries" && { echo "$libraries" >&2; fail "ldd: a library is missing in the root"; }
grep -qiE 'swift|/opt/' <<<"$libraries" && { echo "$libraries" >&2; fail "ldd: a toolchain path"; }
ok "ldd /usr/bin/baton in the root: $(grep -c '=>' <<<"$libraries") libraries, none missing, no toolchain path"

for file in /usr/bin/baton /usr/lib/baton/Baton_Baton.resources/Schema /etc/baton/baton.json /etc/baton/baton.env \
    /lib/systemd/system/baton.service /usr/share/man/man1/baton.1.gz /usr/share/bash-completion/completions/baton \
    /usr/share/baton/prometheus/baton.rules.yml /usr/share/doc/baton/copyright; do
    [ -e "$root$file" ] || fail "the package has no $file"
done
ok "the package's files: binary, schema, /etc/baton, unit, manual page, completion, alerting rules"
in_root getent passwd baton | grep -q ':/usr/sbin/nologin$' || fail "no system user baton with no login shell"
[ "$(in_root stat -c '%U:%G %a' /etc/baton/keys)" = "baton:baton 700" ] || fail "/etc/baton/keys is $(in_root stat -c '%U:%G %a' /etc/baton/keys)"
[ "$(in_root stat -c '%U:%G %a' /etc/baton/baton.env)" = "root:baton 640" ] || fail "/etc/baton/baton.env is $(in_root stat -c '%U:%G %a' /etc/baton/baton.env)"
ok "user baton (nologin); /etc/baton/keys baton:baton 700; /etc/baton/baton.env root:baton 640"
zcat "$root/usr/share/man/man1/baton.1.gz" | head -n 1 | grep -q '^\.TH BATON 1' || fail "the manual page"

completion=$(in_root bash -c 'source /usr/share/bash-completion/completions/baton
    complete() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _baton; echo "${COMPREPLY[*]}"; }
    complete baton se; complete baton report --format ""; complete baton serve --log-level w')
[ "$completion" = $'serve\ntable csv json html\nwarning' ] || fail "bash completion answered: $completion"
ok "bash completion: 'baton se' → serve, 'report --format' → table csv json html"

# A server has systemd (and man): installed after the package, so that the package alone brought its Depends.
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends systemd man-db >>"$work/apt.log" 2>&1 \
    || { tail -n 30 "$work/apt.log" >&2; fail "apt-get install systemd man-db in the root"; }
in_root man -P cat baton 2>/dev/null | grep -q 'baton serve' || fail "man baton"
ok "man baton renders, with each command's options"
if in_root systemd-analyze verify /lib/systemd/system/baton.service >"$work/verify.log" 2>&1 && [ ! -s "$work/verify.log" ]; then
    ok "systemd-analyze verify baton.service (in the root, systemd $(in_root dpkg-query -W -f='${Version}' systemd)): no complaint"
else
    cat "$work/verify.log" >&2
    fail "systemd-analyze verify baton.service"
fi

# As the unit runs it: user baton, no new privileges and no capabilities, the root read-only, a private /tmp.
# Each step execs the next, so a process started in the background with "${service[@]}" CMD & is CMD itself ($!).
service=(unshare --mount --propagation private -- sh -c '
    root=$1; shift
    mount -o remount,bind,ro "$root" "$root"
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/tmp"
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/var/tmp"
    exec chroot "$root" setpriv --reuid=baton --regid=baton --init-groups --no-new-privs --inh-caps=-all \
        --bounding-set=-all -- env -i PATH=/usr/bin:/bin LC_ALL=C.UTF-8 $BATON_ENV "$@"' sh "$root")
as_service() { "${service[@]}" "$@"; }
# The unit's EnvironmentFile: BATON_* assignments of /etc/baton/baton.env (no quotes or spaces in them here).
service_env() { grep -E '^BATON_[A-Z_]+=' "$root/etc/baton/baton.env" | tr '\n' ' '; }

# --- 3. PostgreSQL, the emulator, the configuration ------------------------------------------------------------
"$repo/scripts/pg.sh" primary "$pgdir" >/dev/null
pg_port=$(cat "$pgdir/port")
psql -h "$pgdir" -p "$pg_port" -U postgres -d postgres -v ON_ERROR_STOP=1 -qc 'CREATE DATABASE app'
database_url="postgresql://postgres@127.0.0.1:$pg_port/app"
sql() { psql -h "$pgdir" -p "$pg_port" -U postgres -d app -v ON_ERROR_STOP=1 -qAtc "$1"; }
ok "a throwaway PostgreSQL on 127.0.0.1:$pg_port"


BATON_ENV= "${service[@]}" /usr/bin/baton emulator --port 0 --log-level warning >"$work/emulator.log" 2>&1 &
pids+=($!)
emulator=$(listening_address "$work/emulator.log" $!) || fail "the packaged baton emulator did not start"
ok "the packaged 'baton emulator' on $emulator"
emulator() {
    local method=$1 path=$2 body=${3:-}
    curl -sf -X "$method" -H 'Content-Type: application/json' ${body:+-d "$body"} "http://$emulator$path"
}
client_id=com.example.app
emulator POST /emulator/teams '{}' >"$work/sender.json"
emulator POST /emulator/teams '{}' >"$work/recipient.json"
emulator POST /emulator/apps "$(jq -nc --arg c $client_id --arg t "$(jq -r .team_id "$work/sender.json")" '{client_id: $c, team_id: $t}')" >/dev/null
emulator POST /emulator/users "$(jq -nc --arg c $client_id '{client_id: $c, count: 3, private_email: true}')" >"$work/users.json"
emulator POST /emulator/transfers "$(jq -nc --arg c $client_id --arg t "$(jq -r .team_id "$work/recipient.json")" '{client_id: $c, to_team_id: $t}')" >/dev/null
emulator GET "/emulator/transfer-identifiers?client_id=$client_id" >"$work/transfer-subs.json"
accepted=$(emulator POST /emulator/transfers/accept "$(jq -nc --arg c $client_id '{client_id: $c}')" | jq -r .accepted_at_unix)
accepted_at=$(date -u -d "@$accepted" +%Y-%m-%dT%H:%M:%SZ)

# The application's users under the sending team's identifiers, and the transfer identifiers as the sender
# hands them over (old_sub,transfer_sub).
sql 'CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text UNIQUE, email text)'
jq -r '.users[] | [.user_identifier, .email] | @csv' "$work/users.json" \
    | psql -h "$pgdir" -p "$pg_port" -U postgres -d app -v ON_ERROR_STOP=1 -qc '\copy public.users (apple_sub, email) FROM STDIN WITH (FORMAT csv)'
mkdir -p "$root/srv/baton-test"
{ echo old_sub,transfer_sub; jq -r '.transfer_subs | to_entries[] | "\(.key),\(.value)"' "$work/transfer-subs.json"; } >"$root/srv/baton-test/transfers.csv"
chmod -R a+rX "$root/srv/baton-test"

# The operator's edits: the shipped /etc/baton/baton.json with the transfer's values, keys and token in
# /etc/baton/keys (owner baton, mode 600), the database in /etc/baton/baton.env.
jq --arg apple "http://$emulator" --arg at "$accepted_at" --slurpfile s "$work/sender.json" --slurpfile r "$work/recipient.json" '
    .listen = "127.0.0.1:0"
    | .apple.base_url = $apple | .apple.keys_url = ($apple + "/auth/keys")
    | .apple.transfer.accepted_at = $at
    | .apple.transfer.sender.team_id = $s[0].team_id | .apple.transfer.sender.key_id = $s[0].key_id
    | .apple.transfer.recipient.team_id = $r[0].team_id | .apple.transfer.recipient.key_id = $r[0].key_id
    | del(.database.url)' "$root/etc/baton/baton.json" >"$work/baton.json"
cat "$work/baton.json" >"$root/etc/baton/baton.json"
( umask 077
  jq -r .private_key_pem "$work/sender.json" >"$root/etc/baton/keys/sender.p8"
  jq -r .private_key_pem "$work/recipient.json" >"$root/etc/baton/keys/recipient.p8"
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$root/etc/baton/keys/admin-token" )
in_root chown baton:baton /etc/baton/keys/sender.p8 /etc/baton/keys/recipient.p8 /etc/baton/keys/admin-token
echo "BATON_DATABASE_URL=$database_url" >>"$root/etc/baton/baton.env"

# --- 4. the package's commands, as the service runs --------------------------------------------------------------
export BATON_ENV
BATON_ENV=$(service_env)
started=$(date +%s%N)
version=$(as_service /usr/bin/baton --version 2>"$work/version.err") && version_status=0 || version_status=$?
elapsed_ms=$(( ($(date +%s%N) - started) / 1000000 ))
head_commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
if [ $version_status -eq 0 ] && grep -Eq "^baton [0-9][^ ]* \(commit ${head_commit}(-dirty)?\)$" <<<"$version"; then
    ok "baton --version: '$(head -n 1 <<<"$version")' in ${elapsed_ms} ms (wall, chroot and setpriv included)"
else
    cat "$work/version.err" >&2
    fail "baton --version exited $version_status with '$(head -n 1 <<<"$version")', not 'baton VERSION (commit $head_commit)'"
fi

as_service /usr/bin/baton db migrate >"$work/migrate.log" 2>&1 || { cat "$work/migrate.log" >&2; fail "baton db migrate"; }
ok "baton db migrate (the schema found beside the binary's real path): $(grep -c 'applied' "$work/migrate.log" || true) lines"
as_service /usr/bin/baton import transfers --config /etc/baton/baton.json /srv/baton-test/transfers.csv >"$work/import.log" 2>&1 \
    || { cat "$work/import.log" >&2; fail "baton import transfers"; }
ok "baton import transfers: $(tail -n 1 "$work/import.log")"

if as_service /usr/bin/baton doctor --config /etc/baton/baton.json >"$work/doctor.log" 2>&1; then
    ok "baton doctor as user baton: $(grep -c '^ok' "$work/doctor.log") ok, $(grep -c '^warn' "$work/doctor.log") warn, 0 FAIL"
else
    cat "$work/doctor.log" >&2
    fail "baton doctor"
fi

"${service[@]}" /usr/bin/baton serve --config /etc/baton/baton.json --log-level warning >"$work/serve.log" 2>&1 &
serve_pid=$!
pids+=($serve_pid)
serve=$(listening_address "$work/serve.log" $serve_pid) || fail "baton serve did not start"
[ "$(curl -s -o "$work/healthz" -w '%{http_code}' "http://$serve/healthz")" = 200 ] || fail "/healthz"
for _ in $(seq 100); do
    [ "$(curl -s -o "$work/readyz" -w '%{http_code}' "http://$serve/readyz")" = 200 ] && break
    sleep 0.1
done
jq -e '.ready == true' "$work/readyz" >/dev/null || fail "/readyz: $(cat "$work/readyz")"
ok "baton serve as user baton on a read-only root, on $serve: /healthz 200, /readyz 200"

# Sends a sign-in with a fresh token of emulated user INDEX; prints "STATUS OUTCOME SUB".
signin() {
    local user token status
    user=$(jq -r --argjson i "$1" '.users[$i].id' "$work/users.json")
    token=$(emulator POST /emulator/authorize "$(jq -nc --arg c $client_id --arg u "$user" '{client_id: $c, user: $u}')" | jq -r .id_token)
    status=$(curl -s -o "$work/signin.json" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "$(jq -nc --arg t "$token" '{id_token: $t}')" "http://${2:-$serve}/v1/signin")
    echo "$status $(jq -r '.outcome // .error' "$work/signin.json") $(jq -r '.sub // empty' "$work/signin.json")"
}
old_sub=$(jq -r '.users[0].user_identifier' "$work/users.json")
read -r status outcome new_sub < <(signin 0)
[ "$status $outcome" = "200 migrated" ] || fail "the first sign-in answered $status $outcome"
[ "$(sql "SELECT apple_sub FROM public.users WHERE apple_sub IN ('$old_sub', '$new_sub')")" = "$new_sub" ] \
    || fail "the user's row was not rewritten to the new identifier"
ok "a sign-in from the emulator: 200 migrated, the row rewritten from the old identifier to the new"
read -r status outcome _ < <(signin 0)
[ "$status $outcome" = "200 current" ] || fail "the second sign-in answered $status $outcome"
status=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d '{"id_token":"a.b.c"}' "http://$serve/v1/signin")
[ "$status" = 401 ] || fail "a malformed token answered $status"
ok "the same user again: 200 current; a malformed token: 401"

curl -sf "http://$serve/metrics" >"$work/metrics.txt" || fail "/metrics"
grep -q '^baton_signin_outcomes_total{outcome="migrated"} 1$' "$work/metrics.txt" || fail "/metrics does not count the migration"
grep -q '^baton_ready{check="all"} 1$' "$work/metrics.txt" || fail "/metrics has no baton_ready"
grep -q '^baton_transfer_users{state="migrated"} 1$' "$work/metrics.txt" || fail "/metrics does not count the migrated user"

kill -TERM $serve_pid
wait $serve_pid && serve_status=0 || serve_status=$?
[ $serve_status -eq 0 ] || { cat "$work/serve.log" >&2; fail "baton serve exited $serve_status on SIGTERM"; }
ok "SIGTERM: baton serve stopped with exit 0"

# --- 5. the image ----------------------------------------------------------------------------------------------
if [ -n "$podman_reason" ]; then
    echo "skip the image: $podman_reason"
else
    context=$work/image
    mkdir -p "$context"
    cp "$deb" "$context/"
    image=localhost/baton-install-test:$$
    if ! podman build "${podman_flags[@]}" --format docker --pull=never --build-arg "BASE=$base_image" \
            -f "$repo/packaging/Containerfile" -t "$image" "$context" >"$work/podman-build.log" 2>&1; then
        tail -n 30 "$work/podman-build.log" >&2
        fail "podman build -f packaging/Containerfile"
    fi
    ok "podman build -f packaging/Containerfile FROM the clean root: $(( $(podman image inspect "$image" --format '{{.Size}}') / 1048576 )) MiB, of which the base $(( $(podman image inspect "$base_image" --format '{{.Size}}') / 1048576 )) MiB"
    [ "$(podman image inspect "$image" --format '{{.Config.User}}')" = baton ] || fail "the image does not run as baton"

    # /etc/baton from the host, as an operator mounts it: the same configuration and keys, for uid 10001.
    etc=$work/etc-baton
    mkdir -p "$etc/keys"
    cp "$work/baton.json" "$etc/baton.json"
    cp -p "$root/etc/baton/keys/sender.p8" "$root/etc/baton/keys/recipient.p8" "$root/etc/baton/keys/admin-token" "$etc/keys/"
    chown -R 10001:10001 "$etc/keys"
    chmod 0700 "$etc/keys"
    container=baton-install-test-$$
    # The host's network: a free loopback port rather than the image's 0.0.0.0:8080.
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
    # No systemd on this host to time the health checks: `podman healthcheck run` below runs the image's check.
    # (podman also complains on stderr that it has no systemd to time them: kept in podman-run.log.)
    podman run -d --name "$container" "${podman_flags[@]}" --health-interval=disable -v "$etc:/etc/baton:ro" \
        -e "BATON_LISTEN=127.0.0.1:$port" -e "BATON_DATABASE_URL=$database_url" "$image" >/dev/null 2>"$work/podman-run.log" \
        || { cat "$work/podman-run.log" >&2; fail "podman run"; }
    for _ in $(seq 300); do
        podman logs "$container" >"$work/container.log" 2>&1 || true
        grep -q 'listening on' "$work/container.log" && break
        sleep 0.1
    done
    address=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$work/container.log" | head -n 1 | sed 's|.*http://||') \
        || { cat "$work/container.log" >&2; fail "the container's baton serve did not start"; }
    [ "$(podman exec "$container" id -un)" = baton ] || fail "the container's process is not user baton"
    # The image's own health check (it reads the port from BATON_LISTEN).
    podman healthcheck run "$container" >"$work/healthcheck.log" 2>&1 || { cat "$work/healthcheck.log" >&2; fail "podman healthcheck run"; }
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$address/healthz")" = 200 ] || fail "the container's /healthz"
    read -r status outcome _ < <(signin 1 "$address")
    [ "$status $outcome" = "200 migrated" ] || fail "a sign-in through the container answered $status $outcome"
    ok "the image runs baton serve as user baton: /healthz 200, a sign-in 200 migrated"
    healthcheck=$(podman image inspect "$image" --format '{{json .Config.Healthcheck.Test}}')
    grep -q '/healthz' <<<"$healthcheck" || fail "the image has no health check on /healthz: $healthcheck"
    podman stop -t 20 "$container" >/dev/null 2>>"$work/podman-run.log"
    [ "$(podman inspect "$container" --format '{{.State.ExitCode}}')" = 0 ] || fail "the container's baton serve did not exit 0 on SIGTERM"
    ok "the image's health check: $(jq -r 'join(" ")' <<<"$healthcheck" | cut -c 1-90); podman stop: exit 0"
    podman rm -f "$container" >/dev/null 2>&1 || true
    container=
fi

# --- 6. the unit under systemd ------------------------------------------------------------------------------------
# Where podman runs, systemd boots in a container (the clean root with systemd and the package): baton.service
# starts under its own confinement, answers a sign-in, and stops on SIGTERM with exit 0.
if [ -n "$podman_reason" ]; then
    echo "skip the unit under systemd: $podman_reason"
else
    context=$work/systemd-image
    mkdir -p "$context"
    cp "$deb" "$context/"
    cat >"$context/Containerfile" <<EOF2
FROM $base_image
COPY baton_*.deb /tmp/
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd systemd-sysv /tmp/baton_*.deb
CMD ["/sbin/init"]
EOF2
    unit_image=localhost/baton-install-test-systemd:$$
    podman build "${podman_flags[@]}" --pull=never -t "$unit_image" "$context" >"$work/podman-build-systemd.log" 2>&1 \
        || { tail -n 30 "$work/podman-build-systemd.log" >&2; fail "podman build of the systemd image"; }
    image="$image $unit_image"
    container=baton-install-test-systemd-$$
    # CAP_SYS_ADMIN for the container's systemd, which needs it to give the service its own mount namespace (the
    # read-only system, the private /tmp); without it, systemd in a container skips that part of the unit silently.
    podman run -d --name "$container" "${podman_flags[@]}" --cap-add SYS_ADMIN --systemd=always -v "$work/etc-baton:/srv/etc-baton:ro" \
        "$unit_image" >/dev/null || fail "podman run /sbin/init"
    in_box() { podman exec "$container" "$@"; }
    for _ in $(seq 100); do
        state=$(in_box systemctl is-system-running 2>/dev/null || true)
        case "$state" in running|degraded) break ;; esac
        sleep 0.2
    done
    case "$state" in running|degraded) ;; *) fail "systemd did not boot in the container ($state)" ;; esac
    # The operator's steps of the runbook: configuration, keys (owner baton, mode 600), the database, then the unit.
    in_box sh -c 'cp /srv/etc-baton/baton.json /etc/baton/baton.json
        for key in sender.p8 recipient.p8 admin-token; do install -o baton -g baton -m 600 /srv/etc-baton/keys/$key /etc/baton/keys/$key; done' \
        || fail "configuring /etc/baton in the container"
    in_box sh -c "echo BATON_DATABASE_URL=$database_url >>/etc/baton/baton.env"
    in_box systemctl enable --now baton.service >/dev/null 2>&1 || { in_box journalctl -u baton --no-pager >&2; fail "systemctl enable --now baton"; }
    address=
    for _ in $(seq 100); do
        address=$(in_box journalctl -u baton -o cat --no-pager 2>/dev/null | grep -o 'listening on http://[0-9.]*:[0-9]*' | head -n 1 | sed 's|.*http://||') || true
        [ -n "$address" ] && break
        sleep 0.2
    done
    [ -n "$address" ] || { in_box journalctl -u baton --no-pager >&2; fail "baton.service did not start"; }
    [ "$(in_box systemctl is-active baton)" = active ] || fail "baton.service is not active"
    read -r status outcome _ < <(signin 2 "$address")
    [ "$status $outcome" = "200 migrated" ] || fail "a sign-in through baton.service answered $status $outcome"
    ok "systemd in a container: systemctl enable --now baton; /v1/signin 200 migrated on $address"
    pid=$(in_box systemctl show -p MainPID --value baton)
    confinement=$(in_box sh -c "stat -c %U /proc/$pid; grep -E '^(NoNewPrivs|CapEff|CapBnd|Seccomp):' /proc/$pid/status | tr -s '\t' ' '; awk '\$5 == \"/\" || \$5 == \"/tmp\" { print \$5, \$6 }' /proc/$pid/mountinfo")
    expected=$'baton\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2'
    [ "$(head -n 5 <<<"$confinement")" = "$expected" ] || { echo "$confinement" >&2; fail "baton.service's process is not confined as the unit says"; }
    grep '^/ ' <<<"$confinement" | tail -n 1 | grep -q '^/ ro' || { echo "$confinement" >&2; fail "baton.service sees / writable"; }
    grep -q '^/tmp rw' <<<"$confinement" || { echo "$confinement" >&2; fail "baton.service has no private /tmp"; }
    exposure=$(in_box systemd-analyze security baton.service --no-pager 2>/dev/null | sed -n 's/.*Overall exposure level for baton.service: //p')
    ok "its process: user baton, no capabilities, no new privileges, seccomp filter, / read-only, a private /tmp; systemd-analyze security: $exposure"
    in_box systemctl stop baton
    result=$(in_box systemctl show -p Result -p ExecMainStatus --value baton | tr '\n' ' ')
    [ "$result" = "success 0 " ] || fail "systemctl stop baton: $result"
    ok "systemctl stop baton: SIGTERM, exit 0"
    podman rm -f "$container" >/dev/null 2>&1 || true
    container=
fi

# --- 6. the exchange's --metrics-file, and the alerting rules over both scrapes ----------------------------------
# Last, so the sign-ins above still find users to migrate. The root is read-only: the file goes to the job's
# private /tmp and is printed once the job has ended.
as_service sh -c '/usr/bin/baton exchange --config /etc/baton/baton.json --metrics-file /tmp/exchange.prom >&2 && cat /tmp/exchange.prom' \
    >"$work/exchange.prom" 2>"$work/exchange.log" || { cat "$work/exchange.log" >&2; fail "baton exchange --metrics-file"; }
grep -q '^baton_job_running{command="exchange"} 0$' "$work/exchange.prom" && grep -q '^baton_job_remaining{command="exchange"} 0$' "$work/exchange.prom" \
    || { cat "$work/exchange.prom" >&2; fail "the exchange's --metrics-file"; }
ok "baton exchange --metrics-file as user baton: $(grep -c '^baton_job_' "$work/exchange.prom") samples, ended with 0 remaining"
"$repo/scripts/alerts-test.sh" --scrape "$work/metrics.txt" --scrape "$work/exchange.prom" >"$work/alerts.log" 2>&1 \
    || { cat "$work/alerts.log" >&2; fail "the alerting rules"; }
ok "alerting rules: promtool check and test pass; $(tail -n 1 "$work/alerts.log" | sed 's/^alerts-test: //')"

echo "install-test: $passed passed, 0 failed"
