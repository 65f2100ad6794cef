import BatonPostgres

/// The SQL fragments every statement over the legacy table is built from, so that the Apple-row filter
/// (`legacy.where`), the email's location and the JSON copy are applied the same way everywhere.
///
/// Fragments use the alias `u` for the legacy table and `m` for the email table. Identifiers come from
/// ``BatonConfiguration/LegacyIdentifiers`` (validated, quoted); values are bound parameters; the only
/// raw SQL is Baton's own text.
extension BatonConfiguration.LegacyIdentifiers {
    /// ` AND u."provider" = $n …` for each filter (empty without filters); for a subject inside JSON
    /// (`legacy.subject_path`) the condition that the document holds it (a Logto user of another connector is no Apple
    /// row); and under a `legacy.subject_format` the condition that the row's subject, when not NULL, has the format's
    /// form: a row without it is not an Apple row.
    package func filterSQL(alias: String = "u") -> PostgresQuery {
        var filters = Self.filterSQL(filters, alias: alias)
        if subjectPath != nil { filters = filters + " AND \(unsafeRaw: subjectValueSQL(alias: alias)) IS NOT NULL" }
        guard !storesBareSubject else { return filters }
        let column = "\(subjectValueSQL(alias: alias))::text"
        let pattern = [subjectPrefix, subjectSuffix].map { part in
            part.reduce(into: "") { text, character in text += "\\%_".contains(character) ? "\\\(character)" : String(character) }
        }.joined(separator: "_%")
        return filters + " AND (\(unsafeRaw: column) IS NULL OR \(unsafeRaw: column) LIKE \(pattern))"
    }

    // `legacy.subject_format`: the one rule between a bare `sub` and the subject column's stored form, in SQL.

    /// Whether the subject column holds the bare `sub` (no `legacy.subject_format`, or `{sub}`).
    package var storesBareSubject: Bool { subjectPrefix.isEmpty && subjectSuffix.isEmpty }

    /// The stored form of the bound bare `sub`, to compare with the subject column or write into it: `sub` itself,
    /// or `($p::text || sub::text || $s::text)` under a `legacy.subject_format`.
    package func storedSubjectSQL(_ sub: some PostgresEncodable) -> PostgresQuery {
        storedSubjectSQL(expression: "\(sub)")
    }

    /// The stored form of the bare `sub` an SQL expression yields (a subquery, a column of Baton's own tables).
    package func storedSubjectSQL(expression sub: PostgresQuery) -> PostgresQuery {
        storesBareSubject ? sub : "(\(subjectPrefix)::text || (" + sub + ")::text || \(subjectSuffix)::text)"
    }

    /// The subject as the row `alias` stores it (the stored form ``storedSubjectSQL(_:)`` makes): the subject column, in
    /// its own type so that its index serves a comparison, or the text at `legacy.subject_path` in it
    /// (`(u."identities"::jsonb #>> ARRAY['apple', 'userId']::text[])`, the expression its index must hold); an empty
    /// `alias` leaves the column unqualified.
    package func subjectValueSQL(alias: String = "u") -> String {
        let column = alias.isEmpty ? subjectColumn.quoted : "\(alias).\(subjectColumn.quoted)"
        return subjectPath?.valueSQL(document: "\(column)::jsonb") ?? column
    }

    /// The condition that the row `alias` stores `stored` (an SQL expression of a stored form) as its subject.
    package func subjectEqualsSQL(alias: String = "u", _ stored: PostgresQuery) -> PostgresQuery {
        "\(unsafeRaw: subjectValueSQL(alias: alias)) = " + stored
    }

