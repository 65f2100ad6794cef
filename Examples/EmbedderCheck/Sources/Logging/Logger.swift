/// The embedder's own logging module, standing in for swift-log (module `Logging`, type `Logger`).
public struct Logger: Sendable {
    /// What the log lines are about.
    public let label: String

    /// A logger for `label`.
    public init(label: String) { self.label = label }
}
