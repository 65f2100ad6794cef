import BatonJSON
import Testing

@Suite("JSON")
struct JSONTests {
    @Test("A JWT-like object parses with every kind of value")
    func parsesObject() throws {
        let text = #"{"s":"a\"b\\c\/d\u00e9\ud83d\ude00","i":1700000000,"neg":-12,"f":1.5e2,"t":true,"n":null,"a":[1,"x",{}],"o":{"k":false}}"#
        let value = try JSON.parse(Array(text.utf8))
        #expect(value["s"]?.stringValue == "a\"b\\c/dé😀")
        #expect(value["i"]?.intValue == 1_700_000_000)
        #expect(value["neg"]?.intValue == -12)
        #expect(value["f"]?.doubleValue == 150)
        #expect(value["f"]?.intValue == 150)
        #expect(value["t"]?.boolValue == true)
        #expect(value["n"]?.isNull == true)
        #expect(value["a"]?.arrayValue?.count == 3)
        #expect(value["o"]?["k"]?.boolValue == false)
        #expect(value.objectValue?.keys == ["s", "i", "neg", "f", "t", "n", "a", "o"])
    }

    @Test("Whitespace around tokens, including CRLF, is accepted")
    func whitespace() throws {
        let value = try JSON.parse(Array(" {\"iss\":\"joe\",\r\n \"exp\" : 1300819380 }\n\t".utf8))
        #expect(value["exp"]?.intValue == 1_300_819_380)
    }

    @Test("Fractional and huge numbers are not integers")
    func intValue() throws {
        #expect(try JSON.parse(Array("1.5".utf8)).intValue == nil)
        #expect(try JSON.parse(Array("1e300".utf8)).intValue == nil)
        #expect(try JSON.parse(Array("12345678901234567890".utf8)).intValue == nil)
        #expect(try JSON.parse(Array("-0".utf8)).intValue == 0)
    }

    @Test("Serialization is compact, escapes what it must, and round-trips")
    func serialize() throws {
        let value: JSONValue = ["b": true, "s": "q\"\\\n\u{1}é", "n": 42, "f": 0.25, "a": [.null, "x"], "o": [:]]
        let text = JSON.serialize(value)
        #expect(text == #"{"b":true,"s":"q\"\\\n\u0001é","n":42,"f":0.25,"a":[null,"x"],"o":{}}"#)
        #expect(try JSON.parse(Array(text.utf8)) == value)
    }

    @Test("The escaper escapes quotes, backslashes, every control character and U+2028/9; other text passes through")
    func quote() throws {
        #expect(JSON.quote("a\"b\\c\n\r\t") == #""a\"b\\c\n\r\t""#)
        #expect(JSON.quote("\u{0}\u{1F}\u{7F}\u{80}\u{85}\u{9F}\u{2028}\u{2029}") == #""\u0000\u001f\u007f\u0080\u0085\u009f\u2028\u2029""#)
        #expect(JSON.quote("é😀/\u{A0}\u{2027}\u{202A}") == "\"é😀/\u{A0}\u{2027}\u{202A}\"")
        #expect(JSON.quote("") == #""""#)
        // Printable ASCII with nothing to escape is copied whole; one byte to escape anywhere still escapes it.
        let printable = String(decoding: (0x20...0x7E).filter { $0 != 0x22 && $0 != 0x5C }.map { UInt8($0) }, as: UTF8.self)
        #expect(JSON.quote(printable) == "\"" + printable + "\"")
        #expect(JSON.quote(printable + "\u{7F}") == "\"" + printable + "\\u007f\"")
        #expect(JSON.quote("\u{1F}" + printable) == "\"\\u001f" + printable + "\"")
        for text in ["a\u{85}b\u{2028}c\"\u{1B}[31m", "\u{10FFFF}\u{0}"] {
            #expect(try JSON.parse(Array(JSON.quote(text).utf8)) == .string(text))
        }
        #expect(JSON.escapes("\u{85}") && JSON.escapes("\"") && !JSON.escapes("a") && !JSON.escapes("\u{A0}"))
    }