    /// The assignments of an `UPDATE … AS alias` writing `stored` (an SQL expression of a stored form) as the row's
    /// subject: the subject column, or the string at `legacy.subject_path` in it (every other key kept). With `copies`
    /// (SQL expressions of the bare old and new `sub`), each copy in the row itself (`legacy.subject_copies` without a
    /// table) holding the old `sub` gets the new one in the same assignment.
    package func subjectAssignmentSQL(alias: String = "u", _ stored: PostgresQuery, copies: (old: String, new: PostgresQuery)? = nil) -> PostgresQuery {
        let subject: PostgresQuery = subjectPath.map { path in
            path.updatedSQL(document: "\(unsafeRaw: alias).\(subjectColumn)", holds: { _ in "true" }, newValue: stored)
        } ?? stored
        var assignments: [(column: PostgresIdentifier, value: PostgresQuery)] = [(subjectColumn, subject)]
        for copy in subjectCopies where copy.table == nil {
            guard let copies else { break }
            if let index = assignments.firstIndex(where: { $0.column == copy.column }), let path = copy.path {
                // The subject's own JSON document: the copy's location is rewritten in the document already rewritten.
                assignments[index].value = path.updatedSQL(document: assignments[index].value, holds: { "\(unsafeRaw: $0) = \(unsafeRaw: copies.old)" },
                                                           newValue: copies.new)
            } else {
                assignments.append((copy.column, subjectCopyValueSQL(copy, alias: alias, table: table, old: copies.old, new: copies.new)))
            }
        }
        return assignments.dropFirst().reduce("\(assignments[0].column) = " + assignments[0].value) { $0 + ", \($1.column) = " + $1.value }
    }

    /// The new value of a subject copy's column in the row `alias` of `table`, in the column's own type: the new `sub`
    /// where the copy holds the old one (SQL expressions of bare `sub`s), else the value as it is, untouched (a text
    /// column holding JSON keeps its very text unless the location changes).
    func subjectCopyValueSQL(_ copy: SubjectCopy, alias: String, table: PostgresIdentifier, old: String, new: PostgresQuery) -> PostgresQuery {
        let column = "\(alias).\(copy.column.quoted)"
        guard let path = copy.path else {
            return "CASE WHEN \(unsafeRaw: column)::text = \(unsafeRaw: old) THEN " + new + " ELSE \(unsafeRaw: column) END"
        }
        let document = path.updatedSQL(document: "\(unsafeRaw: column)", holds: { "\(unsafeRaw: $0) = \(unsafeRaw: old)" }, newValue: new)
        return "(SELECT CASE WHEN n.v IS DISTINCT FROM \(unsafeRaw: column)::jsonb THEN (jsonb_populate_record(NULL::\(table), jsonb_build_object(\(unsafeRaw: copy.column.name.sqlLiteral)::text, n.v))).\(copy.column) ELSE \(unsafeRaw: column) END FROM (SELECT "
            + document + " AS v) AS n)"
    }

    /// The columns the CTE `old` of the migration and rollback statements selects from the legacy row `u` for the subject
    /// copies in other tables: ` , u."ref" AS c0 …` (empty without such copies).
    var subjectCopyReferencesSQL: String {
        subjectCopies.enumerated().compactMap { index, copy in copy.table.map { ", u.\($0.referenceColumn.quoted) AS c\(index)" } }.joined()
    }

    /// The CTEs rewriting each subject copy in another table from `old` to `new` (SQL expressions of bare `sub`s over
    /// `from`, which holds the CTE `old` with ``subjectCopyReferencesSQL``): the rows referencing the legacy row, passing
    /// the copy's filters, whose copy holds `old`. Each starts with `, `; empty without such copies.
    func subjectCopiesSQL(from: String, old: String, new: PostgresQuery) -> PostgresQuery {
        subjectCopies.enumerated().reduce(PostgresQuery(unsafeSQL: "")) { sql, entry in
            let (index, copy) = entry
            guard let table = copy.table else { return sql }
            let value = subjectCopyValueSQL(copy, alias: "c", table: table.name, old: old, new: new)
            return sql + ", subject_copy_\(unsafeRaw: String(index)) AS (UPDATE \(table.name) AS c SET \(copy.column) = " + value
                + " FROM \(unsafeRaw: from) WHERE c.\(table.keyColumn) = old.c\(unsafeRaw: String(index))" + Self.filterSQL(copy.filters, alias: "c")
                + " AND c.\(copy.column) IS DISTINCT FROM " + value + " RETURNING 1)"
        }
    }

