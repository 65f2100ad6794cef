import BatonPostgres

/// The SQL fragments every statement over the legacy table is built from, so that the Apple-row filter
/// (`legacy.where`), the email's location and the JSON copy are applied the same way everywhere.
///
/// Fragments use the alias `u` for the legacy table and `m` for the email table. Identifiers come from
/// ``BatonConfiguration/LegacyIdentifiers`` (validated, quoted); values are bound parameters; the only
/// raw SQL is Baton's own text.
extension BatonConfiguration.LegacyIdentifiers {
    /// ` AND u."provider" = $n …` for each filter (empty without filters).
    func filterSQL(alias: String = "u") -> PostgresQuery {
        filters.reduce(PostgresQuery(unsafeSQL: "")) { sql, filter in
            sql + " AND \(unsafeRaw: alias).\(filter.column) = \(filter.value)"
        }
    }

    /// The stored email as text: `u."email"::text`, `m."email"::text`, or `NULL::text`.
    var emailSQL: String {
        if let emailColumn { return "u.\(emailColumn.quoted)::text" }
        if let emailTable { return "m.\(emailTable.column.quoted)::text" }
        return "NULL::text"
    }

    /// The join that brings the email table in (empty when the email is not in another table).
    var emailJoinSQL: String {
        guard let emailTable else { return "" }
        return " LEFT JOIN \(emailTable.table.quoted) AS m ON m.\(emailTable.keyColumn.quoted) = u.\(emailTable.referenceColumn.quoted)"
    }

    /// The condition under which ``emailPolicy`` lets Baton replace the stored email `stored` (an SQL
    /// expression of Baton's own text).
    func policySQL(stored: String) -> String {
        switch emailPolicy {
        case .always: return "true"
        case .never: return "false"
        case .relay: return Self.isRelaySQL(stored)
        }
    }

    /// Whether the email `stored` (an SQL expression of Baton's own text) is a private relay address.
    static func isRelaySQL(_ stored: String) -> String {
        "lower(\(stored)) LIKE '%\(LegacyStore.privateRelayDomain)'"
    }

    /// The new value of the JSON column (alias `u`): its `subjectKeys` set to `newSub` (when given), its
    /// `emailKeys` set to `newEmail` where `write` is true and the policy allows replacing the key's value;
    /// keys that are absent are not added; a value that is not a JSON object is left as it is.
    func jsonSQL<Subject: PostgresEncodable, Email: PostgresEncodable>(_ json: JSONCopy, newSub: Subject?, newEmail: Email?,
                                                                       write: Bool) -> PostgresQuery {
        let value = "u.\(json.column.quoted)::jsonb"
        let subjectKeys = newSub == nil ? [] : json.subjectKeys
        let subjectTest = Self.inList("k", subjectKeys)
        let emailTest = json.emailKeys.isEmpty || emailPolicy == .never
            ? PostgresQuery(unsafeSQL: "false")
            : "(" + Self.inList("k", json.emailKeys) + " AND \(write) AND \(newEmail)::text IS NOT NULL AND (\(unsafeRaw: policySQL(stored: "(\(value) ->> k)"))))"
        return "CASE WHEN jsonb_typeof(\(unsafeRaw: value)) = 'object' THEN \(unsafeRaw: value) || COALESCE((SELECT jsonb_object_agg(k, CASE WHEN "
            + subjectTest + " THEN to_jsonb(\(newSub)::text) ELSE to_jsonb(\(newEmail)::text) END) FROM jsonb_object_keys(\(unsafeRaw: value)) AS k WHERE "
            + subjectTest + " OR " + emailTest + "), '{}'::jsonb) ELSE \(unsafeRaw: value) END"
    }

    /// `name IN ($1, $2)`, or `false` for an empty list.
    static func inList(_ name: String, _ values: [String]) -> PostgresQuery {
        guard let first = values.first else { return "false" }
        return values.dropFirst().reduce("\(unsafeRaw: name) IN (\(first)" as PostgresQuery) { $0 + ", \($1)" } + ")"
    }
}

extension PostgresQuery {
    /// `lhs` followed by `rhs`, whose placeholders are renumbered after `lhs`'s bindings.
    static func + (lhs: PostgresQuery, rhs: PostgresQuery) -> PostgresQuery {
        LegacyStore.concatenate(lhs, rhs)
    }
}

/// A value a statement built once leaves open, bound per call: the sign-in path's statements are built once per
/// shape (``StatementTemplate``), since assembling their text from the fragments above cost more CPU than
/// PostgreSQL spent running them.
enum StatementSlot: PostgresEncodable, Hashable {
    case subject, newSub, newEmail, isPrivateEmail, transferSub, oldSub, method, refusal

    // Never sent: ``StatementTemplate/filled(_:)`` replaces every slot by its value first.
    static var postgresType: UInt32 { 0 }
    func postgresValue() -> [UInt8]? { nil }
}

/// A statement's text and constant bindings, built once, with ``StatementSlot``s where each call's values go.
struct StatementTemplate: Sendable {
    private let sql: String
    private let bindings: [any PostgresEncodable]
    private let slots: [StatementSlot?]

    init(_ query: PostgresQuery) {
        sql = query.sql
        bindings = query.bindings
        slots = query.bindings.map { $0 as? StatementSlot }
    }

    /// The statement with each slot bound to `value(slot)`.
    func filled(_ value: (StatementSlot) -> any PostgresEncodable) -> PostgresQuery {
        var bound = bindings
        for (index, slot) in slots.enumerated() {
            if let slot { bound[index] = value(slot) }
        }
        return PostgresQuery(unsafeSQL: sql, bound)
    }
}
