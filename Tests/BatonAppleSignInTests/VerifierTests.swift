import BatonAppleSignIn
import Foundation
import BatonJOSE
import BatonJSON
import Testing

/// One forged or broken token and the reason it must be refused with.
struct Forgery: Sendable, CustomTestStringConvertible {
    let name: String
    let token: @Sendable () -> String
    let nonce: ExpectedNonce?
    let reason: VerificationError.Code
    var testDescription: String { "\(name) → \(reason.rawValue)" }

    init(_ name: String, _ reason: VerificationError.Code, nonce: ExpectedNonce? = nil, _ token: @escaping @Sendable () -> String) {
        self.name = name
        self.reason = reason
        self.nonce = nonce
        self.token = token
    }
}

private func b64(_ text: String) -> String { Base64URL.encode(Array(text.utf8)) }
private let validClaims = JSON.serialize(.object(Fixture.claims()))
private let kid0 = Fixture.kids[0]

/// Replaces the signature part of `token`.
private func withSignature(_ token: String, _ change: ([UInt8]) -> [UInt8]) -> String {
    let parts = token.split(separator: ".", omittingEmptySubsequences: false)
    let signature = (try? Base64URL.decode(parts[2])) ?? []
    return "\(parts[0]).\(parts[1]).\(Base64URL.encode(change(signature)))"
}

/// A token whose header is `header` (raw JSON text), signed correctly by the first key.
private func signedWithHeader(_ header: String, payload: String = validClaims) -> String {
    let input = b64(header) + "." + b64(payload)
    return input + "." + Base64URL.encode(try! Fixture.keys[0].signRS256(Array(input.utf8)))
}

