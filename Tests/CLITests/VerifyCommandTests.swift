import Foundation
import BatonJOSE
import BatonJSON
import Testing
import TestSupport

/// `baton verify` and `baton-bench verify`, run as the built binaries.
@Suite("baton verify")
struct VerifyCommandTests {
    static let key = try! RSAPrivateKey.generate()
    static let otherKey = try! RSAPrivateKey.generate()
    static let now = 1_795_953_600
    static let directory: URL = {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("baton-verify-\(UUID().uuidString)")
        try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }()
    static let jwksPath: String = {
        let set = JWKSet(keys: [JWK(key: .rsa(key.publicKey), kid: "K1", use: "sig", alg: "RS256"),
                                JWK(key: .rsa(otherKey.publicKey), kid: "K2", use: "sig", alg: "RS256")])
        let path = directory.appendingPathComponent("keys.json").path
        _ = FileManager.default.createFile(atPath: path, contents: Data(JSON.serializeBytes(set.json())))
        return path
    }()

    static func token(_ changes: (inout JSONObject) -> Void = { _ in }) -> String {
        var claims: JSONObject = [
            "iss": "https://appleid.apple.com", "aud": "com.example.app", "sub": "001234.abcdef.1234",
            "iat": .number(Double(now - 10)), "exp": .number(Double(now + 600)), "email": "x@privaterelay.appleid.com",
            "email_verified": "true",
        ]
        changes(&claims)
        return try! JWS.signRS256(payload: JSON.serializeBytes(.object(claims)), key: key, kid: "K1")
    }

    func verify(_ extra: [String], input: Data? = nil) throws -> ProcessResult {
        try runBaton(["verify", "--client-id", "com.example.app", "--jwks", Self.jwksPath, "--now", String(Self.now)] + extra, input: input)
    }

    @Test("A genuine token prints its claims as JSON and exits 0")
    func genuine() throws {
        let result = try verify([Self.token()])
        #expect(result.status == 0, "\(result.stderr)")
        let claims = try JSON.parseObject(Array(result.stdout.utf8))
        #expect(claims["sub"] == "001234.abcdef.1234")
        #expect(claims["email_verified"] == "true")
        #expect(result.stderr.isEmpty)
    }