    /// The bare `sub` of the subject column of the row `alias`, as text: `u."sub"::text`, or its stored form with the
    /// format's text around `{sub}` cut off (for a row ``filterSQL(alias:)`` selects; the lengths are Baton's own numbers).
    package func subjectSQL(alias: String = "u") -> String {
        let column = "\(subjectValueSQL(alias: alias))::text"
        guard !storesBareSubject else { return column }
        let prefix = subjectPrefix.unicodeScalars.count, suffix = subjectSuffix.unicodeScalars.count
        return "substr(\(column), \(prefix + 1), length(\(column)) - \(prefix + suffix))"
    }

    /// ` AND alias."column" …` for each of `filters`, its values bound: the one place a `where` becomes SQL.
    static func filterSQL(_ filters: [Filter], alias: String) -> PostgresQuery {
        filters.reduce(PostgresQuery(unsafeSQL: "")) { sql, filter in
            let column = "\(alias).\(filter.column.quoted)"
            switch filter.condition {
            case .equals(let value): return sql + " AND \(unsafeRaw: column) = \(value)"
            case .notEquals(let value): return sql + " AND \(unsafeRaw: column) <> \(value)"
            case .oneOf(let values): return sql + " AND " + inList(column, values)
            case .notNull: return sql + " AND \(unsafeRaw: column) IS NOT NULL"
            }
        }
    }

    /// The column of the legacy row (alias `alias`) holding the key the email copies' `user_column` references:
    /// the email table's reference column when the email lives there, else the legacy key.
    func copyUserSQL(alias: String) -> String {
        "\(alias).\((emailTable?.referenceColumn ?? keyColumn).quoted)"
    }

    /// That key in the CTE `old` of the migration and email statements, which select the legacy key as `k` and
    /// the email table's reference as `r`.
    var copyUserInOld: String { emailTable == nil ? "old.k" : "old.r" }

    /// For each email copy (alias `alias`, by default `c`), the condition that a row of it is the user's copy of `oldEmail`
    /// (an SQL expression of Baton's own text) that ``emailPolicy`` lets Baton replace with `newEmail` when `write`:
    /// the row references `user` (through `user_column`), passes the copy's filters and holds `oldEmail`, ignoring case
    /// (at the copy's `path`, somewhere the path reaches).
    func copyRowSQL<Email: PostgresEncodable>(_ copy: EmailCopy, user: String, oldEmail: String, newEmail: Email, write: Bool,
                                              alias: String = "c") -> PostgresQuery {
        let row: PostgresQuery = "\(unsafeRaw: alias).\(copy.userColumn) = \(unsafeRaw: user)" + Self.filterSQL(copy.filters, alias: alias)
            + " AND \(write) AND \(newEmail)::text IS NOT NULL AND "
        guard copy.path != nil else { return row + emailHeldSQL("\(alias).\(copy.column.quoted)::text", oldEmail: oldEmail, newEmail: newEmail) }
        return row + "\(unsafeRaw: alias).\(copy.column)::jsonb IS DISTINCT FROM "
            + copyValueSQL(copy, alias: alias, oldEmail: oldEmail, newEmail: newEmail, write: write)
    }

    /// The CTEs rewriting each email copy of the user (`user`, `oldEmail`: SQL expressions over `from`) to
    /// `newEmail` where ``copyRowSQL(_:user:oldEmail:newEmail:write:)`` holds, and appending, for a copy whose new
    /// address another row of its table already holds, an `email_conflict` event (`event`: the columns and values
    /// of `baton.events` besides `kind` and `detail`, selected from `from`) naming the copy, which keeps its old
    /// address. Each starts with `, `; empty without copies or when the policy is `never`.
    func emailCopiesSQL<Email: PostgresEncodable>(from: String, user: String, oldEmail: String, newEmail: Email, write: Bool,
                                                  event: (columns: String, values: PostgresQuery)) -> PostgresQuery {
        guard emailPolicy != .never else { return "" }
        return emailCopies.enumerated().reduce(PostgresQuery(unsafeSQL: "")) { sql, entry in
            let (index, copy) = entry
            let row = copyRowSQL(copy, user: user, oldEmail: oldEmail, newEmail: newEmail, write: write)
            let taken = copyTakenSQL(copy, user: user, oldEmail: oldEmail, newEmail: newEmail, write: write)
            let detail: PostgresQuery = "jsonb_build_object('copy', \(copy.table.description)::text)"
            let value = copySetSQL(copy, oldEmail: oldEmail, newEmail: newEmail, write: write)
            return sql + ", copy_\(unsafeRaw: String(index)) AS (UPDATE \(copy.table) AS c SET " + value + " FROM \(unsafeRaw: from) WHERE "
                + row + " AND NOT " + taken + " RETURNING 1), copy_\(unsafeRaw: String(index))_clash AS (INSERT INTO baton.events (kind, \(unsafeRaw: event.columns), detail) SELECT 'email_conflict', "
                + event.values + ", " + detail + " FROM \(unsafeRaw: from) WHERE " + taken
                + " AND EXISTS (SELECT 1 FROM \(copy.table) AS c WHERE " + row + "))"
        }
    }

