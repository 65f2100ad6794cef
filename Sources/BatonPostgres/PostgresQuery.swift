/// A SQL statement whose values travel as bound parameters, never inside the SQL text.
///
/// Build one by string interpolation: each interpolated value becomes `$1`, `$2`, … and is sent
/// separately. Identifiers go in as ``PostgresIdentifier`` (validated and quoted); anything else that
/// must be spliced into the text has to be spelled `\(unsafeRaw: sql)`.
///
/// ```swift
/// let query: PostgresQuery = "SELECT id FROM \(table) WHERE apple_sub = \(sub)"
/// ```
public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation {
    /// The SQL text with `$n` placeholders.
    public private(set) var sql: String
    /// The values bound to the placeholders, in order.
    public private(set) var bindings: [any PostgresEncodable]

    /// A query from raw SQL and its bindings; the SQL must not contain values from untrusted input.
    public init(unsafeSQL sql: String, _ bindings: [any PostgresEncodable] = []) {
        self.sql = sql
        self.bindings = bindings
    }

    public init(stringLiteral value: String) {
        self.init(unsafeSQL: value)
    }

    public init(stringInterpolation: StringInterpolation) {
        self.init(unsafeSQL: stringInterpolation.sql, stringInterpolation.bindings)
    }

    /// Builds the SQL text and the bindings while a query literal is interpolated.
    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var bindings: [any PostgresEncodable] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount * 3)
            bindings.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) {
            sql += literal
        }

        /// Binds `value` as the next parameter.
        public mutating func appendInterpolation(_ value: some PostgresEncodable) {
            bindings.append(value)
            sql += "$\(bindings.count)"
        }

        /// Binds an optional value; `nil` is sent as NULL.
        public mutating func appendInterpolation<Value: PostgresEncodable>(_ value: Value?) {
            bindings.append(value)
            sql += "$\(bindings.count)"
        }

        /// Splices a validated, quoted identifier into the SQL text.
        public mutating func appendInterpolation(_ identifier: PostgresIdentifier) {
            sql += identifier.quoted
        }

        /// Splices raw SQL into the text. Never pass anything derived from input.
        public mutating func appendInterpolation(unsafeRaw sql: String) {
            self.sql += sql
        }
    }
}

/// A SQL identifier from configuration (a table or column name), validated and quoted.
///
/// Accepts `name` or `schema.name`, each part matching `[A-Za-z_][A-Za-z0-9_]*` and at most 63 bytes,
/// so nothing from a configuration file can break out of the quotes.
public struct PostgresIdentifier: Sendable, Hashable, CustomStringConvertible {
    /// The parts, unquoted: `["public", "users"]`.
    public let parts: [String]

    /// Validates `name` (optionally `schema.name`).
    /// - Throws: ``PostgresError`` with code `invalidConfiguration` naming what is wrong.
    public init(_ name: String) throws {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard (1...2).contains(parts.count), parts.allSatisfy(PostgresIdentifier.isValidPart) else {
            throw PostgresError(.invalidConfiguration, reason: "invalid SQL identifier '\(name)': use letters, digits and '_', optionally 'schema.name'")
        }
        self.parts = parts
    }

    /// The identifier quoted for SQL: `"public"."users"`.
    public var quoted: String {
        parts.map { "\"\($0)\"" }.joined(separator: ".")
    }

    /// The last part, unquoted (the table or column name without its schema).
    public var name: String { parts[parts.count - 1] }

    /// The schema part, if any.
    public var schema: String? { parts.count == 2 ? parts[0] : nil }

    public var description: String { parts.joined(separator: ".") }

    static func isValidPart(_ part: String) -> Bool {
        guard let first = part.utf8.first, part.utf8.count <= 63 else { return false }
        let isLetter = { (byte: UInt8) in (byte >= 65 && byte <= 90) || (byte >= 97 && byte <= 122) || byte == 95 }
        guard isLetter(first) else { return false }
        return part.utf8.allSatisfy { isLetter($0) || ($0 >= 48 && $0 <= 57) }
    }
}
