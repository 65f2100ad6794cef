import BatonPostgres

/// What Baton found about the configured legacy table in the live database: one inspection, run by the
/// engine at start-up and by `baton doctor`, each finding a line an operator can read.
public struct LegacyInspection: Sendable, Equatable {
    /// One finding: `ok`, a warning, or a failure with its fix.
    public struct Finding: Sendable, Equatable {
        /// How it stands.
        public enum Status: String, Sendable, Equatable {
            /// As Baton needs it.
            case ok
            /// Works, but worth knowing.
            case warning
            /// Baton cannot run so.
            case failure
        }

        /// How it stands.
        public var status: Status
        /// What was checked, such as `legacy table` or `subject uniqueness`.
        public var name: String
        /// What was found, in one line.
        public var detail: String
        /// For a failure: what to do (an SQL statement or a configuration key).
        public var fix: String?
    }

    /// The findings, in check order.
    public var findings: [Finding]

    /// The first failure, if any.
    public var failure: Finding? { findings.first { $0.status == .failure } }
}

extension LegacyStore {
    /// Inspects the legacy table (catalog queries, plus one count of the Apple rows): the tables and columns
    /// exist, none Baton writes is a generated column, a unique index makes the subject and the key unique among the
    /// rows `legacy.where` selects (``BatonConfiguration/LegacyIdentifiers/makesUnique(_:by:)``), where emails are (with their further copies, `legacy.email_copies`) and which JSON
    /// keys Baton rewrites, and whether Baton's schema is applied.
    /// - Throws: ``PostgresError`` when the database cannot be queried.
    public func inspectLegacyTable() async throws -> LegacyInspection {
        let l = legacy
        var findings: [LegacyInspection.Finding] = []
        func add(_ status: LegacyInspection.Finding.Status, _ name: String, _ detail: String, fix: String? = nil) {
            findings.append(.init(status: status, name: name, detail: detail, fix: fix))
        }

        let applied = try await pool.query("SELECT to_regclass('baton.transfers') IS NOT NULL")[0].decode(Bool.self, at: 0)
        if !applied { add(.failure, "schema", "Baton's schema is not applied", fix: "run 'baton db migrate'") }

        guard let columns = try await columnInfo(of: l.table) else {
            add(.failure, "legacy table", "legacy.table \(l.table) does not exist in the database (or this user cannot see it)",
                fix: "set legacy.table to the application's table; names are case-sensitive (quoted as \(l.table.quoted))")
            return LegacyInspection(findings: findings)
        }
        var wanted: [(String, PostgresIdentifier)] = [("legacy.key_column", l.keyColumn), ("legacy.subject_column", l.subjectColumn)]
        if let column = l.emailColumn { wanted.append(("legacy.email_column", column)) }
        if let column = l.transferColumn { wanted.append(("legacy.transfer_column", column)) }
        if let json = l.json { wanted.append(("legacy.json.column", json.column)) }
        if let mail = l.emailTable { wanted.append(("legacy.email.reference_column", mail.referenceColumn)) }
        for (index, copy) in l.subjectCopies.enumerated() {
            wanted.append(copy.table.map { ("legacy.subject_copies[\(index)].reference_column", $0.referenceColumn) } ?? ("legacy.subject_copies[\(index)].column", copy.column))
        }
        wanted += l.filters.map { ("legacy.where", $0.column) }
        wanted += l.emailDerived.map { ("legacy.email_derived", $0.column) }
        let missing = wanted.filter { columns[$0.1.name] == nil }.map { "\($0.0) \($0.1.name)" }
        guard missing.isEmpty else {
            add(.failure, "legacy table", "legacy.table \(l.table) has no column \(missing.joined(separator: ", "))",
                fix: "name the existing columns in the legacy section (names are case-sensitive)")
            return LegacyInspection(findings: findings)
        }
        let written = [l.subjectColumn, l.emailColumn, l.json?.column].compactMap { $0 } + l.subjectCopies.filter { $0.table == nil }.map(\.column) + l.emailDerived.map(\.column)
        if let generated = written.first(where: { columns[$0.name]?.generated == true }) {
            add(.failure, "legacy table", "\(l.table).\(generated.name) is a generated column, which cannot be written",
                fix: "name the column it is computed from (for a JSON copy, legacy.json) instead")
            return LegacyInspection(findings: findings)
        }
        var named: [String] = []
        for (_, column) in wanted where !named.contains(column.name) { named.append(column.name) }
        add(.ok, "legacy table", "\(l.table) has columns \(named.joined(separator: ", "))")

        let count = try await pool.query("SELECT count(*) FROM \(l.table) AS u WHERE true" + l.filterSQL())[0].decode(Int.self, at: 0)
        if l.filters.isEmpty {
            add(.ok, "apple rows", "every row of \(l.table) is an Apple row (\(count) rows; no legacy.where)")
        } else {
            let filter = l.filters.map(\.literalSQL).joined(separator: " AND ")
            add(count == 0 ? .warning : .ok, "apple rows", "legacy.where selects \(count) rows of \(l.table) (\(filter)); other rows are never read or written")
        }

        let indexes = try await uniqueIndexes(of: l.table)
        func described(_ index: UniqueIndex) -> String {
            "unique index \(index.name) on (\(index.columns.sorted().joined(separator: ", ")))" + (index.predicate.map { " where \($0)" } ?? "")
        }
        if l.subjectPath != nil {
            if let index = try await subjectExpressionIndex() {
                add(.ok, "subject uniqueness", "unique index \(index) on the subject's expression \(l.subjectValueSQL())")
            } else {
                add(.warning, "subject uniqueness", "no unique index holds the subject's expression \(l.subjectValueSQL()): Baton serializes its own writes of each new sub (an advisory lock), so it migrates each user once, but the application's own writes are not checked",
                    fix: l.subjectIndexStatement())
            }
        } else if let index = indexes.first(where: { l.makesUnique(l.subjectColumn, by: $0) }) {
            add(.ok, "subject uniqueness", described(index))
        } else {
            let within = l.filters.isEmpty ? "" : " among the rows legacy.where selects"
            add(.failure, "subject uniqueness", "\(l.table).\(l.subjectColumn.name) has no unique constraint\(within), so two records could claim one Apple user",
                fix: l.uniqueIndexStatement(over: l.subjectColumn))
        }
        if let index = indexes.first(where: { l.makesUnique(l.keyColumn, by: $0) }) {
            add(.ok, "key uniqueness", described(index))
        } else {
            // The index that makes the configured key unique (the columns the filters fix leading, partial on the other
            // filters) and, when the table has one, a column an index already makes unique among the Apple rows (a
            // primary key such as `id`, or Casdoor's `name` within one `owner`) to name instead, never one Baton writes:
            // no advice to name a primary key the table lacks (Gitea's is over the subject and the source).
            let within = l.filters.isEmpty ? "" : " among the rows legacy.where selects"
            let statement = l.uniqueIndexStatement(over: l.keyColumn)
            let excluded = Set([l.keyColumn, l.subjectColumn, l.emailColumn, l.transferColumn, l.json?.column].compactMap { $0 })
            let unique = indexes.lazy.flatMap { index in
                index.columns.sorted().compactMap { name -> String? in
                    guard let column = try? PostgresIdentifier(name), !excluded.contains(column), l.makesUnique(column, by: index) else { return nil }
                    return name
                }
            }.first
            add(.failure, "key uniqueness", "legacy.key_column \(l.keyColumn.name) is not unique\(within), so a rewrite could reach several rows",
                fix: unique.map { "name \($0) (unique) in legacy.key_column, or run \(statement)" } ?? statement)
        }

        if let mail = l.emailTable {
            guard let mailColumns = try await columnInfo(of: mail.table) else {
                add(.failure, "email", "legacy.email.table \(mail.table) does not exist", fix: "name the users table in legacy.email.table")
                return LegacyInspection(findings: findings)
            }
            let jsonColumn = l.json?.emailTableColumn
            let absent = ([("legacy.email.column", mail.column), ("legacy.email.key_column", mail.keyColumn)]
                          + (jsonColumn.map { [("legacy.json.email_table_column", $0)] } ?? [])
                          + mail.derived.map { ("legacy.email.derived", $0.column) }).filter { mailColumns[$0.1.name] == nil }
            if let first = absent.first {
                add(.failure, "email", "legacy.email.table \(mail.table) has no column \(first.1.name) (\(first.0))", fix: "name an existing column")
                return LegacyInspection(findings: findings)
            }
            if let generated = ([mail.column, jsonColumn].compactMap({ $0 }) + mail.derived.map(\.column)).first(where: { mailColumns[$0.name]?.generated == true }) {
                add(.failure, "email", "\(mail.table).\(generated.name) is a generated column", fix: "name the column it is computed from")
                return LegacyInspection(findings: findings)
            }
            if let jsonColumn, let type = mailColumns[jsonColumn.name]?.type, !Self.holdsJSON(type) {
                add(.failure, "json copy", "legacy.json.email_table_column \(jsonColumn.name) is of type \(type), not json, jsonb or text", fix: "name a JSON column")
                return LegacyInspection(findings: findings)
            }
            let unique = try await uniqueIndexes(of: mail.table).contains { $0.columns == [mail.column.name] && $0.predicate == nil }
            add(.ok, "email", "emails are in \(mail.table).\(mail.column.name), joined on \(mail.keyColumn.name) = \(l.table.name).\(mail.referenceColumn.name)\(unique ? " (unique: a conflict keeps the stored email)" : ""); policy \(l.emailPolicy.rawValue)")
        } else if let column = l.emailColumn {
            add(.ok, "email", "emails are in \(l.table).\(column.name); policy \(l.emailPolicy.rawValue)")
        } else {
            add(.ok, "email", "no email location configured: Baton never reads or writes emails")
        }
        for (index, copy) in l.emailCopies.enumerated() {
            let finding = try await inspectEmailCopy(copy, key: "legacy.email_copies[\(index)]")
            findings.append(finding)
            if finding.status == .failure { return LegacyInspection(findings: findings) }
        }
        for (index, copy) in l.subjectCopies.enumerated() {
            let finding = try await inspectSubjectCopy(copy, key: "legacy.subject_copies[\(index)]", legacyColumns: columns)
            findings.append(finding)
            if finding.status == .failure { return LegacyInspection(findings: findings) }
        }
        if let json = l.json {
            let type = columns[json.column.name]?.type ?? ""
            let emailKeys = json.emailKeys.isEmpty ? "" : ", email keys \(json.emailKeys.joined(separator: ", "))"
            var usersCopy = ""
            if let mail = l.emailTable, let column = json.emailTableColumn {
                usersCopy = " (and in \(mail.table).\(column.name), where they hold the old values)"
            }
            if Self.holdsJSON(type) {
                add(.ok, "json copy", "\(l.table).\(json.column.name) (\(type)): subject keys \(json.subjectKeys.joined(separator: ", "))\(emailKeys) are rewritten\(usersCopy); other keys untouched")
            } else {
                add(.failure, "json copy", "legacy.json.column \(json.column.name) is of type \(type), not json, jsonb or text", fix: "name a JSON column")
            }
        }
        return LegacyInspection(findings: findings)
    }

