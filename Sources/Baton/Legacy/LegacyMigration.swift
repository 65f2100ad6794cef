import BatonPostgres

extension LegacyStore {
    /// Rewrites the legacy record of `oldSub` to `newSub`, exactly once however many callers race.
    ///
    /// One statement, hence one transaction, on one pooled connection:
    /// 1. locks the Apple row (`legacy.where`) whose subject is `oldSub` (`SELECT … FOR UPDATE OF u`);
    /// 2. checks that no Apple row already carries `newSub`;
    /// 3. sets the subject column (or its JSON location, `legacy.subject_path`) to `newSub`, and with it each copy of the
    ///    old `sub` (`legacy.subject_copies`, in the row or in other tables' rows referencing it) and the JSON copy's
    ///    subject keys (`legacy.json`), and in the
    ///    email table's JSON copy (`legacy.json.email_table_column`) the keys holding the old subject or email;
    ///    replaces the email (in `email_column`, or in the email table `legacy.email`, and the JSON email keys)
    ///    by `newEmail` only when `newEmail` is given and `legacy.email_policy` allows it for the stored email
    ///    (`relay`, the default: only a private relay address is replaced); so does each email copy
    ///    (`legacy.email_copies`) in the user's row holding the old address, unless another row of that table
    ///    already holds `newEmail` (then it keeps the old one and an `email_conflict` event names the copy);
    /// 4. records the migration in `baton.transfers` (the row of `oldSub` or of `transferSub`, created when
    ///    neither exists): `state = 'migrated'`, `method`, `new_sub`, `new_email`, `is_private_email`,
    ///    `migrated_at`, the legacy key; lease and last error cleared;
    /// 5. appends one `baton.events` row: `kind = 'migrated'`, `method`, `legacy_key`, old and new subject,
    ///    old and new email, `transfer_sub`.
    ///
    /// Concurrent callers for the same `oldSub` wait on the legacy row's lock; once the first commits, the
    /// row no longer matches, so the others write nothing and return `.alreadyMigrated` with the record as
    /// the first left it. Exactly one caller returns `.migrated`, and exactly one event exists.
    ///
    /// A unique violation on the email (another row holds `newEmail` under a unique constraint) does not
    /// fail the migration: the statement runs again without writing the email, and an `email_conflict` event
    /// records both values. When another Apple row already holds `newSub`, nothing is written, a
    /// `subject_conflict` event names both keys, and the result is `.conflict`.
    ///
    /// Do not call it while your own open transaction holds a lock on the legacy row or on the
    /// `baton.transfers` row of `oldSub` (the call runs on another connection and would wait for you).
    ///
    /// - Parameters:
    ///   - oldSub: the sending team's `sub` stored in the legacy table.
    ///   - newSub: the receiving team's `sub`.
    ///   - newEmail: the receiving team's email for the user (its private relay address, if any).
    ///   - isPrivateEmail: whether `newEmail` is a private relay address (stored in `baton.transfers`).
    ///   - transferSub: the transfer identifier, when known.
    ///   - method: `.signin`, `.exchange` or `.link`.
    /// - Returns: `.migrated(user)` (this call rewrote it), `.alreadyMigrated(user)` (a record already carries
    ///   `newSub`, and no record carries `oldSub`), `.legacyRecordMissing` (neither exists), `.conflict`
    ///   (both exist as different records, or a unique constraint on the subject column or on
    ///   `baton.transfers` refused the rewrite). Only `.migrated` writes the record.
    /// - Throws: ``PostgresError`` for database failures; nothing is half-written.
    public func applyMigration(oldSub: String, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                               transferSub: String?, method: MigrationMethod) async throws -> MigrationOutcome {
        if oldSub == newSub {
            return try await lookupBySubject(newSub).map { .alreadyMigrated($0) } ?? .legacyRecordMissing
        }
        return try await runMigration(from: .subject(oldSub), newSub: newSub, newEmail: newEmail, isPrivateEmail: isPrivateEmail,
                                      transferSub: transferSub, method: method)
    }