    @Test("TOKEN '-' reads standard input, trailing newline and all")
    func standardInput() throws {
        let result = try verify(["-"], input: Data((Self.token() + "\n").utf8))
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try JSON.parseObject(Array(result.stdout.utf8))["aud"] == "com.example.app")
    }

    @Test("Nonces: native (SHA-256 hex) by default, web on request")
    func nonces() throws {
        let hashed = Self.token { $0["nonce"] = .string(Digest.sha256Hex(Array("raw".utf8))) }
        #expect(try verify(["--nonce", "raw", hashed]).status == 0)
        let mismatch = try verify(["--nonce", "other", hashed])
        #expect(mismatch.status == 1)
        #expect(mismatch.stderr.hasPrefix("rejected: nonce_mismatch: "))
        let web = Self.token { $0["nonce"] = "raw" }
        #expect(try verify(["--nonce", "raw", "--nonce-flow", "web", web]).status == 0)
        #expect(try verify(["--nonce", "raw", web]).stderr.hasPrefix("rejected: nonce_mismatch"))
    }

    @Test("Rejections print 'rejected: <reason>: <explanation>' and exit 1", arguments: [
        ("expired", "expired"), ("audience", "wrong_audience"), ("issuer", "wrong_issuer"), ("kid", "bad_signature"),
        ("future", "not_yet_valid"), ("garbage", "malformed"), ("none", "algorithm_not_allowed"),
    ])
    func rejections(kind: String, reason: String) throws {
        let token: String
        switch kind {
        case "expired": token = Self.token { $0["exp"] = .number(Double(Self.now - 3600)) }
        case "audience": token = Self.token { $0["aud"] = "com.attacker" }
        case "issuer": token = Self.token { $0["iss"] = "https://evil.example" }
        case "kid": token = try JWS.signRS256(payload: Array(#"{"sub":"x"}"#.utf8), key: Self.key, kid: "K2")
        case "future": token = Self.token { $0["iat"] = .number(Double(Self.now + 3600)) }
        case "none": token = Base64URL.encode(Array(#"{"alg":"none","kid":"K1"}"#.utf8)) + "." + Base64URL.encode(Array("{}".utf8)) + "."
        default: token = "not.a.token"
        }
        let result = try verify([token])
        #expect(result.status == 1)
        #expect(result.stderr.hasPrefix("rejected: \(reason): "), "\(result.stderr)")
        #expect(!result.stderr.contains(token))
        #expect(result.stdout.isEmpty)
    }

    @Test("Usage and configuration errors exit 2")
    func usageErrors() throws {
        let token = Self.token()
        let cases: [[String]] = [
            ["verify", token],
            ["verify", "--client-id", "com.example.app", token],
            ["verify", "--client-id", "com.example.app", "--jwks", Self.jwksPath],
            ["verify", "--client-id", "com.example.app", "--jwks", Self.jwksPath, token, token],
            ["verify", "--client-id", "com.example.app", "--jwks", Self.jwksPath, "--jwks-url", "https://x.example/keys", token],
            ["verify", "--client-id", "com.example.app", "--jwks", Self.jwksPath, "--now", "yesterday", token],
            ["verify", "--client-id", "com.example.app", "--jwks", Self.jwksPath, "--nonce", "n", "--nonce-flow", "sideways", token],
            ["verify", "--client-id", "com.example.app", "--jwks", "/nonexistent/keys.json", token],
            ["verify", "--client-id", "com.example.app", "--jwks", Self.directory.path, token],
            ["verify", "--client-id", "com.example.app", "--jwks-url", "file:///etc/passwd", token],
            ["verify", "--client-id", "com.example.app", "--jwks", Self.jwksPath, "--frobnicate", token],
        ]
        for arguments in cases {
            let result = try runBaton(arguments)
            #expect(result.status == 2, "\(arguments.dropLast()): \(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result.stderr)")
        }
    }

    @Test("A key set that is refused (duplicate kids) is a configuration error")
    func refusedKeySet() throws {
        let path = Self.directory.appendingPathComponent("dup.json").path
        let jwk = JWK(key: .rsa(Self.key.publicKey), kid: "K1")
        _ = FileManager.default.createFile(atPath: path, contents: Data(JSON.serializeBytes(JWKSet(keys: [jwk, jwk]).json())))
        let result = try runBaton(["verify", "--client-id", "com.example.app", "--jwks", path, Self.token()])
        #expect(result.status == 2)
        #expect(result.stderr.contains("duplicate_key_id"))
    }

    @Test("An unreachable key server fails with exit 1 and one line")
    func unreachableKeyServer() throws {
        let result = try runBaton(["verify", "--client-id", "com.example.app", "--jwks-url", "http://127.0.0.1:9/auth/keys", Self.token()])
        #expect(result.status == 1)
        #expect(result.stderr.contains("cannot fetch the key set"))
    }

    @Test("Large and strange input never crashes or hangs", arguments: [
        Data(count: (1 << 20) + 1), Data(repeating: 0x2E, count: 20_000), Data(repeating: 0x41, count: 16_385),
        Data([0xFF, 0xFE, 0x00, 0x2E, 0x2E]), Data(), Data("\n\n".utf8), Data(String(repeating: "é.", count: 3).utf8),
        Data((Base64URL.encode(Array(String(repeating: "[", count: 9_000).utf8)) + ".e30.AQ").utf8),
    ])
    func strangeInput(input: Data) throws {
        let result = try verify(["-"], input: input)
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.hasPrefix("rejected: "))
    }

    @Test("baton-bench verify ends with one JSON object of figures")
    func bench() throws {
        let result = try runBatonBench(["verify", "--seconds", "0.1"])
        #expect(result.status == 0, "\(result.stderr)")
        let last = try #require(result.stdout.split(separator: "\n").last)
        let figures = try JSON.parseObject(Array(last.utf8))
        for name in ["verify_per_s", "openssl_verify_per_s", "ratio", "verify_per_s_all_cores"] {
            #expect((figures[name]?.doubleValue ?? 0) > 0, "\(name)")
        }
    }
}
