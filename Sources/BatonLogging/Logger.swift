import BatonJSON
import Foundation

/// A small value-type logger: one machine-readable `key=value` line per event.
///
/// Libraries receive a `Logger` and log at `info` or below; the executable decides the level
/// and where events go: by default a line on standard error, or, through the ``Handler`` seam, the
/// embedding server's own logging system (a swift-log bridge is a few lines: docs/library.md). Never pass
/// tokens, secrets or whole emails as metadata: use ``Logger/maskEmail(_:)`` for addresses.
public struct Logger: Sendable {
    /// Severity, from the most verbose to the most severe.
    public enum Level: Int, Sendable, Comparable, CustomStringConvertible {
        case trace, debug, info, notice, warning, error

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }

        public var description: String {
            switch self {
            case .trace: "trace"
            case .debug: "debug"
            case .info: "info"
            case .notice: "notice"
            case .warning: "warning"
            case .error: "error"
            }
        }

        /// Parses a level name such as `info`; nil when unknown.
        public init?(name: String) {
            switch name.lowercased() {
            case "trace": self = .trace
            case "debug": self = .debug
            case "info": self = .info
            case "notice": self = .notice
            case "warning", "warn": self = .warning
            case "error": self = .error
            default: return nil
            }
        }
    }

    /// One event, before it is formatted: what a ``Handler`` receives.
    public struct Event: Sendable, Equatable {
        /// Its severity.
        public var level: Level
        /// The logging component, e.g. `baton.service`.
        public var label: String
        /// What happened.
        public var message: String
        /// The logger's metadata merged with the call's (the call's win); emails in it are already masked.
        public var metadata: [String: String]

        /// Creates an event.
        public init(level: Level, label: String, message: String, metadata: [String: String]) {
            self.level = level
            self.label = label
            self.message = message
            self.metadata = metadata
        }

        /// Baton's own line for it: `ts=… level=… label=… msg="…" key=value …`, keys sorted, control characters escaped.
        public var line: String { Logger.format(level: level, label: label, message: message, metadata: metadata) }
    }

    /// Where events at or above the logger's level go.
    public typealias Handler = @Sendable (Event) -> Void

    /// The component that logs, e.g. `baton.service`.
    public var label: String
    /// Lines below this level are dropped.
    public var level: Level
    /// Metadata added to every line.
    public var metadata: [String: String]
    private let handler: Handler

    /// Creates a logger; by default events go to standard error as lines, at `info` and above.
    public init(label: String, level: Level = .info, metadata: [String: String] = [:], handler: @escaping Handler = Logger.standardError) {
        self.label = label
        self.level = level
        self.metadata = metadata
        self.handler = handler
    }

    /// A logger that drops everything.
    public static func disabled(label: String = "disabled") -> Logger {
        Logger(label: label, level: .error, handler: { _ in })
    }

    /// Writes each event's ``Event/line`` to standard error.
    public static let standardError: Handler = lines { line in
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    /// A handler passing each event's ``Event/line`` to `write`.
    public static func lines(_ write: @escaping @Sendable (String) -> Void) -> Handler {
        { event in write(event.line) }
    }

    /// A copy whose lines carry one more metadata pair.
    public func with(_ key: String, _ value: String) -> Logger {
        var copy = self
        copy.metadata[key] = value
        return copy
    }

    /// Logs `message` at `level` with extra metadata.
    public func log(_ level: Level, _ message: @autoclosure () -> String, _ extra: [String: String] = [:]) {
        guard level >= self.level else { return }
        handler(Event(level: level, label: label, message: message(), metadata: metadata.merging(extra) { _, new in new }))
    }

    public func trace(_ message: @autoclosure () -> String, _ extra: [String: String] = [:]) { log(.trace, message(), extra) }
    public func debug(_ message: @autoclosure () -> String, _ extra: [String: String] = [:]) { log(.debug, message(), extra) }
    public func info(_ message: @autoclosure () -> String, _ extra: [String: String] = [:]) { log(.info, message(), extra) }
    public func notice(_ message: @autoclosure () -> String, _ extra: [String: String] = [:]) { log(.notice, message(), extra) }
    public func warning(_ message: @autoclosure () -> String, _ extra: [String: String] = [:]) { log(.warning, message(), extra) }
    public func error(_ message: @autoclosure () -> String, _ extra: [String: String] = [:]) { log(.error, message(), extra) }

    /// Formats one line: `ts=… level=… label=… msg="…" key=value …` with keys sorted.
    static func format(level: Level, label: String, message: String, metadata: [String: String]) -> String {
        var line = "ts=\(timestamp()) level=\(level) label=\(quoted(label)) msg=\(quoted(message))"
        for key in metadata.keys.sorted() {
            line += " \(key)=\(quoted(metadata[key]!))"
        }
        return line
    }

    /// The current UTC time as `2026-11-29T18:58:49.412` (milliseconds truncated), built by hand: Foundation's
    /// ISO 8601 format style cost more than the rest of a log line.
    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return timestamp(seconds: now.tv_sec, milliseconds: Int(now.tv_nsec) / 1_000_000)
    }

    /// `seconds` since 1970 (UTC) and `milliseconds` as `yyyy-MM-ddTHH:mm:ss.SSS`.
    static func timestamp(seconds: Int, milliseconds: Int) -> String {
        var time = seconds
        var parts = tm()
        gmtime_r(&time, &parts)
        func digits(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
        }
        return digits(parts.tm_year + 1900, 4) + "-" + digits(parts.tm_mon + 1, 2) + "-" + digits(parts.tm_mday, 2)
            + "T" + digits(parts.tm_hour, 2) + ":" + digits(parts.tm_min, 2) + ":" + digits(parts.tm_sec, 2)
            + "." + digits(Int32(milliseconds), 3)
    }

    /// A value as is when it is plain, else quoted and escaped as a JSON string (``JSON/quote(_:)``): when it
    /// is empty, or holds a space, `=` or a scalar that JSON escapes (`"`, `\`, every control character, U+2028
    /// and U+2029), so a value from outside can neither end the line, forge another one nor carry a terminal
    /// escape sequence.
    static func quoted(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.unicodeScalars.contains { $0 == " " || $0 == "=" || JSON.escapes($0) }
        return needsQuotes ? JSON.quote(value) : value
    }

    /// Masks an email address for logs: `jane.doe@example.com` → `j***@example.com`.
    public static func maskEmail(_ email: String) -> String {
        guard let at = email.lastIndex(of: "@"), at > email.startIndex else { return "***" }
        return "\(email[email.startIndex])***\(email[at...])"
    }
}
