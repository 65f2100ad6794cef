import BatonAppleSignIn
import Foundation
import BatonJOSE
import BatonJSON
import Synchronization

/// Keys, tokens and a clock shared by the verification and key-set cache tests.
enum Fixture {
    static let clientID = "com.example.app"
    static let otherClientID = "com.example.web"
    /// 2026-11-29T12:00:00Z, the tests' "now".
    static let now: TimeInterval = 1_795_953_600

    /// Three published RS256 keys (as Apple publishes three), and one the attacker holds.
    static let keys: [RSAPrivateKey] = (0..<3).map { _ in try! RSAPrivateKey.generate() }
    static let attacker = try! RSAPrivateKey.generate()
    static let kids = ["AppleKey1", "AppleKey2", "AppleKey3"]
    static let keySet = JWKSet(keys: zip(keys, kids).map { JWK(key: .rsa($0.publicKey), kid: $1, use: "sig", alg: "RS256") })

    /// Realistic claims of an Apple identity token issued a minute before `now`.
    static func claims(_ changes: (inout JSONObject) -> Void = { _ in }) -> JSONObject {
        var claims: JSONObject = [
            "iss": "https://appleid.apple.com",
            "aud": .string(clientID),
            "exp": .number(now + 540),
            "iat": .number(now - 60),
            "sub": "001234.8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d.1234",
            "c_hash": "c2VjcmV0LWNvZGUtaGFzaA",
            "email": "abcdef1234@privaterelay.appleid.com",
            "email_verified": true,
            "is_private_email": "true",
            "auth_time": .number(now - 61),
            "nonce_supported": true,
            "real_user_status": 2,
        ]
        changes(&claims)
        return claims
    }

    /// A token signed with published key `index` (or another key), with optional header and claim changes.
    static func token(key: RSAPrivateKey? = nil, kid: String = kids[0], extraHeader: JSONObject = [:],
                      claims: JSONObject = claims()) -> String {
        try! JWS.signRS256(payload: JSON.serializeBytes(.object(claims)), key: key ?? keys[0], kid: kid, extraHeader: extraHeader)
    }

    /// A token with a raw payload text, signed with the first published key.
    static func token(payload: String, header: JSONObject = ["alg": "RS256", "kid": .string(kids[0])]) -> String {
        JWS.compact(header: header, payload: Array(payload.utf8)) { try! keys[0].signRS256($0) }
    }

    /// A verifier over the fixed published set with the clock at `now`.
    static func verifier(clientIDs: [String] = [clientID], at time: TimeInterval = now) -> IdentityTokenVerifier {
        IdentityTokenVerifier(clientIDs: clientIDs, keys: FixedKeySet(keySet), now: { Date(timeIntervalSince1970: time) })
    }

    /// HMAC-SHA256 (RFC 2104) built on SHA-256, for forging HS256 tokens.
    static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var block = key.count > 64 ? Digest.sha256(key) : key
        block += [UInt8](repeating: 0, count: 64 - block.count)
        let inner = Digest.sha256(block.map { $0 ^ 0x36 } + message)
        return Digest.sha256(block.map { $0 ^ 0x5C } + inner)
    }
}

/// A clock tests move by hand.
final class TestClock: Sendable {
    private let time: Mutex<TimeInterval>
    init(_ start: TimeInterval = Fixture.now) { time = Mutex(start) }
    var now: Date { Date(timeIntervalSince1970: time.withLock { $0 }) }
    func advance(_ seconds: TimeInterval) { time.withLock { $0 += seconds } }
}
