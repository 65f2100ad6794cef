/// The embedder's own logging module, standing in for swift-log: module `Logging`, type `Logger`, and the part of
/// swift-log's API a bridge from Baton's logger calls (`Level` by name, `Metadata` of `.string` values,
/// `log(level:_:metadata:source:)`).
public struct Logger: Sendable {
    /// swift-log's levels, named as its raw values.
    public enum Level: String, Sendable, CaseIterable {
        case trace, debug, info, notice, warning, error, critical
    }

    /// A metadata value.
    public enum MetadataValue: Sendable, Equatable {
        case string(String)
    }

    /// Metadata by key.
    public typealias Metadata = [String: MetadataValue]

    /// A log message, written as a string literal or interpolation.
    public struct Message: Sendable, ExpressibleByStringLiteral, ExpressibleByStringInterpolation, CustomStringConvertible {
        public let description: String
        public init(stringLiteral value: String) { description = value }
    }

    /// What the log lines are about.
    public let label: String
    /// Messages below it are dropped.
    public var logLevel: Level = .info

    /// A logger for `label`.
    public init(label: String) { self.label = label }

    /// Logs `message` from `source` (the embedder's stand-in writes nothing).
    public func log(level: Level, _ message: @autoclosure () -> Message, metadata: @autoclosure () -> Metadata? = nil,
                    source: @autoclosure () -> String? = nil, file: String = #fileID, function: String = #function, line: UInt = #line) {}
}
