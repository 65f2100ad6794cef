#!/usr/bin/env bash
# Runs every benchmark `baton-bench --help` lists (`baton-bench NAME`: the workbench, beside baton) on a throwaway
# PostgreSQL, and writes their figures with a description of the machine to bench-results/<timestamp>.json
# and bench-results/latest.json. Render them for the README with scripts/bench-readme.py.
#
#   scripts/bench.sh                      build release, run every benchmark with its defaults
#   BENCH_ONLY="verify emulator" scripts/bench.sh       only these
#   BENCH_ARGS_signin="--users 100000" scripts/bench.sh extra arguments for one benchmark
#   BENCH_SKIP_BUILD=1 scripts/bench.sh   use the release binary as it is
#
# Each benchmark's full output goes to bench-results/logs/<timestamp>/<name>.log; its last line must be one
# JSON object. A benchmark that fails is recorded under "failed" and the script exits 1 after the others ran.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

# Benchmarks that need PostgreSQL get a throwaway cluster: re-run this script under scripts/pg.sh.
if [ -z "${BATON_TEST_DATABASE_URL:-}" ]; then
    if [ -z "${BENCH_SKIP_BUILD:-}" ]; then swift build -c release; fi
    BENCH_SKIP_BUILD=1 exec scripts/pg.sh run "$0" "$@"
fi

BENCH=.build/release/baton-bench
for binary in "$BENCH" .build/release/baton; do
    [ -x "$binary" ] || { echo "bench: $binary is missing; run 'swift build -c release'" >&2; exit 2; }
done
stamp=$(date -u +%Y%m%dT%H%M%SZ)
logs="bench-results/logs/$stamp"
mkdir -p "$logs"

available=$("$BENCH" --help | awk '/^benchmarks:/ {on=1; next} on && NF == 0 {exit} on {print $1}')
selected="${BENCH_ONLY:-$available}"
echo "bench: benchmarks available: $(echo $available); running: $(echo $selected)"

# A database of its own for each benchmark that needs one, on the throwaway cluster.
database_for() {
    local name="bench_$1"
    psql "$BATON_TEST_DATABASE_URL" -q -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name" >/dev/null
    echo "${BATON_TEST_DATABASE_URL/\/postgres\?//$name?}"
}

failed=()
for name in $selected; do
    echo "$available" | grep -qx "$name" || { echo "bench: '$name' is not a benchmark of this binary" >&2; failed+=("$name"); continue; }
    args_var="BENCH_ARGS_$name"
    read -r -a extra <<<"${!args_var:-}"
    environment=()
    if [ "$name" = exchange ]; then environment=(BATON_DATABASE_URL="$(database_for exchange)"); fi
    echo "bench: baton-bench $name ${extra[*]:-}"
    start=$(date +%s)
    if env "${environment[@]}" "$BENCH" "$name" "${extra[@]}" >"$logs/$name.log" 2>&1; then
        echo "bench: $name done in $(( $(date +%s) - start )) s: $(tail -n 1 "$logs/$name.log")"
    else
        echo "bench: $name FAILED (see $logs/$name.log):" >&2
        tail -n 5 "$logs/$name.log" >&2
        failed+=("$name")
    fi
done

pg_version=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
BENCH_STAMP="$stamp" BENCH_LOGS="$logs" BENCH_SELECTED="$selected" BENCH_FAILED="${failed[*]:-}" \
BENCH_SWIFT="$(swift --version 2>&1 | head -n 1)" BENCH_OPENSSL="$(openssl version 2>/dev/null || echo unknown)" \
BENCH_POSTGRES="$("$pg_version/postgres" --version 2>/dev/null || echo unknown)" BENCH_PGBENCH="$("$pg_version/pgbench" --version 2>/dev/null || pgbench --version 2>/dev/null || echo unknown)" \
python3 - <<'PY'
import json, os, platform, subprocess

def first(path, key):
    try:
        for line in open(path):
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"

def git(*args):
    try:
        return subprocess.check_output(["git", *args], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return ""

stamp, logs = os.environ["BENCH_STAMP"], os.environ["BENCH_LOGS"]
figures = {}
for name in os.environ["BENCH_SELECTED"].split():
    path = os.path.join(logs, name + ".log")
    try:
        lines = [line for line in open(path).read().splitlines() if line.strip()]
        figures[name] = json.loads(lines[-1])
    except (OSError, IndexError, ValueError):
        pass
result = {
    "timestamp": stamp,
    "command": "make bench",
    "git_commit": git("rev-parse", "HEAD"),
    "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    "machine": {
        "cpu_model": first("/proc/cpuinfo", "model name"),
        "nproc": os.cpu_count(),
        "memory_total": first("/proc/meminfo", "MemTotal"),
        "kernel": platform.release(),
        "os": next((l.split("=", 1)[1].strip().strip('"') for l in open("/etc/os-release") if l.startswith("PRETTY_NAME=")), "unknown"),
        "swift": os.environ["BENCH_SWIFT"],
        "openssl": os.environ["BENCH_OPENSSL"],
        "postgresql": os.environ["BENCH_POSTGRES"],
        "pgbench": os.environ["BENCH_PGBENCH"],
        "load_average_at_end": open("/proc/loadavg").read().split()[:3],
    },
    "benchmarks": figures,
    "failed": os.environ["BENCH_FAILED"].split(),
    "logs": logs,
}
text = json.dumps(result, indent=2, sort_keys=True) + "\n"
for path in ("bench-results/%s.json" % stamp, "bench-results/latest.json"):
    with open(path, "w") as out:
        out.write(text)
print("bench: wrote bench-results/%s.json and bench-results/latest.json" % stamp)
PY

if [ ${#failed[@]} -gt 0 ]; then echo "bench: failed: ${failed[*]}" >&2; exit 1; fi
