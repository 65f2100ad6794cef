import BatonPostgres

/// A kind of problem a rehearsal looks for in the application's tables before a transfer.
public enum LegacyProblemKind: String, Sendable, Equatable, CaseIterable, Codable {
    /// The email of an Apple row is also held by another row (ignoring case): writing it would hit a unique
    /// constraint, or the address belongs to two accounts.
    case emailConflict = "email_conflict"
    /// An email copy (`legacy.email_copies`) of an Apple user holds the user's address, which another row of
    /// that table also holds (ignoring case): the copy cannot take the new address unless that row lets it go.
    case emailCopyConflict = "email_copy_conflict"
    /// An email copy of an Apple user holds a private relay address other than the user's stored email: Baton
    /// rewrites only the copy holding the stored address, so this one keeps the old team's relay address.
    case emailCopyStale = "email_copy_stale"
    /// An Apple row has no subject (and no transfer identifier).
    case subjectNull = "subject_null"
    /// An Apple row's subject does not look like Apple's `NNNNNN.<32 hex>.NNNN`.
    case subjectMalformed = "subject_malformed"
    /// Several Apple rows hold one subject.
    case subjectDuplicate = "subject_duplicate"
    /// A row of another provider (outside `legacy.where`) holds the subject of an Apple row.
    case sharedSubject = "shared_subject"
    /// A row `legacy.where` leaves out holds an Apple-like subject that no Apple row holds.
    case filteredAppleLike = "filtered_apple_like"
    /// A JSON copy's subject key disagrees with the subject column.
    case jsonMismatch = "json_mismatch"
    /// The unique index over the subject (with the `where` columns), or over the key, is missing.
    case missingUnique = "missing_unique"
    /// Between companies: a row holding only a transfer identifier that `baton import transfers` refuses in the
    /// `key,transfer_sub` form (a key or identifier with other characters than letters, digits, `.`, `_`, `-`,
    /// longer than 256, or a transfer identifier held by several rows). Found by the rehearsal's import.
    case transferRejected = "transfer_rejected"
}

/// One problem found in the legacy table: how many rows, and up to five of their keys.
public struct LegacyProblem: Sendable, Equatable {
    /// What it is.
    public var kind: LegacyProblemKind
    /// How many rows (for `missing_unique`, how many indexes).
    public var count: Int
    /// Up to five keys of those rows (for `missing_unique`, the statement that adds the index).
    public var examples: [String]

    /// Creates a problem.
    public init(kind: LegacyProblemKind, count: Int, examples: [String]) {
        self.kind = kind
        self.count = count
        self.examples = examples
    }
}

extension LegacyStore {
    /// Apple's user identifier shape, as a PostgreSQL regular expression.
    static let appleSubjectPattern = "^[0-9]{6}\\.[0-9a-f]{32}\\.[0-9]{4}$"

