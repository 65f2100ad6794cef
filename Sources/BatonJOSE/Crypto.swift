// The only file of JOSE that touches OpenSSL: key objects and the RS256 / ES256 primitives.
internal import CBatonOpenSSL
import Synchronization

// MARK: - Helpers

/// Drains OpenSSL's error queue into a ``JOSEError`` naming the failed `operation`.
private func openSSLError(_ code: JOSEError.Code, _ operation: String) -> JOSEError {
    var first: UInt = 0
    while true {
        let error = ERR_get_error()
        if error == 0 { break }
        if first == 0 { first = error }
    }
    guard first != 0 else { return JOSEError(code, operation) }
    var buffer = [CChar](repeating: 0, count: 256)
    ERR_error_string_n(first, &buffer, buffer.count)
    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return JOSEError(code, "\(operation): \(text)")
}

/// Runs `body` over the bytes of `collection`, copying only when they are not contiguous.
@inline(__always)
private func withBytes<R>(_ collection: some Collection<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
    if let result = try collection.withContiguousStorageIfAvailable(body) { return result }
    return try Array(collection).withUnsafeBufferPointer(body)
}

/// Removes leading zero bytes of a big-endian integer.
private func stripLeadingZeros(_ bytes: [UInt8]) -> [UInt8] {
    guard let first = bytes.firstIndex(where: { $0 != 0 }) else { return [] }
    return Array(bytes[first...])
}

/// The big-endian bytes of `bignum`, left-padded to `length` when given.
private func bignumBytes(_ bignum: OpaquePointer, length: Int? = nil) -> [UInt8] {
    let count = length ?? Int((BN_num_bits(bignum) + 7) / 8)
    var bytes = [UInt8](repeating: 0, count: count)
    if length != nil {
        _ = BN_bn2binpad(bignum, &bytes, Int32(count))
    } else {
        _ = BN_bn2bin(bignum, &bytes)
    }
    return bytes
}

/// Reads a big-number parameter (`"n"`, `"e"`, `"qx"`, …) of `key`.
private func bignumParameter(_ key: OpaquePointer, _ name: String, length: Int? = nil) throws -> [UInt8] {
    var bignum: OpaquePointer?
    guard EVP_PKEY_get_bn_param(key, name, &bignum) == 1, let bignum else {
        throw openSSLError(.cryptoFailure, "reading key parameter \(name)")
    }
    defer { BN_free(bignum) }
    return bignumBytes(bignum, length: length)
}

/// OpenSSL parameter names and values as C strings that live for the whole process:
/// `OSSL_PARAM_BLD` keeps pointers to them, not copies, until `OSSL_PARAM_BLD_to_param`.
private enum ParameterName {
    // nonisolated(unsafe): written once at initialization, then only read; never freed.
    nonisolated(unsafe) static let n = strdup("n")!
    nonisolated(unsafe) static let e = strdup("e")!
    nonisolated(unsafe) static let group = strdup("group")!
    nonisolated(unsafe) static let publicKey = strdup("pub")!
    nonisolated(unsafe) static let p256 = strdup("P-256")!
}

/// Builds a public `EVP_PKEY` of type `type` from big numbers, an optional UTF-8 parameter and an
/// optional octet-string parameter; every referenced buffer stays alive until the key is built.
private func publicKey(
    type: String,
    bignums: [(UnsafeMutablePointer<CChar>, OpaquePointer)] = [],
    utf8: (UnsafeMutablePointer<CChar>, UnsafeMutablePointer<CChar>)? = nil,
    octets: (UnsafeMutablePointer<CChar>, [UInt8])? = nil
) throws -> OpaquePointer {
    guard let builder = OSSL_PARAM_BLD_new() else { throw openSSLError(.cryptoFailure, "allocating parameters") }
    defer { OSSL_PARAM_BLD_free(builder) }
    let octetBytes = octets?.1 ?? []
    return try octetBytes.withUnsafeBytes { octetBuffer in
        var pushed = true
        for (name, value) in bignums { pushed = pushed && OSSL_PARAM_BLD_push_BN(builder, name, value) == 1 }
        if let (name, value) = utf8 { pushed = pushed && OSSL_PARAM_BLD_push_utf8_string(builder, name, value, 0) == 1 }
        if let name = octets?.0 {
            pushed = pushed && OSSL_PARAM_BLD_push_octet_string(builder, name, octetBuffer.baseAddress, octetBuffer.count) == 1
        }
        guard pushed, let parameters = OSSL_PARAM_BLD_to_param(builder) else {
            throw openSSLError(.invalidKey, "building key parameters")
        }
        defer { OSSL_PARAM_free(parameters) }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, type, nil) else { throw openSSLError(.cryptoFailure, "key context") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_fromdata_init(context) == 1,
              EVP_PKEY_fromdata(context, &key, COpenSSL_EVP_PKEY_PUBLIC_KEY(), parameters) == 1, let key else {
            throw openSSLError(.invalidKey, "importing \(type) public key")
        }
        return key
    }
}

