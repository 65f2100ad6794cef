import BatonBuildInfo
import BatonCommandLine
import Foundation

// `baton`: the command-line entry point. Dispatches to a subcommand and maps failures to exit codes:
// 0 success, 1 rejected input or a failed run, 2 usage or configuration errors.

let arguments = Array(CommandLine.arguments.dropFirst())
// The benchmarks and the HTTP fuzzer are the workbench's, not the product's.
if let word = arguments.first, word == "bench" || word == "fuzz" {
    let moved = (word == "bench" ? arguments.dropFirst() : arguments[...]).joined(separator: " ")
    printError("baton: '\(word)' is not part of baton; run 'baton-bench \(moved.isEmpty ? "--help" : moved)' (swift build --product baton-bench)")
    exit(2)
}
let program = Program(name: "baton", version: "baton \(BuildInfo.version) (commit \(BuildInfo.commit))", groups: [("commands", commands)])
exit(await program.run(arguments))