/// A token with header `header` and an HS256 MAC keyed with `secret`.
private func hs256(_ secret: [UInt8]) -> String {
    let input = b64(#"{"alg":"HS256","kid":"\#(kid0)"}"#) + "." + b64(validClaims)
    return input + "." + Base64URL.encode(Fixture.hmacSHA256(key: secret, message: Array(input.utf8)))
}

let forgeries: [Forgery] = [
    // Shape and size.
    Forgery("two parts", .malformed) { String(Fixture.token().split(separator: ".").prefix(2).joined(separator: ".")) },
    Forgery("four parts", .malformed) { Fixture.token() + ".AAAA" },
    Forgery("empty", .malformed) { "" },
    Forgery("bad base64 (padding)", .malformed) { Fixture.token().replacingOccurrences(of: ".", with: "=.") },
    Forgery("bad base64 (character)", .malformed) { "*" + Fixture.token() },
    Forgery("oversize", .tooLarge) { Fixture.token() + String(repeating: "A", count: 16_384) },
    Forgery("oversize garbage", .tooLarge) { String(repeating: "\u{1F600}", count: 5_000) },
    // Header.
    Forgery("header not JSON", .malformed) { b64("alg=RS256") + "." + b64(validClaims) + ".AQAB" },
    Forgery("header not an object", .malformed) { b64(#"["RS256"]"#) + "." + b64(validClaims) + ".AQAB" },
    Forgery("duplicate header member", .malformed) { signedWithHeader(#"{"alg":"RS256","kid":"\#(kid0)","alg":"RS256"}"#) },
    Forgery("duplicate kid", .malformed) { signedWithHeader(#"{"alg":"RS256","kid":"nope","kid":"\#(kid0)"}"#) },
    Forgery("non-string kid", .malformed) { signedWithHeader(#"{"alg":"RS256","kid":1}"#) },
    Forgery("deeply nested header", .malformed) { signedWithHeader(#"{"alg":"RS256","kid":"\#(kid0)","x":"# + String(repeating: "[", count: 10_000) + "}") },
    Forgery("crit", .unsupportedHeader) { Fixture.token(extraHeader: ["crit": ["exp"], "exp": 1]) },
    Forgery("typ JOSE", .unsupportedHeader) { Fixture.token(extraHeader: ["typ": "JOSE"]) },
    // Algorithm.
    Forgery("alg none", .algorithmNotAllowed) { b64(#"{"alg":"none","kid":"\#(kid0)"}"#) + "." + b64(validClaims) + "." },
    Forgery("alg none with a signature", .algorithmNotAllowed) { b64(#"{"alg":"none","kid":"\#(kid0)"}"#) + "." + b64(validClaims) + ".AQAB" },
    Forgery("alg None", .algorithmNotAllowed) { b64(#"{"alg":"None","kid":"\#(kid0)"}"#) + "." + b64(validClaims) + ".AQAB" },
    Forgery("alg rs256 (case)", .algorithmNotAllowed) { signedWithHeader(#"{"alg":"rs256","kid":"\#(kid0)"}"#) },
    Forgery("HS256 keyed with the public key PEM", .algorithmNotAllowed) { hs256(Array(Fixture.keys[0].publicKey.pem().utf8)) },
    Forgery("HS256 keyed with the raw modulus", .algorithmNotAllowed) { hs256(Fixture.keys[0].publicKey.modulus) },
    Forgery("RS512 signed with the right key", .algorithmNotAllowed) {
        JWS.compact(header: ["alg": "RS512", "kid": .string(kid0)], payload: Array(validClaims.utf8)) {
            try! Fixture.keys[0].signRefusedAlgorithm($0, pss: false)
        }
    },
    Forgery("PS256 signed with the right key", .algorithmNotAllowed) {
        JWS.compact(header: ["alg": "PS256", "kid": .string(kid0)], payload: Array(validClaims.utf8)) {
            try! Fixture.keys[0].signRefusedAlgorithm($0, pss: true)
        }
    },
    Forgery("ES256 by an attacker", .algorithmNotAllowed) {
        try! JWS.signES256(payload: Array(validClaims.utf8), key: P256PrivateKey.generate(), kid: kid0)
    },
    // Key selection.
    Forgery("unknown kid", .unknownKey) { Fixture.token(kid: "AppleKey9") },
    Forgery("no kid", .unknownKey) { signedWithHeader(#"{"alg":"RS256"}"#) },
    Forgery("embedded jwk, no kid", .unknownKey) {
        JWS.compact(header: ["alg": "RS256", "jwk": JWK(key: .rsa(Fixture.attacker.publicKey)).json()], payload: Array(validClaims.utf8)) {
            try! Fixture.attacker.signRS256($0)
        }
    },
    Forgery("embedded jwk with a published kid", .badSignature) {
        Fixture.token(key: Fixture.attacker, extraHeader: ["jwk": JWK(key: .rsa(Fixture.attacker.publicKey), kid: kid0).json()])
    },
    Forgery("jku to the attacker's keys", .badSignature) { Fixture.token(key: Fixture.attacker, extraHeader: ["jku": "https://evil.example/keys"]) },
    Forgery("x5u to the attacker's certificate", .badSignature) { Fixture.token(key: Fixture.attacker, extraHeader: ["x5u": "https://evil.example/cert"]) },
    Forgery("x5c with the attacker's chain", .badSignature) { Fixture.token(key: Fixture.attacker, extraHeader: ["x5c": ["MIIB"]]) },
    Forgery("kid swapped to another published key", .badSignature) { Fixture.token(kid: Fixture.kids[1]) },
    // Signature.
    Forgery("tampered payload", .badSignature) {
        let parts = Fixture.token().split(separator: ".")
        return "\(parts[0]).\(b64(validClaims.replacingOccurrences(of: "001234", with: "001235"))).\(parts[2])"
    },
    Forgery("truncated signature", .badSignature) { withSignature(Fixture.token()) { Array($0.dropLast()) } },
    Forgery("extended signature", .badSignature) { withSignature(Fixture.token()) { $0 + [0] } },
    Forgery("zero-prefixed signature", .badSignature) { withSignature(Fixture.token()) { [0] + $0 } },
    Forgery("all-zero signature", .badSignature) { withSignature(Fixture.token()) { [UInt8](repeating: 0, count: $0.count) } },
    Forgery("one-byte signature", .badSignature) { withSignature(Fixture.token()) { _ in [1] } },
    Forgery("empty signature", .badSignature) { withSignature(Fixture.token()) { _ in [] } },
    Forgery("bit-flipped signature", .badSignature) { withSignature(Fixture.token()) { var s = $0; s[100] ^= 0x04; return s } },
    Forgery("signature equal to the modulus", .badSignature) { withSignature(Fixture.token()) { _ in Fixture.keys[0].publicKey.modulus } },
    // Payload.
    Forgery("non-JSON payload", .malformed) { Fixture.token(payload: "iss=https://appleid.apple.com") },
    Forgery("non-object payload", .malformed) { Fixture.token(payload: #"["https://appleid.apple.com"]"#) },
    Forgery("duplicate payload member", .malformed) { Fixture.token(payload: String(validClaims.dropLast()) + #","sub":"victim"}"#) },
    Forgery("deeply nested payload", .malformed) { Fixture.token(payload: #"{"a":"# + String(repeating: "[", count: 5_000)) },
    Forgery("payload with invalid UTF-8", .malformed) {
        JWS.compact(header: ["alg": "RS256", "kid": .string(kid0)], payload: Array(#"{"sub":""#.utf8) + [0xFF] + Array(#""}"#.utf8)) {
            try! Fixture.keys[0].signRS256($0)
        }
    },
    // Claims.
    Forgery("wrong iss", .wrongIssuer) { Fixture.token(claims: Fixture.claims { $0["iss"] = "https://appleid.apple.com.evil.example" }) },
    Forgery("iss with a trailing slash", .wrongIssuer) { Fixture.token(claims: Fixture.claims { $0["iss"] = "https://appleid.apple.com/" }) },
    Forgery("iss not a string", .wrongIssuer) { Fixture.token(claims: Fixture.claims { $0["iss"] = ["https://appleid.apple.com"] }) },
    Forgery("missing iss", .missingClaim) { Fixture.token(claims: Fixture.claims { $0["iss"] = nil }) },
    Forgery("wrong aud", .wrongAudience) { Fixture.token(claims: Fixture.claims { $0["aud"] = "com.attacker.app" }) },
    Forgery("aud array without our client", .wrongAudience) { Fixture.token(claims: Fixture.claims { $0["aud"] = ["com.attacker.app"] }) },
    Forgery("empty aud array", .wrongAudience) { Fixture.token(claims: Fixture.claims { $0["aud"] = [] }) },
    Forgery("aud not a string", .invalidClaim) { Fixture.token(claims: Fixture.claims { $0["aud"] = 7 }) },
    Forgery("missing aud", .missingClaim) { Fixture.token(claims: Fixture.claims { $0["aud"] = nil }) },
    Forgery("expired", .expired) { Fixture.token(claims: Fixture.claims { $0["exp"] = .number(Fixture.now - 61) }) },
    Forgery("expired long ago", .expired) { Fixture.token(claims: Fixture.claims { $0["exp"] = 1_300_819_380 }) },
    Forgery("missing exp", .missingClaim) { Fixture.token(claims: Fixture.claims { $0["exp"] = nil }) },
    Forgery("exp as a string", .invalidClaim) { Fixture.token(claims: Fixture.claims { $0["exp"] = "1900000000" }) },
    Forgery("future iat", .notYetValid) { Fixture.token(claims: Fixture.claims { $0["iat"] = .number(Fixture.now + 61) }) },
    Forgery("missing iat", .missingClaim) { Fixture.token(claims: Fixture.claims { $0["iat"] = nil }) },
    Forgery("future nbf", .notYetValid) { Fixture.token(claims: Fixture.claims { $0["nbf"] = .number(Fixture.now + 300) }) },
    Forgery("missing sub", .missingClaim) { Fixture.token(claims: Fixture.claims { $0["sub"] = nil }) },
    Forgery("empty sub", .invalidClaim) { Fixture.token(claims: Fixture.claims { $0["sub"] = "" }) },
    Forgery("sub of 256 characters", .invalidClaim) { Fixture.token(claims: Fixture.claims { $0["sub"] = .string(String(repeating: "a", count: 256)) }) },
    Forgery("sub not a string", .invalidClaim) { Fixture.token(claims: Fixture.claims { $0["sub"] = 1234 }) },
    Forgery("nonce mismatch", .nonceMismatch, nonce: .native(raw: "expected-raw-nonce")) {
        Fixture.token(claims: Fixture.claims { $0["nonce"] = .string(Digest.sha256Hex(Array("another-nonce".utf8))) })
    },
    Forgery("hashed nonce replayed as raw (native)", .nonceMismatch, nonce: .native(raw: Digest.sha256Hex(Array("n".utf8)))) {
        Fixture.token(claims: Fixture.claims { $0["nonce"] = .string(Digest.sha256Hex(Array("n".utf8))) })
    },
    Forgery("web nonce mismatch", .nonceMismatch, nonce: .web("abc")) { Fixture.token(claims: Fixture.claims { $0["nonce"] = "abd" }) },
    Forgery("missing nonce", .missingClaim, nonce: .web("abc")) { Fixture.token() },
    Forgery("nonce not a string", .invalidClaim, nonce: .web("1")) { Fixture.token(claims: Fixture.claims { $0["nonce"] = 1 }) },
    Forgery("email_verified not a Boolean", .invalidClaim) { Fixture.token(claims: Fixture.claims { $0["email_verified"] = "yes" }) },
    Forgery("real_user_status out of range", .invalidClaim) { Fixture.token(claims: Fixture.claims { $0["real_user_status"] = 3 }) },
    Forgery("transfer_sub not a string", .invalidClaim) { Fixture.token(claims: Fixture.claims { $0["transfer_sub"] = [] }) },
]

@Suite("Identity token verification")
struct VerifierTests {
    @Test("Forged and broken tokens are refused with their reason", arguments: forgeries)
    func refuses(forgery: Forgery) async {
        let token = forgery.token()
        do {
            let claims = try await Fixture.verifier().verify(token, nonce: forgery.nonce)
            Issue.record("accepted: \(claims.subject)")
        } catch let error as VerificationError {
            #expect(error.code == forgery.reason, "\(error)")
            #expect(!error.description.contains(token), "the error must not echo the token")
        } catch {
            Issue.record("unexpected error \(error)")
        }
    }

    @Test("Every reason code has a forged token except keys_unavailable (a cache test)")
    func everyReasonCovered() {
        let covered = Set(forgeries.map(\.reason))
        #expect(Set(VerificationError.Code.allCases).subtracting(covered) == [.keysUnavailable])
    }

    @Test("A genuine token verifies and its claims decode")
    func genuine() async throws {
        let token = Fixture.token(key: Fixture.keys[2], kid: Fixture.kids[2], claims: Fixture.claims {
            $0["transfer_sub"] = "0012ab.transfer"
            $0["org_id"] = "org-1"
            $0["at_hash"] = "aGFzaA"
            $0["email_verified"] = "false"
            $0["is_private_email"] = false
            $0["real_user_status"] = 1
            $0["custom"] = ["kept": true]
        })
        let verified = try await Fixture.verifier().verify(token)
        #expect(verified.issuer == "https://appleid.apple.com")
        #expect(verified.subject == "001234.8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d.1234")
        #expect(verified.audience == [Fixture.clientID])
        #expect(verified.issuedAt == Date(timeIntervalSince1970: Fixture.now - 60))
        #expect(verified.expiresAt == Date(timeIntervalSince1970: Fixture.now + 540))
        #expect(verified.authTime == Date(timeIntervalSince1970: Fixture.now - 61))
        #expect(verified.email == "abcdef1234@privaterelay.appleid.com")
        #expect(verified.emailVerified == false)
        #expect(verified.isPrivateEmail == false)
        #expect(verified.realUserStatus == .unknown)
        #expect(verified.nonceSupported == true)
        #expect(verified.transferSubject == "0012ab.transfer")
        #expect(verified.organizationID == "org-1")
        #expect(verified.codeHash == "c2VjcmV0LWNvZGUtaGFzaA")
        #expect(verified.accessTokenHash == "aGFzaA")
        #expect(verified.keyID == Fixture.kids[2])
        #expect(verified.claims["custom"]?["kept"] == true)
        #expect(verified.nonce == nil && verified.notBefore == nil)
    }

    @Test("String Booleans decode as Booleans; absent ones stay nil")
    func booleans() async throws {
        let stringy = try await Fixture.verifier().verify(Fixture.token(claims: Fixture.claims { $0["email_verified"] = "true" }))
        #expect(stringy.emailVerified == true && stringy.isPrivateEmail == true)
        let absent = try await Fixture.verifier().verify(Fixture.token(claims: Fixture.claims {
            $0["email_verified"] = nil
            $0["is_private_email"] = nil
            $0["email"] = nil
        }))
        #expect(absent.emailVerified == nil && absent.isPrivateEmail == nil && absent.email == nil)
    }

    @Test("aud may be an array containing a configured client ID; any configured ID is accepted")
    func audiences() async throws {
        let token = Fixture.token(claims: Fixture.claims { $0["aud"] = ["com.other", .string(Fixture.otherClientID)] })
        #expect(try await Fixture.verifier(clientIDs: [Fixture.clientID, Fixture.otherClientID]).verify(token).audience.count == 2)
        await #expect(throws: VerificationError(.wrongAudience)) { try await Fixture.verifier().verify(token) }
    }

    @Test("Nonces: the native flow compares SHA-256 hex of the raw nonce, the web flow the value itself")
    func nonces() async throws {
        let raw = "r4nd0m-n0nce"
        let native = Fixture.token(claims: Fixture.claims { $0["nonce"] = .string(Digest.sha256Hex(Array(raw.utf8))) })
        #expect(try await Fixture.verifier().verify(native, nonce: .native(raw: raw)).nonce == Digest.sha256Hex(Array(raw.utf8)))
        let web = Fixture.token(claims: Fixture.claims { $0["nonce"] = .string(raw) })
        #expect(try await Fixture.verifier().verify(web, nonce: .web(raw)).nonce == raw)
        await #expect(throws: VerificationError(.nonceMismatch)) { try await Fixture.verifier().verify(web, nonce: .native(raw: raw)) }
        #expect(try await Fixture.verifier().verify(native).subject.isEmpty == false)
    }

    @Test("exp, iat and nbf use the injected clock with a 60 s leeway")
    func clock() async throws {
        let token = Fixture.token()
        let exp = Fixture.now + 540, iat = Fixture.now - 60
        #expect(try await Fixture.verifier(at: exp + 59).verify(token).subject.isEmpty == false)
        await #expect(throws: VerificationError(.expired)) { try await Fixture.verifier(at: exp + 60).verify(token) }
        #expect(try await Fixture.verifier(at: iat - 60).verify(token).subject.isEmpty == false)
        await #expect(throws: VerificationError(.notYetValid)) { try await Fixture.verifier(at: iat - 61).verify(token) }
        let strict = IdentityTokenVerifier(clientIDs: [Fixture.clientID], keys: FixedKeySet(Fixture.keySet), leeway: 0,
                                           now: { Date(timeIntervalSince1970: exp) })
        await #expect(throws: VerificationError(.expired)) { try await strict.verify(token) }
        let nbf = Fixture.token(claims: Fixture.claims { $0["nbf"] = .number(Fixture.now + 30) })
        #expect(try await Fixture.verifier().verify(nbf).notBefore == Date(timeIntervalSince1970: Fixture.now + 30))
    }

    @Test("A key published for another algorithm or use verifies nothing")
    func keyAlgorithmAllowList() async {
        let restricted = JWKSet(keys: [JWK(key: .rsa(Fixture.keys[0].publicKey), kid: Fixture.kids[0], alg: "RS512"),
                                       JWK(key: .rsa(Fixture.keys[1].publicKey), kid: Fixture.kids[1], use: "enc")])
        let verifier = IdentityTokenVerifier(clientIDs: [Fixture.clientID], keys: FixedKeySet(restricted), now: { Date(timeIntervalSince1970: Fixture.now) })
        await #expect(throws: VerificationError(.badSignature)) { try await verifier.verify(Fixture.token()) }
        await #expect(throws: VerificationError(.badSignature)) { try await verifier.verify(Fixture.token(key: Fixture.keys[1], kid: Fixture.kids[1])) }
        let ecKey = try! P256PrivateKey.generate()
        let ecSet = JWKSet(keys: [JWK(key: .p256(ecKey.publicKey), kid: "ec")])
        let ecVerifier = IdentityTokenVerifier(clientIDs: [Fixture.clientID], keys: FixedKeySet(ecSet), now: { Date(timeIntervalSince1970: Fixture.now) })
        await #expect(throws: VerificationError(.badSignature)) { try await ecVerifier.verify(Fixture.token(key: Fixture.keys[0], kid: "ec")) }
    }

    @Test("The synchronous path agrees with the asynchronous one")
    func synchronous() throws {
        let verifier = Fixture.verifier()
        #expect(try verifier.verify(Fixture.token(), keySet: Fixture.keySet).subject == "001234.8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d.1234")
        #expect(throws: VerificationError(.unknownKey)) { try verifier.verify(Fixture.token(kid: "x"), keySet: Fixture.keySet) }
    }

    @Test("Random mutations of a genuine token never crash and never verify")
    func fuzz() async {
        var generator = SystemRandomNumberGenerator()
        let token = Array(Fixture.token().utf8)
        let verifier = Fixture.verifier()
        for _ in 0..<300 {
            var mutated = token
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                let index = Int.random(in: 0..<mutated.count, using: &generator)
                mutated[index] = UInt8.random(in: 0...255, using: &generator)
            }
            guard mutated != token else { continue }
            let text = String(decoding: mutated, as: UTF8.self)
            await #expect(throws: VerificationError.self) { try await verifier.verify(text) }
        }
    }
}
