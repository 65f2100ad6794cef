import BatonBench
import BatonBuildInfo
import BatonCommandLine
import Foundation

// `baton-bench`: the workbench, built beside `baton` but never shipped: the benchmarks and the HTTP fuzzer.
// Exit codes as baton's: 0 success, 1 a failed run, 2 usage errors.

let program = Program(
    name: "baton-bench",
    version: "baton-bench \(BuildInfo.version) (commit \(BuildInfo.commit))",
    groups: [("benchmarks", benchmarks), ("fuzzers", [fuzzCommand])]
)
exit(await program.run(Array(CommandLine.arguments.dropFirst())))