    /// ``applyMigration(oldSub:newSub:newEmail:isPrivateEmail:transferSub:method:)`` with the record found
    /// from `transferSub` inside the same statement: the row whose subject `baton.transfers` maps it to, or
    /// the row `baton.transfers` names by key (`baton import transfers` with `key,transfer_sub`), or the row
    /// whose transfer column holds it (whatever its subject: NULL between companies). The sign-in path, one
    /// round trip. Same rules, locks and outcomes; an unknown `transferSub` is `.legacyRecordMissing` (or
    /// `.alreadyMigrated` when `newSub` has a record).
    /// - Throws: ``PostgresError``; nothing is half-written.
    public func applyMigration(transferSub: String, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                               method: MigrationMethod) async throws -> MigrationOutcome {
        try await runMigration(from: .transfer(transferSub), newSub: newSub, newEmail: newEmail, isPrivateEmail: isPrivateEmail,
                               transferSub: transferSub, method: method)
    }

    private func runMigration(from source: OldSubjectSource, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                              transferSub: String?, method: MigrationMethod) async throws -> MigrationOutcome {
        let rows: PostgresResult
        do {
            rows = try await Self.withRefusedValueFallbacks { parts in
                let query = migrationQuery(from: source, newSub: newSub, newEmail: newEmail, isPrivateEmail: isPrivateEmail,
                                           transferSub: transferSub, method: method, parts: parts)
                guard locksNewSubject else { return try await pool.query(query) }
                return try await pool.withTransaction { connection in
                    _ = try await connection.query(Self.newSubjectLockQuery(newSub))
                    return try await connection.query(query)
                }
            }
        } catch let error as PostgresError where error.code == .uniqueViolation {
            return .conflict  // with every part that can hold a refused value left out, the subject's own: another row holds it
        }
        switch try Self.migrationRow(rows, newSub: newSub) {
        case .settled(let outcome): return outcome
        case .readAgain: return try await lookupBySubject(newSub).map { .alreadyMigrated($0) } ?? .legacyRecordMissing
        }
    }

    /// Whether a migration first takes Baton's own lock on the new `sub` (``newSubjectLockQuery(_:)``): for a subject
    /// inside JSON (`legacy.subject_path`), which the database may keep unique by no index at all (Logto). Taken in its
    /// own statement, before the migration statement's snapshot, so that statement sees whatever the last holder wrote:
    /// two callers can never both find the new `sub` free and write it into two records.
    var locksNewSubject: Bool { legacy.subjectPath != nil }

    /// The statement taking that lock until the transaction ends (two keys: Baton's space, the `sub`'s hash).
    static func newSubjectLockQuery(_ newSub: String) -> PostgresQuery {
        "SELECT pg_advisory_xact_lock(1111577678, hashtext(\(newSub)::text))"
    }

    /// Runs the migration statement through `run` with every part, then with fewer after each value the application's
    /// table refuses (a unique email, one too long, a CHECK, a JSON copy that is not JSON: ``MigrationParts``), so such
    /// a value never keeps the user from migrating; the subject is always rewritten and the event records why.
    /// `beforeRetry` runs before each retry (inside a transaction: back to a savepoint).
    /// - Throws: the error once no part is left to leave out.
    static func withRefusedValueFallbacks(_ run: (MigrationParts) async throws -> PostgresResult,
                                          beforeRetry: () async throws -> Void = {}) async throws -> PostgresResult {
        var parts = MigrationParts.all
        while true {
            do {
                return try await run(parts)
            } catch let error as PostgresError {
                guard let fewer = parts.withoutNext(after: error) else { throw error }
                try await beforeRetry()
                parts = fewer
            }
        }
    }

    /// The migration statement of a sign-in on an event loop's pipeline: every part written, the legacy row locked
    /// `NOWAIT` (a row another transaction holds fails the statement at once, writing nothing, and the async way
    /// takes the wait and the fallbacks of ``applyMigration(transferSub:newSub:newEmail:isPrivateEmail:method:)``).
    func pipelinedMigrationQuery(_ request: MigrationRequest) -> PostgresQuery {
        let source: OldSubjectSource = request.oldSub.map { .subject($0) } ?? .transfer(request.transferSub ?? "")
        return migrationQuery(from: source, newSub: request.newSub, newEmail: request.newEmail, isPrivateEmail: request.isPrivateEmail,
                              transferSub: request.transferSub, method: request.method, waitForLock: false)
    }

    /// What ``pipelinedMigrationQuery(_:)`` came to: `.migrated`, `.conflict`, or `.legacyRecordMissing` when nothing
    /// was rewritten and no conflict seen (the decision then looks the subject up again, as a fresh read would).
    static func pipelinedMigrationOutcome(_ rows: PostgresResult, newSub: String) throws -> MigrationOutcome {
        switch try migrationRow(rows, newSub: newSub) {
        case .settled(let outcome): return outcome
        case .readAgain: return .legacyRecordMissing
        }
    }

