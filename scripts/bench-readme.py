#!/usr/bin/env python3
"""Renders bench-results/latest.json (or the file given) as the Markdown the README shows.

Every figure is set against the anchor measured in the same run, so numbers from different machines and
days can be compared as ratios: bare OpenSSL RS256 verification for `baton-bench verify`, pgbench on the same
SQL for `baton-bench signin` (driven by its own load generator and by wrk), the emulator's rate limit for
`baton-bench exchange`. The emulator's own throughput has no anchor and is shown as is.

    python3 scripts/bench-readme.py [bench-results/latest.json] > table.md
"""
import json
import sys


def number(value, unit=""):
    if value is None:
        return "n/a"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}".rstrip("0").rstrip(".")
    return text + unit


def ratio(value, anchor):
    if value is None or not anchor:
        return "n/a"
    return f"{value / anchor:.2f}"


def load(machine):
    """The load average at the end of the run, which tells how much else the machine was doing."""
    average = machine.get("load_average_at_end")
    return f"; load average {average[0]} at the end" if average else ""


def rows(benchmarks):
    verify = benchmarks.get("verify")
    if verify:
        yield ("verify", "full identity-token verification, one thread", number(verify.get("verify_per_s"), "/s"),
               "bare OpenSSL RS256 verify " + number(verify.get("openssl_verify_per_s"), "/s"),
               ratio(verify.get("verify_per_s"), verify.get("openssl_verify_per_s")))
        if "verify_cpu_us" in verify:
            # CPU time per operation is what stays comparable on a shared, loaded machine.
            yield ("verify", f"CPU per full verification: {number(verify.get('verify_cpu_us'), ' µs')}",
                   number(1e6 / verify["verify_cpu_us"], "/s per core"),
                   f"bare OpenSSL RS256 verify {number(verify.get('openssl_verify_cpu_us'), ' µs')} CPU",
                   ratio(verify.get("openssl_verify_cpu_us"), verify.get("verify_cpu_us")))
        cores = verify.get("cores")
        yield ("verify", f"full verification, all {number(cores)} cores", number(verify.get("verify_per_s_all_cores"), "/s"),
               "bare OpenSSL, all cores " + number(verify.get("openssl_verify_per_s_all_cores"), "/s"),
               ratio(verify.get("verify_per_s_all_cores"), verify.get("openssl_verify_per_s_all_cores")))
    signin = benchmarks.get("signin")
    if signin:
        for phase, label in (("migrated", "sign-ins that migrate a user"), ("current", "sign-ins of current users")):
            cpu = signin.get(phase + "_server_cpu_us")
            cpu_text = f", server CPU {number(cpu, ' µs')} each" if cpu is not None else ""
            yield ("signin", f"{label} via `baton serve`, own load generator, 32 connections (p99 {number(signin.get(phase + '_p99_ms'), ' ms')}{cpu_text})",
                   number(signin.get(phase + "_per_s"), "/s"),
                   "pgbench, same SQL " + number(signin.get("pgbench_" + phase + "_tps"), " tps"),
                   ratio(signin.get(phase + "_per_s"), signin.get("pgbench_" + phase + "_tps")))
        # Migrations driven by wrk (each token once), then the same current users' sign-ins, as users measure from outside.
        if "wrk_migrated_per_s" in signin:
            key = "wrk_migrated_"
            yield ("signin", f"sign-ins that migrate a user via `baton serve`, wrk -c 32 (p50 {number(signin.get(key + 'p50_ms'), ' ms')}, "
                   f"p99 {number(signin.get(key + 'p99_ms'), ' ms')}, max {number(signin.get(key + 'max_ms'), ' ms')}, "
                   f"server CPU {number(signin.get(key + 'server_cpu_us'), ' µs')} each)",
                   number(signin.get(key + "per_s"), "/s"),
                   "pgbench, same SQL " + number(signin.get("pgbench_migrated_tps"), " tps"),
                   ratio(signin.get(key + "per_s"), signin.get("pgbench_migrated_tps")))
        for connections in (1, 8, 32, 64):
            key = f"wrk_c{connections}_"
            if key + "per_s" not in signin:
                continue
            cpu = signin.get(key + "server_cpu_us")
            cpu_text = f", server CPU {number(cpu, ' µs')} each" if cpu is not None else ""
            yield ("signin", f"sign-ins of current users via `baton serve`, wrk -c {connections} (p50 {number(signin.get(key + 'p50_ms'), ' ms')}, "
                   f"p99 {number(signin.get(key + 'p99_ms'), ' ms')}, max {number(signin.get(key + 'max_ms'), ' ms')}{cpu_text})",
                   number(signin.get(key + "per_s"), "/s"),
                   "pgbench, same SQL " + number(signin.get("pgbench_current_tps"), " tps"),
                   ratio(signin.get(key + "per_s"), signin.get("pgbench_current_tps")))
    exchange = benchmarks.get("exchange")
    if exchange:
        limit = exchange.get("limit_per_s")
        yield ("exchange", f"`baton exchange` job ({number(exchange.get('over_limit'))} requests over the limit)",
               number(exchange.get("achieved_per_s"), "/s"), "emulator rate limit " + number(limit, "/s"),
               ratio(exchange.get("achieved_per_s"), limit))
        yield ("exchange", "one request at a time (the public scripts' way)", number(exchange.get("sequential_per_s"), "/s"),
               "emulator rate limit " + number(limit, "/s"), ratio(exchange.get("sequential_per_s"), limit))
    emulator = benchmarks.get("emulator")
    if emulator:
        concurrency = emulator.get("concurrency")
        for key, label in (("keys_requests_per_s", "`GET /auth/keys`"), ("authorize_tokens_per_s", "`POST /emulator/authorize` (signs a token)"),
                           ("exchange_requests_per_s", "`POST /auth/usermigrationinfo`")):
            if key in emulator:
                yield ("emulator", f"{label}, {number(concurrency)} keep-alive connections", number(emulator.get(key), "/s"), "none", "n/a")
    known = {"verify", "signin", "exchange", "emulator"}
    for name in sorted(set(benchmarks) - known):
        yield (name, ", ".join(f"{k} {v}" for k, v in sorted(benchmarks[name].items())), "", "", "")


def memory(text):
    """`/proc/meminfo`'s `MemTotal` ("24684092 kB") in GiB."""
    try:
        return f"{int(str(text).split()[0]) / 1024 / 1024:.1f} GiB"
    except (ValueError, IndexError):
        return str(text)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "bench-results/latest.json"
    with open(path) as source:
        results = json.load(source)
    machine = results.get("machine", {})
    commit = (results.get("git_commit") or "unknown")[:12] + (" (with local changes)" if results.get("git_dirty") else "")
    print(f"Figures from `{results.get('command', 'make bench')}` at {results.get('timestamp')} on commit {commit}:")
    print(f"{machine.get('cpu_model')}, {machine.get('nproc')} cores, {memory(machine.get('memory_total'))} memory, "
          f"Linux {machine.get('kernel')}; {machine.get('swift')}; {machine.get('openssl')}; {machine.get('postgresql')}{load(machine)}.")
    print()
    print("| benchmark | figure | value | anchor, same run | ratio |")
    print("| --- | --- | ---: | --- | ---: |")
    for row in rows(results.get("benchmarks", {})):
        print("| " + " | ".join(row) + " |")
    if results.get("failed"):
        print()
        print("Failed its own pass criterion in this run (figures shown anyway): " + ", ".join(results["failed"])
              + f" (logs in {results.get('logs')}).")


if __name__ == "__main__":
    main()
