import Foundation
import BatonJOSE
import BatonJSON
import Testing

/// RFC 7515 Appendix A.2 (RS256) and A.3 (ES256), and the labelled cases derived from them.
@Suite("RFC 7515 examples")
struct RFC7515Tests {
    struct File: Decodable {
        struct Example: Decodable {
            let id: String
            let jws_compact: String
            let public_jwk: [String: String]
            let payload_utf8: String
            let protected_header_json: String
        }
        struct Derived: Decodable {
            struct Case: Decodable {
                let id: String
                let token: String
                let key: String
                let expect: String
            }
            let cases: [Case]
        }
        let examples: [Example]
        let derived_cases: Derived
    }

    static let file: File = {
        do { return try JSONDecoder().decode(File.self, from: vectorData("rfc7515_examples.json")) } catch { fatalError("\(error)") }
    }()

    static func key(_ name: String) throws -> JWK {
        let example = try #require(file.examples.first { $0.id == "RFC7515-\(name)" })
        return try #require(try JWK(json: JSONObject(uniqueMembers: example.public_jwk)))
    }

    @Test("A.2 (RS256) and A.3 (ES256) parse and verify", arguments: ["A.2", "A.3"])
    func examplesVerify(name: String) throws {
        let example = try #require(Self.file.examples.first { $0.id == "RFC7515-\(name)" })
        let jws = try CompactJWS.parse(example.jws_compact)
        #expect(jws.payload == Array(example.payload_utf8.utf8))
        #expect(try JSON.parseObject(Array(example.protected_header_json.utf8)) == jws.header.raw)
        #expect(try jws.claims()["iss"] == "joe")
        #expect(try Self.key(name).verifies(jws))
    }

    @Test("A.2's key does not verify A.3 and the reverse")
    func keysAreNotInterchangeable() throws {
        let a2 = try CompactJWS.parse(Self.file.examples[0].jws_compact)
        let a3 = try CompactJWS.parse(Self.file.examples[1].jws_compact)
        #expect(try !Self.key("A.3").verifies(a2))
        #expect(try !Self.key("A.2").verifies(a3))
    }

    @Test("Derived cases behave as labelled", arguments: file.derived_cases.cases.map(\.id))
    func derived(id: String) throws {
        let testCase = try #require(Self.file.derived_cases.cases.first { $0.id == id })
        let key = try Self.key(testCase.key == "A2" ? "A.2" : "A.3")
        let accepted: Bool
        do {
            accepted = key.verifies(try CompactJWS.parse(testCase.token))
        } catch is JOSEError {
            accepted = false
        }
        #expect(accepted == (testCase.expect == "accept-signature"), "\(id)")
    }
}