    /// What the migration statement's row says: the outcome, or that the record must be read again.
    enum MigrationRow {
        case settled(MigrationOutcome)
        /// Nothing was rewritten and no conflict seen: the statement's snapshot may predate a concurrent
        /// migration that committed while this one waited for the row lock, so a fresh read of `newSub` tells
        /// `.alreadyMigrated` from `.legacyRecordMissing`.
        case readAgain
    }

    static func migrationRow(_ rows: PostgresResult, newSub: String) throws -> MigrationRow {
        let row = rows[0]
        if let key = try row.decode(String?.self, at: 2) {
            // The subject as the row now holds it: the sign-in decision checks that it is the one asked for.
            return .settled(.migrated(LegacyUser(key: key, subject: try row.decode(String.self, at: 4), email: try row.decode(String?.self, at: 3),
                                                 accountKey: try row.decode(String?.self, at: 5))))
        }
        let oldExists = try row.decode(String?.self, at: 0) != nil
        let newExists = try row.decode(String?.self, at: 1) != nil
        return oldExists && newExists ? .settled(.conflict) : .readAgain
    }

    /// What varies between the texts of the migration statement.
    struct MigrationShape: Hashable, Sendable {
        /// The record is found by the sending team's identifier (``OldSubjectSource/subject(_:)``), else by the
        /// transfer identifier.
        var bySubject: Bool
        var writeEmail: Bool
        /// The JSON copy (its subject and email keys) and the subject's copies (`legacy.subject_copies`) are rewritten.
        var writeJSON: Bool
        var waitForLock: Bool
    }

    /// Which parts of a record besides its subject the migration statement writes: all of them, then fewer after
    /// the application's table refused a value (SQLSTATE class 22, data, or 23, a constraint).
    package struct MigrationParts: Sendable, Equatable {
        var email = true
        var json = true
        /// The SQLSTATE that made the statement leave parts out, recorded in the `email_conflict` event.
        var refusal: String?

        /// Every part.
        package static let all = MigrationParts()

        /// The parts to try after `error`, or nil when none is left to leave out (or `error` is not about a value).
        func withoutNext(after error: PostgresError) -> MigrationParts? {
            guard error.isRefusedValue, let state = error.sqlState else { return nil }
            if email { return MigrationParts(email: false, json: true, refusal: state) }
            // Without the email, a unique violation left is the subject's own; anything else may be the JSON copy.
            if json, state != "23505" { return MigrationParts(email: false, json: false, refusal: state) }
            return nil
        }
    }

    /// Where the migration statement finds the record.
    public enum OldSubjectSource: Sendable {
        /// The row carrying this sending-team identifier.
        case subject(String)
        /// The row this transfer identifier leads to (`baton.transfers`, then the legacy transfer column).
        case transfer(String)
    }

    /// The migration statement of ``applyMigration(oldSub:newSub:newEmail:isPrivateEmail:transferSub:method:)``
    /// and ``applyMigration(transferSub:newSub:newEmail:isPrivateEmail:method:)`` (also the SQL
    /// `baton-bench signin` gives pgbench). With `parts` leaving out the email, no email is written and an
    /// `email_conflict` event records the values and the refusal's SQLSTATE; leaving out the JSON copy keeps it as
    /// it was; with `waitForLock` false a legacy row another transaction holds fails the statement (`NOWAIT`)
    /// instead of waiting for it. The text is built once per shape (``StatementTemplate``); only the values are
    /// bound here.
    package func migrationQuery(from source: OldSubjectSource, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                               transferSub: String?, method: MigrationMethod, parts: MigrationParts = .all,
                               waitForLock: Bool = true) -> PostgresQuery {
        let oldSub: String?
        switch source {
        case .subject(let sub): oldSub = sub
        case .transfer: oldSub = nil
        }
        let shape = MigrationShape(bySubject: oldSub != nil, writeEmail: parts.email, writeJSON: parts.json, waitForLock: waitForLock)
        return templates.migration(shape).filled { slot in
            switch slot {
            case .newSub: return newSub
            case .newEmail: return newEmail
            case .isPrivateEmail: return isPrivateEmail
            case .transferSub: return transferSub
            case .oldSub: return oldSub
            case .method: return method.rawValue
            case .refusal: return parts.refusal
            case .subject: return newSub  // not in the migration statement
            }
        }
    }

