import BatonAppleSignIn
import Foundation
import BatonJOSE
import BatonJSON
import Testing
import TestSupport

/// Replays the committed seed corpus of the libFuzzer targets (`Fuzz/corpus/`, see `scripts/fuzz.sh`) through
/// the verifier and the JSON reader on every `make test`, with the harness's key set and clock: the forged
/// and policy-breaking seeds stay refused, the valid ones stay accepted.
@Suite("Fuzz seed corpus replay")
struct FuzzCorpusTests {
    static let corpus = packageRoot.appendingPathComponent("Fuzz/corpus")

    /// The seeds that are raw tokens (mode byte 0), by file name.
    static func tokenSeeds() throws -> [(name: String, token: String)] {
        let folder = corpus.appendingPathComponent("verifier")
        return try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted().compactMap { name in
            let bytes = try Data(contentsOf: folder.appendingPathComponent(name))
            guard bytes.first == 0 else { return nil }
            return (name, String(decoding: bytes.dropFirst(), as: UTF8.self))
        }
    }

    @Test("valid seeds verify; every forged or policy-breaking seed is refused")
    func verifierSeeds() throws {
        let keySet = try JWKSet(json: Data(contentsOf: Self.corpus.appendingPathComponent("verifier-keys.json")))
        #expect(keySet.keys.map(\.kid) == ["fuzz-1", "fuzz-2", "fuzz-ec"])
        let verifier = IdentityTokenVerifier(clientIDs: ["com.example.app", "com.example.web"], keys: FixedKeySet(keySet),
                                             now: { Date(timeIntervalSince1970: 1_795_953_660) })
        let seeds = try Self.tokenSeeds()
        #expect(seeds.count >= 40)
        var accepted: [String] = []
        for seed in seeds where (try? verifier.verify(seed.token, keySet: keySet)) != nil { accepted.append(seed.name) }
        #expect(accepted == seeds.map(\.name).filter { $0.hasPrefix("valid-") })
        #expect(accepted.count == 4)
    }

    @Test("refusals carry the reason the seed was built to trigger", arguments: [
        ("forged-alg-none", VerificationError.Code.algorithmNotAllowed),
        ("forged-es256-valid-signature", .algorithmNotAllowed),
        ("forged-hs256", .algorithmNotAllowed),
        ("forged-kid-swapped", .badSignature),
        ("forged-payload-swapped", .badSignature),
        ("forged-unknown-kid", .unknownKey),
        ("forged-oversize", .tooLarge),
        ("signed-kid-of-ec-key", .badSignature),
        ("signed-duplicate-sub", .malformed),
        ("signed-escaped-duplicate", .malformed),
        ("signed-duplicate-alg", .malformed),
        ("signed-crit", .unsupportedHeader),
        ("signed-expired", .expired),
        ("signed-wrong-aud", .wrongAudience),
        ("signed-wrong-iss", .wrongIssuer),
    ])
    func reasons(name: String, reason: VerificationError.Code) throws {
        let keySet = try JWKSet(json: Data(contentsOf: Self.corpus.appendingPathComponent("verifier-keys.json")))
        let verifier = IdentityTokenVerifier(clientIDs: ["com.example.app", "com.example.web"], keys: FixedKeySet(keySet),
                                             now: { Date(timeIntervalSince1970: 1_795_953_660) })
        let seed = try #require(try Self.tokenSeeds().first { $0.name == name })
        #expect(throws: VerificationError(reason)) { try verifier.verify(seed.token, keySet: keySet) }
    }

    @Test("every JSON seed either parses and round-trips, or is refused with a JSON error")
    func jsonSeeds() throws {
        let folder = Self.corpus.appendingPathComponent("json")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(names.count >= 15)
        var refused = 0
        for name in names {
            let bytes = try [UInt8](Data(contentsOf: folder.appendingPathComponent(name)))
            do {
                let value = try JSON.parse(bytes)
                #expect(try JSON.parse(JSON.serializeBytes(value)) == value, "\(name)")
            } catch is JSONError {
                refused += 1
            }
        }
        #expect(refused >= 10)
    }
}
