import Foundation
import BatonJOSE
import BatonJSON

/// Where a verifier finds the key for a token's `kid`.
///
/// ``KeySetCache`` (Apple's published keys, refreshed) and ``FixedKeySet`` conform.
public protocol VerificationKeyProvider: Sendable {
    /// The key published under `kid`.
    /// - Throws: ``VerificationError`` `.unknownKey` when there is none (never a fallback to another key),
    ///   `.keysUnavailable` when no key set can be had.
    func key(withID kid: String) async throws -> JWK

    /// The key published under `kid` when the answer needs no waiting (no fetch, no fetch in flight); nil when it
    /// does. The default is nil: such a provider is only asked through ``key(withID:)``.
    /// - Throws: what ``key(withID:)`` would throw, when that is already known.
    func keyWithoutWaiting(withID kid: String) throws -> JWK?
}

extension VerificationKeyProvider {
    /// Nil: the provider is asked through ``key(withID:)``.
    public func keyWithoutWaiting(withID kid: String) throws -> JWK? { nil }
}

/// A fixed key set as a ``VerificationKeyProvider`` (tests, `baton verify --jwks FILE`, pinned keys).
public struct FixedKeySet: VerificationKeyProvider {
    /// The keys.
    public let keySet: JWKSet

    /// Wraps `keySet`.
    public init(_ keySet: JWKSet) { self.keySet = keySet }

    /// The key published under `kid`.
    /// - Throws: ``VerificationError`` `.unknownKey` when the set has none.
    public func key(withID kid: String) async throws -> JWK {
        try requireKey(keySet, kid)
    }

    /// The key published under `kid`: a fixed set never waits.
    /// - Throws: ``VerificationError`` `.unknownKey` when the set has none.
    public func keyWithoutWaiting(withID kid: String) throws -> JWK? {
        try requireKey(keySet, kid)
    }
}

/// The key of `keySet` published under `kid`, or `.unknownKey`.
func requireKey(_ keySet: JWKSet, _ kid: String) throws -> JWK {
    guard let key = keySet.key(withID: kid) else { throw VerificationError(.unknownKey, "no published key has this 'kid'") }
    return key
}

/// The nonce a caller expects in a token: the one nonce policy of Baton (the service, `baton verify` and
/// embedders all pass one of these to ``IdentityTokenVerifier``, which compares in constant time).
///
/// The flow is stated, never guessed: accepting either form would let a token carrying the raw nonce pass where
/// its hash was expected.
public enum ExpectedNonce: Sendable, Equatable {
    /// Native flow: the app sent SHA-256(raw nonce) as hex to Apple; the claim must equal that hash of `raw`.
    case native(raw: String)
    /// Web flow: the nonce was sent as is; the claim must equal `value`.
    case web(String)

    /// How the nonce reached Apple.
    public enum Flow: String, Sendable, CaseIterable {
        /// The app hashed it (Apple's native SDKs): ``ExpectedNonce/native(raw:)``.
        case native
        /// Sent as is (Sign in with Apple JS, the REST web flow): ``ExpectedNonce/web(_:)``.
        case web
    }

    /// The expected nonce for `raw` sent through `flow`.
    public init(_ raw: String, flow: Flow) {
        switch flow {
        case .native: self = .native(raw: raw)
        case .web: self = .web(raw)
        }
    }

    /// The nonce as the caller's session holds it (the raw value, whichever the flow).
    public var value: String {
        switch self {
        case .native(let raw), .web(let raw): raw
        }
    }

    /// Whether `value` has the form of a native flow's claim: 64 lower-case hexadecimal digits, a SHA-256. A web-flow
    /// nonce of that form is refused, so a native token's claim, which anyone holding the token can read, cannot be
    /// presented as a web flow's nonce.
    static func looksHashed(_ value: String) -> Bool {
        value.utf8.count == 64 && value.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }
}

/// Verifies Sign in with Apple identity tokens strictly, in a fixed order.
///
/// 1. size (16 KiB by default, before decoding) and shape: three strict base64url parts;
/// 2. header: a JSON object without duplicate members, no `crit`, `typ` absent or `JWT`;
/// 3. `alg` is exactly `RS256`;
/// 4. the key by `kid` from the key provider: an unknown `kid` is an error, never a fallback; the key must be
///    published for RS256;
/// 5. the signature (length equal to the modulus);
/// 6. claims: a JSON object without duplicates; `iss` exactly the issuer; `aud` (a string, or an array)
///    naming a configured client ID; `exp` not passed and `iat` not in the future (with `leeway`, against
///    the injected clock); `nbf` if present; `sub` a non-empty string of at most 255 characters; the
///    nonce when one is expected; then the optional claims' types.
///
/// Every rejection is a ``VerificationError`` with a stable reason code.
public struct IdentityTokenVerifier: Sendable {
    /// Apple's issuer, `https://appleid.apple.com`.
    public static let appleIssuer = "https://appleid.apple.com"