    /// The key of the legacy row `transferSub` leads to, as a query returning at most one `k` (the migration
    /// statement's `candidate`): the row whose subject `baton.transfers` maps it to, the row `baton.transfers`
    /// names by key, or the row whose transfer column holds it.
    static func transferCandidate(_ l: BatonConfiguration.LegacyIdentifiers, transferSub: some PostgresEncodable) -> PostgresQuery {
        // The first way that knows the key answers (each an index probe; the key's arm only runs when
        // baton.transfers holds a key for this identifier).
        var candidates: PostgresQuery = """
            (SELECT x.\(l.keyColumn) AS k FROM \(l.table) AS x WHERE
            """ + " " + l.subjectEqualsSQL(alias: "x", l.storedSubjectSQL(expression: "(SELECT old_sub FROM baton.transfers WHERE transfer_sub = \(transferSub))"))
        candidates = candidates + l.filterSQL(alias: "x") + " LIMIT 1)"
        if let column = l.transferColumn {
            candidates = candidates + " UNION ALL (SELECT x.\(l.keyColumn) FROM \(l.table) AS x WHERE x.\(column) = \(transferSub)"
                + l.filterSQL(alias: "x") + " LIMIT 1)"
        }
        // The stored key is text: it is read back in the key column's own type (through the table's row type),
        // so the probe is an index scan whatever that type is; `key::text = legacy_key` scans the whole table.
        // baton.transfers is probed by the transfer identifier alone (its unique index); a NULL key finds no row.
        // `AND legacy_key IS NOT NULL` there let the planner, whose statistics predate the migrations that set
        // the keys, scan transfers_legacy_key_idx over every migrated row instead: O(migrated rows) per call.
        candidates = candidates + """
             UNION ALL (SELECT y.k FROM (SELECT legacy_key FROM baton.transfers WHERE transfer_sub = \(transferSub)) AS m
                        CROSS JOIN LATERAL (SELECT x.\(l.keyColumn) AS k FROM \(l.table) AS x
                            WHERE x.\(l.keyColumn) = (jsonb_populate_record(NULL::\(l.table), jsonb_build_object(\(l.keyColumn.name)::text, m.legacy_key))).\(l.keyColumn)
            """ + l.filterSQL(alias: "x") + " LIMIT 1) AS y) LIMIT 1"
        return candidates
    }

