/// The shapes of Apple's identifiers, checked before any call so a typo fails with a clear reason instead of
/// Apple's bare `invalid_client`.
public enum AppleIdentifierFormat {
    /// Whether `text` is a team ID: 10 upper-case ASCII letters or digits (`A1B2C3D4E5`).
    public static func isTeamID(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 10 && text.utf8.allSatisfy { isUpper($0) || isDigit($0) }
    }

    /// Whether `text` is a key ID: 10 ASCII letters or digits (`KEYA000001`).
    public static func isKeyID(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 10 && text.utf8.allSatisfy { isUpper($0) || isLower($0) || isDigit($0) }
    }

    /// Why `text` is not a usable client ID, or nil when it is.
    ///
    /// A client ID is a bundle ID or Services ID (`com.example.app`): letters, digits, `.` and `-`. A leading
    /// team ID (`A1B2C3D4E5.com.example.app`, the App ID form) is refused: Apple answers `invalid_client`.
    public static func clientIDProblem(_ text: String) -> String? {
        if text.isEmpty { return "a client ID is empty" }
        guard text.utf8.allSatisfy({ isUpper($0) || isLower($0) || isDigit($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") }) else {
            return "a client ID may hold only letters, digits, '.' and '-'"
        }
        if hasTeamPrefix(text) {
            return "a client ID starts with a team ID: remove the 'TEAMID.' prefix (use the bundle ID or Services ID alone)"
        }
        return nil
    }

    /// `text` without a leading `TEAMID.`; unchanged when it has none.
    public static func strippingTeamPrefix(_ text: String) -> String {
        guard hasTeamPrefix(text), let dot = text.firstIndex(of: ".") else { return text }
        return String(text[text.index(after: dot)...])
    }

    /// Whether `text` starts with a team ID followed by a dotted identifier: `A1B2C3D4E5.com.example`.
    private static func hasTeamPrefix(_ text: String) -> Bool {
        guard let dot = text.firstIndex(of: ".") else { return false }
        return isTeamID(text[..<dot]) && text[text.index(after: dot)...].contains(".")
    }

    private static func isUpper(_ byte: UInt8) -> Bool { (0x41...0x5A).contains(byte) }
    private static func isLower(_ byte: UInt8) -> Bool { (0x61...0x7A).contains(byte) }
    private static func isDigit(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) }
}