    /// Finds the problems of ``LegacyProblemKind`` in the legacy table, read-only: one query per kind over the
    /// Apple rows (`legacy.where`), the rows it leaves out, the email's location, its copies and the JSON copy, plus the
    /// unique-index checks of ``inspectLegacyTable()``. Kinds without rows are left out.
    /// - Throws: ``PostgresError`` when the database cannot be queried.
    public func findProblems() async throws -> [LegacyProblem] {
        let l = legacy
        let apple = l.filterSQL()
        let key = "u.\(l.keyColumn.quoted)"
        let subject = l.subjectValueSQL()
        let pattern = Self.appleSubjectPattern
        var problems: [LegacyProblem] = []
        func rows(_ kind: LegacyProblemKind, _ condition: PostgresQuery, join: String = "") async throws {
            let query: PostgresQuery = "SELECT k::text, count(*) OVER () FROM (SELECT \(unsafeRaw: key) AS k FROM \(l.table) AS u\(unsafeRaw: join) WHERE true"
                + apple + " AND " + condition + ") AS s ORDER BY k LIMIT 5"
            let found = try await pool.query(query)
            guard let first = found.first else { return }
            problems.append(LegacyProblem(kind: kind, count: try first.decode(Int.self, at: 1), examples: try found.map { try $0.decode(String.self, at: 0) }))
        }

        if let email = l.emailColumn {
            // Among the rows the equality filters share (Logto's addresses are unique per tenant), as the table's own
            // constraint would be.
            let shared = BatonConfiguration.LegacyIdentifiers.filterSQL(l.filters.filter { $0.condition.fixedValue != nil }, alias: "o")
            try await rows(.emailConflict, "lower(u.\(unsafeRaw: email.quoted)::text) IN (SELECT lower(o.\(email)::text) FROM \(l.table) AS o WHERE o.\(email) IS NOT NULL"
                           + shared + " GROUP BY 1 HAVING count(*) > 1)")
        } else if let mail = l.emailTable {
            try await rows(.emailConflict, "lower(m.\(unsafeRaw: mail.column.quoted)::text) IN (SELECT lower(\(mail.column)::text) FROM \(mail.table) WHERE \(mail.column) IS NOT NULL GROUP BY 1 HAVING count(*) > 1)",
                           join: l.emailJoinSQL)
        }
        // A copy at a JSON path is no column to compare.
        for copy in l.emailCopies where copy.path == nil {
            let stored = "lower(c.\(copy.column.quoted)::text)"
            let userCopies: PostgresQuery = "EXISTS (SELECT 1 FROM \(copy.table) AS c WHERE c.\(copy.userColumn) = \(unsafeRaw: l.copyUserSQL(alias: "u"))"
                + BatonConfiguration.LegacyIdentifiers.filterSQL(copy.filters, alias: "c")
            try await rows(.emailCopyConflict, userCopies + " AND \(unsafeRaw: stored) = lower(\(unsafeRaw: l.emailSQL)) AND \(unsafeRaw: stored) IN (SELECT lower(\(copy.column)::text) FROM \(copy.table) GROUP BY 1 HAVING count(*) > 1))",
                           join: l.emailJoinSQL)
            try await rows(.emailCopyStale, userCopies + " AND \(unsafeRaw: stored) LIKE \("%" + Self.privateRelayDomain) AND \(unsafeRaw: stored) IS DISTINCT FROM lower(\(unsafeRaw: l.emailSQL)))",
                           join: l.emailJoinSQL)
        }
        let noTransfer = l.transferColumn.map { " AND u.\($0.quoted) IS NULL" } ?? ""
        try await rows(.subjectNull, "\(unsafeRaw: subject) IS NULL\(unsafeRaw: noTransfer)")
        try await rows(.subjectMalformed, "\(unsafeRaw: l.subjectSQL()) !~ \(pattern)")
        try await rows(.subjectDuplicate, "\(unsafeRaw: subject) IN (SELECT \(unsafeRaw: subject) FROM \(l.table) AS u WHERE \(unsafeRaw: subject) IS NOT NULL" + apple
                       + " GROUP BY 1 HAVING count(*) > 1)")
        if !l.filters.isEmpty {
            let other = "(true" + l.filterSQL(alias: "o") + ") IS NOT TRUE"
            try await rows(.sharedSubject, "\(unsafeRaw: subject) IN (SELECT \(unsafeRaw: l.subjectValueSQL(alias: "o")) FROM \(l.table) AS o WHERE " + other + ")")
            // Rows outside the filter: the same query shape, with the filter negated in the subquery instead.
            let query: PostgresQuery = "SELECT k::text, count(*) OVER () FROM (SELECT o.\(l.keyColumn) AS k FROM \(l.table) AS o WHERE " + other
                + " AND \(unsafeRaw: l.subjectValueSQL(alias: "o"))::text ~ \(pattern) AND \(unsafeRaw: l.subjectValueSQL(alias: "o")) NOT IN (SELECT \(unsafeRaw: subject) FROM \(l.table) AS u WHERE \(unsafeRaw: subject) IS NOT NULL"
                + apple + ")) AS s ORDER BY k LIMIT 5"
            let found = try await pool.query(query)
            if let first = found.first {
                problems.append(LegacyProblem(kind: .filteredAppleLike, count: try first.decode(Int.self, at: 1),
                                              examples: try found.map { try $0.decode(String.self, at: 0) }))
            }
        }
        if let json = l.json {
            let value = "u.\(json.column.quoted)::jsonb"
            let keys = json.subjectKeys.reduce(PostgresQuery(unsafeSQL: "false")) { sql, name in
                sql + " OR (\(unsafeRaw: value) ? \(name) AND \(unsafeRaw: value) ->> \(name) IS DISTINCT FROM \(unsafeRaw: subject)::text)"
            }
            try await rows(.jsonMismatch, "jsonb_typeof(\(unsafeRaw: value)) = 'object' AND (" + keys + ")")
        }
        let unique = try await inspectLegacyTable().findings.filter { $0.status == .failure && $0.name.hasSuffix("uniqueness") }
        if !unique.isEmpty {
            problems.append(LegacyProblem(kind: .missingUnique, count: unique.count, examples: unique.map { $0.fix ?? $0.detail }))
        }
        return problems
    }
}

