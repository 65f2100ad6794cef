import BatonAppleSignIn
import Foundation
import TestSupport
import Testing

@Suite("ClientSecret")
struct ClientSecretTests {
    @Test("the secret is an ES256 JWT with Apple's claims, verified by openssl from the public key")
    func verifiedByOpenSSL() throws {
        let keys = try KeyDirectory()
        defer { keys.remove() }
        let (pem, publicPath) = try keys.p256()
        let signer = try ClientSecret(teamID: "AAAAAAAAAA", keyID: "KEYA000001", clientID: "com.example.app", pem: pem)
        let issuedAt = Date(timeIntervalSince1970: 1_800_000_000.75)
        let token = try signer.clientSecret(issuedAt: issuedAt, lifetime: 3600)

        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        let headerBytes = try #require(decodeBase64URL(parts[0]))
        let header = try #require(try JSONSerialization.jsonObject(with: headerBytes) as? [String: Any])
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == "KEYA000001")
        let claimBytes = try #require(decodeBase64URL(parts[1]))
        let claims = try #require(try JSONSerialization.jsonObject(with: claimBytes) as? [String: Any])
        #expect(claims["iss"] as? String == "AAAAAAAAAA")
        #expect(claims["sub"] as? String == "com.example.app")
        #expect(claims["aud"] as? String == "https://appleid.apple.com")
        #expect((claims["iat"] as? NSNumber)?.int64Value == 1_800_000_000)
        #expect((claims["exp"] as? NSNumber)?.int64Value == 1_800_003_600)
        #expect(Set(claims.keys) == ["iss", "iat", "exp", "aud", "sub"])

        let signature = try #require(decodeBase64URL(parts[2]))
        #expect(signature.count == 64)
        try Data("\(parts[0]).\(parts[1])".utf8).write(to: URL(fileURLWithPath: keys.path("input")))
        try derFromRaw(signature).write(to: URL(fileURLWithPath: keys.path("sig.der")))
        let verified = try runProcess("/usr/bin/openssl", ["dgst", "-sha256", "-verify", publicPath, "-signature", keys.path("sig.der"), keys.path("input")])
        #expect(verified.status == 0)
        #expect(verified.stdout.contains("Verified OK"))

