import BatonCommandLine
import Foundation

/// The benchmarks, `baton-bench NAME` each; the last line of a benchmark's output is one JSON object of figures
/// (scripts/bench.sh reads them, and the list from `baton-bench --help`). Build with -c release for meaningful
/// numbers.
package let benchmarks: [Command] = [
    Command(
        name: "verify",
        summary: "identity-token verification against bare OpenSSL RS256",
        options: VerifyBenchmarkOptions.self,
        run: runVerifyBenchmark
    ),
    Command(
        name: "emulator",
        summary: "emulator requests/s (/auth/keys, /auth/usermigrationinfo) and tokens/s (/emulator/authorize)",
        options: EmulatorBenchmarkOptions.self,
        run: runEmulatorBenchmark
    ),
    Command(
        name: "signin",
        summary: "sign-ins/s and latency through baton serve (own load generator and wrk) vs pgbench on the same SQL",
        options: SigninBenchmarkOptions.self,
        run: runSigninBenchmark
    ),
    Command(
        name: "exchange",
        summary: "baton exchange against the emulator (20 ms, 200/s limit) vs one request at a time",
        options: ExchangeBenchmarkOptions.self,
        run: runExchangeBenchmark
    ),
]

/// The options of `baton-bench verify`.
struct VerifyBenchmarkOptions: CommandOptions {
    let seconds = Option.number("seconds", "S", default: 2, in: 0.05...600, "seconds of each measurement")
}

/// The options of `baton-bench emulator`.
struct EmulatorBenchmarkOptions: CommandOptions {
    let concurrency = Option.integer("concurrency", default: 32, in: 1...1024, "keep-alive connections")
    let requests = Option.integer("requests", default: 100_000, in: 1...10_000_000, "GET /auth/keys requests")
    let tokens = Option.integer("tokens", default: 10_000, in: 1...1_000_000, "POST /emulator/authorize requests")
    let exchanges = Option.integer("exchanges", default: 20_000, in: 1...1_000_000, "POST /auth/usermigrationinfo requests")
}

/// The options of `baton-bench signin`.
struct SigninBenchmarkOptions: CommandOptions {
    let databaseURL = Option.databaseURL("a server where it may create a database (default $BATON_TEST_DATABASE_URL, then $BATON_DATABASE_URL)")
    let users = Option.integer("users", default: 1_000_000, in: 1_000...100_000_000, "legacy users")
    let transfers = Option.integer("transfers", default: 200_000, in: 100...100_000_000, "pending transfers, at most --users")
    let migrations = Option.integer("migrations", default: 20_000, in: 100...100_000_000, "sign-ins that migrate a user, from the own load generator")
    let wrkMigrations = Option.integer("wrk-migrations", default: 40_000, in: 100...100_000_000, "tokens of users to migrate for wrk -c 32 (--wrk-seconds / 2; each sent once); with --migrations at most --transfers")
    let nonce = Option.flag("nonce", "wrk's migrating sign-ins carry a nonce (native flow), each consumed once; pgbench's migration\nthen starts with the nonce's INSERT")
    let currentRequests = Option.integer("current-requests", default: 100_000, in: 100...100_000_000, "sign-ins of current users")
    let concurrency = Option.integer("concurrency", default: 32, in: 1...1024, "keep-alive connections")
    let pgbenchSeconds = Option.integer("pgbench-seconds", default: 10, in: 1...600, "seconds of each pgbench run")
    let poolSize = Option.integer("pool-size", default: 8, in: 1...256, "baton serve's database.pool_size")
    let schema = Option.choice("schema", default: BenchSchema.users, "the application's tables: public.users, Django allauth's, Ory Kratos' (a prefixed subject and its JSON copy) or Logto's (a subject inside JSON)")
    let wrkSeconds = Option.integer("wrk-seconds", default: 10, in: 1...600, "seconds of each wrk run (1, 8, 32 and 64 connections)")
    let perf = Option.text("perf", "FILE", "record a perf profile of baton serve under wrk -c 32 into FILE and print it by group")
    let logLevel = Option.logLevel(default: .warning, "baton serve's log level")
    let baton = Option.text("baton", "FILE", "the baton executable that serves (default the baton beside baton-bench)")
}

/// The options of `baton-bench exchange`.
struct ExchangeBenchmarkOptions: CommandOptions {
    let databaseURL = Option.databaseURL("a throwaway database (default $BATON_DATABASE_URL)")
    let users = Option.integer("users", default: 20_000, in: 1...2_000_000, "pending users to exchange")
    let backlog = Option.integer("backlog", default: 0, in: 0...10_000_000, "more pending rows after them, not exchanged")
    let limit = Option.number("limit", default: 200, in: 1...100_000, "the emulator's rate limit and the job's --rate")
    let latencyMs = Option.integer("latency-ms", default: 20, in: 0...10_000, "the emulator's latency")
    let workers = Option.integer("workers", default: 32, in: 1...256, "the job's workers")
    let sequentialSeconds = Option.number("sequential-seconds", "S", default: 5, in: 0.5...600, "how long the one-at-a-time run lasts")
}
