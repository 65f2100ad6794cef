/// A stable error code: a snake_case raw value safe to log, to match on and to answer over HTTP. A code says what
/// went wrong, nothing more: the HTTP layer that answers it says which status it is (`HTTPStatusCode` in
/// BatonHTTPServer), so codes of the JSON, JOSE and bulk-job modules carry no status they never serve.
public protocol ErrorCode: RawRepresentable<String>, Sendable, Hashable {}

/// The one shape of Baton's errors: a stable ``ErrorCode`` plus a short reason.
///
/// Each module names its own, e.g. `typealias JOSEError = CodedError<JOSEErrorCode>`. The reason never holds token
/// bytes, key material, emails, SQL values or secrets. Two errors are equal when their codes are, so tests can write
/// `#expect(throws: JOSEError(.tooLarge))`.
public struct CodedError<Codes: ErrorCode>: Error, Sendable, Equatable, CustomStringConvertible {
    /// The module's code enum, e.g. `JOSEErrorCode` for `JOSEError`.
    public typealias Code = Codes

    /// What went wrong, stable across releases.
    public let code: Code
    /// Why, in words, for people; empty when the code says it all.
    public let reason: String

    /// Creates an error with `code` and an optional `reason`.
    public init(_ code: Code, _ reason: String = "") {
        self.code = code
        self.reason = reason
    }

    /// `code: reason`, or the code alone.
    public var description: String {
        reason.isEmpty ? code.rawValue : "\(code.rawValue): \(reason)"
    }

    /// Errors are equal when their codes are equal; the reason is explanation only.
    public static func == (lhs: CodedError, rhs: CodedError) -> Bool { lhs.code == rhs.code }
}
