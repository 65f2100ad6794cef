import Foundation
import TestSupport
import Testing

@Suite("baton client-secret")
struct ClientSecretCommandTests {
    func arguments(_ keys: KeyDirectory, key: String = "key.p8", days: String? = nil, teamID: String = "AAAAAAAAAA", clientID: String = "com.example.app") -> [String] {
        var arguments = ["client-secret", "--team-id", teamID, "--key-id", "KEYA000001", "--key", keys.path(key), "--client-id", clientID]
        if let days { arguments += ["--days", days] }
        return arguments
    }

    @Test("prints one ES256 secret with the requested lifetime, verified by openssl")
    func printsVerifiableSecret() throws {
        let keys = try KeyDirectory()
        defer { keys.remove() }
        try keys.p256("key.p8")
        let result = try runBaton(arguments(keys, days: "182"))
        #expect(result.status == 0, "\(result.stderr)")
        let secret = result.stdout.trimmingCharacters(in: .newlines)
        #expect(!secret.contains("\n"))
        #expect(!result.stderr.contains(secret))
        #expect(result.stderr.contains("valid until"))

        let parts = secret.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        let headerData = try #require(decodeBase64URL(parts[0]))
        let header = try #require(try JSONSerialization.jsonObject(with: headerData) as? [String: Any])
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == "KEYA000001")
        let claimData = try #require(decodeBase64URL(parts[1]))
        let claims = try #require(try JSONSerialization.jsonObject(with: claimData) as? [String: Any])
        #expect(claims["iss"] as? String == "AAAAAAAAAA")
        #expect(claims["sub"] as? String == "com.example.app")
        #expect(claims["aud"] as? String == "https://appleid.apple.com")
        let iat = try #require((claims["iat"] as? NSNumber)?.int64Value)
        let exp = try #require((claims["exp"] as? NSNumber)?.int64Value)
        #expect(exp - iat == 182 * 86_400)
        #expect(exp - iat <= 15_777_000)

        let signature = try #require(decodeBase64URL(parts[2]))
        #expect(signature.count == 64)
        try Data("\(parts[0]).\(parts[1])".utf8).write(to: URL(fileURLWithPath: keys.path("input")))
        try derFromRaw(signature).write(to: URL(fileURLWithPath: keys.path("sig.der")))
        let verified = try runProcess("/usr/bin/openssl", ["dgst", "-sha256", "-verify", keys.path("key.p8.pub"), "-signature", keys.path("sig.der"), keys.path("input")])
        #expect(verified.status == 0)
        #expect(verified.stdout.contains("Verified OK"))
    }

    @Test("the default lifetime is one day")
    func defaultLifetime() throws {
        let keys = try KeyDirectory()
        defer { keys.remove() }
        try keys.p256("key.p8")
        let result = try runBaton(arguments(keys))
        #expect(result.status == 0)
        let payload = try #require(decodeBase64URL(result.stdout.split(separator: ".")[1]))
        let claims = try #require(try JSONSerialization.jsonObject(with: payload) as? [String: Any])
        #expect((claims["exp"] as? NSNumber)!.int64Value - (claims["iat"] as? NSNumber)!.int64Value == 86_400)
    }

    /// Usage errors: exit 2, one line naming the problem, nothing on stdout.
    static let usageErrors: [(String, [String], String)] = [
        ("183 days", ["--days", "183"], "--days"),
        ("zero days", ["--days", "0"], "--days"),
        ("days not a number", ["--days", "six months"], "--days"),
        ("lower-case team ID", ["--team-id", "aaaaaaaaaa"], "--team-id"),
        ("client ID with team prefix", ["--client-id", "AAAAAAAAAA.com.example.app"], "team ID"),
        ("unknown option", ["--lifetime", "3"], "unknown option"),
    ]

    @Test("usage errors exit 2 with one line", arguments: usageErrors.indices)
    func usageError(_ index: Int) throws {
        let (_, extra, expected) = Self.usageErrors[index]
        let keys = try KeyDirectory()
        defer { keys.remove() }
        try keys.p256("key.p8")
        var base = arguments(keys)
        // Later options win, so appending overrides the valid ones.
        base += extra
        let result = try runBaton(base)
        #expect(result.status == 2)
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.contains(expected), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1)
    }

    @Test("a missing option is a usage error")
    func missingOption() throws {
        let result = try runBaton(["client-secret", "--team-id", "AAAAAAAAAA", "--key-id", "KEYA000001", "--client-id", "com.example.app"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("missing --key"))
    }

    @Test("a key that is not P-256, or no key at all, exits 1 with a clear line")
    func badKeys() throws {
        let keys = try KeyDirectory()
        defer { keys.remove() }
        try keys.openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", keys.path("rsa.pem")])
        try keys.openssl(["rsa", "-in", keys.path("rsa.pem"), "-traditional", "-out", keys.path("rsa-traditional.pem")])
        let pkcs8RSA = try runBaton(arguments(keys, key: "rsa.pem"))
        #expect(pkcs8RSA.status == 1)
        #expect(pkcs8RSA.stdout.isEmpty)
        #expect(pkcs8RSA.stderr.contains("not an EC P-256"))
        let traditionalRSA = try runBaton(arguments(keys, key: "rsa-traditional.pem"))
        #expect(traditionalRSA.status == 1)
        #expect(traditionalRSA.stderr.contains("RSA key"))
        let missing = try runBaton(arguments(keys, key: "absent.p8"))
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("cannot read the private key"))
    }
}
