import Foundation

/// An executable's command line (`baton`, `baton-bench`): the word on the command line selects one of its
/// commands, `--help` lists them, `--version` prints the version line.
package struct Program: Sendable {
    /// The executable's name, as usage and messages print it.
    package let name: String
    /// What `--version` prints.
    package let version: String
    /// The commands, in the order `--help` lists them, under a heading each (`commands`, `benchmarks`).
    package let groups: [(title: String, commands: [Command])]

    package init(name: String, version: String, groups: [(title: String, commands: [Command])]) {
        self.name = name
        self.version = version
        self.groups = groups
    }

    /// Every command, across the groups.
    package var commands: [Command] { groups.flatMap(\.commands) }

    /// The top-level `--help` text.
    package var usage: String {
        let width = commands.map(\.name.count).max() ?? 0
        var text = "usage: \(name) <command> [options]\n"
        for group in groups {
            text += "\n\(group.title):\n"
            for command in group.commands {
                text += "  \(command.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(command.summary)\n"
            }
        }
        text += "\nRun '\(name) <command> --help' for a command's options, '\(name) --version' for the version and commit."
        return text
    }

    /// Runs the command `arguments` name and returns the exit code: 0 success, 1 rejected input or a failed
    /// run, 2 usage or configuration errors. Failures are printed on standard error.
    package func run(_ arguments: [String]) async -> Int32 {
        guard let word = arguments.first else {
            printError(usage)
            return 2
        }
        if word == "--help" || word == "-h" || word == "help" {
            print(usage)
            return 0
        }
        if word == "--version" {
            print(version)
            return 0
        }
        guard var command = commands.first(where: { $0.name == word }) else {
            printError("\(name): unknown command '\(word)'; run '\(name) --help' for the list")
            return 2
        }
        /// The words that chose `command` (`fuzz http`), for messages and usage.
        var chosen = [word]
        var rest = Array(arguments.dropFirst())
        let wantsHelp = rest.contains("--help") || rest.contains("-h")
        do {
            // Commands with subcommands (`baton db migrate`): the next word selects one.
            while !command.subcommands.isEmpty {
                let expected = listed(command.subcommands.map { "'\($0.name)'" })
                guard let next = rest.first, let sub = command.subcommands.first(where: { $0.name == next }) else {
                    if wantsHelp { break }
                    throw CommandFailure.usage(rest.first.map { "unknown \(command.name) command '\($0)': expected \(expected)" } ?? "expected \(expected)")
                }
                command = sub
                chosen.append(sub.name)
                rest.removeFirst()
            }
            if wantsHelp {
                print(command.usage(path: ([name] + chosen.dropLast()).joined(separator: " ")))
                return 0
            }
            return try await command.run(rest)
        } catch let failure as CommandFailure {
            let full = ([name] + chosen).joined(separator: " ")
            switch failure {
            case .usage(let message):
                printError("\(full): \(message); run '\(full) --help' for usage")
            case .rejected(let message), .failed(let message):
                printError(message)
            }
            return failure.exitCode
        } catch {
            printError("\(([name] + chosen).joined(separator: " ")): \(error)")
            return 1
        }
    }
}
