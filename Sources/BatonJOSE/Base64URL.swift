/// Strict base64url (RFC 4648 §5) as JWS uses it (RFC 7515 §2): no padding, no whitespace.
public enum Base64URL {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Maps an ASCII byte to its 6-bit value, or 0xFF for a byte outside the alphabet.
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (value, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(value) }
        return table
    }()

    /// Encodes `bytes` as base64url without padding.
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        let input = Array(bytes)
        var output = [UInt8]()
        output.reserveCapacity((input.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= input.count {
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
            output.append(alphabet[Int(chunk >> 6 & 63)])
            output.append(alphabet[Int(chunk & 63)])
            index += 3
        }
        switch input.count - index {
        case 1:
            let chunk = UInt32(input[index]) << 16
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
        case 2:
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
            output.append(alphabet[Int(chunk >> 6 & 63)])
        default:
            break
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Decodes strict base64url text.
    ///
    /// Rejects padding (`=`), whitespace, any character outside `A–Z a–z 0–9 - _`, a length of 1 mod 4,
    /// and non-zero unused trailing bits (so every byte string has exactly one encoding).
    /// - Throws: ``JOSEError`` with code `.invalidBase64`.
    public static func decode(_ text: some StringProtocol) throws -> [UInt8] {
        let decoded: [UInt8]?
        if let fast = text.utf8.withContiguousStorageIfAvailable({ decode(bytes: $0) }) {
            decoded = fast
        } else {
            var copy = String(text)
            decoded = copy.withUTF8 { decode(bytes: $0) }
        }
        guard let decoded else { throw JOSEError(.invalidBase64, "not strict base64url") }
        return decoded
    }

    /// Decodes strict base64url from ASCII bytes; `nil` when they are not strict base64url (see ``decode(_:)``).
    public static func decode(bytes input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let count = input.count
        if count % 4 == 1 { return nil }
        let outputCount = count / 4 * 3 + (count % 4 == 0 ? 0 : count % 4 - 1)
        return decodeTable.withUnsafeBufferPointer { table -> [UInt8]? in
            var bad = false
            let output = [UInt8](unsafeUninitializedCapacity: outputCount) { out, initialized in
                var i = 0, o = 0
                var invalid: UInt8 = 0
                // Eight characters at a time into one 48-bit group, stored as one 8-byte big-endian word
                // (the two extra bytes are overwritten by the next group or never counted as initialized).
                if let base = out.baseAddress, let inputBase = input.baseAddress {
                    let raw = UnsafeMutableRawPointer(base)
                    let source = UnsafeRawPointer(inputBase)
                    while i + 8 <= count, o + 8 <= outputCount {
                        // One little-endian load of eight characters; byte k of `word` is character i + k.
                        let word = source.loadUnaligned(fromByteOffset: i, as: UInt64.self).littleEndian
                        let v0 = table[Int(word & 0xFF)], v1 = table[Int(word >> 8 & 0xFF)]
                        let v2 = table[Int(word >> 16 & 0xFF)], v3 = table[Int(word >> 24 & 0xFF)]
                        let v4 = table[Int(word >> 32 & 0xFF)], v5 = table[Int(word >> 40 & 0xFF)]
                        let v6 = table[Int(word >> 48 & 0xFF)], v7 = table[Int(word >> 56)]
                        invalid |= v0 | v1 | v2 | v3 | v4 | v5 | v6 | v7
                        var group = UInt64(v0 & 0x3F) << 42 | UInt64(v1 & 0x3F) << 36 | UInt64(v2 & 0x3F) << 30
                        group |= UInt64(v3 & 0x3F) << 24 | UInt64(v4 & 0x3F) << 18 | UInt64(v5 & 0x3F) << 12
                        group |= UInt64(v6 & 0x3F) << 6 | UInt64(v7 & 0x3F)
                        raw.storeBytes(of: (group << 16).bigEndian, toByteOffset: o, as: UInt64.self)
                        i += 8
                        o += 6
                    }
                }
                while i + 4 <= count {
                    let a = table[Int(input[i])], b = table[Int(input[i + 1])]
                    let c = table[Int(input[i + 2])], d = table[Int(input[i + 3])]
                    invalid |= a | b | c | d
                    let chunk = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    out[o] = UInt8(truncatingIfNeeded: chunk >> 16)
                    out[o + 1] = UInt8(truncatingIfNeeded: chunk >> 8)
                    out[o + 2] = UInt8(truncatingIfNeeded: chunk)
                    i += 4
                    o += 3
                }
                switch count - i {
                case 2:
                    let a = table[Int(input[i])], b = table[Int(input[i + 1])]
                    invalid |= a | b
                    if b & 0x0F != 0 { invalid |= 0x80 }
                    out[o] = UInt8(truncatingIfNeeded: UInt32(a) << 2 | UInt32(b) >> 4)
                    o += 1
                case 3:
                    let a = table[Int(input[i])], b = table[Int(input[i + 1])], c = table[Int(input[i + 2])]
                    invalid |= a | b | c
                    if c & 0x03 != 0 { invalid |= 0x80 }
                    let chunk = UInt32(a) << 10 | UInt32(b) << 4 | UInt32(c) >> 2
                    out[o] = UInt8(truncatingIfNeeded: chunk >> 8)
                    out[o + 1] = UInt8(truncatingIfNeeded: chunk)
                    o += 2
                default:
                    break
                }
                // Table values are 0...63 for valid characters and 0xFF otherwise, so bit 6 or 7 set means invalid.
                bad = invalid & 0xC0 != 0
                initialized = o
            }
            return bad ? nil : output
        }
    }
}
