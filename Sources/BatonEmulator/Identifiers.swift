/// Random identifiers shaped like Apple's.
enum Identifiers {
    private static let upperAlphanumerics = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    private static let lowerAlphanumerics = Array("abcdefghijklmnopqrstuvwxyz0123456789")
    private static let hexDigits = Array("0123456789abcdef")

    /// A team-scoped user identifier: six digits, 32 hex digits, four digits (`001234.0123…cdef.1234`).
    static func userIdentifier() -> String {
        "\(digits(6)).\(hex(32)).\(digits(4))"
    }

    /// A transfer identifier, shaped like a user identifier.
    static func transferIdentifier() -> String {
        "\(digits(6)).\(hex(32)).\(digits(4))"
    }

    /// A 10-character key or team identifier (`A1B2C3D4E5`).
    static func tenCharacters() -> String {
        String((0..<10).map { _ in upperAlphanumerics.randomElement()! })
    }

    /// A private relay address (`x7k2m9q4tz@privaterelay.appleid.com`).
    static func privateRelayEmail() -> String {
        String((0..<10).map { _ in lowerAlphanumerics.randomElement()! }) + "@privaterelay.appleid.com"
    }

    /// An opaque bearer value (access tokens, refresh tokens, codes): `prefix` and 48 hex digits.
    static func opaque(_ prefix: String) -> String { prefix + hex(48) }

    /// `count` random hex digits (16 per 64-bit draw, so few calls to the system generator).
    static func hex(_ count: Int) -> String {
        var digits: [Character] = []
        digits.reserveCapacity(count + 15)
        while digits.count < count {
            var word = UInt64.random(in: .min ... .max)
            for _ in 0..<16 {
                digits.append(hexDigits[Int(word & 0xF)])
                word >>= 4
            }
        }
        return String(digits.prefix(count))
    }

    /// `count` random decimal digits.
    /// (18 per 64-bit draw: one call to the system generator for a user identifier's six digits, not six.)
    static func digits(_ count: Int) -> String {
        var digits: [UInt8] = []
        digits.reserveCapacity(count)
        while digits.count < count {
            let run = min(18, count - digits.count)
            var value = UInt64.random(in: 0..<(0..<run).reduce(UInt64(1)) { product, _ in product * 10 })
            var part = [UInt8](repeating: UInt8(ascii: "0"), count: run)
            for index in stride(from: run - 1, through: 0, by: -1) {
                part[index] = UInt8(ascii: "0") + UInt8(value % 10)
                value /= 10
            }
            digits += part
        }
        return String(decoding: digits, as: UTF8.self)
    }

    /// Whether `text` is a valid team or key identifier: 10 characters, upper-case letters and digits.
    static func isTenCharacters(_ text: String) -> Bool {
        text.count == 10 && text.allSatisfy { upperAlphanumerics.contains($0) }
    }
}