    /// The client IDs (Services IDs and bundle IDs) a token's `aud` may name.
    public let clientIDs: [String]
    /// The exact `iss` required.
    public let issuer: String
    /// Clock skew tolerated on `exp`, `iat` and `nbf`, in seconds (default 60).
    public let leeway: TimeInterval
    /// The longest token accepted, in bytes (default 16 KiB).
    public let maxTokenLength: Int
    /// Where keys come from.
    public let keys: any VerificationKeyProvider
    /// The clock.
    public let now: @Sendable () -> Date

    /// Creates a verifier.
    /// - Parameters:
    ///   - clientIDs: the accepted audiences; must not be empty.
    ///   - keys: the key provider, usually a ``KeySetCache`` of Apple's keys.
    ///   - issuer: the required `iss` (default ``appleIssuer``).
    ///   - leeway: tolerated clock skew in seconds (default 60).
    ///   - maxTokenLength: the longest token accepted in bytes (default 16 384).
    ///   - now: the clock (default the system clock); inject one in tests.
    public init(
        clientIDs: [String],
        keys: any VerificationKeyProvider,
        issuer: String = IdentityTokenVerifier.appleIssuer,
        leeway: TimeInterval = 60,
        maxTokenLength: Int = CompactJWS.defaultMaxLength,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        precondition(!clientIDs.isEmpty, "IdentityTokenVerifier needs at least one client ID")
        self.clientIDs = clientIDs
        self.keys = keys
        self.issuer = issuer
        self.leeway = leeway
        self.maxTokenLength = maxTokenLength
        self.now = now
    }

    /// Verifies `token` and returns its claims, waiting for the key provider when it must fetch
    /// (``VerificationKeyProvider/key(withID:)``).
    /// - Parameter nonce: the nonce to require, or `nil` when the caller has none.
    /// - Throws: ``VerificationError`` with the reason of the first failed check.
    public func verify(_ token: some StringProtocol, nonce: ExpectedNonce? = nil) async throws -> AppleIDToken {
        let (jws, kid) = try parse(token)
        return try check(jws, kid: kid, key: try await keys.key(withID: kid), nonce: nonce)
    }

    /// Verifies `token` synchronously when its key is at hand (``VerificationKeyProvider/keyWithoutWaiting(withID:)``);
    /// nil when getting the key needs a wait (a fetch), and then the async ``verify(_:nonce:)`` is the way.
    /// - Throws: ``VerificationError`` with the reason of the first failed check.
    public func verifyWithoutWaiting(_ token: some StringProtocol, nonce: ExpectedNonce? = nil) throws -> AppleIDToken? {
        try verify(token, nonce: nonce, key: keys.keyWithoutWaiting(withID:))
    }

    /// Verifies `token` against a fixed key set, synchronously (no fetching).
    /// - Throws: ``VerificationError`` with the reason of the first failed check.
    public func verify(_ token: some StringProtocol, nonce: ExpectedNonce? = nil, keySet: JWKSet) throws -> AppleIDToken {
        // A fixed set always answers: `requireKey` returns its key or throws.
        try verify(token, nonce: nonce) { kid in try requireKey(keySet, kid) }!
    }

    /// Steps 1 to 6, with the key `key` gives for the token's `kid`: the entries differ only in where the key comes
    /// from. Nil when `key` has none without waiting.
    private func verify(_ token: some StringProtocol, nonce: ExpectedNonce?, key: (String) throws -> JWK?) throws -> AppleIDToken? {
        let (jws, kid) = try parse(token)
        guard let key = try key(kid) else { return nil }
        return try check(jws, kid: kid, key: key, nonce: nonce)
    }

    /// Steps 1–3 and the presence of `kid`.
    private func parse(_ token: some StringProtocol) throws -> (CompactJWS, String) {
        let jws: CompactJWS
        do {
            jws = try CompactJWS.parse(String(token), maxLength: maxTokenLength)
        } catch let error as JOSEError {
            switch error.code {
            case .tooLarge: throw VerificationError(.tooLarge, "token longer than \(maxTokenLength) bytes")
            case .criticalExtension, .unsupportedType: throw VerificationError(.unsupportedHeader, error.reason)
            default: throw VerificationError(.malformed, error.description)
            }
        }
        guard jws.header.alg == "RS256" else { throw VerificationError(.algorithmNotAllowed, "only RS256 is accepted") }
        guard let kid = jws.header.kid else { throw VerificationError(.unknownKey, "the header has no 'kid'") }
        return (jws, kid)
    }

