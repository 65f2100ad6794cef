import BatonErrors

/// The one error type of the JSON module: a stable ``JSONErrorCode`` plus a short context.
///
/// `description` names what was wrong and where (a byte offset), never the text read. Two errors are equal
/// when their codes are equal, so tests can write `#expect(throws: JSONError(.duplicateMember))`.
public typealias JSONError = CodedError<JSONErrorCode>

/// Stable error codes of the JSON reader; their raw values are snake_case identifiers safe to log and to match on.
public enum JSONErrorCode: String, ErrorCode, CaseIterable {
    /// Bytes that are not strict JSON (RFC 8259), including invalid UTF-8 and lone surrogates.
    case invalidJSON = "invalid_json"
    /// JSON nested deeper than the allowed depth.
    case tooDeep = "too_deep"
    /// A JSON object with the same member name twice.
    case duplicateMember = "duplicate_member"
    /// A JSON value of the wrong kind where a specific one is required (for example not an object).
    case unexpectedJSON = "unexpected_json"
}
