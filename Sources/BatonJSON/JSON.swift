/// Baton's one strict JSON reader, one compact writer and one string escaper (RFC 8259), working on UTF-8 bytes.
///
/// The reader refuses what lenient parsers let through and attackers rely on: duplicate member names,
/// invalid UTF-8, lone surrogates, control characters in strings, leading zeros, `NaN`, comments,
/// trailing commas, a byte-order mark, trailing content, and nesting deeper than `maxDepth`
/// (checked before recursing, so deep input never exhausts the stack).
public enum JSON {
    /// Parses one JSON text.
    /// - Parameters:
    ///   - bytes: UTF-8 JSON text; whitespace around the value is allowed, anything else after it is not.
    ///   - maxDepth: the deepest nesting of arrays and objects accepted (default 16).
    /// - Throws: ``JSONError`` with code `.invalidJSON`, `.tooDeep` or `.duplicateMember`.
    public static func parse(_ bytes: some Collection<UInt8>, maxDepth: Int = 16) throws -> JSONValue {
        if let result = try bytes.withContiguousStorageIfAvailable({ try parse(buffer: $0, maxDepth: maxDepth) }) {
            return result
        }
        let copy = Array(bytes)
        return try copy.withUnsafeBufferPointer { try parse(buffer: $0, maxDepth: maxDepth) }
    }

    /// Parses one JSON text from a byte array; the same as the generic ``parse(_:maxDepth:)``.
    /// - Throws: ``JSONError`` with code `.invalidJSON`, `.tooDeep` or `.duplicateMember`.
    public static func parse(_ bytes: [UInt8], maxDepth: Int = 16) throws -> JSONValue {
        try bytes.withUnsafeBufferPointer { try parse(buffer: $0, maxDepth: maxDepth) }
    }

    /// Parses one JSON text from a byte array that must be an object; the same as the generic ``parseObject(_:maxDepth:)``.
    /// - Throws: ``JSONError`` with code `.unexpectedJSON`, or any code of ``parse(_:maxDepth:)``.
    public static func parseObject(_ bytes: [UInt8], maxDepth: Int = 16) throws -> JSONObject {
        guard case .object(let object) = try parse(bytes, maxDepth: maxDepth) else {
            throw JSONError(.unexpectedJSON, "expected a JSON object")
        }
        return object
    }

    /// Parses one JSON text that must be an object (a JWS header or JWT claims set).
    /// - Throws: ``JSONError`` with code `.unexpectedJSON` when the value is not an object, or any code of ``parse(_:maxDepth:)``.
    public static func parseObject(_ bytes: some Collection<UInt8>, maxDepth: Int = 16) throws -> JSONObject {
        guard case .object(let object) = try parse(bytes, maxDepth: maxDepth) else {
            throw JSONError(.unexpectedJSON, "expected a JSON object")
        }
        return object
    }

    private static func parse(buffer: UnsafeBufferPointer<UInt8>, maxDepth: Int) throws -> JSONValue {
        var reader = Reader(bytes: buffer, maxDepth: maxDepth)
        reader.skipWhitespace()
        let value = try reader.readValue(depth: 0)
        reader.skipWhitespace()
        guard reader.index == buffer.count else { throw JSONError(.invalidJSON, "content after the JSON value") }
        return value
    }

