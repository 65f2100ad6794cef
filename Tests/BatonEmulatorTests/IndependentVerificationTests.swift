import BatonEmulator
import Foundation
import BatonJOSE
import Testing
import TestSupport

@Suite("Identity tokens verify with an independent implementation")
struct IndependentVerificationTests {
    @Test("openssl verifies an identity token with the published JWK, converted to PEM by openssl itself")
    func opensslVerifies() async throws {
        try await Scenario.run(users: 1) { scenario in
            let token = try scenario.emulator.authorize(clientID: scenario.clientID, user: scenario.users[0].id, nonce: "x").idToken
            let jws = try CompactJWS.parse(token)
            let keys = try JWKSet(json: Array(try await scenario.http.get("/auth/keys").text.utf8))
            let kid = try #require(jws.header.kid)
            let jwk = try #require(keys.key(withID: kid))
            guard case .rsa(let rsa) = jwk.key else { Issue.record("not an RSA key"); return }

            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("verify-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            @Sendable func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
            let hex = { (bytes: [UInt8]) in bytes.map { String(format: "%02X", $0) }.joined() }
            // An RSAPublicKey (PKCS#1) built by openssl from n and e, then turned into a SubjectPublicKeyInfo PEM.
            try "asn1=SEQUENCE:key\n[key]\nn=INTEGER:0x\(hex(rsa.modulus))\ne=INTEGER:0x\(hex(rsa.exponent))\n"
                .write(toFile: path("key.conf"), atomically: true, encoding: .utf8)
            let der = try await offPool { try runProcess("/usr/bin/openssl", ["asn1parse", "-genconf", path("key.conf"), "-out", path("key.der"), "-noout"]) }
            #expect(der.status == 0, "\(der.stderr)")
            let pem = try await offPool { try runProcess("/usr/bin/openssl", ["rsa", "-RSAPublicKey_in", "-inform", "DER", "-in", path("key.der"), "-pubout", "-out", path("pub.pem")]) }
            #expect(pem.status == 0, "\(pem.stderr)")
            try Data(jws.signingInput).write(to: URL(fileURLWithPath: path("input")))
            try Data(jws.signature).write(to: URL(fileURLWithPath: path("sig.bin")))
            let verified = try await offPool { try runProcess("/usr/bin/openssl", ["dgst", "-sha256", "-verify", path("pub.pem"), "-signature", path("sig.bin"), path("input")]) }
            #expect(verified.status == 0)
            #expect(verified.stdout.contains("Verified OK"))

            // The same check fails for a tampered signing input: the test can fail.
            try Data(jws.signingInput + [0x41]).write(to: URL(fileURLWithPath: path("input")))
            let tampered = try await offPool { try runProcess("/usr/bin/openssl", ["dgst", "-sha256", "-verify", path("pub.pem"), "-signature", path("sig.bin"), path("input")]) }
            #expect(tampered.status != 0)
        }
    }

    @Test("Baton's JOSE verifier accepts emulator tokens and refuses them under a wrong kid")
    func joseVerifies() async throws {
        try await Scenario.run(users: 1) { scenario in
            let jws = try CompactJWS.parse(try scenario.emulator.authorize(clientID: scenario.clientID, user: scenario.users[0].id).idToken)
            let keys = scenario.emulator.jwks
            #expect(keys.key(withID: jws.header.kid!)?.verifies(jws) == true)
            let other = try #require(keys.keys.first { $0.kid != jws.header.kid })
            #expect(other.verifies(jws) == false)
        }
    }
}
