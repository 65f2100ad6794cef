import BatonAppleSignIn
import Foundation
import BatonJOSE
import BatonJSON

/// The verifier fuzz target: feeds inputs to ``IdentityTokenVerifier`` and stops the process (so libFuzzer
/// records the input) when a token is accepted that the harness did not legitimately sign, or that
/// breaks the verification policy when its parts are checked independently with Foundation's JSON parser.
///
/// An input is read in one of two modes, chosen by its first byte:
/// - even: the rest is a compact token, verified as is. Only tokens the harness signed with `fuzz-1`
///   may ever be accepted, and their signing input and signature must be byte-identical to one of them.
/// - odd: the rest is `header 0xFF payload` (or a payload alone, under the default header); the harness
///   signs it with `fuzz-1` itself, so the fuzzer reaches the claim checks behind the signature. An
///   accepted token must satisfy every rule of the policy when re-checked independently.
public final class VerifierHarness: Sendable {
    /// The fixed clock of every verification: 2026-11-30T08:01:00Z.
    public static let now = Date(timeIntervalSince1970: issuedAt + 60)
    /// `iat` of the seed tokens.
    static let issuedAt = 1_795_953_600.0
    /// The accepted audiences.
    static let clientIDs = ["com.example.app", "com.example.web"]
    /// The default header of harness-signed inputs.
    static let defaultHeader = #"{"alg":"RS256","kid":"fuzz-1"}"#

    let signingKey: RSAPrivateKey
    let ecKey: P256PrivateKey
    let keySet: JWKSet
    let verifier: IdentityTokenVerifier
    /// Every token the harness signed with `fuzz-1` for the seed corpus: `signing input.signature`.
    let legitimate: Set<[UInt8]>
    /// The seed corpus, by file name.
    public let seeds: [Seed]

    /// Loads the keys and builds the seed tokens.
    public init() throws {
        signingKey = try RSAPrivateKey(pem: fuzzSigningKeyPEM)
        ecKey = try P256PrivateKey(pkcs8PEM: fuzzECKeyPEM)
        let unknown = try RSAPublicKey(modulus: Base64URL.decode(fuzzUnknownModulus), exponent: [0x01, 0x00, 0x01])
        keySet = try JWKSet(validating: [
            JWK(key: .rsa(signingKey.publicKey), kid: "fuzz-1", use: "sig", alg: "RS256"),
            JWK(key: .rsa(unknown), kid: "fuzz-2", use: "sig", alg: "RS256"),
            JWK(key: .p256(ecKey.publicKey), kid: "fuzz-ec", use: "sig", alg: "ES256"),
        ])
        verifier = IdentityTokenVerifier(clientIDs: Self.clientIDs, keys: FixedKeySet(keySet), now: { VerifierHarness.now })
        let built = try SeedTokens(signingKey: signingKey, ecKey: ecKey)
        legitimate = Set(built.legitimate.map { Array($0.utf8) })
        seeds = built.seeds
    }

    /// The public key set the verifier trusts, as a JWK Set document (written next to the corpus so that
    /// the corpus replay test in `AppleSignInTests` verifies with the same keys).
    public var keySetDocument: [UInt8] { JSON.serializeBytes(keySet.json()) }

    /// Runs one input; returns normally unless the oracle finds a violation, which ends the process.
    public func run(_ input: UnsafeRawBufferPointer) {
        guard let mode = input.first else { return }
        let rest = Array(input.dropFirst())
        if mode & 1 == 0 {
            let token = String(decoding: rest, as: UTF8.self)
            guard let accepted = try? verifier.verify(token, keySet: keySet) else { return }
            // `String(decoding:)` repairs invalid UTF-8; the verifier saw the repaired bytes.
            guard legitimate.contains(Array(token.utf8)) else {
                violation("accepted a token the harness never signed", accepted, token: token)
            }
            checkIndependently(accepted, token: token)
        } else {
            let header: [UInt8], payload: [UInt8]
            if let separator = rest.firstIndex(of: 0xFF) {
                header = Array(rest[..<separator])
                payload = Array(rest[(separator + 1)...])
            } else {
                header = Array(Self.defaultHeader.utf8)
                payload = rest
            }
            let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(payload)
            guard let signature = try? signingKey.signRS256(Array(signingInput.utf8)) else { violation("signing failed", nil, token: signingInput) }
            let token = signingInput + "." + Base64URL.encode(signature)
            guard let accepted = try? verifier.verify(token, keySet: keySet) else { return }
            checkIndependently(accepted, token: token)
        }
    }

    /// Re-checks an accepted token's header and claims with Foundation's JSON parser and the policy's rules.
    private func checkIndependently(_ accepted: AppleIDToken, token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
              let headerBytes = try? Base64URL.decode(parts[0]),
              let payloadBytes = try? Base64URL.decode(parts[1]),
              let header = try? JSONSerialization.jsonObject(with: Data(headerBytes)) as? [String: Any],
              let claims = try? JSONSerialization.jsonObject(with: Data(payloadBytes)) as? [String: Any] else {
            violation("accepted a token whose parts Foundation cannot read as JSON objects", accepted, token: token)
        }
        guard header["alg"] as? String == "RS256", header["kid"] as? String == "fuzz-1", header["crit"] == nil,
              header["typ"] == nil || header["typ"] as? String == "JWT" else {
            violation("accepted a header the policy refuses", accepted, token: token)
        }
        let now = Self.now.timeIntervalSince1970, leeway = 60.0
        let audiences: [String]
        if let single = claims["aud"] as? String { audiences = [single] } else { audiences = (claims["aud"] as? [Any])?.compactMap { $0 as? String } ?? [] }
        guard claims["iss"] as? String == IdentityTokenVerifier.appleIssuer,
              audiences.contains(where: Self.clientIDs.contains),
              let exp = (claims["exp"] as? NSNumber)?.doubleValue, now < exp + leeway,
              let iat = (claims["iat"] as? NSNumber)?.doubleValue, iat <= now + leeway,
              (claims["nbf"] as? NSNumber).map({ $0.doubleValue <= now + leeway }) ?? (claims["nbf"] == nil),
              let sub = claims["sub"] as? String, !sub.isEmpty, sub == accepted.subject,
              claims["transfer_sub"] as? String == accepted.transferSubject else {
            violation("accepted claims the policy refuses", accepted, token: token)
        }
    }

    private func violation(_ what: String, _ accepted: AppleIDToken?, token: String) -> Never {
        FileHandle.standardError.write(Data("fuzz-verifier: \(what); subject \(accepted?.subject ?? "-"); token \(token)\n".utf8))
        abort()
    }
}
