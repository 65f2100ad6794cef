import BatonPostgres

/// How a derived column holds the email written beside it (`derived`).
public enum LegacyDerivedForm: String, Sendable, Equatable, Codable, CaseIterable {
    /// The new email as it is (Keycloak's `user_entity.email_constraint`).
    case same
    /// The new email lower-cased (Gitea's `email_address.lower_email`).
    case lower
}

/// `derived` (`legacy.email_derived`, `legacy.email.derived`, `legacy.email_copies[].derived`): further columns of the
/// row of an email, column → form, written with the new email whenever that email is written.
public struct LegacyDerivedColumns: Sendable, Equatable, Codable, ExpressibleByDictionaryLiteral {
    /// Column → form.
    public var columns: [String: LegacyDerivedForm]

    /// The columns.
    public init(_ columns: [String: LegacyDerivedForm]) {
        self.columns = columns
    }

    /// `["lower_email": .lower]`.
    public init(dictionaryLiteral elements: (String, LegacyDerivedForm)...) {
        self.init(Dictionary(elements, uniquingKeysWith: { $1 }))
    }

    /// Decodes an object of column → `"same"` or `"lower"`; anything else is `dataCorrupted` with the forms accepted,
    /// which ``ConfigurationError`` reports under the key.
    public init(from decoder: any Decoder) throws {
        guard let names = try? decoder.singleValueContainer().decode([String: String].self) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: Self.shapes))
        }
        columns = try names.mapValues { name in
            guard let form = LegacyDerivedForm(rawValue: name) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: Self.shapes))
            }
            return form
        }
    }

    /// Encodes the form ``init(from:)`` reads.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(columns.mapValues(\.rawValue))
    }

    private static let shapes = #"must be an object of column → "same" or "lower", such as {"lower_email": "lower"}"#
}

extension LegacyDerivedColumns: ConfigurationValue {
    /// From the environment `lower_email=lower` pairs or the JSON object, as a `where`.
    static var kind: BatonConfiguration.KeyKind { .filters }
}

extension BatonConfiguration.LegacyIdentifiers {
    /// A column following an email in its row (`derived`).
    public struct DerivedColumn: Sendable, Equatable {
        /// The column.
        public var column: PostgresIdentifier
        /// What it holds of the email.
        public var form: LegacyDerivedForm

        /// The column's value for the email `email` (an SQL expression), as text.
        func valueSQL(_ email: PostgresQuery) -> PostgresQuery {
            form == .lower ? "lower((" + email + ")::text)" : "(" + email + ")::text"
        }
    }

    /// Sets the email locations beyond the columns (`legacy.email_derived`, `legacy.email.derived`, and each
    /// `legacy.email_copies[]`'s `path` and `derived`), each derived column validated and distinct from the columns
    /// Baton writes or matches in that row.
    /// - Throws: ``ConfigurationError`` (`invalidValue`) naming the first bad key.
    mutating func addEmailLocations(_ legacy: BatonConfiguration.Legacy) throws {
        typealias Legacy = BatonConfiguration.Legacy
        let path = BatonConfiguration.name(of: \.legacy)
        let key = Legacy.key(\.emailDerived, in: path)
        emailDerived = try Self.derived(legacy.emailDerived, key: key, written: [keyColumn, subjectColumn, emailColumn, transferColumn, json?.column]
                                        + filters.map(\.column) + subjectCopies.filter { $0.table == nil }.map(\.column))
        if !emailDerived.isEmpty && emailColumn == nil {
            throw ConfigurationError(.invalidValue, key: key, reason: "needs legacy.email_column: it names columns beside that email")
        }
        if let derived = legacy.email?.derived, let mail = emailTable {
            emailTable?.derived = try Self.derived(derived, key: LegacyEmailTable.key(\.derived, in: Legacy.key(\.email, in: path)),
                                                   written: [mail.column, mail.keyColumn, json?.emailTableColumn])
        }
        for (index, copy) in (legacy.emailCopies ?? []).enumerated() {
            let entry = emailCopies[index], path = "\(Legacy.key(\.emailCopies, in: path))[\(index)]"
            if let location = copy.path {
                let key = LegacyEmailCopy.key(\.path, in: path)
                emailCopies[index].path = try location.validated(key: key, keysOnly: false)
                guard case .key = location.steps.last else {
                    throw ConfigurationError(.invalidValue, key: key, reason: "must end with the key holding the address")
                }
            }
            emailCopies[index].derived = try Self.derived(copy.derived, key: LegacyEmailCopy.key(\.derived, in: path),
                                                          written: [entry.column, entry.userColumn] + entry.filters.map(\.column))
        }
    }