    /// Writes `value` as compact JSON (no insignificant whitespace, members in order).
    ///
    /// Integers within ±2^53 are written without a fraction; non-finite numbers, which JSON cannot
    /// express, are written as `null`.
    public static func serialize(_ value: JSONValue) -> String {
        var output = [UInt8]()
        output.reserveCapacity(256)
        write(value, to: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// Writes `value` as compact JSON UTF-8 bytes; see ``serialize(_:)``.
    public static func serializeBytes(_ value: JSONValue) -> [UInt8] {
        var output = [UInt8]()
        output.reserveCapacity(256)
        write(value, to: &output)
        return output
    }

    private static func write(_ value: JSONValue, to output: inout [UInt8]) {
        switch value {
        case .null: output.append(contentsOf: "null".utf8)
        case .bool(let flag): output.append(contentsOf: (flag ? "true" : "false").utf8)
        case .number(let number): writeNumber(number, to: &output)
        case .string(let text): writeString(text, to: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                write(element, to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let object):
            output.append(UInt8(ascii: "{"))
            for (index, member) in object.members.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                writeString(member.key, to: &output)
                output.append(UInt8(ascii: ":"))
                write(member.value, to: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    private static func writeNumber(_ number: Double, to output: inout [UInt8]) {
        guard number.isFinite else {
            output.append(contentsOf: "null".utf8)
            return
        }
        if number == number.rounded(.towardZero), abs(number) <= 9_007_199_254_740_992 {
            output.append(contentsOf: String(Int64(number)).utf8)
        } else {
            output.append(contentsOf: number.description.utf8)
        }
    }

    /// `text` as a JSON string literal, quotes included: the one escaper of Baton's JSON bodies, error
    /// answers and log lines.
    ///
    /// The scalars that ``escapes(_:)`` names are escaped: `"` and `\` with a backslash, LF, CR and tab as
    /// `\n`, `\r` and `\t`, any other as `\u00XX` or `\u202X`; so the text can neither end a line, forge
    /// another one nor carry a terminal escape sequence.
    public static func quote(_ text: String) -> String {
        var output = [UInt8]()
        output.reserveCapacity(text.utf8.count + 2)
        writeString(text, to: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// Whether ``quote(_:)`` escapes `scalar`: `"`, `\`, every control character (C0, DEL, C1 such as
    /// U+0085) and the separators U+2028 and U+2029.
    public static func escapes(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x22, 0x5C, 0..<0x20, 0x7F...0x9F, 0x2028, 0x2029: true
        default: false
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends `text` quoted and escaped as ``quote(_:)`` describes.
    private static func writeString(_ text: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        // Most strings are printable ASCII with nothing to escape (identifiers, tokens, dates): copied whole.
        var text = text
        let copied = text.withUTF8 { bytes in
            guard bytes.allSatisfy({ (0x20...0x7E).contains($0) && $0 != 0x22 && $0 != 0x5C }) else { return false }
            output.append(contentsOf: bytes)
            return true
        }
        if copied {
            output.append(UInt8(ascii: "\""))
            return
        }
        for scalar in text.unicodeScalars {
            guard escapes(scalar) else {
                if scalar.isASCII { output.append(UInt8(scalar.value)) } else { output.append(contentsOf: UTF8.encode(scalar)!) }
                continue
            }
            switch scalar.value {
            case 0x22: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case 0x5C: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            default:
                output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u")])
                for shift in [12, 8, 4, 0] { output.append(hexDigits[Int(scalar.value >> shift & 0x0F)]) }
            }
        }
        output.append(UInt8(ascii: "\""))
    }
}

/// The recursive-descent reader behind ``JSON/parse(_:maxDepth:)``.
private struct Reader {
    let bytes: UnsafeBufferPointer<UInt8>
    let maxDepth: Int
    var index = 0

    init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    private func fail(_ what: String) -> JSONError { JSONError(.invalidJSON, "\(what) at byte \(index)") }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func readValue(depth: Int) throws -> JSONValue {
        guard index < bytes.count else { throw fail("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return .object(try readObject(depth: depth + 1))
        case UInt8(ascii: "["): return .array(try readArray(depth: depth + 1))
        case UInt8(ascii: "\""): return .string(try readString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try readNumber())
        default: throw fail("unexpected character")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw fail("bad literal") }
        let start = literal.utf8Start
        for offset in 0..<count where bytes[index + offset] != start[offset] { throw fail("bad literal") }
        index += count
    }

    private mutating func readObject(depth: Int) throws -> JSONObject {
        guard depth <= maxDepth else { throw JSONError(.tooDeep, "nesting deeper than \(maxDepth)") }
        index += 1
        // Duplicate names are found through fingerprints (kept on the stack for the first 16 members):
        // FNV-1a of an ASCII name without escapes, or 0 for any other name, which is then compared with
        // `==` (canonical equivalence, the stricter test). Larger objects switch to a set of names.
        return try withUnsafeTemporaryAllocation(of: UInt64.self, capacity: 16) { fingerprints in
            try readMembers(depth: depth, fingerprints: fingerprints)
        }
    }

    private mutating func readMembers(depth: Int, fingerprints: UnsafeMutableBufferPointer<UInt64>) throws -> JSONObject {
        var members: [JSONObject.Member] = []
        var seen: Set<String>?
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return JSONObject(uniqueMembers: members)
        }
        members.reserveCapacity(16)
        while true {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
            let start = index + 1
            let key = try readString()
            let count = members.count
            if count < 16 {
                let fingerprint = Self.fingerprint(UnsafeBufferPointer(rebasing: bytes[start..<(index - 1)]))
                for position in 0..<count {
                    let other = fingerprints[position]
                    if (other == fingerprint || other == 0 || fingerprint == 0) && members[position].key == key {
                        throw JSONError(.duplicateMember, "member name repeated")
                    }
                }
                fingerprints[count] = fingerprint
                if count == 15 { seen = Set(members.map(\.key)); seen?.insert(key) }
            } else if seen?.insert(key).inserted == false {
                throw JSONError(.duplicateMember, "member name repeated")
            }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try readValue(depth: depth)
            members.append(JSONObject.Member(key: key, value: value))
            skipWhitespace()
            guard index < bytes.count else { throw fail("unterminated object") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                skipWhitespace()
            } else if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return JSONObject(uniqueMembers: members)
            } else {
                throw fail("expected ',' or '}'")
            }
        }
    }

    private mutating func readArray(depth: Int) throws -> [JSONValue] {
        guard depth <= maxDepth else { throw JSONError(.tooDeep, "nesting deeper than \(maxDepth)") }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return elements
        }
        while true {
            elements.append(try readValue(depth: depth))
            skipWhitespace()
            guard index < bytes.count else { throw fail("unterminated array") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                skipWhitespace()
            } else if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return elements
            } else {
                throw fail("expected ',' or ']'")
            }
        }
    }

    /// FNV-1a of a member name's raw bytes when they are printable ASCII without escapes (never 0), else 0.
    private static func fingerprint(_ raw: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in raw {
            if byte >= 0x80 || byte == UInt8(ascii: "\\") { return 0 }
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
        }
        return hash == 0 ? 1 : hash
    }

    private mutating func readNumber() throws -> Double {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw fail("bad number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(bytes[index]) {
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        } else {
            throw fail("bad number")
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let digitsStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > digitsStart else { throw fail("bad number") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            let digitsStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > digitsStart else { throw fail("bad number") }
        }
        let negative = bytes[start] == UInt8(ascii: "-")
        let digitCount = index - start - (negative ? 1 : 0)
        if isInteger, digitCount <= 15 {
            var value: Int64 = 0
            for position in (start + (negative ? 1 : 0))..<index {
                value = value * 10 + Int64(bytes[position] &- UInt8(ascii: "0"))
            }
            return Double(negative ? -value : value)
        }
        guard let value = Double(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)),
              value.isFinite else { throw fail("number out of range") }
        return value
    }

    private mutating func readString() throws -> String {
        index += 1
        let start = index
        // Fast path: printable ASCII without escapes, the shape of nearly every JOSE string.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                index += 1
                return text
            }
            if byte < 0x20 || byte >= 0x80 || byte == UInt8(ascii: "\\") { break }
            index += 1
        }
        var scratch = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let text = String(validating: scratch, as: UTF8.self) else { throw fail("invalid UTF-8") }
                return text
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw fail("unterminated escape") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scratch.append(escape)
                case UInt8(ascii: "b"): scratch.append(0x08)
                case UInt8(ascii: "f"): scratch.append(0x0C)
                case UInt8(ascii: "n"): scratch.append(0x0A)
                case UInt8(ascii: "r"): scratch.append(0x0D)
                case UInt8(ascii: "t"): scratch.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try readHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw fail("lone surrogate")
                        }
                        index += 2
                        let low = try readHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw fail("lone surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw fail("lone surrogate")
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw fail("invalid escape") }
                    scratch.append(contentsOf: UTF8.encode(unicode)!)
                default:
                    throw fail("invalid escape")
                }
            case 0..<0x20:
                throw fail("control character in string")
            default:
                scratch.append(byte)
                index += 1
            }
        }
        throw fail("unterminated string")
    }

    private mutating func readHex4() throws -> UInt32 {
        guard bytes.count - index >= 4 else { throw fail("short \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw fail("bad \\u escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }
}
