import Foundation

// `baton`: the command-line entry point. Dispatches to a subcommand and maps failures to exit codes:
// 0 success, 1 rejected input or a failed run, 2 usage or configuration errors.


func topLevelUsage() -> String {
    let width = commands.map(\.name.count).max() ?? 0
    var text = "usage: baton <command> [options]\n\ncommands:\n"
    for command in commands {
        text += "  \(command.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(command.summary)\n"
    }
    text += "\nRun 'baton <command> --help' for a command's options."
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
guard let command = commands.first(where: { $0.name == name }) else {
    printError("baton: unknown command '\(name)'; run 'baton --help' for the list")
    exit(2)
}
let rest = Array(arguments.dropFirst())
if rest.contains("--help") || rest.contains("-h") {
    print(command.usage)
    exit(0)
}
do {
    exit(try await command.run(rest))
} catch let failure as CommandFailure {
    switch failure {
    case .usage(let message):
        printError("baton \(command.name): \(message); run 'baton \(command.name) --help' for usage")
    case .rejected(let message), .failed(let message):
        printError(message)
    }
    exit(failure.exitCode)
} catch {
    printError("baton \(command.name): \(error)")
    exit(1)
}