    /// The finding on one email copy: its table and columns exist, the email column is text and not generated,
    /// `user_column` compares with the key it references, and an index leads with it (else a warning: each
    /// migration would read the whole table).
    private func inspectEmailCopy(_ copy: BatonConfiguration.LegacyIdentifiers.EmailCopy, key: String) async throws -> LegacyInspection.Finding {
        let l = legacy
        func failure(_ detail: String, fix: String) -> LegacyInspection.Finding {
            .init(status: .failure, name: "email copy", detail: detail, fix: fix)
        }
        guard let columns = try await columnInfo(of: copy.table) else {
            return failure("\(key).table \(copy.table) does not exist", fix: "name the table holding the copy (names are case-sensitive)")
        }
        let wanted = [("column", copy.column), ("user_column", copy.userColumn)] + copy.filters.map { ("where", $0.column) }
            + copy.derived.map { ("derived", $0.column) }
        if let absent = wanted.first(where: { columns[$0.1.name] == nil }) {
            return failure("\(key).table \(copy.table) has no column \(absent.1.name) (\(key).\(absent.0))", fix: "name an existing column")
        }
        let type = columns[copy.column.name]!
        if let generated = ([copy.column] + copy.derived.map(\.column)).first(where: { columns[$0.name]?.generated == true }) {
            return failure("\(copy.table).\(generated.name) is a generated column", fix: "name the column it is computed from")
        }
        if copy.path != nil {
            guard Self.holdsJSON(type.type) else {
                return failure("\(key).column \(copy.column.name) is of type \(type.type), not json, jsonb or text (\(key).path)", fix: "name the JSON column")
            }
        } else if !(["text", "citext"].contains(type.type) || type.type.hasPrefix("character")) {
            return failure("\(key).column \(copy.column.name) is of type \(type.type), not text, varchar or citext", fix: "name the email column")
        }
        let (referenced, referencedKey) = l.emailTable.map { ($0.table, $0.keyColumn) } ?? (l.table, l.keyColumn)
        do {
            try await pool.execute("SELECT 1 FROM \(copy.table) AS c JOIN \(referenced) AS r ON c.\(copy.userColumn) = r.\(referencedKey) WHERE false")
        } catch let error as PostgresError where error.code == .undefinedObject {  // 42883: no such operator
            return failure("\(key).user_column \(copy.userColumn.name) (\(columns[copy.userColumn.name]!.type)) cannot be compared with \(referenced).\(referencedKey.name)",
                           fix: "name the column of \(copy.table) holding \(referenced).\(referencedKey.name)")
        }
        let indexed = try await pool.query("""
            SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                           WHERE i.indrelid = to_regclass(\(copy.table.quoted)) AND a.attname = \(copy.userColumn.name))
            """)[0].decode(Bool.self, at: 0)
        let detail = "\(copy.table).\(copy.column.name), the user's rows by \(copy.userColumn.name) = \(referenced.name).\(referencedKey.name): the row holding the old address gets the new one; policy \(l.emailPolicy.rawValue)"
        guard indexed else {
            return .init(status: .warning, name: "email copy", detail: detail + "; no index leads with \(copy.userColumn.name), so each migration reads the whole table",
                         fix: "CREATE INDEX CONCURRENTLY ON \(copy.table.quoted) (\(copy.userColumn.quoted))")
        }
        return .init(status: .ok, name: "email copy", detail: detail)
    }

