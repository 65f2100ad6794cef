import BatonJSON

/// The protected header of a compact JWS, as far as Baton reads it.
///
/// `jwk`, `jku`, `x5u`, `x5c` and any other member stay in ``raw`` and are never used to find a key.
public struct JWSHeader: Sendable, Equatable {
    /// The algorithm (`alg`), always present.
    public let alg: String
    /// The key ID (`kid`), when present.
    public let kid: String?
    /// The type (`typ`), `JWT` when present.
    public let typ: String?
    /// The whole header object.
    public let raw: JSONObject

    /// Reads a header object.
    /// - Throws: ``JOSEError`` `.invalidHeader` when `alg` is missing or not a string or `kid`/`typ` is not a
    ///   string; `.criticalExtension` when `crit` is present; `.unsupportedType` when `typ` is not `JWT`.
    public init(_ raw: JSONObject) throws {
        var alg: String?
        var kid: String?
        var typ: String?
        for member in raw {
            switch member.key {
            case "alg":
                guard case .string(let value) = member.value else { throw JOSEError(.invalidHeader, "'alg' must be a string") }
                alg = value
            case "kid":
                guard case .string(let value) = member.value else { throw JOSEError(.invalidHeader, "'kid' must be a string") }
                kid = value
            case "typ":
                guard case .string(let value) = member.value else { throw JOSEError(.invalidHeader, "'typ' must be a string") }
                typ = value
            case "crit":
                throw JOSEError(.criticalExtension, "'crit' names extensions this verifier does not understand")
            default:
                continue
            }
        }
        guard let alg else { throw JOSEError(.invalidHeader, "header without 'alg'") }
        if let typ, typ != "JWT" { throw JOSEError(.unsupportedType, "'typ' must be \"JWT\"") }
        self.alg = alg
        self.kid = kid
        self.typ = typ
        self.raw = raw
    }
}

/// A parsed JWS in compact serialization (RFC 7515 §7.1): `header.payload.signature`.
///
/// Parsing checks shape and header only; it does not verify the signature (see ``JWK/verifies(_:)``).
public struct CompactJWS: Sendable {
    /// The protected header.
    public let header: JWSHeader
    /// The decoded payload bytes (JSON text for a JWT).
    public let payload: [UInt8]
    /// The ASCII bytes of `header.payload` exactly as they appeared: what the signature covers.
    public let signingInput: [UInt8]
    /// The decoded signature bytes.
    public let signature: [UInt8]

    /// The longest token accepted by default: 16 KiB.
    public static let defaultMaxLength = 16_384

    /// Parses a compact JWS.
    ///
    /// The length limit is applied before any decoding. Exactly three dot-separated parts, each strict
    /// base64url, and a header that is a JSON object accepted by ``JWSHeader``. An empty signature parses
    /// (an unsecured JWS is well-formed) and verifies under no key.
    /// - Throws: ``JOSEError`` `.tooLarge`, `.malformedJWS`, `.invalidBase64`, `.invalidJSON`, `.tooDeep`,
    ///   `.duplicateMember`, `.unexpectedJSON`, `.invalidHeader`, `.criticalExtension`, `.unsupportedType`.
    public static func parse(_ token: some StringProtocol, maxLength: Int = defaultMaxLength) throws -> CompactJWS {
        let utf8 = token.utf8
        guard utf8.count <= maxLength else { throw JOSEError(.tooLarge, "token longer than \(maxLength) bytes") }
        if let parsed = try utf8.withContiguousStorageIfAvailable({ try parse(bytes: $0) }) { return parsed }
        return try Array(utf8).withUnsafeBufferPointer { try parse(bytes: $0) }
    }

    /// Parses a compact JWS held in a `String`: the same as the generic ``parse(_:maxLength:)``, without
    /// generic dispatch on the verification hot path.
    public static func parse(_ token: String, maxLength: Int = defaultMaxLength) throws -> CompactJWS {
        guard token.utf8.count <= maxLength else { throw JOSEError(.tooLarge, "token longer than \(maxLength) bytes") }
        var token = token
        return try token.withUTF8 { try parse(bytes: $0) }
    }