    /// Verifies `payload`, a JWS Apple signed that is not an identity token (a server-to-server notification), by
    /// the same steps 1 to 5 and the same `iss` and `aud` checks; its `iat` must be present, not in the future beyond
    /// the leeway, and at most `maxAge` seconds old. The caller reads the rest of the claims.
    /// - Returns: the claims and `iat`, in seconds.
    /// - Throws: ``VerificationError`` with the reason of the first failed check.
    public func verifySignedMessage(_ payload: String, maxAge: TimeInterval) async throws -> (claims: JSONObject, issuedAt: Double) {
        let (jws, kid) = try parse(payload)
        let key = try await keys.key(withID: kid)
        let (claims, fields) = try checkSignatureAndAudience(jws, key: key)
        let current = now().timeIntervalSince1970
        let iat = try numericDate(fields[.iat], "iat", required: true)!
        guard iat <= current + leeway else { throw VerificationError(.notYetValid, "'iat' is in the future") }
        guard current - iat <= maxAge else { throw VerificationError(.expired, "'iat' is older than \(Int(maxAge)) seconds") }
        return (claims, iat)
    }

    /// Steps 4 (key kind) to 6.
    private func check(_ jws: CompactJWS, kid: String, key: JWK, nonce: ExpectedNonce?) throws -> AppleIDToken {
        let (claims, fields) = try checkSignatureAndAudience(jws, key: key)
        let current = now().timeIntervalSince1970
        let exp = try numericDate(fields[.exp], "exp", required: true)!
        let iat = try numericDate(fields[.iat], "iat", required: true)!
        guard current < exp + leeway else { throw VerificationError(.expired, "'exp' has passed") }
        guard iat <= current + leeway else { throw VerificationError(.notYetValid, "'iat' is in the future") }
        let nbf = try numericDate(fields[.nbf], "nbf", required: false)
        if let nbf, nbf > current + leeway { throw VerificationError(.notYetValid, "'nbf' is in the future") }

        guard let subValue = fields[.sub] else { throw VerificationError(.missingClaim, "no 'sub'") }
        // Counting bytes first spares the grapheme walk for every ordinary (ASCII) subject.
        guard case .string(let sub) = subValue, !sub.isEmpty, sub.utf8.count <= 255 || sub.count <= 255 else {
            throw VerificationError(.invalidClaim, "'sub' must be a non-empty string of at most 255 characters")
        }

        if let nonce {
            guard let claim = fields[.nonce] else { throw VerificationError(.missingClaim, "a nonce is expected but the token has none") }
            guard case .string(let value) = claim else { throw VerificationError(.invalidClaim, "'nonce' must be a string") }
            let expected: String
            switch nonce {
            case .native(let raw): expected = Digest.sha256Hex(Array(raw.utf8))
            case .web(let raw):
                guard !ExpectedNonce.looksHashed(raw) else {
                    throw VerificationError(.nonceMismatch, "a web-flow nonce may not be a SHA-256 in hex, a native claim's form")
                }
                expected = raw
            }
            guard ConstantTime.equals(value, expected) else { throw VerificationError(.nonceMismatch, "'nonce' does not match") }
        }

        return try AppleIDToken(claims: claims, fields: fields, keyID: kid)
    }

    /// Step 4's key kind, step 5, and step 6's `iss` and `aud`: what every message Apple signs for this app must pass.
    private func checkSignatureAndAudience(_ jws: CompactJWS, key: JWK) throws -> (JSONObject, ClaimFields) {
        guard key.allowedAlgorithm == "RS256", case .rsa(let rsa) = key.key else {
            throw VerificationError(.badSignature, "the key for this 'kid' is not published for RS256")
        }
        guard rsa.verifyRS256(signature: jws.signature, message: jws.signingInput) else {
            throw VerificationError(.badSignature, "the signature does not verify")
        }
        let claims: JSONObject
        do {
            claims = try jws.claims()
        } catch let error as JOSEError {
            throw VerificationError(.malformed, "payload: \(error.description)")
        }

        let fields = ClaimFields(claims)

        guard let iss = fields[.iss] else { throw VerificationError(.missingClaim, "no 'iss'") }
        guard case .string(issuer) = iss else { throw VerificationError(.wrongIssuer, "'iss' is not \(issuer)") }

        switch fields[.aud] {
        case nil:
            throw VerificationError(.missingClaim, "no 'aud'")
        case .string(let single)?:
            guard clientIDs.contains(single) else { throw VerificationError(.wrongAudience, "'aud' names no configured client ID") }
        case .array(let elements)?:
            var named = false
            for element in elements {
                guard case .string(let value) = element else { throw VerificationError(.invalidClaim, "'aud' must hold strings") }
                named = named || clientIDs.contains(value)
            }
            guard named else { throw VerificationError(.wrongAudience, "'aud' names no configured client ID") }
        default:
            throw VerificationError(.invalidClaim, "'aud' must be a string or an array of strings")
        }
        return (claims, fields)
    }

    /// A NumericDate claim in seconds; `nil` when absent and not required.
    private func numericDate(_ value: JSONValue?, _ name: String, required: Bool) throws -> Double? {
        switch value {
        case nil:
            if required { throw VerificationError(.missingClaim, "no '\(name)'") }
            return nil
        case .number(let seconds)? where seconds >= 0:
            return seconds
        default:
            throw VerificationError(.invalidClaim, "'\(name)' must be a non-negative NumericDate")
        }
    }
}
