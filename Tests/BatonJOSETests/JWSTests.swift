import BatonJOSE
import BatonJSON
import Testing

@Suite("JWS, JWK and keys")
struct JWSTests {
    static let rsa = try! RSAPrivateKey.generate()
    static let ec = try! P256PrivateKey.generate()

    static func token(header: JSONObject, payload: String = #"{"sub":"x"}"#) -> String {
        JWS.compact(header: header, payload: Array(payload.utf8)) { _ in [1, 2, 3] }
    }

    @Test("RS256 and ES256 tokens round-trip through signing, parsing and verification")
    func roundTrip() throws {
        let payload = Array(#"{"iss":"me","n":1}"#.utf8)
        let rs = try CompactJWS.parse(JWS.signRS256(payload: payload, key: Self.rsa, kid: "r1"))
        #expect(rs.header.alg == "RS256" && rs.header.kid == "r1" && rs.header.typ == nil)
        #expect(rs.payload == payload)
        #expect(rs.signature.count == 256)
        #expect(JWK(key: .rsa(Self.rsa.publicKey), kid: "r1").verifies(rs))
        let es = try CompactJWS.parse(JWS.signES256(payload: payload, key: Self.ec, kid: "e1", extraHeader: ["typ": "JWT"]))
        #expect(es.header.alg == "ES256" && es.header.typ == "JWT")
        #expect(es.signature.count == 64)
        #expect(JWK(key: .p256(Self.ec.publicKey), kid: "e1").verifies(es))
        #expect(!JWK(key: .p256(try P256PrivateKey.generate().publicKey)).verifies(es))
    }

    @Test("A key verifies only the algorithm it is published for")
    func algorithmAllowList() throws {
        let payload = Array("{}".utf8)
        let rs = try CompactJWS.parse(JWS.signRS256(payload: payload, key: Self.rsa, kid: "k"))
        let relabelled = try CompactJWS.parse(JWS.signRS256(payload: payload, key: Self.rsa, kid: "k", extraHeader: ["alg": "RS512"]))
        #expect(relabelled.header.alg == "RS512")
        #expect(!JWK(key: .rsa(Self.rsa.publicKey)).verifies(relabelled))
        #expect(!JWK(key: .rsa(Self.rsa.publicKey), alg: "RS512").verifies(rs))
        #expect(!JWK(key: .rsa(Self.rsa.publicKey), use: "enc").verifies(rs))
        #expect(JWK(key: .rsa(Self.rsa.publicKey), use: "sig", alg: "RS256").verifies(rs))
        let es = try CompactJWS.parse(JWS.signES256(payload: payload, key: Self.ec, kid: "k", extraHeader: ["alg": "RS256"]))
        #expect(!JWK(key: .p256(Self.ec.publicKey)).verifies(es))
    }

    @Test("Compact parsing refuses each malformed shape with its code", arguments: [
        ("a.b", JOSEError.Code.malformedJWS), ("a.b.c.d", .malformedJWS), ("abc", .malformedJWS), (".e30.AQ", .malformedJWS),
        ("e30.e30.", .invalidHeader), ("..", .malformedJWS), ("e30=.e30.AQ", .invalidBase64), ("eyJhbGciOiJSUzI1NiJ9.e3 0.AQ", .invalidBase64), ("eyJhbGciOiJSUzI1NiJ9.e30.A", .invalidBase64),
        ("eyJhbGciOiJSUzI1NiJ9.e30.AQ+", .invalidBase64), ("bm90IGpzb24.e30.AQ", .invalidJSON), ("WzFd.e30.AQ", .unexpectedJSON),
        ("e30.e30.AQ", .invalidHeader),
    ])
    func malformed(token: String, code: JOSEError.Code) {
        #expect(joseCode { _ = try CompactJWS.parse(token) } == code)
    }

    @Test("Header checks: crit, typ, kid type, alg, duplicate members", arguments: [
        (#"{"alg":"RS256","crit":["exp"],"exp":1}"#, JOSEError.Code.criticalExtension),
        (#"{"alg":"RS256","crit":[]}"#, .criticalExtension),
        (#"{"alg":"RS256","typ":"JOSE"}"#, .unsupportedType),
        (#"{"alg":"RS256","typ":"jwt"}"#, .unsupportedType),
        (#"{"alg":"RS256","typ":1}"#, .invalidHeader),
        (#"{"alg":"RS256","kid":7}"#, .invalidHeader),
        (#"{"alg":"RS256","kid":["a"]}"#, .invalidHeader),
        (#"{"alg":null}"#, .invalidHeader),
        (#"{"kid":"a"}"#, .invalidHeader),
        (#"{"alg":"RS256","alg":"none"}"#, .duplicateMember),
        (#"{"alg":"RS256","kid":"a","kid":"b"}"#, .duplicateMember),
    ])
    func headerChecks(header: String, code: JOSEError.Code) {
        let token = Base64URL.encode(Array(header.utf8)) + ".e30.AQ"
        #expect(joseCode { _ = try CompactJWS.parse(token) } == code)
    }

    @Test("Key-bearing headers are kept but never used: the key comes from the caller")
    func embeddedKeysIgnored() throws {
        let attacker = try RSAPrivateKey.generate()
        let forged = try JWS.signRS256(payload: Array("{}".utf8), key: attacker, kid: "k",
                                       extraHeader: ["jwk": JWK(key: .rsa(attacker.publicKey)).json(), "jku": "https://evil.example/keys"])
        let jws = try CompactJWS.parse(forged)
        #expect(jws.header.raw["jwk"] != nil)
        #expect(!JWK(key: .rsa(Self.rsa.publicKey), kid: "k").verifies(jws))
    }

    @Test("Tokens over the limit are refused before decoding; the limit is adjustable")
    func sizeLimit() throws {
        let big = String(repeating: "A", count: 16_385)
        #expect(joseCode { _ = try CompactJWS.parse(big) } == .tooLarge)
        #expect(joseCode { _ = try CompactJWS.parse(String(repeating: "!", count: 20_000)) } == .tooLarge)
        let token = Self.token(header: ["alg": "RS256"])
        #expect(joseCode { _ = try CompactJWS.parse(token, maxLength: token.utf8.count - 1) } == .tooLarge)
        #expect(try CompactJWS.parse(token, maxLength: token.utf8.count).header.alg == "RS256")
    }

    @Test("claims() refuses non-object and duplicate-member payloads", arguments: [
        (#"[1]"#, JOSEError.Code.unexpectedJSON), ("\"s\"", .unexpectedJSON), (#"{"sub":"a","sub":"b"}"#, .duplicateMember),
        ("{", .invalidJSON), (String(repeating: "[", count: 5_000), .tooDeep),
    ])
    func claimsChecks(payload: String, code: JOSEError.Code) throws {
        let jws = try CompactJWS.parse(Self.token(header: ["alg": "RS256"], payload: payload), maxLength: 100_000)
        #expect(joseCode { _ = try jws.claims() } == code)
    }

    @Test("JWK Sets: parse, select by kid, skip other types, refuse duplicates and weak keys")
    func jwkSets() throws {
        let second = try RSAPrivateKey.generate()
        var keys = [JWK(key: .rsa(Self.rsa.publicKey), kid: "a", use: "sig", alg: "RS256"),
                    JWK(key: .rsa(second.publicKey), kid: "b", use: "sig", alg: "RS256"),
                    JWK(key: .p256(Self.ec.publicKey), kid: "c")]
        let set = JWKSet(keys: keys)
        var document = try #require(set.json()["keys"]?.arrayValue)
        document.append(["kty": "oct", "k": "c2VjcmV0", "kid": "h"])
        document.append(["kty": "OKP", "crv": "Ed25519", "x": "AAAA", "kid": "o"])
        document.append(["kty": "EC", "crv": "P-384", "x": "AAAA", "y": "AAAA", "kid": "p"])
        let parsed = try JWKSet(json: JSON.serializeBytes(["keys": .array(document)]))
        #expect(parsed == set)
        #expect(parsed.key(withID: "b")?.key == .rsa(second.publicKey))
        #expect(parsed.key(withID: "h") == nil)
        #expect(parsed.key(withID: "") == nil)

        keys.append(JWK(key: .p256(Self.ec.publicKey), kid: "a"))
        #expect(joseCode { _ = try JWKSet(validating: keys) } == .duplicateKeyID)
        #expect(joseCode { _ = try JWKSet(json: JSON.serializeBytes(JWKSet(keys: keys).json())) } == .duplicateKeyID)
    }

    @Test("JWK policy and shape failures refuse the set", arguments: [
        (#"{"keys":[{"kty":"RSA","n":"\#(Base64URL.encode([0xC1] + [UInt8](repeating: 7, count: 127)))","e":"AQAB"}]}"#, JOSEError.Code.keyPolicy),
        (#"{"keys":[{"kty":"RSA","n":"\#(Base64URL.encode([0xC1] + [UInt8](repeating: 7, count: 255)))","e":"Aw"}]}"#, .keyPolicy),
        (#"{"keys":[{"kty":"RSA","n":"\#(Base64URL.encode([0xC1] + [UInt8](repeating: 7, count: 254)))","e":"AQAB"}]}"#, .keyPolicy),
        (#"{"keys":[{"kty":"RSA","e":"AQAB"}]}"#, .invalidKey),
        (#"{"keys":[{"kty":"RSA","n":"AA==","e":"AQAB"}]}"#, .invalidKey),
        (#"{"keys":[{"kty":"RSA","n":"\#(Base64URL.encode([0xC1] + [UInt8](repeating: 7, count: 255)))","e":"AQAB","kid":5}]}"#, .invalidKey),
        (#"{"keys":[{"kty":"EC","crv":"P-256","x":"\#(Base64URL.encode([UInt8](repeating: 1, count: 32)))","y":"\#(Base64URL.encode([UInt8](repeating: 1, count: 32)))"}]}"#, .invalidKey),
        (#"{"keys":[{"n":"AQAB"}]}"#, .invalidKey),
        (#"{"keys":{}}"#, .unexpectedJSON),
        (#"{"keys":[1]}"#, .unexpectedJSON),
        (#"[]"#, .unexpectedJSON),
        (#"{"keys":[],"keys":[]}"#, .duplicateMember),
    ])
    func jwkRefusals(json: String, code: JOSEError.Code) {
        #expect(joseCode { _ = try JWKSet(json: Array(json.utf8)) } == code)
    }

    @Test("Private keys round-trip through PKCS#8 PEM; other key kinds are refused")
    func pem() throws {
        let rsaPEM = Self.rsa.pem()
        #expect(rsaPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(try RSAPrivateKey(pem: rsaPEM).publicKey == Self.rsa.publicKey)
        let ecPEM = Self.ec.pkcs8PEM()
        let reread = try P256PrivateKey(pkcs8PEM: "\n" + ecPEM + "\n")
        #expect(reread.publicKey == Self.ec.publicKey)
        let signature = try reread.signES256(Array("m".utf8))
        #expect(Self.ec.publicKey.verifyES256(signature: signature, message: Array("m".utf8)))
        #expect(joseCode { _ = try P256PrivateKey(pkcs8PEM: rsaPEM) } == .invalidKey)
        #expect(joseCode { _ = try RSAPrivateKey(pem: ecPEM) } == .invalidKey)
        #expect(joseCode { _ = try P256PrivateKey(pkcs8PEM: "") } == .invalidKey)
        #expect(joseCode { _ = try P256PrivateKey(pkcs8PEM: ecPEM.replacingOccurrences(of: "PRIVATE KEY", with: "EC PRIVATE KEY")) } == .invalidKey)
        #expect(joseCode { _ = try P256PrivateKey(pkcs8PEM: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----") } == .invalidKey)
        #expect(joseCode { _ = try RSAPrivateKey.generate(bits: 1024) } == .keyPolicy)
    }

    @Test("ES256 refuses DER and wrong-length signatures; RS256 refuses wrong lengths")
    func signatureForms() throws {
        let message = Array("payload".utf8)
        let raw = try Self.ec.signES256(message)
        #expect(Self.ec.publicKey.verifyES256(signature: raw, message: message))
        #expect(!Self.ec.publicKey.verifyES256(signature: raw + [0], message: message))
        #expect(!Self.ec.publicKey.verifyES256(signature: Array(raw.dropLast()), message: message))
        #expect(!Self.ec.publicKey.verifyES256(signature: [UInt8](repeating: 0, count: 64), message: message))
        let rs = try Self.rsa.signRS256(message)
        #expect(Self.rsa.publicKey.verifyRS256(signature: rs, message: message))
        #expect(!Self.rsa.publicKey.verifyRS256(signature: [0] + rs, message: message))
        #expect(!Self.rsa.publicKey.verifyRS256(signature: Array(rs.dropFirst()), message: message))
        #expect(!Self.rsa.publicKey.verifyRS256(signature: [], message: message))
        #expect(Digest.sha256Hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test("One key verifies correctly from many threads at once, good and bad signatures interleaved")
    func concurrentVerification() async throws {
        let key = Self.rsa.publicKey
        let messages = (0..<8).map { Array("message \($0)".utf8) }
        let signatures = try messages.map { try Self.rsa.signRS256($0) }
        let results = await withTaskGroup(of: Bool.self) { group in
            for task in 0..<16 {
                group.addTask {
                    var correct = true
                    for round in 0..<200 {
                        let index = (task + round) % messages.count
                        let genuine = key.verifyRS256(signature: signatures[index], message: messages[index])
                        let forged = key.verifyRS256(signature: signatures[(index + 1) % messages.count], message: messages[index])
                        correct = correct && genuine && !forged
                    }
                    return correct
                }
            }
            var all: [Bool] = []
            for await result in group { all.append(result) }
            return all
        }
        #expect(results.count == 16 && results.allSatisfy { $0 })
    }
}
