#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer) of the identity-token verifier and the JSON reader.
#
#   scripts/fuzz.sh [run] [verifier|json ...]   build, then fuzz each target for $FUZZ_SECONDS (default 60)
#   scripts/fuzz.sh build                       build the fuzzers only
#   scripts/fuzz.sh seeds                       regenerate the committed seed corpus in Fuzz/corpus/
#   scripts/fuzz.sh replay FILE...              run the verifier and JSON targets once on each FILE
#
# The fuzzers are the package in Fuzz/BatonFuzz, compiled with -sanitize=fuzzer,address (JSON, JOSE and AppleSignIn
# included). Each run starts from the committed seeds (Fuzz/corpus/<target>, read only) plus the inputs found
# by earlier runs (.build/fuzz/corpus/<target>); a crash, a hang (-timeout=10 s), an out-of-memory or an
# oracle violation (an accepted forgery, a JSON round-trip mismatch) stops the run with a non-zero status
# and leaves the input in .build/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

SECONDS_EACH="${FUZZ_SECONDS:-60}"
PACKAGE=Fuzz/BatonFuzz
BIN="$PACKAGE/.build/release"
WORK=.build/fuzz

build() {
    echo "fuzz: building $PACKAGE (release, -sanitize=fuzzer,address)"
    # --sanitize=fuzzer makes SwiftPM link libFuzzer's main; the -Xswiftc flag, which comes last, is the one
    # swiftc keeps (a later -sanitize= replaces an earlier one), so every module gets both instrumentations.
    swift build --package-path "$PACKAGE" -c release --sanitize=fuzzer -Xswiftc -sanitize=fuzzer,address 2>&1 \
        | sed '/ld.gold: warning: Cannot export local symbol/d'
}

max_len() { [ "$1" = verifier ] && echo 20000 || echo 4096; }

run_target() {
    local target="$1"
    mkdir -p "$WORK/corpus/$target" "$WORK/artifacts"
    echo "fuzz: $target for ${SECONDS_EACH}s (seeds: Fuzz/corpus/$target, log: $WORK/$target.log)"
    local status=0
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" "$BIN/fuzz-$target" \
        -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$target")" \
        -dict="Fuzz/dictionaries/$target.dict" -artifact_prefix="$WORK/artifacts/$target-" -print_final_stats=1 \
        "$WORK/corpus/$target" "Fuzz/corpus/$target" >"$WORK/$target.log" 2>&1 || status=$?
    local runs execs coverage
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/$target.log")
    execs=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$WORK/$target.log")
    coverage=$(grep -o 'cov: [0-9]*' "$WORK/$target.log" | tail -1 || true)
    if [ "$status" -ne 0 ]; then
        echo "fuzz: $target FAILED (exit $status); last lines of $WORK/$target.log:" >&2
        tail -40 "$WORK/$target.log" >&2
        return "$status"
    fi
    echo "fuzz: $target ok: ${runs:-?} inputs, ${execs:-?} exec/s, ${coverage:-cov: ?}, corpus $(ls "$WORK/corpus/$target" | wc -l) found + $(ls "Fuzz/corpus/$target" | wc -l) seeds"
}

command="${1:-run}"
case "$command" in
    build)
        build ;;
    seeds)
        build
        rm -rf Fuzz/corpus/verifier Fuzz/corpus/json
        BATON_FUZZ_WRITE_SEEDS=Fuzz/corpus/verifier "$BIN/fuzz-verifier" >/dev/null 2>&1
        BATON_FUZZ_WRITE_SEEDS=Fuzz/corpus/json "$BIN/fuzz-json" >/dev/null 2>&1
        echo "fuzz: wrote $(ls Fuzz/corpus/verifier | wc -l) verifier seeds, $(ls Fuzz/corpus/json | wc -l) JSON seeds, Fuzz/corpus/verifier-keys.json" ;;
    replay)
        shift
        build
        for target in verifier json; do ASAN_OPTIONS=detect_leaks=0 "$BIN/fuzz-$target" "$@"; done ;;
    run|verifier|json)
        [ "$command" = run ] && shift || true
        targets=("$@")
        [ ${#targets[@]} -gt 0 ] || targets=(verifier json)
        build
        for target in "${targets[@]}"; do
            case "$target" in verifier|json) run_target "$target" ;; *) echo "fuzz: unknown target '$target'" >&2; exit 2 ;; esac
        done ;;
    *)
        echo "usage: scripts/fuzz.sh [run [verifier|json ...] | build | seeds | replay FILE...]" >&2; exit 2 ;;
esac