/// Generates a key pair of `type`, configured by `configure` after `EVP_PKEY_keygen_init`.
private func generateKey(type: String, _ configure: (OpaquePointer) -> Int32) throws -> OpaquePointer {
    guard let context = EVP_PKEY_CTX_new_from_name(nil, type, nil) else { throw openSSLError(.cryptoFailure, "key context") }
    defer { EVP_PKEY_CTX_free(context) }
    var key: OpaquePointer?
    guard EVP_PKEY_keygen_init(context) == 1, configure(context) == 1,
          EVP_PKEY_generate(context, &key) == 1, let key else {
        throw openSSLError(.cryptoFailure, "generating \(type) key")
    }
    return key
}

/// The public half of the private `key`, read by `read`; when it throws, `key` is freed first (a private key's
/// init owns `key` from its start, and a throwing init runs no `deinit`).
private func publicHalf<Public>(of key: OpaquePointer, _ read: (OpaquePointer) throws -> Public) throws -> Public {
    do {
        return try read(key)
    } catch {
        EVP_PKEY_free(key)
        throw error
    }
}

/// Reads a PKCS#8 PEM private key (`-----BEGIN PRIVATE KEY-----` only: never encrypted, never legacy forms).
private func readPKCS8PEM(_ pem: String) throws -> OpaquePointer {
    let trimmed = pem.trimmingASCIIWhitespace()
    guard trimmed.hasPrefix("-----BEGIN PRIVATE KEY-----"), trimmed.hasSuffix("-----END PRIVATE KEY-----") else {
        throw JOSEError(.invalidKey, "expected an unencrypted PKCS#8 PEM private key")
    }
    let bytes = Array(trimmed.utf8)
    return try bytes.withUnsafeBytes { raw in
        guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { throw openSSLError(.cryptoFailure, "BIO") }
        defer { BIO_free(bio) }
        guard let key = PEM_read_bio_PrivateKey(bio, nil, nil, nil) else { throw openSSLError(.invalidKey, "reading PEM private key") }
        return key
    }
}

/// The PEM text `write` puts in a memory BIO (returning 1 on success); empty when OpenSSL fails.
private func pemText(_ write: (OpaquePointer) -> Int32) -> String {
    guard let bio = BIO_new(BIO_s_mem()) else { return "" }
    defer { BIO_free(bio) }
    guard write(bio) == 1 else {
        ERR_clear_error()
        return ""
    }
    var data: UnsafeMutablePointer<CChar>?
    let length = COpenSSL_BIO_get_mem_data(bio, &data)
    guard let data, length > 0 else { return "" }
    return String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
}

/// Writes `key` as unencrypted PKCS#8 PEM.
private func writePKCS8PEM(_ key: OpaquePointer) -> String {
    pemText { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }
}

/// SHA-256 digest-and-verify of `signature` over `message` with `key` (EVP_DigestVerify, default padding).
@inline(__always)
private func digestVerify(_ key: OpaquePointer, signature: UnsafeBufferPointer<UInt8>, message: UnsafeBufferPointer<UInt8>) -> Bool {
    guard let context = EVP_MD_CTX_new() else { return false }
    defer { EVP_MD_CTX_free(context) }
    guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1 else {
        ERR_clear_error()
        return false
    }
    let result = EVP_DigestVerify(context, signature.baseAddress, signature.count, message.baseAddress, message.count)
    if result != 1 { ERR_clear_error() }
    return result == 1
}

/// SHA-256 digest-and-sign of `message` with `key`; the signature in OpenSSL's form (PKCS#1 v1.5 or DER ECDSA).
private func digestSign(_ key: OpaquePointer, message: UnsafeBufferPointer<UInt8>) throws -> [UInt8] {
    guard let context = EVP_MD_CTX_new() else { throw openSSLError(.cryptoFailure, "digest context") }
    defer { EVP_MD_CTX_free(context) }
    var length = 0
    guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1,
          EVP_DigestSign(context, nil, &length, message.baseAddress, message.count) == 1 else {
        throw openSSLError(.cryptoFailure, "signing")
    }
    var signature = [UInt8](repeating: 0, count: length)
    guard EVP_DigestSign(context, &signature, &length, message.baseAddress, message.count) == 1 else {
        throw openSSLError(.cryptoFailure, "signing")
    }
    return Array(signature.prefix(length))
}

