import Baton
import Foundation
import BatonLogging

/// Why a command stopped; decides the exit code. Kept apart from the modules' codes: it carries the exit code and the
/// line a command prints, whatever went wrong below it.
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

/// What the parser and `--help` know of an option, whatever its value's type: its name, what it takes, its
/// default and help line. Made by the constructors of ``Option``.
package struct OptionSpec: Sendable {
    /// What the option takes.
    package enum Kind: Sendable {
        /// `--name` alone.
        case flag
        /// `--name VALUE`, any text.
        case text(default: String?)
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
    /// May be given more than once, every value kept (shell completion offers it again).
    package var isRepeatable = false

    /// The default as `--help` shows it, or nil.
    package var defaultText: String? {
        switch kind {
        case .flag: nil
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
        case .flag, .text:
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
            guard words.contains(value) else { throw CommandFailure.usage("--\(name) must be \(listed(words))") }
        }
    }
}

/// `a`, `a or b`, `a, b or c`.
package func listed(_ words: [String]) -> String {
    words.count > 1 ? words.dropLast().joined(separator: ", ") + " or " + words.last! : words.joined()
}

/// One option of a command, declared once as a stored property of the command's ``CommandOptions``: parsing,
/// validation, the default, the `--help` line and the typed value read back (`parsed.users` is an `Int`) all
/// come from it.
package struct Option<Value: Sendable>: Sendable {
    package private(set) var spec: OptionSpec
    /// The value from every string given for the option, in order (already validated against `spec`).
    fileprivate let read: @Sendable ([String]) -> Value

    private init(_ name: String, _ placeholder: String, _ kind: OptionSpec.Kind, _ help: String, read: @escaping @Sendable ([String]) -> Value) {
        spec = OptionSpec(name: name, placeholder: placeholder, kind: kind, help: help)
        self.read = read
    }
}

extension Option where Value == Bool {
    /// `--name` alone: true when given.
    package static func flag(_ name: String, _ help: String) -> Option {
        Option(name, "", .flag, help) { !$0.isEmpty }
    }
}

extension Option where Value == String? {
    /// `--name VALUE`, any text; the last one given wins; nil when absent.
    package static func text(_ name: String, _ placeholder: String, _ help: String) -> Option {
        Option(name, placeholder, .text(default: nil), help) { $0.last }
    }

    /// The same option, required: absent or empty is a usage error, so its value is always there.
    package func required() -> Option<String> {
        var required = Option<String>(spec.name, spec.placeholder, spec.kind, spec.help) { $0.last ?? "" }
        required.spec.isRequired = true
        return required
    }

    /// `--config FILE`, for ``loadConfiguration(_:)``.
    package static let config = text("config", "FILE", "the configuration file (default baton.json; BATON_* variables override it)")

    /// `--database-url URL`, for ``databaseURLOrEnvironment(_:)``.
    package static func databaseURL(_ help: String) -> Option { text("database-url", "URL", help) }
}

extension Option where Value == String {
    /// `--name VALUE`, any text; the last one given wins, else the default.
    package static func text(_ name: String, _ placeholder: String, default value: String, _ help: String) -> Option {
        Option(name, placeholder, .text(default: value), help) { $0.last ?? value }
    }
}

extension Option where Value == [String] {
    /// `--name VALUE`, repeatable; every value is kept, in order.
    package static func repeatable(_ name: String, _ placeholder: String, _ help: String) -> Option {
        var option = Option(name, placeholder, .text(default: nil), help) { $0 }
        option.spec.isRepeatable = true
        return option
    }

    /// The same option, required: at least one non-empty value.
    package func required() -> Option {
        var required = self
        required.spec.isRequired = true
        return required
    }
}

extension Option where Value == Int {
    /// `--name N`, a whole number within `range`, else the default.
    package static func integer(_ name: String, _ placeholder: String = "N", default value: Int, in range: ClosedRange<Int>, _ help: String) -> Option {
        Option(name, placeholder, .integer(default: value, in: range), help) { $0.last.flatMap { Int($0) } ?? value }
    }
}

extension Option where Value == Int? {
    /// `--name N`, a whole number within `range`; nil when absent.
    package static func integer(_ name: String, _ placeholder: String = "N", in range: ClosedRange<Int>, _ help: String) -> Option {
        Option(name, placeholder, .integer(default: nil, in: range), help) { $0.last.flatMap { Int($0) } }
    }
}

extension Option where Value == Double {
    /// `--name R`, a finite number within `range`, else the default.
    package static func number(_ name: String, _ placeholder: String = "R", default value: Double, in range: ClosedRange<Double>, _ help: String) -> Option {
        Option(name, placeholder, .number(default: value, in: range), help) { $0.last.flatMap { Double($0) } ?? value }
    }
}

extension Option where Value == Double? {
    /// `--name R`, a finite number within `range`; nil when absent.
    package static func number(_ name: String, _ placeholder: String = "R", in range: ClosedRange<Double>, _ help: String) -> Option {
        Option(name, placeholder, .number(default: nil, in: range), help) { $0.last.flatMap { Double($0) } }
    }
}

extension Option where Value: Equatable {
    /// `--name WORD`, one of `choices` by its word, else the default.
    package static func choice(_ name: String, _ choices: [(word: String, value: Value)], default value: Value, _ help: String) -> Option {
        let words = choices.map(\.word)
        let defaultWord = choices.first { $0.value == value }?.word
        return Option(name, words.joined(separator: "|"), .choice(words, default: defaultWord), help) { given in
            given.last.flatMap { word in choices.first { $0.word == word }?.value } ?? value
        }
    }
}

extension Option where Value: CaseIterable & RawRepresentable & Equatable, Value.RawValue == String {
    /// `--name WORD`, one of the cases by its raw value, else the default.
    package static func choice(_ name: String, default value: Value, _ help: String) -> Option {
        choice(name, Value.allCases.map { ($0.rawValue, $0) }, default: value, help)
    }
}

extension Option where Value == Logger.Level {
    /// `--log-level L`: how much to log.
    package static func logLevel(default value: Logger.Level = .info, _ help: String = "how much to log") -> Option {
        choice("log-level", [.trace, .debug, .info, .notice, .warning, .error].map { ($0.description, $0) }, default: value, help)
    }
}

/// A command's options: a struct whose stored properties are its ``Option``s (in `--help` order), and
/// possibly groups of options shared with other commands (another `CommandOptions` as a stored property).
///
/// The properties are found by reflection; a command reads them back through ``Parsed``, by property, so a
/// misspelt option does not compile.
package protocol CommandOptions: Sendable {
    init()
}

/// An ``Option`` of any value type, for reflection.
private protocol AnyOption { var spec: OptionSpec { get } }
extension Option: AnyOption {}

extension CommandOptions {
    /// Every option, groups flattened, in declaration order.
    package var specs: [OptionSpec] {
        Mirror(reflecting: self).children.flatMap { child -> [OptionSpec] in
            if let option = child.value as? any AnyOption { return [option.spec] }
            if let group = child.value as? any CommandOptions { return group.specs }
            return []
        }
    }
}

/// A command's options parsed: `parsed.users` is the value of its `users` option (typed by the declaration,
/// its default when not given), `parsed.bulk` a group's.
@dynamicMemberLookup
package struct Parsed<Options: CommandOptions>: Sendable {
    private let options: Options
    /// Every string given for each option, by name (a flag's is empty).
    private let given: [String: [String]]
    /// The arguments that are not options, in order.
    package let positionals: [String]

    /// Parses `arguments` against the options.
    ///
    /// An undeclared option is a usage error rather than a silently ignored typo; every given value is validated
    /// when parsed, and required options are checked then. `--name=value` is accepted too; `--` ends the
    /// options. Positional arguments are refused unless `takesPositionals`.
    package init(_ arguments: [String], takesPositionals: Bool) throws {
        let options = Options()
        let specs = options.specs
        let declared = Dictionary(uniqueKeysWithValues: specs.map { ($0.name, $0) })
        var given: [String: [String]] = [:]
        var positionals: [String] = []
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
            guard let spec = declared[name] else { throw CommandFailure.usage("unknown option --\(name)") }
            if case .flag = spec.kind {
                guard inlineValue == nil else { throw CommandFailure.usage("--\(name) takes no value") }
                given[name, default: []].append("")
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
            try spec.validate(value)
            given[name, default: []].append(value)
        }
        for spec in specs where spec.isRequired {
            guard given[spec.name, default: []].contains(where: { !$0.isEmpty }) else { throw CommandFailure.usage("missing --\(spec.name)") }
        }
        if !takesPositionals, let extra = positionals.first {
            throw CommandFailure.usage("unexpected argument '\(extra)'")
        }
        self.init(options: options, given: given, positionals: positionals)
    }

    private init(options: Options, given: [String: [String]], positionals: [String]) {
        self.options = options
        self.given = given
        self.positionals = positionals
    }

    /// The value of one option: what was given, else its default.
    package subscript<Value>(dynamicMember option: KeyPath<Options, Option<Value>>) -> Value {
        let option = options[keyPath: option]
        return option.read(given[option.spec.name] ?? [])
    }

    /// A group of options, parsed.
    package subscript<Group: CommandOptions>(dynamicMember group: KeyPath<Options, Group>) -> Parsed<Group> {
        Parsed<Group>(options: options[keyPath: group], given: given, positionals: positionals)
    }

    /// The whole number of `option` (its default when absent), within a range known only at run time (it
    /// depends on other options).
    package func value(of option: KeyPath<Options, Option<Int?>>, default defaultValue: Int, in range: ClosedRange<Int>) throws -> Int {
        guard let number = self[dynamicMember: option] else { return defaultValue }
        guard range.contains(number) else {
            let name = options[keyPath: option].spec.name
            throw CommandFailure.usage("--\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }
}

/// One subcommand of `baton` (or of a command with subcommands, like `baton db`).
package struct Command: Sendable {
    /// The word that selects it, e.g. `verify`.
    package let name: String
    /// One line for the list of commands.
    package let summary: String
    /// What follows the options in the usage line (`TOKEN`, `FILE.csv`); empty when the command takes no
    /// positional arguments, and then any is refused as unexpected.
    package let arguments: String
    /// Text before the list of options in `--help`.
    package let abstract: String
    /// The options, as `--help` lists them.
    package let options: [OptionSpec]
    /// Text after the list of options in `--help` (outputs, exit status).
    package let discussion: String
    /// Commands selected by the next word (`baton db migrate`); `run` is then unused.
    package let subcommands: [Command]
    /// The heading of the subcommands in `--help` (`commands`, `shells`).
    package let subcommandsTitle: String
    /// Parses the arguments that follow the command's words and runs it; returns the exit code.
    package let run: @Sendable ([String]) async throws -> Int32

    /// A command that runs with the options of `Options`.
    package init<Options: CommandOptions>(name: String, summary: String, arguments: String = "", abstract: String = "", options: Options.Type,
                                          discussion: String = "", run: @escaping @Sendable (Parsed<Options>) async throws -> Int32) {
        self.name = name
        self.summary = summary
        self.arguments = arguments
        self.abstract = abstract
        self.options = Options().specs
        self.discussion = discussion
        self.subcommands = []
        self.subcommandsTitle = ""
        self.run = { words in try await run(try Parsed<Options>(words, takesPositionals: !arguments.isEmpty)) }
    }

    /// A command whose next word selects one of `subcommands`.
    package init(name: String, summary: String, abstract: String = "", discussion: String = "", subcommands: [Command], subcommandsTitle: String = "commands") {
        self.name = name
        self.summary = summary
        self.arguments = ""
        self.abstract = abstract
        self.options = []
        self.discussion = discussion
        self.subcommands = subcommands
        self.subcommandsTitle = subcommandsTitle
        self.run = { _ in 2 }  // unused: the next word selects a subcommand
    }

    /// The `--help` text, from the declaration. `path` is the words before the name (`baton`, `baton db`).
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

/// The database URL given (`--database-url`), else `BATON_DATABASE_URL`, else nil.
package func databaseURLOrEnvironment(_ given: String?) -> String? {
    guard let url = given ?? ProcessInfo.processInfo.environment["BATON_DATABASE_URL"], !url.isEmpty else { return nil }
    return url
}

/// The configuration from `path` (`--config`; default `baton.json`) and the `BATON_*` variables; errors are
/// usage errors.
package func loadConfiguration(_ path: String?) async throws -> BatonConfiguration {
    do {
        return try await BatonConfiguration.load(path: path, environment: ProcessInfo.processInfo.environment, queue: .global())
    } catch let error as ConfigurationError {
        throw CommandFailure.usage("\(error)")
    }
}

/// Writes a line to standard error.
package func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}
