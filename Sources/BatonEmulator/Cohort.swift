/// A rehearsal's users of one app, derived from a secret instead of stored: what `baton rehearse` seeds the
/// emulator with (ten million users would otherwise be ten million people, identifiers and transfer records).
///
/// A member is known to the sending team by any Apple-shaped identifier (`NNNNNN.<32 hex>.NNNN`): the copy's
/// subjects, as they are. Their transfer identifier for the recipient is a keyed permutation of that identifier
/// (``ShapedPermutation``), so it is deterministic, collision-free, Apple-shaped and leads back to the member.
/// A member known only by a transfer identifier (a recipient's row between companies) is named
/// `cohort:<transfer identifier>`. A member's identifier under any other team and their addresses are derived
/// from the transfer identifier. Each member is a person of the emulator with the ID `cohort:<transfer
/// identifier>`; what must stay state (revocations, re-consents) is kept per person in ``EmulatorState/App``.
struct Cohort: Codable, Sendable {
    /// The app whose users they are.
    var clientID: String
    /// The team that knows them by the given identifiers (the app's owner when the cohort was made).
    var fromTeamID: String
    /// The team their transfer identifiers are for.
    var toTeamID: String
    /// The keys of the derivations (random, one cohort's own).
    var secret: [UInt64]

    /// The prefix of a member's person ID.
    static let personPrefix = "cohort:"

    init(clientID: String, fromTeamID: String, toTeamID: String) {
        self.clientID = clientID
        self.fromTeamID = fromTeamID
        self.toTeamID = toTeamID
        secret = (0..<4).map { _ in UInt64.random(in: .min ... .max) }
    }

    /// The member a sending team's identifier names: every Apple-shaped identifier is one.
    func person(ofSenderIdentifier identifier: String) -> String? {
        guard let shaped = ShapedIdentifier(identifier) else { return nil }
        return Self.personPrefix + permutation("transfer").apply(shaped).description
    }

    /// The member a transfer identifier for ``toTeamID`` names: any of 1 to 256 printable ASCII characters but spaces.
    func person(ofTransferIdentifier transferSub: String) -> String? {
        guard (1...256).contains(transferSub.utf8.count), transferSub.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else { return nil }
        return Self.personPrefix + transferSub
    }

    /// The transfer identifier of a member's person ID (nil when it is no member's).
    static func transferIdentifier(ofPerson personID: String) -> String? {
        guard personID.hasPrefix(personPrefix) else { return nil }
        return String(personID.dropFirst(personPrefix.count))
    }

    /// A member's identifier under `team`: the given one under ``fromTeamID`` (derived for a member known only by
    /// a transfer identifier that is not Apple-shaped), a keyed permutation of the transfer identifier under another.
    func identifier(ofTransferIdentifier transferSub: String, team: String) -> String {
        if team == fromTeamID, let shaped = ShapedIdentifier(transferSub) {
            return permutation("transfer").invert(shaped).description
        }
        return permutation("team " + team).apply(shaped(transferSub)).description
    }

    /// Whether the member hides their address (half of them do), and the address they share with `team`:
    /// a relay address for that team (`<10 letters or digits>@privaterelay.appleid.com`) or their real one.
    func email(ofTransferIdentifier transferSub: String, team: String) -> (email: String, isPrivate: Bool) {
        let identity = shaped(transferSub)
        let mixed = ShapedPermutation.mix(ShapedPermutation.mix(ShapedPermutation.mix(identity.digits ^ secret[3]) ^ identity.high) ^ identity.low)
        guard mixed & 1 == 0 else { return ("cohort-\(String(mixed >> 16, radix: 16))@example.com", false) }
        var local = ShapedPermutation.mix(permutation("email " + team).apply(identity).high)
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789".utf8)
        var characters: [UInt8] = []
        for _ in 0..<10 {
            characters.append(alphabet[Int(local % 36)])
            local /= 36
        }
        return (String(decoding: characters, as: UTF8.self) + "@privaterelay.appleid.com", true)
    }