    /// One subject copy (`legacy.subject_copies`): its table and columns exist, the column is not generated, a JSON location
    /// is in a json, jsonb or text column, and (in another table) an index leads with the key column.
    private func inspectSubjectCopy(_ copy: BatonConfiguration.LegacyIdentifiers.SubjectCopy, key: String,
                                    legacyColumns: [String: ColumnInfo]) async throws -> LegacyInspection.Finding {
        let l = legacy
        func failure(_ detail: String, fix: String) -> LegacyInspection.Finding {
            .init(status: .failure, name: "subject copy", detail: detail, fix: fix)
        }
        let table = copy.table?.name ?? l.table
        guard let columns = copy.table == nil ? legacyColumns : try await columnInfo(of: table) else {
            return failure("\(key).table \(table) does not exist", fix: "name the table holding the copy (names are case-sensitive)")
        }
        let wanted = [("column", copy.column)] + (copy.table.map { [("key_column", $0.keyColumn)] } ?? []) + copy.filters.map { ("where", $0.column) }
        if let absent = wanted.first(where: { columns[$0.1.name] == nil }) {
            return failure("\(table) has no column \(absent.1.name) (\(key).\(absent.0))", fix: "name an existing column")
        }
        let type = columns[copy.column.name]!
        if type.generated {
            return failure("\(table).\(copy.column.name) is a generated column", fix: "name the column it is computed from")
        }
        if copy.path != nil, !Self.holdsJSON(type.type) {
            return failure("\(key).column \(copy.column.name) is of type \(type.type), not json, jsonb or text", fix: "name a JSON column, or leave out path")
        }
        let location = "\(table).\(copy.column.name)" + (copy.path.map { " at \($0)" } ?? "")
        guard let other = copy.table else {
            return .init(status: .ok, name: "subject copy", detail: "\(location) in the legacy row: rewritten where it holds the old sub")
        }
        let detail = "\(location), the rows by \(other.keyColumn.name) = \(l.table.name).\(other.referenceColumn.name): rewritten where they hold the old sub"
        let indexed = try await pool.query("""
            SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                           WHERE i.indrelid = to_regclass(\(table.quoted)) AND a.attname = \(other.keyColumn.name))
            """)[0].decode(Bool.self, at: 0)
        guard indexed else {
            return .init(status: .warning, name: "subject copy", detail: detail + "; no index leads with \(other.keyColumn.name), so each migration reads the whole table",
                         fix: "CREATE INDEX CONCURRENTLY ON \(table.quoted) (\(other.keyColumn.quoted))")
        }
        return .init(status: .ok, name: "subject copy", detail: detail)
    }