    /// The text of the migration statement for `shape`, with ``StatementSlot``s for the values.
    static func migrationStatement(_ l: BatonConfiguration.LegacyIdentifiers, _ shape: MigrationShape) -> PostgresQuery {
        let newSub = StatementSlot.newSub, newEmail = StatementSlot.newEmail, isPrivateEmail = StatementSlot.isPrivateEmail
        let transferSub = StatementSlot.transferSub, method = StatementSlot.method, writeEmail = shape.writeEmail
        let reference = (l.emailTable.map { ", u.\($0.referenceColumn.quoted) AS r" } ?? "") + l.subjectCopyReferencesSQL
        let columns: PostgresQuery = """
            SELECT u.\(l.keyColumn) AS k, \(unsafeRaw: l.emailSQL) AS e, \(unsafeRaw: l.subjectSQL()) AS s\(unsafeRaw: reference)
            FROM \(l.table) AS u\(unsafeRaw: l.emailJoinSQL)
            """
        var query: PostgresQuery
        if shape.bySubject {
            query = "WITH old AS (" + columns + " WHERE " + l.subjectEqualsSQL(l.storedSubjectSQL(StatementSlot.oldSub))
        } else {
            // The row's key first, then the row itself is locked by key.
            query = "WITH candidate AS (" + transferCandidate(l, transferSub: transferSub) + "), old AS (" + columns
                + " WHERE u.\(l.keyColumn) = (SELECT k FROM candidate) AND \(unsafeRaw: l.subjectValueSQL()) IS DISTINCT FROM " + l.storedSubjectSQL(newSub)
        }
        query = query + l.filterSQL() + " LIMIT 1 FOR UPDATE OF u" + (shape.waitForLock ? "" : " NOWAIT") + """

            ), taken AS (
                SELECT u.\(l.keyColumn)::text AS k FROM \(l.table) AS u WHERE
            """ + " " + l.subjectEqualsSQL(l.storedSubjectSQL(newSub)) + l.filterSQL() + " LIMIT 1)"

        // The legacy row: subject, email (when in this table), JSON copy.
        let mayWrite: PostgresQuery = "\(writeEmail) AND \(newEmail)::text IS NOT NULL"
        var set = l.subjectAssignmentSQL(l.storedSubjectSQL(newSub), copies: shape.writeJSON ? ("old.s", "\(newSub)::text") : nil)
        if let column = l.emailColumn, l.emailPolicy != .never {
            set = set + ", \(column) = CASE WHEN " + mayWrite
                + " AND (\(unsafeRaw: l.policySQL(stored: "u.\(column.quoted)::text"))) THEN \(newEmail) ELSE u.\(column) END"
            set = set + l.derivedSQL(l.emailDerived, alias: "u", email: "\(newEmail)",
                                     when: mayWrite + " AND (\(unsafeRaw: l.policySQL(stored: "u.\(column.quoted)::text")))")
        }
        if let json = l.json, shape.writeJSON {
            set = set + ", \(json.column) = " + l.jsonSQL(json, newSub: newSub, newEmail: newEmail, write: writeEmail)
        }
        let returnedEmail = l.emailColumn.map { "u.\($0.quoted)::text" } ?? "NULL::text"
        let returnedReference = l.emailTable.map { ", u.\($0.referenceColumn.quoted) AS r" } ?? ""
        let accountKey = l.emailTable == nil ? "NULL::text" : "moved.r::text"
        // The key may be unique only among the Apple rows (`legacy.where`): the filter is part of the write too.
        query = query + ", moved AS (UPDATE \(l.table) AS u SET " + set + " FROM old WHERE u.\(l.keyColumn) = old.k" + l.filterSQL()
            + " AND \(unsafeRaw: l.subjectValueSQL()) IS DISTINCT FROM " + l.storedSubjectSQL(newSub) + """
             AND NOT EXISTS (SELECT 1 FROM taken)
                RETURNING u.\(l.keyColumn)::text AS k, \(unsafeRaw: returnedEmail) AS e, \(unsafeRaw: l.subjectSQL()) AS s\(unsafeRaw: returnedReference)
            )
            """

        // The email table, when the email lives there: its email, and its JSON copy's keys that hold the old values.
        var finalEmail = "moved.e"
        let mailJSON = l.json.flatMap { json in json.emailTableColumn.map { (json, $0) } }
        if let mail = l.emailTable, l.emailPolicy != .never || mailJSON != nil {
            let writesEmail: PostgresQuery = l.emailPolicy == .never ? "false" : mayWrite + " AND m.\(mail.column) IS DISTINCT FROM \(newEmail)::text AND ("
                + "\(unsafeRaw: l.policySQL(stored: "m.\(mail.column.quoted)::text")))"
            var set: PostgresQuery = "\(mail.column) = CASE WHEN " + writesEmail + " THEN \(newEmail) ELSE m.\(mail.column) END"
            set = set + l.derivedSQL(mail.derived, alias: "m", email: "\(newEmail)", when: writesEmail)
            var changes = writesEmail
            if let (json, column) = mailJSON {
                let value = l.jsonSQL(json, in: "m.\(column.quoted)", held: ("old.s", "old.e"), newSub: newSub, newEmail: newEmail, write: writeEmail)
                set = set + ", \(column) = " + value
                changes = "(" + changes + ") OR m.\(column)::jsonb IS DISTINCT FROM (" + value + ")"
            }
            query = query + ", mail AS (UPDATE \(mail.table) AS m SET " + set + " FROM moved, old WHERE m.\(mail.keyColumn) = moved.r AND (" + changes
                + ") RETURNING m.\(mail.column)::text AS e)"
            finalEmail = "COALESCE((SELECT e FROM mail), (SELECT e FROM old))"
        } else if l.emailTable != nil {
            finalEmail = "(SELECT e FROM old)"
        }
        // The email's further copies: the user's row holding the old address gets the new one.
        query = query + l.emailCopiesSQL(from: "moved, old", user: l.copyUserInOld, oldEmail: "old.e", newEmail: newEmail, write: writeEmail, event: (
            "method, legacy_key, old_sub, new_sub, old_email, new_email, transfer_sub",
            "\(method)::text, moved.k, old.s, \(newSub)::text, old.e, \(newEmail)::text, \(transferSub)::text"))

        // The subject's copies in other tables: the rows of the user holding the old `sub` get the new one.
        if shape.writeJSON {
            query = query + l.subjectCopiesSQL(from: "moved, old", old: "old.s", new: "\(newSub)::text")
        }

        // Found by its sending-team identifier (a re-link, or an exchange), the record's own transfer row is the one
        // holding that identifier; the token's transfer identifier may lead to another person's row (one person's old
        // token linked to another Apple ID's current token), which stays theirs.
        let ownRow: PostgresQuery, insertedTransferSub: PostgresQuery
        if shape.bySubject {
            ownRow = "t.old_sub = old.s OR (t.old_sub IS NULL AND t.transfer_sub = \(transferSub)::text AND (t.legacy_key IS NULL OR t.legacy_key = moved.k))"
            insertedTransferSub = "CASE WHEN EXISTS (SELECT 1 FROM baton.transfers WHERE transfer_sub = \(transferSub)::text) THEN NULL ELSE \(transferSub)::text END"
        } else {
            ownRow = "t.old_sub = old.s OR t.transfer_sub = \(transferSub)::text"
            insertedTransferSub = "\(transferSub)::text"
        }
        let rest: PostgresQuery = """
            , updated AS (
                UPDATE baton.transfers AS t SET
                    old_sub = COALESCE(t.old_sub, old.s), transfer_sub = COALESCE(t.transfer_sub, \(transferSub)::text),
                    legacy_key = moved.k, new_sub = \(newSub)::text, new_email = \(newEmail)::text,
                    is_private_email = \(isPrivateEmail), state = 'migrated', method = \(method)::text,
                    migrated_at = now(), updated_at = now(), last_error = NULL,
                    lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL
                FROM moved, old
                WHERE
            """ + " " + ownRow + """

                RETURNING 1
            ), inserted AS (
                INSERT INTO baton.transfers (old_sub, transfer_sub, legacy_key, new_sub, new_email, is_private_email,
                                             state, method, migrated_at, updated_at)
                SELECT old.s,
            """ + " " + insertedTransferSub + """
            , moved.k, \(newSub)::text, \(newEmail)::text, \(isPrivateEmail),
                       'migrated', \(method)::text, now(), now()
                FROM moved, old WHERE NOT EXISTS (SELECT 1 FROM updated) AND (old.s IS NOT NULL OR \(transferSub)::text IS NOT NULL)
                RETURNING 1
            ), event AS (
                INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, old_email, new_email, transfer_sub)
                SELECT 'migrated', \(method)::text, moved.k, old.s, \(newSub)::text, old.e,
                       \(unsafeRaw: finalEmail), \(transferSub)::text
                FROM moved, old
            ), clash AS (
                INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, old_email, new_email, transfer_sub, detail)
                SELECT 'email_conflict', \(method)::text, moved.k, old.s, \(newSub)::text, old.e, \(newEmail)::text,
                       \(transferSub)::text, jsonb_build_object('sqlstate', \(StatementSlot.refusal)::text, 'json_written', \(shape.writeJSON))
                FROM moved, old WHERE NOT \(writeEmail)
            ), taken_once AS (
                INSERT INTO baton.signals_once (kind, sub, transfer_sub)
                SELECT 'subject_conflict', \(newSub)::text, COALESCE(\(transferSub)::text, old.s) FROM old, taken
                ON CONFLICT DO NOTHING RETURNING 1
            ), taken_event AS (
                INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, transfer_sub, detail)
                SELECT 'subject_conflict', \(method)::text, old.k::text, old.s, \(newSub)::text, \(transferSub)::text,
                       jsonb_build_object('holder_key', taken.k)
                FROM old, taken WHERE EXISTS (SELECT 1 FROM taken_once)
            )
            SELECT (SELECT k::text FROM old), (SELECT k FROM taken), moved.k, \(unsafeRaw: finalEmail), moved.s, \(unsafeRaw: accountKey)
            FROM (SELECT 1) AS one LEFT JOIN moved ON true
            """
        return query + rest
    }
}

extension PostgresError {
    /// Whether the application's table refused a value: SQLSTATE class 22 (a data exception: too long, not JSON)
    /// or 23 (a constraint: unique, CHECK, NOT NULL). Nothing was written, and the statement may succeed without it.
    var isRefusedValue: Bool {
        guard let state = sqlState else { return false }
        return state.hasPrefix("22") || state.hasPrefix("23")
    }
}