    /// The columns of `derived` (at `key`), ordered by name, none of them one of `written`.
    private static func derived(_ derived: LegacyDerivedColumns?, key: String, written: [PostgresIdentifier?]) throws -> [DerivedColumn] {
        try (derived?.columns ?? [:]).sorted { $0.key < $1.key }.map { name, form in
            let column = try BatonConfiguration.identifier(name, key: key, allowSchema: false)
            if written.contains(column) {
                throw ConfigurationError(.invalidValue, key: "\(key).\(name)",
                                         reason: "is a column Baton already writes or matches in that row: name a column only the email decides")
            }
            return DerivedColumn(column: column, form: form)
        }
    }

    /// `, "column" = CASE WHEN written THEN <email, or lower(email)> ELSE alias."column" END` for each of `derived`
    /// (empty without any): the derived columns follow the email (`email`, an SQL expression) where `written` holds.
    func derivedSQL(_ derived: [DerivedColumn], alias: String, email: PostgresQuery, when written: PostgresQuery) -> PostgresQuery {
        derived.reduce(PostgresQuery(unsafeSQL: "")) { sql, derived in
            sql + ", \(derived.column) = CASE WHEN " + written + " THEN " + derived.valueSQL(email) + " ELSE \(unsafeRaw: alias).\(derived.column) END"
        }
    }

    /// Whether the email `stored` (an SQL text expression of Baton's own text) is `oldEmail` (ignoring case) that
    /// ``emailPolicy`` lets Baton replace with a different `newEmail`.
    func emailHeldSQL<Email: PostgresEncodable>(_ stored: String, oldEmail: String, newEmail: Email) -> PostgresQuery {
        "lower(\(unsafeRaw: stored)) = lower(\(unsafeRaw: oldEmail)) AND \(unsafeRaw: stored) IS DISTINCT FROM \(newEmail)::text AND (\(unsafeRaw: policySQL(stored: stored)))"
    }

    /// The copy's column (alias `alias`) with `oldEmail` replaced by `newEmail` where ``emailHeldSQL(_:oldEmail:newEmail:)``
    /// holds: at its path, or the column itself (`newEmail` where `write`, see ``assignedSQL(_:else:write:)``).
    func copyValueSQL<Email: PostgresEncodable>(_ copy: EmailCopy, alias: String = "c", oldEmail: String, newEmail: Email, write: Bool) -> PostgresQuery {
        let column = "\(alias).\(copy.column.quoted)"
        guard let path = copy.path else { return Self.assignedSQL(newEmail, else: column, write: write) }
        return path.updatedSQL(document: "\(unsafeRaw: column)", holds: { emailHeldSQL($0, oldEmail: oldEmail, newEmail: newEmail) }, newValue: "\(newEmail)::text")
    }

    /// The assignments rewriting a row of `copy` (alias `c`) that ``copyRowSQL(_:user:oldEmail:newEmail:write:alias:)``
    /// selects: its address, and its derived columns with it.
    func copySetSQL<Email: PostgresEncodable>(_ copy: EmailCopy, oldEmail: String, newEmail: Email, write: Bool) -> PostgresQuery {
        "\(copy.column) = " + copyValueSQL(copy, oldEmail: oldEmail, newEmail: newEmail, write: write)
            + derivedSQL(copy.derived, alias: "c", email: "\(newEmail)", when: "\(unsafeRaw: write ? "true" : "false")")
    }

    /// Whether a row of `copy` other than the one rewritten already holds `newEmail` in its address column (not at a
    /// path: no constraint reaches inside JSON) or its form in a derived column, which a unique index may refuse twice.
    func copyTakenSQL<Email: PostgresEncodable>(_ copy: EmailCopy, user: String, oldEmail: String, newEmail: Email, write: Bool) -> PostgresQuery {
        let held: [PostgresQuery] = (copy.path == nil ? ["o.\(copy.column) = \(newEmail)::text"] : [])
            + copy.derived.map { "o.\($0.column) = " + $0.valueSQL("\(newEmail)") }
        guard let first = held.first else { return "false" }
        return "EXISTS (SELECT 1 FROM \(copy.table) AS o WHERE (" + held.dropFirst().reduce(first) { $0 + " OR " + $1 } + ") AND ("
            + copyRowSQL(copy, user: user, oldEmail: oldEmail, newEmail: newEmail, write: write, alias: "o") + ") IS NOT TRUE)"
    }
}