    /// Checks at start-up, with ``inspectLegacyTable()``, that Baton can run against the legacy table.
    /// - Returns: the inspection, whose findings the caller may log.
    /// - Throws: ``BatonError`` `invalid_legacy_table` with the first failure and its fix; ``PostgresError``
    ///   when the database cannot be reached.
    @discardableResult
    public func validateLegacyTable() async throws -> LegacyInspection {
        let inspection = try await inspectLegacyTable()
        if let failure = inspection.failure {
            throw BatonError(.invalidLegacyTable, failure.detail + (failure.fix.map { "; fix: \($0)" } ?? ""))
        }
        return inspection
    }

    /// Whether a column of type `type` (`format_type`'s text) can hold a JSON copy.
    private static func holdsJSON(_ type: String) -> Bool {
        ["json", "jsonb", "text"].contains(type) || type.hasPrefix("character varying")
    }

    private struct ColumnInfo {
        var type: String
        var generated: Bool
    }

    /// The columns of `table` by name, or nil when the table does not exist.
    private func columnInfo(of table: PostgresIdentifier) async throws -> [String: ColumnInfo]? {
        let exists = try await pool.query("SELECT to_regclass(\(table.quoted)) IS NOT NULL")[0].decode(Bool.self, at: 0)
        guard exists else { return nil }
        let rows = try await pool.query("""
            SELECT attname::text, format_type(atttypid, atttypmod), attgenerated <> ''
            FROM pg_attribute WHERE attrelid = to_regclass(\(table.quoted)) AND attnum > 0 AND NOT attisdropped
            """)
        var result: [String: ColumnInfo] = [:]
        for row in rows {
            result[try row.decode(String.self, at: 0)] = ColumnInfo(type: try row.decode(String.self, at: 1), generated: try row.decode(Bool.self, at: 2))
        }
        return result
    }