    private static func parse(bytes: UnsafeBufferPointer<UInt8>) throws -> CompactJWS {
        guard let firstDot = nextDot(in: bytes, from: 0),
              let secondDot = nextDot(in: bytes, from: firstDot + 1),
              nextDot(in: bytes, from: secondDot + 1) == nil else {
            throw JOSEError(.malformedJWS, "expected three parts separated by '.'")
        }
        guard firstDot > 0 else { throw JOSEError(.malformedJWS, "empty header") }
        func decode(_ range: Range<Int>) throws -> [UInt8] {
            guard let decoded = Base64URL.decode(bytes: UnsafeBufferPointer(rebasing: bytes[range])) else {
                throw JOSEError(.invalidBase64, "a token part is not strict base64url")
            }
            return decoded
        }
        let headerBytes = try decode(0..<firstDot)
        let header = try JWSHeader(JOSEError.readingJSON { try JSON.parseObject(headerBytes) })
        let payload = try decode((firstDot + 1)..<secondDot)
        let signature = try decode((secondDot + 1)..<bytes.count)
        return CompactJWS(
            header: header,
            payload: payload,
            signingInput: Array(UnsafeBufferPointer(rebasing: bytes[0..<secondDot])),
            signature: signature
        )
    }

    /// The index of the first '.' in `bytes` at or after `start`, scanning eight bytes at a time.
    private static func nextDot(in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        guard let base = bytes.baseAddress else { return nil }
        let raw = UnsafeRawPointer(base)
        var index = start
        let dots: UInt64 = 0x2E2E_2E2E_2E2E_2E2E, ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        while index + 8 <= bytes.count {
            let word = raw.loadUnaligned(fromByteOffset: index, as: UInt64.self) ^ dots
            // Non-zero exactly when some byte of `word` is zero, i.e. some byte was '.'.
            if (word &- ones) & ~word & highs != 0 { break }
            index += 8
        }
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: ".") { return index }
            index += 1
        }
        return nil
    }

    /// The payload parsed as a JWT claims set: a JSON object without duplicate names.
    /// - Throws: ``JOSEError`` `.invalidJSON`, `.tooDeep`, `.duplicateMember`, `.unexpectedJSON`.
    public func claims(maxDepth: Int = 16) throws -> JSONObject {
        try JOSEError.readingJSON { try JSON.parseObject(payload, maxDepth: maxDepth) }
    }
}

/// Producing compact JWS strings.
public enum JWS {
    /// Signs `payload` with RS256 into a compact JWS whose header is `{"alg":"RS256","kid":kid}` followed by
    /// `extraHeader`'s members (a member of `extraHeader` named `alg` or `kid` replaces the default).
    /// - Throws: ``JOSEError`` `.cryptoFailure` if signing fails.
    public static func signRS256(payload: [UInt8], key: RSAPrivateKey, kid: String, extraHeader: JSONObject = [:]) throws -> String {
        try compact(header: header(alg: "RS256", kid: kid, extra: extraHeader), payload: payload) { try key.signRS256($0) }
    }

    /// Signs `payload` with ES256 (raw `r||s` signature) into a compact JWS whose header is
    /// `{"alg":"ES256","kid":kid}` followed by `extraHeader`'s members.
    /// - Throws: ``JOSEError`` `.cryptoFailure` if signing fails.
    public static func signES256(payload: [UInt8], key: P256PrivateKey, kid: String, extraHeader: JSONObject = [:]) throws -> String {
        try compact(header: header(alg: "ES256", kid: kid, extra: extraHeader), payload: payload) { try key.signES256($0) }
    }

    /// Assembles a compact JWS from any header and payload, signing the signing input with `sign`.
    ///
    /// For tests and tools that need unusual tokens; the header is written as given.
    public static func compact(header: JSONObject, payload: [UInt8], sign: ([UInt8]) throws -> [UInt8]) rethrows -> String {
        let signingInput = Base64URL.encode(JSON.serializeBytes(.object(header))) + "." + Base64URL.encode(payload)
        let signature = try sign(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    private static func header(alg: String, kid: String, extra: JSONObject) -> JSONObject {
        var header: JSONObject = ["alg": .string(alg), "kid": .string(kid)]
        for member in extra { header[member.key] = member.value }
        return header
    }
}
