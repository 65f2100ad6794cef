/// The one error type of the JSON module: a stable ``Code`` plus a short context.
///
/// `description` names what was wrong and where (a byte offset), never the text read. Two errors are equal
/// when their codes are equal, so tests can write `#expect(throws: JSONError(.duplicateMember))`.
public struct JSONError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Stable error codes; their raw values are snake_case identifiers safe to log and to match on.
    public enum Code: String, Sendable, CaseIterable {
        /// Bytes that are not strict JSON (RFC 8259), including invalid UTF-8 and lone surrogates.
        case invalidJSON = "invalid_json"
        /// JSON nested deeper than the allowed depth.
        case tooDeep = "too_deep"
        /// A JSON object with the same member name twice.
        case duplicateMember = "duplicate_member"
        /// A JSON value of the wrong kind where a specific one is required (for example not an object).
        case unexpectedJSON = "unexpected_json"
    }

    /// What went wrong, stable across releases.
    public let code: Code
    /// Why, in words, without the text read.
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

    /// Errors are equal when their codes are equal; the context is explanation only.
    public static func == (lhs: JSONError, rhs: JSONError) -> Bool { lhs.code == rhs.code }
}