extension String {
    fileprivate func trimmingASCIIWhitespace() -> Substring {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\n" || $0 == "\r" || $0 == "\t" }
        guard let start = firstIndex(where: { !isSpace($0) }), let end = lastIndex(where: { !isSpace($0) }) else { return "" }
        return self[start...end]
    }
}

// MARK: - RSA

/// An `EVP_PKEY_CTX` ready for RS256 verification, as kept in a key's pool.
// @unchecked Sendable: a context in the pool is owned by the pool; a thread that takes one uses it alone
// until it returns it or frees it.
private struct VerifyContext: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// An RSA public key for RS256 (RSASSA-PKCS1-v1_5 with SHA-256), held as an OpenSSL `EVP_PKEY`.
///
/// Policy, applied at construction: the modulus is 2048 to 8192 bits and the public exponent is 65537.
// @unchecked Sendable: the EVP_PKEY is never modified after init, and OpenSSL 3 allows concurrent
// read-only use of one key from several threads; each pooled EVP_PKEY_CTX is used by one thread at a
// time (taken from and returned to the Mutex-guarded pool); deinit frees them all once no reference remains.
public final class RSAPublicKey: @unchecked Sendable, Equatable {
    let key: OpaquePointer
    /// The modulus, big-endian, without leading zero bytes.
    public let modulus: [UInt8]
    /// The public exponent, big-endian, without leading zero bytes (always 65537).
    public let exponent: [UInt8]
    /// The size of the modulus in bits.
    public let modulusBits: Int
    /// The size of a signature in bytes (the modulus length).
    public let signatureLength: Int
    /// Verification contexts (`EVP_PKEY_CTX` set up for PKCS#1 v1.5 with SHA-256 on this key), lent to one
    /// thread at a time so each verification skips OpenSSL's per-call context setup and algorithm lookups.
    private let contexts = Mutex<[VerifyContext]>([])
    /// The most contexts kept for reuse (one per concurrently verifying thread is enough).
    private static let maxPooledContexts = 64

    /// Creates a key from big-endian modulus and exponent bytes (leading zeros allowed).
    /// - Throws: ``JOSEError`` `.keyPolicy` for a modulus outside 2048–8192 bits or an exponent other
    ///   than 65537; `.invalidKey` when OpenSSL refuses the numbers.
    public init(modulus: [UInt8], exponent: [UInt8]) throws {
        let modulus = stripLeadingZeros(modulus)
        let exponent = stripLeadingZeros(exponent)
        guard exponent == [0x01, 0x00, 0x01] else { throw JOSEError(.keyPolicy, "RSA public exponent must be 65537") }
        let bits = modulus.isEmpty ? 0 : (modulus.count - 1) * 8 + (8 - modulus[0].leadingZeroBitCount)
        guard bits >= 2048 else { throw JOSEError(.keyPolicy, "RSA modulus of \(bits) bits is under 2048") }
        guard bits <= 8192 else { throw JOSEError(.keyPolicy, "RSA modulus of \(bits) bits is over 8192") }
        guard modulus[modulus.count - 1] & 1 == 1 else { throw JOSEError(.invalidKey, "RSA modulus is even") }
        let n = BN_bin2bn(modulus, Int32(modulus.count), nil)
        let e = BN_bin2bn(exponent, Int32(exponent.count), nil)
        defer { BN_free(n); BN_free(e) }
        guard let n, let e else { throw openSSLError(.cryptoFailure, "big numbers") }
        self.key = try publicKey(type: "RSA", bignums: [(ParameterName.n, n), (ParameterName.e, e)])
        self.modulus = modulus
        self.exponent = exponent
        self.modulusBits = bits
        self.signatureLength = modulus.count
    }

    deinit {
        contexts.withLock { pooled in
            for context in pooled { EVP_PKEY_CTX_free(context.pointer) }
        }
        EVP_PKEY_free(key)
    }