extension LegacyStore {
    /// The Apple rows (`legacy.where`) of the legacy table.
    package func appleRowCount() async throws -> Int {
        try await pool.query("SELECT count(*) FROM \(legacy.table) AS u WHERE true" + legacy.filterSQL())[0].decode(Int.self, at: 0)
    }

    /// On a rehearsal's copy only: makes the table one Baton can run on. Keeps the lowest key of each duplicated
    /// subject, adds the missing unique index over the subject (the one the inspection's fix names), and drops from
    /// `baton.transfers` the subjects that are not Apple-shaped. Returns whether the key is unique (else the
    /// run cannot go on).
    package func setAsideProblemRowsOfCopy() async throws -> Bool {
        let l = legacy
        try await pool.execute("DELETE FROM \(l.table) AS u WHERE \(unsafeRaw: l.subjectValueSQL()) IS NOT NULL" + l.filterSQL()
                               + " AND EXISTS (SELECT 1 FROM \(l.table) AS d WHERE \(unsafeRaw: l.subjectValueSQL(alias: "d")) = \(unsafeRaw: l.subjectValueSQL()) AND d.\(l.keyColumn) < u.\(l.keyColumn)"
                               + l.filterSQL(alias: "d") + ")")
        for finding in try await inspectLegacyTable().findings where finding.status == .failure {
            guard finding.name == "subject uniqueness" else { return false }
            try await pool.execute(PostgresQuery(unsafeSQL: l.subjectIndexStatement(concurrently: false)))
        }
        return true
    }

    /// Between companies: the Apple rows holding a transfer identifier (`legacy.transfer_column`) and no subject,
    /// as (key, transfer identifier), up to `limit` in key order after the key `after`; none without the column.
    package func rowsWithTransferIdentifierOnly(after: String?, limit: Int) async throws -> [(key: String, transferSub: String)] {
        let l = legacy
        guard let column = l.transferColumn else { return [] }
        let afterKey: PostgresQuery = after.map { " AND u.\(l.keyColumn) > \($0)" } ?? ""
        let rows = try await pool.query("""
            SELECT u.\(l.keyColumn)::text, u.\(column)::text FROM \(l.table) AS u
            WHERE \(unsafeRaw: l.subjectValueSQL()) IS NULL AND u.\(column) IS NOT NULL
            """ + l.filterSQL() + afterKey + " ORDER BY u.\(l.keyColumn) LIMIT \(limit)")
        return try rows.map { (try $0.decode(String.self, at: 0), try $0.decode(String.self, at: 1)) }
    }

    /// On a rehearsal's copy: removes from `baton.transfers` the subjects Apple would not know (not Apple-shaped).
    package func dropMalformedTransfers() async throws {
        try await pool.execute("DELETE FROM baton.transfers WHERE old_sub !~ \(Self.appleSubjectPattern)")
    }
}