    /// `value` where `write` holds, else `current` (an SQL expression of Baton's own text) as it is. A statement that
    /// must not write a value the table refuses (too long for the column, say) cannot just update no row: PostgreSQL
    /// folds a bound value into the plan and coerces it to the column's type there, failing the statement before any
    /// row is read. With `write` false this arm is dropped at that folding, and the value is never coerced.
    static func assignedSQL<Value: PostgresEncodable>(_ value: Value, else current: String, write: Bool) -> PostgresQuery {
        "CASE WHEN \(unsafeRaw: write ? "true" : "false") THEN \(value) ELSE \(unsafeRaw: current) END"
    }

    /// The account's key as text (`u."user_id"::text`: the users row the record references), or `NULL::text` when
    /// the configuration names no users table.
    var accountKeySQL: String {
        emailTable.map { "u.\($0.referenceColumn.quoted)::text" } ?? "NULL::text"
    }

    /// The stored email as text: `u."email"::text`, `m."email"::text`, or `NULL::text`.
    package var emailSQL: String {
        if let emailColumn { return "u.\(emailColumn.quoted)::text" }
        if let emailTable { return "m.\(emailTable.column.quoted)::text" }
        return "NULL::text"
    }

    /// The join that brings the email table in (empty when the email is not in another table).
    package var emailJoinSQL: String {
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

    /// The new value of a JSON copy (by default the legacy table's, `u."column"`): its `subjectKeys` set to
    /// `newSub` (when given), its `emailKeys` set to `newEmail` where `write` is true and the policy allows replacing
    /// the key's value; keys that are absent are not added; a value that is not a JSON object is left as it is.
    /// With `held` (SQL expressions of the old subject and email), a key is rewritten only where it holds that old
    /// value (the email ignoring case): the users table's copy, which another provider's sign-in may have written.
    func jsonSQL<Subject: PostgresEncodable, Email: PostgresEncodable>(_ json: JSONCopy, in column: String? = nil,
                                                                       held: (subject: String, email: String)? = nil,
                                                                       newSub: Subject?, newEmail: Email?, write: Bool) -> PostgresQuery {
        let value = "\(column ?? "u.\(json.column.quoted)")::jsonb"
        let subjectKeys = newSub == nil ? [] : json.subjectKeys
        let subjectHeld = held.map { " AND (\(value) ->> k) = \($0.subject)" } ?? ""
        let emailHeld = held.map { " AND lower(\(value) ->> k) = lower(\($0.email))" } ?? ""
        let subjectTest = subjectKeys.isEmpty ? Self.inList("k", []) : "(" + Self.inList("k", subjectKeys) + "\(unsafeRaw: subjectHeld))"
        let emailTest = json.emailKeys.isEmpty || emailPolicy == .never
            ? PostgresQuery(unsafeSQL: "false")
            : "(" + Self.inList("k", json.emailKeys) + " AND \(write) AND \(newEmail)::text IS NOT NULL AND (\(unsafeRaw: policySQL(stored: "(\(value) ->> k)")))\(unsafeRaw: emailHeld))"
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
    package static func + (lhs: PostgresQuery, rhs: PostgresQuery) -> PostgresQuery {
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