    /// Whether `signature` is a valid RS256 signature of `message`.
    ///
    /// The signature must be exactly as long as the modulus; OpenSSL also rejects a value not below it.
    /// SHA-256 of the message, then `EVP_PKEY_verify` (PKCS#1 v1.5, DigestInfo for SHA-256) on a pooled context.
    public func verifyRS256(signature: [UInt8], message: some Collection<UInt8>) -> Bool {
        guard signature.count == signatureLength else { return false }
        return signature.withUnsafeBufferPointer { signature in
            withBytes(message) { pooledVerify(signature: signature, message: $0) }
        }
    }

    /// Whether `signature` is a valid RS256 signature of `message`: the byte-array form of the generic
    /// method above, without generic dispatch.
    public func verifyRS256(signature: [UInt8], message: [UInt8]) -> Bool {
        guard signature.count == signatureLength else { return false }
        return signature.withUnsafeBufferPointer { signature in
            message.withUnsafeBufferPointer { pooledVerify(signature: signature, message: $0) }
        }
    }

    /// The verification primitive behind ``verifyRS256(signature:message:)-([UInt8],[UInt8])`` without its
    /// length check: a baseline for `baton-bench verify`.
    package func primitiveVerifyRS256(signature: [UInt8], message: [UInt8]) -> Bool {
        signature.withUnsafeBufferPointer { signature in
            message.withUnsafeBufferPointer { pooledVerify(signature: signature, message: $0) }
        }
    }

    private func pooledVerify(signature: UnsafeBufferPointer<UInt8>, message: UnsafeBufferPointer<UInt8>) -> Bool {
        var digest: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &digest) { digestBytes -> Bool in
            let digestPointer = digestBytes.baseAddress!.assumingMemoryBound(to: UInt8.self)
            guard SHA256(message.baseAddress, message.count, digestPointer) != nil,
                  let context = contexts.withLock({ $0.popLast()?.pointer }) ?? makeVerifyContext() else { return false }
            let result = EVP_PKEY_verify(context, signature.baseAddress, signature.count, digestPointer, 32)
            guard result == 1 else {
                // A context that saw a failure is not reused: start the next verification from a clean one.
                ERR_clear_error()
                EVP_PKEY_CTX_free(context)
                return false
            }
            let kept = contexts.withLock { pooled -> Bool in
                guard pooled.count < Self.maxPooledContexts else { return false }
                pooled.append(VerifyContext(pointer: context))
                return true
            }
            if !kept { EVP_PKEY_CTX_free(context) }
            return true
        }
    }

    /// A context set up for RS256 verification with this key, or `nil` if OpenSSL refuses.
    private func makeVerifyContext() -> OpaquePointer? {
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else {
            ERR_clear_error()
            return nil
        }
        guard EVP_PKEY_verify_init(context) == 1,
              EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PADDING) == 1,
              EVP_PKEY_CTX_set_signature_md(context, EVP_sha256()) == 1 else {
            ERR_clear_error()
            EVP_PKEY_CTX_free(context)
            return nil
        }
        return context
    }

    /// The bare OpenSSL verification (`EVP_DigestVerifyInit` + `EVP_DigestVerify` with this key), without
    /// the length check: the baseline `baton-bench verify` compares full token verification against.
    package func opensslVerifyRS256(signature: [UInt8], message: [UInt8]) -> Bool {
        signature.withUnsafeBufferPointer { signature in
            message.withUnsafeBufferPointer { digestVerify(key, signature: signature, message: $0) }
        }
    }

    /// The key as SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    public func pem() -> String { pemText { PEM_write_bio_PUBKEY($0, key) } }

    /// Keys are equal when their modulus and exponent are.
    public static func == (lhs: RSAPublicKey, rhs: RSAPublicKey) -> Bool {
        lhs.modulus == rhs.modulus && lhs.exponent == rhs.exponent
    }
}

/// An RSA private key that signs RS256, for tests, the emulator and benchmarks.
// @unchecked Sendable: the EVP_PKEY is never modified after init; signing with one key from several
// threads is allowed by OpenSSL 3 (each call uses its own EVP_MD_CTX).
public final class RSAPrivateKey: @unchecked Sendable {
    let key: OpaquePointer
    /// The matching public key.
    public let publicKey: RSAPublicKey

    private init(key: OpaquePointer) throws {
        self.key = key
        publicKey = try publicHalf(of: key) { try RSAPublicKey(modulus: bignumParameter($0, "n"), exponent: bignumParameter($0, "e")) }
    }

    deinit { EVP_PKEY_free(key) }

