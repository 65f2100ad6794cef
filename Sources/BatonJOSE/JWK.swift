import BatonJSON

/// A public JSON Web Key (RFC 7517) of a kind Baton verifies with: RSA or EC P-256.
public struct JWK: Sendable, Equatable {
    /// The key material.
    public enum Key: Sendable, Equatable {
        /// An RSA public key (RS256).
        case rsa(RSAPublicKey)
        /// An EC P-256 public key (ES256).
        case p256(P256PublicKey)
    }

    /// Key ID (`kid`), used to select the key for a token.
    public var kid: String?
    /// Intended use (`use`); a key whose use is present and not `sig` verifies nothing.
    public var use: String?
    /// The algorithm the key is published for (`alg`); when present, the only one it verifies.
    public var alg: String?
    /// The key material.
    public var key: Key

    /// Creates a JWK from key material and optional metadata.
    public init(key: Key, kid: String? = nil, use: String? = nil, alg: String? = nil) {
        self.key = key
        self.kid = kid
        self.use = use
        self.alg = alg
    }

    /// Reads one JWK object; `nil` for a key type Baton does not use (neither RSA nor EC P-256), which callers skip.
    /// - Throws: ``JOSEError`` `.invalidKey` for a malformed supported key (missing or non-string members,
    ///   bad base64url, a point off the curve), `.keyPolicy` for an RSA key under 2048 bits or with e ≠ 65537.
    public init?(json object: JSONObject) throws {
        guard case .string(let kty)? = object["kty"] else { throw JOSEError(.invalidKey, "JWK without a string 'kty'") }
        func optionalString(_ name: String) throws -> String? {
            switch object[name] {
            case nil: return nil
            case .string(let value)?: return value
            default: throw JOSEError(.invalidKey, "JWK member '\(name)' must be a string")
            }
        }
        func bytes(_ name: String) throws -> [UInt8] {
            guard case .string(let text)? = object[name] else { throw JOSEError(.invalidKey, "JWK without a string '\(name)'") }
            do { return try Base64URL.decode(text) } catch { throw JOSEError(.invalidKey, "JWK member '\(name)' is not base64url") }
        }
        let material: Key
        switch kty {
        case "RSA":
            material = .rsa(try RSAPublicKey(modulus: bytes("n"), exponent: bytes("e")))
        case "EC":
            guard try optionalString("crv") == "P-256" else { return nil }
            material = .p256(try P256PublicKey(x: bytes("x"), y: bytes("y")))
        default:
            return nil
        }
        self.init(key: material, kid: try optionalString("kid"), use: try optionalString("use"), alg: try optionalString("alg"))
    }

    /// The one JWS algorithm this key may verify: `RS256` for RSA, `ES256` for P-256, and none when
    /// the published `alg` names another algorithm or `use` is not `sig`.
    public var allowedAlgorithm: String? {
        if let use, use != "sig" { return nil }
        let natural: String
        switch key {
        case .rsa: natural = "RS256"
        case .p256: natural = "ES256"
        }
        if let alg, alg != natural { return nil }
        return natural
    }

    /// Whether `jws` carries an algorithm this key allows and a valid signature by it.
    public func verifies(_ jws: CompactJWS) -> Bool {
        guard let allowed = allowedAlgorithm, jws.header.alg == allowed else { return false }
        switch key {
        case .rsa(let rsa): return rsa.verifyRS256(signature: jws.signature, message: jws.signingInput)
        case .p256(let ec): return ec.verifyES256(signature: jws.signature, message: jws.signingInput)
        }
    }

    /// The key as a JWK JSON object (public members only).
    public func json() -> JSONValue {
        var object = JSONObject()
        switch key {
        case .rsa(let rsa):
            object["kty"] = "RSA"
            if let kid { object["kid"] = .string(kid) }
            if let use { object["use"] = .string(use) }
            if let alg { object["alg"] = .string(alg) }
            object["n"] = .string(Base64URL.encode(rsa.modulus))
            object["e"] = .string(Base64URL.encode(rsa.exponent))
        case .p256(let ec):
            object["kty"] = "EC"
            if let kid { object["kid"] = .string(kid) }
            if let use { object["use"] = .string(use) }
            if let alg { object["alg"] = .string(alg) }
            object["crv"] = "P-256"
            object["x"] = .string(Base64URL.encode(ec.x))
            object["y"] = .string(Base64URL.encode(ec.y))
        }
        return .object(object)
    }
}

/// A JWK Set (RFC 7517 §5): the keys a token issuer publishes, selected by `kid`.
public struct JWKSet: Sendable, Equatable {
    /// The usable keys, in published order.
    public let keys: [JWK]

    /// Creates a set from keys.
    ///
    /// Keys are taken as given: use ``init(validating:)`` to refuse duplicate key IDs.
    public init(keys: [JWK]) {
        self.keys = keys
    }

    /// Creates a set from keys, refusing two keys with the same `kid`.
    /// - Throws: ``JOSEError`` `.duplicateKeyID`.
    public init(validating keys: [JWK]) throws {
        var seen = Set<String>()
        for key in keys {
            if let kid = key.kid, !seen.insert(kid).inserted {
                throw JOSEError(.duplicateKeyID, "kid '\(kid)' appears twice")
            }
        }
        self.keys = keys
    }

    /// Parses a JWK Set document `{"keys": [...]}`.
    ///
    /// Keys of other types or curves are skipped; any malformed or policy-breaking RSA / P-256 key, or a
    /// repeated `kid`, refuses the whole set (a key server that publishes one is not to be trusted half-way).
    /// - Throws: ``JOSEError`` `.invalidJSON`/`.duplicateMember`/`.tooDeep` for bad JSON, `.unexpectedJSON`
    ///   when `keys` is missing or not an array of objects, `.invalidKey`, `.keyPolicy`, `.duplicateKeyID`.
    public init(json bytes: some Collection<UInt8>) throws {
        let document = try JOSEError.readingJSON { try JSON.parseObject(bytes) }
        guard case .array(let elements)? = document["keys"] else {
            throw JOSEError(.unexpectedJSON, "JWK Set without a 'keys' array")
        }
        var keys: [JWK] = []
        for element in elements {
            guard case .object(let object) = element else { throw JOSEError(.unexpectedJSON, "JWK Set element is not an object") }
            if let key = try JWK(json: object) { keys.append(key) }
        }
        try self.init(validating: keys)
    }

    /// The key with ID `kid`, or `nil`: there is never a fallback to another key.
    public func key(withID kid: String) -> JWK? {
        keys.first { $0.kid == kid }
    }

    /// The set as a JWK Set JSON document.
    public func json() -> JSONValue {
        .object(["keys": .array(keys.map { $0.json() })])
    }
}
