/// A validated SQL identifier from the configuration, optionally qualified by a schema: `users` or `public.users`.
///
/// Each part matches `^[A-Za-z_][A-Za-z0-9_]{0,62}$` (PostgreSQL's 63-byte limit). The identifier is always
/// quoted when it reaches SQL, so it is case-sensitive as written: a table created as `CREATE TABLE Users`
/// is named `users`.
public struct SQLIdentifier: Sendable, Hashable, CustomStringConvertible {
    /// The schema part, if the identifier was written `schema.name`.
    public let schema: String?
    /// The unqualified name.
    public let name: String

    /// Validates `text`.
    ///
    /// - Parameter allowSchema: whether a `schema.` prefix is accepted (tables: yes; columns: no).
    /// - Returns: nil when `text` is not a valid identifier.
    public init?(_ text: String, allowSchema: Bool) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        switch parts.count {
        case 1 where SQLIdentifier.isValidPart(parts[0]):
            schema = nil
            name = parts[0]
        case 2 where allowSchema && SQLIdentifier.isValidPart(parts[0]) && SQLIdentifier.isValidPart(parts[1]):
            schema = parts[0]
            name = parts[1]
        default:
            return nil
        }
    }

    /// The identifier quoted for SQL: `"public"."users"` or `"users"`.
    public var quoted: String {
        if let schema { return "\(SQLIdentifier.quote(schema)).\(SQLIdentifier.quote(name))" }
        return SQLIdentifier.quote(name)
    }

    /// The identifier as written in the configuration: `public.users`.
    public var description: String {
        if let schema { return "\(schema).\(name)" }
        return name
    }

    /// Whether `part` matches `^[A-Za-z_][A-Za-z0-9_]{0,62}$`.
    static func isValidPart(_ part: String) -> Bool {
        let bytes = Array(part.utf8)
        guard (1...63).contains(bytes.count) else { return false }
        func isLetter(_ byte: UInt8) -> Bool { (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || byte == 0x5F }
        func isDigit(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) }
        return isLetter(bytes[0]) && bytes.dropFirst().allSatisfy { isLetter($0) || isDigit($0) }
    }

    /// Double-quotes one part, doubling any embedded quote (validated parts have none; this is defence in depth).
    private static func quote(_ part: String) -> String {
        "\"" + part.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
