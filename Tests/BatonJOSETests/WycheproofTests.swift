import Foundation
import BatonJOSE
import BatonJSON
import Testing

/// Project Wycheproof vectors (see Tests/Vectors/SOURCES.md): every case gives its expected result.
@Suite("Wycheproof")
struct WycheproofTests {
    struct TestCase: Decodable {
        let tcId: Int
        let msg: String
        let sig: String
        let result: String
    }

    struct RSAFile: Decodable {
        struct Group: Decodable {
            struct PublicKey: Decodable {
                let modulus: String
                let publicExponent: String
            }
            let publicKey: PublicKey
            let tests: [TestCase]
        }
        let testGroups: [Group]
    }

    struct ECFile: Decodable {
        struct Group: Decodable {
            struct PublicKey: Decodable {
                let wx: String
                let wy: String
            }
            let publicKeyJwk: [String: String]?
            let publicKey: PublicKey
            let tests: [TestCase]
        }
        let testGroups: [Group]
    }

    /// A Wycheproof coordinate (hex, possibly with a sign byte or short) as 32 bytes.
    static func coordinate(_ hex: String) -> [UInt8] {
        let bytes = hexBytes(hex)
        return [UInt8](repeating: 0, count: max(0, 32 - bytes.count)) + bytes.suffix(32)
    }

    @Test("RSA PKCS#1 2048/SHA-256: every case as expected; e = 3 groups refused by policy")
    func rsaPKCS1() throws {
        let file = try JSONDecoder().decode(RSAFile.self, from: vectorData("rsa_signature_2048_sha256_test.json"))
        var checked = 0, policyRejected: [Int] = []
        for group in file.testGroups {
            let key: RSAPublicKey
            do {
                key = try RSAPublicKey(modulus: hexBytes(group.publicKey.modulus), exponent: hexBytes(group.publicKey.publicExponent))
            } catch let error as JOSEError {
                #expect(error.code == .keyPolicy)
                #expect(group.publicKey.publicExponent == "03")
                policyRejected += group.tests.map(\.tcId)
                continue
            }
            #expect(key.modulusBits == 2048)
            for test in group.tests {
                let verified = key.verifyRS256(signature: hexBytes(test.sig), message: hexBytes(test.msg))
                switch test.result {
                case "valid": #expect(verified, "tcId \(test.tcId) should verify")
                case "invalid": #expect(!verified, "tcId \(test.tcId) should not verify")
                default: break  // "acceptable" (tcId 8): either result passes.
                }
                checked += 1
            }
        }
        #expect(checked == 257)
        #expect(policyRejected == [258, 259])
    }

    @Test("ECDSA P-256 P1363 (raw r||s): every case as expected")
    func ecdsaP1363() throws {
        let file = try JSONDecoder().decode(ECFile.self, from: vectorData("ecdsa_secp256r1_sha256_p1363_test.json"))
        var checked = 0
        for group in file.testGroups {
            let key: P256PublicKey
            if let jwkMembers = group.publicKeyJwk {
                let jwk = try #require(try JWK(json: JSONObject(uniqueMembers: jwkMembers)))
                guard case .p256(let parsed) = jwk.key else {
                    Issue.record("not a P-256 key")
                    continue
                }
                key = parsed
            } else {
                key = try P256PublicKey(x: Self.coordinate(group.publicKey.wx), y: Self.coordinate(group.publicKey.wy))
            }
            for test in group.tests {
                let verified = key.verifyES256(signature: hexBytes(test.sig), message: hexBytes(test.msg))
                #expect(verified == (test.result == "valid"), "tcId \(test.tcId): expected \(test.result)")
                checked += 1
            }
        }
        #expect(checked == 262)
    }

    @Test("DER-encoded ECDSA signatures (the other Wycheproof file) never verify as ES256")
    func ecdsaDERRefused() throws {
        let file = try JSONDecoder().decode(ECFile.self, from: vectorData("ecdsa_secp256r1_sha256_test.json"))
        var checked = 0
        for group in file.testGroups {
            let key = try P256PublicKey(x: Self.coordinate(group.publicKey.wx), y: Self.coordinate(group.publicKey.wy))
            for test in group.tests where test.result == "valid" {
                #expect(!key.verifyES256(signature: hexBytes(test.sig), message: hexBytes(test.msg)), "tcId \(test.tcId)")
                checked += 1
            }
        }
        #expect(checked > 100)
    }
}

extension JSONObject {
    init(uniqueMembers dictionary: [String: String]) {
        self.init()
        for (key, value) in dictionary.sorted(by: { $0.key < $1.key }) { self[key] = .string(value) }
    }
}