        // The same check fails on other content, so it can fail.
        try Data("\(parts[0]).\(parts[1])x".utf8).write(to: URL(fileURLWithPath: keys.path("input")))
        let tampered = try runProcess("/usr/bin/openssl", ["dgst", "-sha256", "-verify", publicPath, "-signature", keys.path("sig.der"), keys.path("input")])
        #expect(tampered.status != 0)
    }

    @Test("the lifetime is at most 15,777,000 seconds")
    func lifetimeLimit() throws {
        let keys = try KeyDirectory()
        defer { keys.remove() }
        let signer = try ClientSecret(teamID: "AAAAAAAAAA", keyID: "KEYA000001", clientID: "com.example.app", pem: try keys.p256().privatePEM)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        _ = try signer.clientSecret(issuedAt: now, lifetime: 15_777_000)
        for lifetime in [15_777_001, 0, -1] as [TimeInterval] {
            let error = #expect(throws: AppleClientError.self) { try signer.clientSecret(issuedAt: now, lifetime: lifetime) }
            #expect(error?.code == .invalidParameter)
        }
    }

    /// Keys that are not Apple `.p8` keys, made by openssl: (name, commands producing `key.pem` from nothing).
    static let refusedKeys: [(String, [[String]])] = [
        ("RSA PKCS#8", [["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "key.pem"]]),
        ("P-384 PKCS#8", [["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", "key.pem"]]),
        ("secp256k1 PKCS#8", [["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:secp256k1", "-out", "key.pem"]]),
        ("Ed25519 PKCS#8", [["genpkey", "-algorithm", "ed25519", "-out", "key.pem"]]),
        ("P-256 SEC1", [["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "p8.pem"], ["ec", "-in", "p8.pem", "-out", "key.pem"]]),
        ("P-256 encrypted", [["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "p8.pem"], ["pkcs8", "-topk8", "-v2", "aes-256-cbc", "-passout", "pass:x", "-in", "p8.pem", "-out", "key.pem"]]),
        ("P-256 public key", [["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "p8.pem"], ["pkey", "-in", "p8.pem", "-pubout", "-out", "key.pem"]]),
    ]

    @Test("anything but an EC P-256 PKCS#8 key is refused with a clear error", arguments: refusedKeys.indices)
    func refusedKey(_ index: Int) async throws {
        let (name, commands) = Self.refusedKeys[index]
        let keys = try KeyDirectory()
        defer { keys.remove() }
        for command in commands {
            try keys.openssl(command.map { $0.hasSuffix(".pem") ? keys.path($0) : $0 })
        }
        // openssl writes a public key readable by all; the test is about the content, so make it private.
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: keys.path("key.pem"))
        let error = await #expect(throws: AppleClientError.self, "\(name)") {
            try await ClientSecret.load(teamID: "AAAAAAAAAA", keyID: "KEYA000001", clientID: "com.example.app", keyFile: keys.path("key.pem"))
        }
        #expect(error?.code == .keyInvalid)
        let pemBody = try String(contentsOfFile: keys.path("key.pem"), encoding: .utf8).split(separator: "\n")[1]
        #expect(error?.description.contains(pemBody) == false)
    }

    @Test("text that is not PEM, and a missing file, are refused")
    func notPEM() async throws {
        #expect(throws: AppleClientError(.keyInvalid)) {
            try ClientSecret(teamID: "AAAAAAAAAA", keyID: "KEYA000001", clientID: "com.example.app", pem: "hello")
        }
        #expect(throws: AppleClientError(.keyInvalid)) {
            try ClientSecret(teamID: "AAAAAAAAAA", keyID: "KEYA000001", clientID: "com.example.app", pem: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
        }
        let missing = await #expect(throws: AppleClientError.self) {
            try await ClientSecret.load(teamID: "AAAAAAAAAA", keyID: "KEYA000001", clientID: "com.example.app", keyFile: "/nonexistent/key.p8")
        }
        #expect(missing?.code == .keyUnreadable)
    }

    @Test("a .p8 file readable by its group or others is refused, and accepted once private")
    func exposedKey() async throws {
        let keys = try KeyDirectory()
        defer { keys.remove() }
        let pem = try keys.p256().privatePEM
        try keys.write("exposed.p8", pem, mode: 0o644)
        let exposed = await #expect(throws: AppleClientError.self) {
            try await ClientSecret.load(teamID: "AAAAAAAAAA", keyID: "KEYA000001", clientID: "com.example.app", keyFile: keys.path("exposed.p8"))
        }
        #expect(exposed?.code == .keyExposed)
        try keys.write("exposed.p8", pem, mode: 0o600)
        _ = try await ClientSecret.load(teamID: "AAAAAAAAAA", keyID: "KEYA000001", clientID: "com.example.app", keyFile: keys.path("exposed.p8"))
    }

    @Test("malformed identifiers are refused", arguments: [
        ("aaaaaaaaaa", "KEYA000001", "com.example.app"),
        ("AAAAAAAAA", "KEYA000001", "com.example.app"),
        ("AAAAAAAAAA", "KEYA00001", "com.example.app"),
        ("AAAAAAAAAA", "KEYA000001", "AAAAAAAAAA.com.example.app"),
        ("AAAAAAAAAA", "KEYA000001", ""),
        ("AAAAAAAAAA", "KEYA000001", "com.example\"app"),
    ])
    func malformedIdentifiers(_ teamID: String, _ keyID: String, _ clientID: String) throws {
        let keys = try KeyDirectory()
        defer { keys.remove() }
        let pem = try keys.p256().privatePEM
        #expect(throws: AppleClientError(.invalidParameter)) {
            try ClientSecret(teamID: teamID, keyID: keyID, clientID: clientID, pem: pem)
        }
    }

    @Test("the signer's description shows no key material")
    func noKeyInDescription() throws {
        let keys = try KeyDirectory()
        defer { keys.remove() }
        let pem = try keys.p256().privatePEM
        let signer = try ClientSecret(teamID: "AAAAAAAAAA", keyID: "KEYA000001", clientID: "com.example.app", pem: pem)
        var dumped = ""
        dump(signer, to: &dumped)
        let body = String(pem.split(separator: "\n")[1].prefix(20))
        for text in [String(describing: signer), String(reflecting: signer), dumped] {
            #expect(!text.contains(body))
            #expect(!text.contains("PRIVATE"))
        }
    }
}
