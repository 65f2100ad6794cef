import BatonBuildInfo
import BatonTools
import Foundation

// `baton`: the command-line entry point. Dispatches to a subcommand and maps failures to exit codes:
// 0 success, 1 rejected input or a failed run, 2 usage or configuration errors.

func topLevelUsage() -> String {
    let width = commands.map(\.name.count).max() ?? 0
    var text = "usage: baton <command> [options]\n\ncommands:\n"
    for command in commands {
        text += "  \(command.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(command.summary)\n"
    }
    text += "\nRun 'baton <command> --help' for a command's options, 'baton --version' for the version and commit."
    return text
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard let name = arguments.first else {
    printError(topLevelUsage())
    exit(2)
}
if name == "--help" || name == "-h" || name == "help" {
    print(topLevelUsage())
    exit(0)
}
if name == "--version" {
    print("baton \(BuildInfo.version) (commit \(BuildInfo.commit))")
    exit(0)
}
guard var command = commands.first(where: { $0.name == name }) else {
    printError("baton: unknown command '\(name)'; run 'baton --help' for the list")
    exit(2)
}
/// The words that chose `command` (`bench signin`), for messages and usage.
var chosen = [name]
var rest = Array(arguments.dropFirst())
let wantsHelp = rest.contains("--help") || rest.contains("-h")
do {
    // Commands with subcommands (`baton bench verify`): the next word selects one.
    while !command.subcommands.isEmpty {
        let expected = listed(command.subcommands.map { "'\($0.name)'" })
        guard let word = rest.first, let sub = command.subcommands.first(where: { $0.name == word }) else {
            if wantsHelp { break }
            throw CommandFailure.usage(rest.first.map { "unknown \(command.name) command '\($0)': expected \(expected)" } ?? "expected \(expected)")
        }
        command = sub
        chosen.append(sub.name)
        rest.removeFirst()
    }
    if wantsHelp {
        print(command.usage(path: (["baton"] + chosen.dropLast()).joined(separator: " ")))
        exit(0)
    }
    exit(try await command.run(rest))
} catch let failure as CommandFailure {
    let full = chosen.joined(separator: " ")
    switch failure {
    case .usage(let message):
        printError("baton \(full): \(message); run 'baton \(full) --help' for usage")
    case .rejected(let message), .failed(let message):
        printError(message)
    }
    exit(failure.exitCode)
} catch {
    printError("baton \(chosen.joined(separator: " ")): \(error)")
    exit(1)
}
