import Foundation

/// One benchmark of `baton bench NAME`: its name, a summary line, and its runner (arguments after the name).
struct Benchmark: Sendable {
    let name: String
    let summary: String
    let run: @Sendable ([String]) async throws -> Int32
}

/// Every benchmark; adding one is one line here plus its own file.
let benchmarks: [Benchmark] = [
    Benchmark(name: "verify", summary: "identity-token verification against bare OpenSSL RS256", run: runVerifyBenchmark),
    Benchmark(name: "emulator", summary: "emulator requests/s (/auth/keys, /auth/usermigrationinfo) and tokens/s (/emulator/authorize) [--concurrency N --requests N --tokens N --exchanges N]", run: runEmulatorBenchmark),
    Benchmark(name: "signin", summary: "sign-ins/s and p99 through baton serve vs pgbench on the same SQL [--database-url URL --users N --transfers N --migrations N --current-requests N --concurrency N --pool-size N --schema users|allauth]", run: runSigninBenchmark),
    Benchmark(name: "exchange", summary: "baton exchange against the emulator (20 ms, 200/s limit) vs one request at a time [--users N --backlog N --database-url URL]", run: runExchangeBenchmark),
]

/// `baton bench NAME`: runs a benchmark; its last line of output is one JSON object of figures.
let benchCommand = Command(
    name: "bench",
    summary: "run a benchmark (\(benchmarks.map(\.name).joined(separator: ", ")))",
    usage: """
    usage: baton bench <name> [options]

    benchmarks:
    \(benchmarks.map { "  \($0.name)  \($0.summary)" }.joined(separator: "\n"))

    The last line of output is one JSON object of figures. Build with -c release for meaningful numbers.
    """,
    run: { arguments in
        guard let name = arguments.first else { throw CommandFailure.usage("missing benchmark name") }
        guard let benchmark = benchmarks.first(where: { $0.name == name }) else {
            throw CommandFailure.usage("unknown benchmark '\(name)'")
        }
        return try await benchmark.run(Array(arguments.dropFirst()))
    }
)