    @Test("Object equality ignores member order; subscripts replace and remove")
    func objectSemantics() {
        var object: JSONObject = ["a": 1, "b": 2]
        #expect(object == ["b": 2, "a": 1])
        object["a"] = 3
        #expect(object.keys == ["a", "b"])
        object["a"] = nil
        #expect(object.keys == ["b"])
        #expect(object != ["b": 2, "c": 3])
    }

    @Test("Malformed JSON is rejected", arguments: [
        "", " ", "{", "}", "{\"a\":1,}", "[1,]", "[1 2]", "{\"a\" 1}", "{a:1}", "{'a':1}", "01", "-", "1.", ".5", "1e", "+1",
        "NaN", "Infinity", "1e999", "tru", "nul", "\"abc", "\"a\u{1}b\"", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"",
        "\"\\ud800\\u0041\"", "{} {}", "{}x", "// c\n{}", "/* c */{}", "\u{FEFF}{}", "[\"\t\"]",
    ])
    func rejectsMalformed(text: String) {
        #expect(throws: JSONError(.invalidJSON)) { try JSON.parse(Array(text.utf8)) }
    }

    @Test("Invalid UTF-8 in strings is rejected", arguments: [[0xC3], [0xFF], [0xED, 0xA0, 0x80], [0xC0, 0xAF], [0xE2, 0x82]] as [[UInt8]])
    func rejectsInvalidUTF8(sequence: [UInt8]) {
        let bytes = Array("\"a".utf8) + sequence + Array("b\"".utf8)
        #expect(throws: JSONError(.invalidJSON)) { try JSON.parse(bytes) }
    }

    @Test("Duplicate member names are rejected, in small and large objects and nested")
    func rejectsDuplicates() throws {
        #expect(throws: JSONError(.duplicateMember)) { try JSON.parse(Array(#"{"a":1,"a":1}"#.utf8)) }
        #expect(throws: JSONError(.duplicateMember)) { try JSON.parse(Array(#"{"a":1,"b":{"c":1,"c":2}}"#.utf8)) }
        #expect(throws: JSONError(.duplicateMember)) { try JSON.parse(Array(#"{"a":1,"\u0061":2}"#.utf8)) }
        for count in [15, 16, 17, 40] {
            let members = (0..<count).map { "\"k\($0)\":\($0)" } + ["\"k\(count - 1)\":0"]
            #expect(throws: JSONError(.duplicateMember)) { try JSON.parse(Array("{\(members.joined(separator: ","))}".utf8)) }
            let unique = (0..<count).map { "\"k\($0)\":\($0)" }
            #expect(try JSON.parse(Array("{\(unique.joined(separator: ","))}".utf8)).objectValue?.count == count)
        }
    }

    @Test("Deep nesting is rejected without a crash, however deep")
    func rejectsDeepNesting() throws {
        for depth in [17, 1_000, 200_000] {
            #expect(throws: JSONError(.tooDeep)) { try JSON.parse(Array(String(repeating: "[", count: depth).utf8)) }
            #expect(throws: JSONError(.tooDeep)) { try JSON.parse(Array(String(repeating: "{\"a\":", count: depth).utf8)) }
        }
        let sixteen = String(repeating: "[", count: 16) + String(repeating: "]", count: 16)
        #expect(try JSON.parse(Array(sixteen.utf8)).arrayValue != nil)
        #expect(throws: JSONError(.tooDeep)) { try JSON.parse(Array(sixteen.utf8), maxDepth: 15) }
    }

    @Test("parseObject refuses non-object JSON", arguments: ["[]", "1", "\"x\"", "null", "true"])
    func parseObjectRefusesOtherValues(text: String) {
        #expect(throws: JSONError(.unexpectedJSON)) { try JSON.parseObject(Array(text.utf8)) }
    }
}
