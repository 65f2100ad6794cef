import Foundation

/// Why a command stopped; decides the exit code.
enum CommandFailure: Error {
    /// Bad usage or configuration: exit 2, with a hint.
    case usage(String)
    /// Input rejected (a bad token, a bad file): exit 1.
    case rejected(String)
    /// The command ran and failed (Apple unreachable, a job with failures): exit 1.
    case failed(String)

    var exitCode: Int32 {
        switch self {
        case .usage: 2
        case .rejected, .failed: 1
        }
    }
}

/// One subcommand of `baton`.
struct Command: Sendable {
    /// The word after `baton`, e.g. `verify`.
    let name: String
    /// One line for `baton --help`.
    let summary: String
    /// Usage text shown by `baton NAME --help`.
    let usage: String
    /// Runs the command with the arguments after its name; returns the exit code.
    let run: @Sendable ([String]) async throws -> Int32
}

/// Parsed command-line arguments: `--name value` options, `--flag` flags, and positionals.
///
/// Options and flags are declared up front, so an unknown option is a usage error rather than
/// a silently ignored typo. `--name=value` is accepted too; `--` ends the options.
struct Arguments {
    private(set) var options: [String: String] = [:]
    private(set) var repeated: [String: [String]] = [:]
    private(set) var flags: Set<String> = []
    private(set) var positionals: [String] = []

    /// Parses `arguments` given the option names that take a value and the flags that do not.
    init(_ arguments: [String], options optionNames: Set<String>, flags flagNames: Set<String> = []) throws {
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
            if flagNames.contains(name) {
                guard inlineValue == nil else { throw CommandFailure.usage("--\(name) takes no value") }
                flags.insert(name)
            } else if optionNames.contains(name) {
                let value: String
                if let inlineValue {
                    value = inlineValue
                } else {
                    guard index < arguments.count else { throw CommandFailure.usage("--\(name) needs a value") }
                    value = arguments[index]
                    index += 1
                }
                options[name] = value
                repeated[name, default: []].append(value)
            } else {
                throw CommandFailure.usage("unknown option --\(name)")
            }
        }
    }

    /// The value of `--name`, if given.
    func value(_ name: String) -> String? { options[name] }

    /// Every value given for a repeatable option, in order.
    func values(_ name: String) -> [String] { repeated[name] ?? [] }

    /// Whether `--name` was given.
    func flag(_ name: String) -> Bool { flags.contains(name) }

    /// The value of `--name`, or a usage error naming it.
    func required(_ name: String) throws -> String {
        guard let value = options[name], !value.isEmpty else { throw CommandFailure.usage("missing --\(name)") }
        return value
    }

    /// The value of `--name` as an integer within `range`, or `defaultValue` when absent.
    func integer(_ name: String, default defaultValue: Int, in range: ClosedRange<Int>) throws -> Int {
        guard let text = options[name] else { return defaultValue }
        guard let number = Int(text), range.contains(number) else {
            throw CommandFailure.usage("--\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    /// The value of `--name` as a number within `range`, or `defaultValue` when absent.
    func double(_ name: String, default defaultValue: Double, in range: ClosedRange<Double>) throws -> Double {
        guard let text = options[name] else { return defaultValue }
        guard let number = Double(text), number.isFinite, range.contains(number) else {
            throw CommandFailure.usage("--\(name) must be a number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }
}

/// Writes a line to standard error.
func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}