    /// The name of a valid unique index of the legacy table over the subject's expression (`legacy.subject_path`) and
    /// columns the filters hold to one value, which PostgreSQL's planner uses for a lookup by subject under the
    /// filters (so its expression and any predicate match); nil when there is none.
    private func subjectExpressionIndex() async throws -> String? {
        let l = legacy
        var columns: [String: Set<String>] = [:]
        for row in try await pool.query("""
            SELECT c.relname::text, a.attname::text
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1]) AND a.attnum > 0
            WHERE i.indrelid = to_regclass(\(l.table.quoted)) AND i.indisunique AND i.indisvalid AND i.indexprs IS NOT NULL
            """) {
            columns[try row.decode(String.self, at: 0), default: []].formUnion([try row.decode(String?.self, at: 1)].compactMap { $0 })
        }
        let candidates = columns.filter { $0.value.isSubset(of: l.fixedColumns) }.keys.sorted()
        guard !candidates.isEmpty else { return nil }
        let filters = l.filters.map { " AND " + $0.literalSQL }.joined()
        let plan = try await pool.withTransaction { connection in
            _ = try await connection.query("SELECT set_config('enable_seqscan', 'off', true)")
            return try await connection.query(PostgresQuery(unsafeSQL: "EXPLAIN (COSTS OFF) SELECT 1 FROM \(l.table.quoted) AS u WHERE \(l.subjectValueSQL()) = ''\(filters)"))
                .map { try $0.decode(String.self, at: 0) }.joined(separator: "\n")
        }
        return candidates.first { plan.contains(" \($0) ") || plan.contains(" \"\($0)\" ") }
    }

    /// The valid unique indexes (and constraints) of `table` over columns only (no expression), with their key
    /// columns and, for a partial one, its predicate.
    private func uniqueIndexes(of table: PostgresIdentifier) async throws -> [UniqueIndex] {
        let rows = try await pool.query("""
            SELECT c.relname::text, a.attname::text, pg_get_expr(i.indpred, i.indrelid)
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1])
            WHERE i.indrelid = to_regclass(\(table.quoted)) AND i.indisunique AND i.indisvalid AND i.indexprs IS NULL
            ORDER BY c.relname
            """)
        var indexes: [UniqueIndex] = []
        for row in rows {
            let name = try row.decode(String.self, at: 0)
            let column = try row.decode(String.self, at: 1)
            if indexes.last?.name == name {
                indexes[indexes.count - 1].columns.insert(column)
            } else {
                indexes.append(UniqueIndex(name: name, columns: [column], predicate: try row.decode(String?.self, at: 2)))
            }
        }
        return indexes
    }
}
