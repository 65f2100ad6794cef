import BatonErrors

/// Why an identity token was rejected: a stable ``VerificationErrorCode`` plus a short reason.
///
/// The reason names the failed check (for example "'aud' is not a configured client ID") and never
/// contains the token, claim values, emails or key material. Errors are equal when their codes are.
public typealias VerificationError = CodedError<VerificationErrorCode>

/// Stable rejection codes; raw values are the snake_case strings used on the command line and in HTTP errors.
public enum VerificationErrorCode: String, ErrorCode, CaseIterable {
    /// Not a compact JWS with a JSON-object header and payload (bad shape, base64url, JSON, duplicates, nesting).
    case malformed
    /// Longer than the accepted maximum (16 KiB by default), checked before any decoding.
    case tooLarge = "too_large"
    /// A header Baton refuses to process: `crit` present, or `typ` other than `JWT`.
    case unsupportedHeader = "unsupported_header"
    /// `alg` is not `RS256` (including `none`, `HS256`, `RS512`, `PS256`, `ES256`).
    case algorithmNotAllowed = "algorithm_not_allowed"
    /// No `kid`, or a `kid` the key set does not contain (never a fallback key).
    case unknownKey = "unknown_key"
    /// The signature does not verify with the selected key (or the key is not published for RS256).
    case badSignature = "bad_signature"
    /// `iss` is not exactly the configured issuer.
    case wrongIssuer = "wrong_issuer"
    /// `aud` names none of the configured client IDs.
    case wrongAudience = "wrong_audience"
    /// `exp` is in the past, beyond the leeway.
    case expired
    /// `iat` or `nbf` is in the future, beyond the leeway.
    case notYetValid = "not_yet_valid"
    /// A required claim (`iss`, `aud`, `exp`, `iat`, `sub`, or `nonce` when one is expected) is absent.
    case missingClaim = "missing_claim"
    /// A claim of the wrong type or out of range (for example an empty `sub`).
    case invalidClaim = "invalid_claim"
    /// The `nonce` claim does not match the expected nonce.
    case nonceMismatch = "nonce_mismatch"
    /// No usable key set: the key server could not be reached and no good set is cached.
    case keysUnavailable = "keys_unavailable"
}
