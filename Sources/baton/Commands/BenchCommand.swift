/// One benchmark run by `baton bench NAME`; its last line of output is one JSON object of figures.
struct Benchmark: Sendable {
    /// The word after `baton bench`.
    let name: String
    /// One line for `baton bench --help`.
    let summary: String
    /// Usage text of its options.
    let usage: String
    /// Runs it with the arguments after its name; returns the exit code.
    let run: @Sendable ([String]) async throws -> Int32
}

/// Every benchmark, in the order `baton bench` lists them: adding one is one line here.
let benchmarks: [Benchmark] = [
    emulatorBenchmark,
]

/// `baton bench NAME [options]`.
let benchCommand = Command(
    name: "bench",
    summary: "run a benchmark (\(benchmarks.map(\.name).joined(separator: ", ")))",
    usage: "usage: baton bench <name> [options]\n\nbenchmarks:\n"
        + benchmarks.map { "  \($0.name)  \($0.summary)\n" + $0.usage.split(separator: "\n").dropFirst().map { "    \($0)" }.joined(separator: "\n") }.joined(separator: "\n"),
    run: { arguments in
        guard let name = arguments.first else {
            throw CommandFailure.usage("name a benchmark: \(benchmarks.map(\.name).joined(separator: ", "))")
        }
        guard let benchmark = benchmarks.first(where: { $0.name == name }) else {
            throw CommandFailure.usage("unknown benchmark '\(name)'; known: \(benchmarks.map(\.name).joined(separator: ", "))")
        }
        return try await benchmark.run(Array(arguments.dropFirst()))
    }
)