    /// The identifier itself when Apple-shaped, else one derived from it (a recipient's own format).
    private func shaped(_ text: String) -> ShapedIdentifier {
        if let shaped = ShapedIdentifier(text) { return shaped }
        var high = secret[2], low = ~secret[2]
        for byte in text.utf8 {
            high = ShapedPermutation.mix(high ^ UInt64(byte))
            low = ShapedPermutation.mix(low &+ high)
        }
        return ShapedIdentifier(digits: high % ShapedIdentifier.digitsRange, high: ShapedPermutation.mix(low ^ high), low: low)
    }

    private func permutation(_ purpose: String) -> ShapedPermutation {
        var key = secret[0] ^ secret[1]
        for byte in purpose.utf8 { key = ShapedPermutation.mix(key ^ UInt64(byte)) }
        return ShapedPermutation(key: key)
    }
}

/// An Apple-shaped identifier, `NNNNNN.<32 lower-case hex>.NNNN`, as numbers: its ten digits and its 128 bits.
struct ShapedIdentifier: Equatable, CustomStringConvertible {
    /// The six leading and four trailing digits, as one number below 10^10.
    var digits: UInt64
    var high: UInt64
    var low: UInt64

    static let digitsRange: UInt64 = 10_000_000_000

    init(digits: UInt64, high: UInt64, low: UInt64) {
        self.digits = digits
        self.high = high
        self.low = low
    }

    /// Parses `text`; nil unless it has exactly the shape.
    init?(_ text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 44, bytes[6] == UInt8(ascii: "."), bytes[39] == UInt8(ascii: ".") else { return nil }
        func decimal(_ range: Range<Int>) -> UInt64? {
            var value: UInt64 = 0
            for byte in bytes[range] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + UInt64(byte - UInt8(ascii: "0"))
            }
            return value
        }
        func hex(_ range: Range<Int>) -> UInt64? {
            var value: UInt64 = 0
            for byte in bytes[range] {
                let nibble: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = byte - UInt8(ascii: "a") + 10
                default: return nil
                }
                value = value << 4 | UInt64(nibble)
            }
            return value
        }
        guard let lead = decimal(0..<6), let trail = decimal(40..<44), let high = hex(7..<23), let low = hex(23..<39) else { return nil }
        self.init(digits: lead * 10_000 + trail, high: high, low: low)
    }

    var description: String {
        func padded(_ value: UInt64, _ width: Int, radix: Int) -> String {
            let text = String(value, radix: radix)
            return String(repeating: "0", count: width - text.count) + text
        }
        return "\(padded(digits / 10_000, 6, radix: 10)).\(padded(high, 16, radix: 16))\(padded(low, 16, radix: 16)).\(padded(digits % 10_000, 4, radix: 10))"
    }
}

/// A keyed permutation of Apple-shaped identifiers: a four-round Feistel network over their 128 bits and their
/// ten digits, so distinct identifiers stay distinct and each result leads back to its identifier. Not a
/// cipher worth the name: it only has to look like Apple's identifiers and never collide.
struct ShapedPermutation {
    let key: UInt64

    /// SplitMix64's finalizer: a fast, well-spread bijection of 64-bit words.
    static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    private func round(_ index: UInt64, _ value: UInt64) -> UInt64 { Self.mix(value ^ Self.mix(key &+ index)) }

    func apply(_ identifier: ShapedIdentifier) -> ShapedIdentifier {
        var result = identifier
        for pass: UInt64 in [0, 2] {
            result.high ^= round(pass, result.digits)
            result.low ^= round(pass + 8, result.digits)
            result.digits = (result.digits + round(pass + 1, result.high ^ Self.mix(result.low)) % ShapedIdentifier.digitsRange) % ShapedIdentifier.digitsRange
        }
        return result
    }

    func invert(_ identifier: ShapedIdentifier) -> ShapedIdentifier {
        var result = identifier
        for pass: UInt64 in [2, 0] {
            let step = round(pass + 1, result.high ^ Self.mix(result.low)) % ShapedIdentifier.digitsRange
            result.digits = (result.digits + ShapedIdentifier.digitsRange - step) % ShapedIdentifier.digitsRange
            result.high ^= round(pass, result.digits)
            result.low ^= round(pass + 8, result.digits)
        }
        return result
    }
}
