import Baton
import Foundation
import BatonLogging

/// Why a command stopped; decides the exit code.
package enum CommandFailure: Error {
    /// Bad usage or configuration: exit 2, with a hint.
    case usage(String)
    /// Input rejected (a bad token, a bad file): exit 1.
    case rejected(String)
    /// The command ran and failed (Apple unreachable, a job with failures): exit 1.
    case failed(String)

    package var exitCode: Int32 {
        switch self {
        case .usage: 2
        case .rejected, .failed: 1
        }
    }
}

/// One option of a command, declared once: parsing, validation, the default and the `--help` line all come from it.
package struct Option: Sendable {
    /// What the option takes.
    package enum Kind: Sendable {
        /// `--name` alone.
        case flag
        /// `--name VALUE`, any text; the last one given wins.
        case text(default: String?)
        /// `--name VALUE`, any text, repeatable; every value is kept.
        case repeatable
        /// `--name N`, a whole number within the range.
        case integer(default: Int?, in: ClosedRange<Int>)
        /// `--name R`, a finite number within the range.
        case number(default: Double?, in: ClosedRange<Double>)
        /// `--name WORD`, one of the words.
        case choice([String], default: String?)
    }

    package let name: String
    /// The value's name in usage text (`FILE`, `N`); empty for a flag.
    package let placeholder: String
    package let kind: Kind
    /// One line (or a few, split by `\n`) for `--help`; `(default X)` is appended when the kind declares a default.
    package let help: String
    /// Absent or empty is a usage error ("missing --name").
    package var isRequired = false

    package static func flag(_ name: String, _ help: String) -> Option {
        Option(name: name, placeholder: "", kind: .flag, help: help)
    }

    package static func text(_ name: String, _ placeholder: String, default value: String? = nil, _ help: String) -> Option {
        Option(name: name, placeholder: placeholder, kind: .text(default: value), help: help)
    }

    package static func repeatable(_ name: String, _ placeholder: String, _ help: String) -> Option {
        Option(name: name, placeholder: placeholder, kind: .repeatable, help: help)
    }

    package static func integer(_ name: String, _ placeholder: String = "N", default value: Int? = nil, in range: ClosedRange<Int>, _ help: String) -> Option {
        Option(name: name, placeholder: placeholder, kind: .integer(default: value, in: range), help: help)
    }

    package static func number(_ name: String, _ placeholder: String = "R", default value: Double? = nil, in range: ClosedRange<Double>, _ help: String) -> Option {
        Option(name: name, placeholder: placeholder, kind: .number(default: value, in: range), help: help)
    }

    package static func choice(_ name: String, _ words: [String], default value: String? = nil, _ help: String) -> Option {
        Option(name: name, placeholder: words.joined(separator: "|"), kind: .choice(words, default: value), help: help)
    }

    /// The same option, required.
    package func required() -> Option {
        var option = self
        option.isRequired = true
        return option
    }

    /// `--config FILE`, read by `Arguments.configuration()`.
    package static let config = Option.text("config", "FILE", "the configuration file (default baton.json; BATON_* variables override it)")

    /// `--log-level L`, read by `Arguments.logLevel`.
    package static let logLevel = Option.choice("log-level", ["trace", "debug", "info", "notice", "warning", "error"], default: "info", "how much to log")

    /// `--database-url URL`, read by `Arguments.databaseURL(...)`.
    package static func databaseURL(_ help: String) -> Option { .text("database-url", "URL", help) }

    /// The default as `--help` shows it, or nil.
    package var defaultText: String? {
        switch kind {
        case .flag, .repeatable: nil
        case .text(let value): value
        case .integer(let value, _): value.map { $0.formatted(.number.grouping(.never)) }
        case .number(let value, _): value.map { $0 == $0.rounded() ? String(Int($0)) : String($0) }
        case .choice(_, let value): value
        }
    }

    /// `--name VALUE` or `--name`.
    package var synopsis: String { placeholder.isEmpty ? "--\(name)" : "--\(name) \(placeholder)" }

    /// Checks one given value; the error names the option and what it takes.
    fileprivate func validate(_ value: String) throws {
        switch kind {
        case .flag, .text, .repeatable:
            return
        case .integer(_, let range):
            guard let number = Int(value), range.contains(number) else {
                throw CommandFailure.usage("--\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
            }
        case .number(_, let range):
            guard let number = Double(value), number.isFinite, range.contains(number) else {
                throw CommandFailure.usage("--\(name) must be a number from \(range.lowerBound) to \(range.upperBound)")
            }
        case .choice(let words, _):
            guard words.contains(value) else {
                let list = words.count > 1 ? words.dropLast().joined(separator: ", ") + " or " + words.last! : words.joined()
                throw CommandFailure.usage("--\(name) must be \(list)")
            }
        }
    }
}

/// One subcommand of `baton` (or of a command with subcommands, like `baton bench`).
package struct Command: Sendable {
    /// The word that selects it, e.g. `verify`.
    package let name: String
    /// One line for the list of commands.
    package let summary: String
    /// What follows the options in the usage line (`TOKEN`, `FILE.csv`); empty when the command takes no
    /// positional arguments, and then any is refused as unexpected.
    package var arguments = ""
    /// Text before the list of options in `--help`.
    package var abstract = ""
    package var options: [Option] = []
    /// Text after the list of options in `--help` (outputs, exit status).
    package var discussion = ""
    /// Commands selected by the next word (`baton bench verify`); `run` is then unused.
    package var subcommands: [Command] = []
    /// The heading of the subcommands in `--help` (`benchmarks`; scripts/bench.sh reads that list).
    package var subcommandsTitle = "commands"
    /// Runs the command with its parsed arguments; returns the exit code.
    package var run: @Sendable (Arguments) async throws -> Int32

    package init(name: String, summary: String, arguments: String = "", abstract: String = "", options: [Option] = [],
                 discussion: String = "", subcommands: [Command] = [], subcommandsTitle: String = "commands", run: @escaping @Sendable (Arguments) async throws -> Int32 = { _ in 0 }) {
        self.name = name
        self.summary = summary
        self.arguments = arguments
        self.abstract = abstract
        self.options = options
        self.discussion = discussion
        self.subcommands = subcommands
        self.subcommandsTitle = subcommandsTitle
        self.run = run
    }

    /// The `--help` text, from the declaration. `path` is the words before the name (`baton`, `baton bench`).
    package func usage(path: String) -> String {
        let prefix = "\(path) \(name)"
        if !subcommands.isEmpty {
            let width = subcommands.map(\.name.count).max() ?? 0
            var text = "usage: \(prefix) <\(subcommands.map(\.name).joined(separator: "|"))> [options]\n"
            if !abstract.isEmpty { text += "\n\(abstract)\n" }
            text += "\n\(subcommandsTitle):\n"
            for command in subcommands {
                text += "  \(command.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(command.summary)\n"
            }
            text += "\nRun '\(prefix) <\(subcommands.count == 1 ? subcommands[0].name : "name")> --help' for its options."
            if !discussion.isEmpty { text += "\n\(discussion)" }
            return text
        }
        let words = options.map { $0.isRequired ? $0.synopsis : "[\($0.synopsis)]" } + (arguments.isEmpty ? [] : [arguments])
        var text = "usage: \(prefix)"
        var line = text.count
        let indent = String(repeating: " ", count: text.count)
        for word in words {
            if line + 1 + word.count > 110 {
                text += "\n" + indent
                line = indent.count
            }
            text += " " + word
            line += 1 + word.count
        }
        text += "\n"
        if !abstract.isEmpty { text += "\n\(abstract)\n" }
        if !options.isEmpty {
            text += "\n"
            let width = min(24, options.map(\.synopsis.count).max() ?? 0)
            for option in options {
                var help = option.help
                if let value = option.defaultText { help += " (default \(value))" }
                let lines = help.split(separator: "\n", omittingEmptySubsequences: false)
                let head = option.synopsis.padding(toLength: max(width, option.synopsis.count), withPad: " ", startingAt: 0)
                text += "  \(head)  \(lines[0])\n"
                for more in lines.dropFirst() { text += "  \(String(repeating: " ", count: width))  \(more)\n" }
            }
        }
        if !discussion.isEmpty { text += "\n\(discussion)\n" }
        return String(text.dropLast())
    }
}

/// Parsed command-line arguments, checked against a command's declared options.
///
/// An undeclared option is a usage error rather than a silently ignored typo; every given value is validated
/// when parsed, and required options are checked then. `--name=value` is accepted too; `--` ends the options.
package struct Arguments: Sendable {
    private let declared: [String: Option]
    private var repeated: [String: [String]] = [:]
    private var flags: Set<String> = []
    package private(set) var positionals: [String] = []

    /// Parses `arguments` against `command`'s options.
    package init(_ arguments: [String], for command: Command) throws {
        declared = Dictionary(uniqueKeysWithValues: command.options.map { ($0.name, $0) })
        var index = 0
        var onlyPositionals = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if onlyPositionals || !argument.hasPrefix("--") || argument == "-" {
                positionals.append(argument)
                continue
            }
            if argument == "--" {
                onlyPositionals = true
                continue
            }
            var name = String(argument.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            guard let option = declared[name] else { throw CommandFailure.usage("unknown option --\(name)") }
            if case .flag = option.kind {
                guard inlineValue == nil else { throw CommandFailure.usage("--\(name) takes no value") }
                flags.insert(name)
                continue
            }
            let value: String
            if let inlineValue {
                value = inlineValue
            } else {
                guard index < arguments.count else { throw CommandFailure.usage("--\(name) needs a value") }
                value = arguments[index]
                index += 1
            }
            try option.validate(value)
            repeated[name, default: []].append(value)
        }
        for option in command.options where option.isRequired {
            guard values(option.name).contains(where: { !$0.isEmpty }) else { throw CommandFailure.usage("missing --\(option.name)") }
        }
        if command.arguments.isEmpty, let extra = positionals.first {
            throw CommandFailure.usage("unexpected argument '\(extra)'")
        }
    }

    private func declaration(_ name: String) -> Option {
        guard let option = declared[name] else { preconditionFailure("--\(name) is not declared") }
        return option
    }

    /// The value given for `--name` (the last one), else its declared default.
    package func value(_ name: String) -> String? {
        if let given = repeated[name]?.last { return given }
        if case .text(let value) = declaration(name).kind { return value }
        if case .choice(_, let value) = declaration(name).kind { return value }
        return nil
    }

    /// Every value given for a repeatable option, in order.
    package func values(_ name: String) -> [String] { repeated[name] ?? [] }

    /// Whether the flag `--name` was given.
    package func flag(_ name: String) -> Bool { flags.contains(name) }

    /// The value of `--name`, which the declaration makes required or gives a default.
    package func required(_ name: String) -> String {
        guard let value = value(name) else { preconditionFailure("--\(name) has neither a value nor a default") }
        return value
    }

    /// The whole number given for `--name` (validated when parsed), else its declared default, else nil.
    package func optionalInteger(_ name: String) -> Int? {
        if let given = repeated[name]?.last { return Int(given) }
        if case .integer(let value, _) = declaration(name).kind { return value }
        return nil
    }

    /// The whole number for `--name`, defaulting to its declaration.
    package func integer(_ name: String) -> Int {
        guard let value = optionalInteger(name) else { preconditionFailure("--\(name) has no default") }
        return value
    }

    /// The whole number for `--name` within a range known only at run time (it depends on other options).
    package func integer(_ name: String, default defaultValue: Int, in range: ClosedRange<Int>) throws -> Int {
        guard let text = repeated[name]?.last, let number = Int(text) else { return defaultValue }
        guard range.contains(number) else {
            throw CommandFailure.usage("--\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    /// The number for `--name` (validated when parsed), defaulting to its declaration.
    package func number(_ name: String) -> Double {
        if let given = repeated[name]?.last, let number = Double(given) { return number }
        guard case .number(let value?, _) = declaration(name).kind else { preconditionFailure("--\(name) has no default") }
        return value
    }

    /// The level of `--log-level` (default info).
    package var logLevel: Logger.Level { Logger.Level(name: required("log-level")) ?? .info }

    /// `--database-url`, else `BATON_DATABASE_URL`, else nil.
    package var databaseURLOrEnvironment: String? {
        guard let url = value("database-url") ?? ProcessInfo.processInfo.environment["BATON_DATABASE_URL"], !url.isEmpty else { return nil }
        return url
    }

    /// The configuration from `--config` (default `baton.json`) and the `BATON_*` variables; errors are usage errors.
    package func configuration() async throws -> BatonConfiguration {
        do {
            return try await BatonConfiguration.load(path: value("config"), environment: ProcessInfo.processInfo.environment, queue: .global())
        } catch let error as ConfigurationError {
            throw CommandFailure.usage("\(error)")
        }
    }

    /// The database URL: `--database-url`, else `BATON_DATABASE_URL`, else the configuration's `database.url`.
    package func databaseURL() async throws -> String {
        if let url = databaseURLOrEnvironment { return url }
        return try await configuration().database.url
    }
}

/// Writes a line to standard error.
package func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}