    /// Generates a new key with public exponent 65537.
    /// - Parameter bits: modulus size, 2048 (the default) to 8192.
    /// - Throws: ``JOSEError`` `.keyPolicy` for a size outside that range, `.cryptoFailure` if OpenSSL fails.
    public static func generate(bits: Int = 2048) throws -> RSAPrivateKey {
        guard (2048...8192).contains(bits) else { throw JOSEError(.keyPolicy, "RSA key size must be 2048 to 8192 bits") }
        let key = try generateKey(type: "RSA") { EVP_PKEY_CTX_set_rsa_keygen_bits($0, Int32(bits)) }
        return try RSAPrivateKey(key: key)
    }

    /// Reads an unencrypted PKCS#8 PEM RSA private key (`-----BEGIN PRIVATE KEY-----`).
    /// - Throws: ``JOSEError`` `.invalidKey` for anything else, `.keyPolicy` when its public half breaks the RSA policy.
    public convenience init(pem: String) throws {
        let key = try readPKCS8PEM(pem)
        guard EVP_PKEY_is_a(key, "RSA") == 1 else {
            EVP_PKEY_free(key)
            throw JOSEError(.invalidKey, "not an RSA key")
        }
        try self.init(key: key)
    }

    /// The key as unencrypted PKCS#8 PEM. This is a secret: never print or log it.
    public func pem() -> String { writePKCS8PEM(key) }

    /// Signs `message` with RS512 (`pss: false`) or PS256 (`pss: true`): algorithms Baton never accepts,
    /// for tests that must show a correctly signed token under a refused algorithm is still refused.
    /// - Throws: ``JOSEError`` `.cryptoFailure` if OpenSSL fails.
    package func signRefusedAlgorithm(_ message: [UInt8], pss: Bool) throws -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw openSSLError(.cryptoFailure, "digest context") }
        defer { EVP_MD_CTX_free(context) }
        var keyContext: OpaquePointer?
        guard EVP_DigestSignInit(context, &keyContext, pss ? EVP_sha256() : EVP_sha512(), nil, key) == 1,
              !pss || EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PSS_PADDING) == 1 else {
            throw openSSLError(.cryptoFailure, "signing")
        }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, message, message.count) == 1 else { throw openSSLError(.cryptoFailure, "signing") }
        var signature = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &signature, &length, message, message.count) == 1 else { throw openSSLError(.cryptoFailure, "signing") }
        return Array(signature.prefix(length))
    }

    /// Signs `message` with RS256; the signature is as long as the modulus.
    /// - Throws: ``JOSEError`` `.cryptoFailure` if OpenSSL fails.
    public func signRS256(_ message: some Collection<UInt8>) throws -> [UInt8] {
        try withBytes(message) { try digestSign(key, message: $0) }
    }
}

// MARK: - P-256

/// Order of the P-256 group; an ECDSA scalar must lie in [1, n-1].
private let p256GroupOrder: [UInt8] = [
    0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51,
]

/// Whether the 32-byte big-endian `scalar` is in [1, n-1] for the P-256 order n.
private func isValidP256Scalar(_ scalar: ArraySlice<UInt8>) -> Bool {
    guard scalar.contains(where: { $0 != 0 }) else { return false }
    for (byte, limit) in zip(scalar, p256GroupOrder) where byte != limit { return byte < limit }
    return false
}

/// An EC P-256 public key for ES256, held as an OpenSSL `EVP_PKEY`; the point is checked to be on the curve.
// @unchecked Sendable: the EVP_PKEY is never modified after init; concurrent verification is allowed.
public final class P256PublicKey: @unchecked Sendable, Equatable {
    let key: OpaquePointer
    /// The x coordinate, 32 bytes big-endian.
    public let x: [UInt8]
    /// The y coordinate, 32 bytes big-endian.
    public let y: [UInt8]

