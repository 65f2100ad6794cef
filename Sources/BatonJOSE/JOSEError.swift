import BatonErrors
import BatonJSON

/// The one error type of the JOSE module: a stable ``JOSEErrorCode`` plus a short context.
///
/// `description` never contains token bytes, key material or claim values; it names what was wrong
/// and where (for example "header member 'typ' must be \"JWT\""). Two errors are equal when their codes
/// are equal, so tests can write `#expect(throws: JOSEError(.tooLarge))`.
public typealias JOSEError = CodedError<JOSEErrorCode>

/// Stable error codes; their raw values are snake_case identifiers safe to log and to match on.
public enum JOSEErrorCode: String, ErrorCode, CaseIterable {
    /// Input longer than the limit allowed for it (checked before any decoding).
    case tooLarge = "too_large"
    /// Text that is not strict base64url (padding, whitespace, a foreign character, bad length or trailing bits).
    case invalidBase64 = "invalid_base64"
    /// Bytes that are not strict JSON (RFC 8259), including invalid UTF-8 and lone surrogates.
    case invalidJSON = "invalid_json"
    /// JSON nested deeper than the allowed depth.
    case tooDeep = "too_deep"
    /// A JSON object with the same member name twice.
    case duplicateMember = "duplicate_member"
    /// A JSON value of the wrong kind where a specific one is required (for example a non-object payload).
    case unexpectedJSON = "unexpected_json"
    /// A compact JWS without exactly three parts, or with an empty or missing required part.
    case malformedJWS = "malformed_jws"
    /// A JWS header that is missing `alg` or has a member of the wrong type.
    case invalidHeader = "invalid_header"
    /// A JWS header with `crit`: no extension is understood, so every one is refused.
    case criticalExtension = "critical_extension"
    /// A JWS header whose `typ` is present and not `JWT`.
    case unsupportedType = "unsupported_type"
    /// Key material that does not describe a valid key (bad point, bad encoding, wrong type).
    case invalidKey = "invalid_key"
    /// A well-formed key refused by policy (RSA under 2048 bits or with e other than 65537).
    case keyPolicy = "key_policy"
    /// A JWK Set with the same `kid` twice.
    case duplicateKeyID = "duplicate_key_id"
    /// An OpenSSL operation failed (key generation, signing, PEM encoding).
    case cryptoFailure = "crypto_failure"
}

extension JOSEError {
    /// The JOSE error for a refusal of the JSON reader: the same code, the same reason.
    init(_ error: JSONError) {
        switch error.code {
        case .invalidJSON: self.init(.invalidJSON, error.reason)
        case .tooDeep: self.init(.tooDeep, error.reason)
        case .duplicateMember: self.init(.duplicateMember, error.reason)
        case .unexpectedJSON: self.init(.unexpectedJSON, error.reason)
        }
    }

    /// The result of `read`, a use of the JSON reader, with its ``JSONError`` turned into the ``JOSEError`` of
    /// the same code, so JOSE's callers see one error type.
    static func readingJSON<Value>(_ read: () throws -> Value) throws -> Value {
        do {
            return try read()
        } catch let error as JSONError {
            throw JOSEError(error)
        }
    }
}
