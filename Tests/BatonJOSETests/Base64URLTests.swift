import BatonJOSE
import Testing

@Suite("Base64URL")
struct Base64URLTests {
    @Test("RFC 4648 test vectors encode without padding and decode back",
          arguments: [("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"), ("foobar", "Zm9vYmFy")])
    func rfc4648(plain: String, encoded: String) throws {
        #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
        #expect(try Base64URL.decode(encoded) == Array(plain.utf8))
    }

    @Test("The URL-safe alphabet is used both ways")
    func urlSafeAlphabet() throws {
        let bytes: [UInt8] = [0xFB, 0xFF, 0xBF, 0xFE]
        #expect(Base64URL.encode(bytes) == "-_-__g")
        #expect(try Base64URL.decode("-_-__g") == bytes)
    }

    @Test("Every byte string round-trips", arguments: 0..<40)
    func roundTrip(length: Int) throws {
        let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ length) }
        #expect(try Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        #expect(try Base64URL.decode(Substring(Base64URL.encode(bytes))) == bytes)
    }

    @Test("Non-strict text is rejected",
          arguments: ["Zg==", "Zm8=", "Zm9v\n", " Zm9v", "Zm 9v", "Zm9v+A", "Zm9v/A", "Z", "Zm9vY", "Zh", "Zm9", "é", "Zm9v\0", "Zm.v"])
    func rejects(text: String) {
        #expect(throws: JOSEError(.invalidBase64)) { try Base64URL.decode(text) }
    }
}