    /// Creates a key from its affine coordinates, 32 bytes each.
    /// - Throws: ``JOSEError`` `.invalidKey` for a wrong length or a point not on the curve.
    public init(x: [UInt8], y: [UInt8]) throws {
        guard x.count == 32, y.count == 32 else { throw JOSEError(.invalidKey, "P-256 coordinates must be 32 bytes each") }
        let key = try publicKey(type: "EC", utf8: (ParameterName.group, ParameterName.p256),
                                octets: (ParameterName.publicKey, [0x04] + x + y))
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else {
            EVP_PKEY_free(key)
            throw openSSLError(.cryptoFailure, "key context")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_public_check(context) == 1 else {
            EVP_PKEY_free(key)
            throw openSSLError(.invalidKey, "P-256 point is not valid")
        }
        self.key = key
        self.x = x
        self.y = y
    }

    deinit { EVP_PKEY_free(key) }

    /// Whether `signature` (raw `r||s`, exactly 64 bytes, as JWS requires) is a valid ES256 signature of `message`.
    ///
    /// DER signatures and any other length are refused; so are r or s outside [1, n-1].
    public func verifyES256(signature: [UInt8], message: some Collection<UInt8>) -> Bool {
        guard signature.count == 64,
              isValidP256Scalar(signature[0..<32]), isValidP256Scalar(signature[32..<64]) else { return false }
        guard let der = derSignature(raw: signature) else { return false }
        return der.withUnsafeBufferPointer { der in
            withBytes(message) { digestVerify(key, signature: der, message: $0) }
        }
    }

    /// Converts raw `r||s` to the DER `ECDSA-Sig-Value` OpenSSL verifies.
    private func derSignature(raw: [UInt8]) -> [UInt8]? {
        guard let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard let r, let s else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }

    /// Keys are equal when their coordinates are.
    public static func == (lhs: P256PublicKey, rhs: P256PublicKey) -> Bool { lhs.x == rhs.x && lhs.y == rhs.y }
}

/// An EC P-256 private key that signs ES256 (Apple's `.p8` keys for client secrets, the emulator's keys).
// @unchecked Sendable: the EVP_PKEY is never modified after init; signing from several threads is allowed.
public final class P256PrivateKey: @unchecked Sendable {
    let key: OpaquePointer
    /// The matching public key.
    public let publicKey: P256PublicKey

    private init(key: OpaquePointer) throws {
        self.key = key
        publicKey = try publicHalf(of: key) { try P256PublicKey(x: bignumParameter($0, "qx", length: 32), y: bignumParameter($0, "qy", length: 32)) }
    }

    deinit { EVP_PKEY_free(key) }

    /// Generates a new P-256 key.
    /// - Throws: ``JOSEError`` `.cryptoFailure` if OpenSSL fails.
    public static func generate() throws -> P256PrivateKey {
        try P256PrivateKey(key: generateKey(type: "EC") { EVP_PKEY_CTX_set_group_name($0, "P-256") })
    }

    /// Reads an unencrypted PKCS#8 PEM EC P-256 private key, the format of Apple's `.p8` files.
    /// - Throws: ``JOSEError`` `.invalidKey` for anything else (other labels, curves or key types).
    public convenience init(pkcs8PEM: String) throws {
        let key = try readPKCS8PEM(pkcs8PEM)
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_is_a(key, "EC") == 1,
              EVP_PKEY_get_utf8_string_param(key, "group", &name, name.count, &length) == 1,
              ["prime256v1", "P-256", "secp256r1"].contains(String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self))
        else {
            ERR_clear_error()
            EVP_PKEY_free(key)
            throw JOSEError(.invalidKey, "not an EC P-256 key")
        }
        try self.init(key: key)
    }

    /// The key as unencrypted PKCS#8 PEM (the `.p8` form). This is a secret: never print or log it.
    public func pkcs8PEM() -> String { writePKCS8PEM(key) }

    /// Signs `message` with ES256; the signature is raw `r||s`, 64 bytes.
    /// - Throws: ``JOSEError`` `.cryptoFailure` if OpenSSL fails.
    public func signES256(_ message: some Collection<UInt8>) throws -> [UInt8] {
        let der = try withBytes(message) { try digestSign(key, message: $0) }
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let parsed else { throw openSSLError(.cryptoFailure, "decoding ECDSA signature") }
        defer { ECDSA_SIG_free(parsed) }
        guard let r = ECDSA_SIG_get0_r(parsed), let s = ECDSA_SIG_get0_s(parsed) else {
            throw JOSEError(.cryptoFailure, "ECDSA signature without r or s")
        }
        return bignumBytes(r, length: 32) + bignumBytes(s, length: 32)
    }
}

/// Message digests (for nonces and claim hashes; no keys involved).
public enum Digest {
    /// The SHA-256 digest of `bytes`, 32 bytes.
    public static func sha256(_ bytes: some Collection<UInt8>) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        withBytes(bytes) { input in
            _ = digest.withUnsafeMutableBufferPointer { SHA256(input.baseAddress, input.count, $0.baseAddress) }
        }
        return digest
    }

    /// The SHA-256 digest of `bytes` as 64 lowercase hexadecimal characters.
    public static func sha256Hex(_ bytes: some Collection<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(64)
        for byte in sha256(bytes) {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
