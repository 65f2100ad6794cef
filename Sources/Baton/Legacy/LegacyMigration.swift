import BatonPostgres

extension LegacyStore {
    /// Rewrites the legacy record of `oldSub` to `newSub`, exactly once however many callers race.
    ///
    /// One statement, hence one transaction, on one pooled connection:
    /// 1. locks the Apple row (`legacy.where`) whose subject is `oldSub` (`SELECT … FOR UPDATE OF u`);
    /// 2. checks that no Apple row already carries `newSub`;
    /// 3. sets the subject column to `newSub` and the JSON copy's subject keys (`legacy.json`) with it;
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
        func run(writeEmail: Bool) async throws -> PostgresResult {
            try await pool.query(migrationQuery(from: source, newSub: newSub, newEmail: newEmail, isPrivateEmail: isPrivateEmail,
                                                transferSub: transferSub, method: method, writeEmail: writeEmail))
        }
        let rows: PostgresResult
        do {
            rows = try await run(writeEmail: true)
        } catch let error as PostgresError where error.code == .uniqueViolation {
            // Most likely the email (another row holds it); without the email, a violation left is the subject's.
            do {
                rows = try await run(writeEmail: false)
            } catch let error as PostgresError where error.code == .uniqueViolation {
                return .conflict
            }
        }
        switch try Self.migrationRow(rows, newSub: newSub) {
        case .settled(let outcome): return outcome
        case .readAgain: return try await lookupBySubject(newSub).map { .alreadyMigrated($0) } ?? .legacyRecordMissing
        }
    }

    /// ``applyMigration(transferSub:newSub:newEmail:isPrivateEmail:method:)`` for a sign-in, on a connection the
    /// calling thread borrowed (a server thread: ``PostgresPool/withConnectionBlocking(_:)``), without waiting for
    /// another transaction: the legacy row is locked `NOWAIT`, so a row someone else holds fails the statement at
    /// once (`lock_not_available`) instead of holding up the thread's other connections. Returns the record when this
    /// call rewrote it; nil for every other outcome (already migrated, a conflict, no record), which the caller
    /// settles the async way, as it does every error (an email another row holds, a locked row): nothing was written.
    /// - Throws: ``PostgresError``.
    package func migrateWithoutWaiting(transferSub: String, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                                       on connection: PostgresConnection) throws -> LegacyUser? {
        let rows = try connection.queryBlocking(migrationQuery(from: .transfer(transferSub), newSub: newSub, newEmail: newEmail,
                                                               isPrivateEmail: isPrivateEmail, transferSub: transferSub,
                                                               method: .signin, waitForLock: false))
        guard case .settled(.migrated(let user)) = try Self.migrationRow(rows, newSub: newSub) else { return nil }
        return user
    }

    /// ``migrateWithoutWaiting(transferSub:newSub:newEmail:isPrivateEmail:on:)`` queued on an event loop's pipeline
    /// as a write of its own; `completion` runs on the loop's thread once the statement committed (or failed).
    /// Returns false (and `completion` never runs) when the pipeline cannot take it now.
    package func migrateWithoutWaiting(transferSub: String, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                                       on pipeline: PostgresPipeline, _ completion: @escaping (Result<LegacyUser?, any Error>) -> Void) -> Bool {
        let query = migrationQuery(from: .transfer(transferSub), newSub: newSub, newEmail: newEmail, isPrivateEmail: isPrivateEmail,
                                   transferSub: transferSub, method: .signin, waitForLock: false)
        return pipeline.send(query, write: true) { outcome in
            completion(Result {
                guard case .settled(.migrated(let user)) = try Self.migrationRow(try outcome.get(), newSub: newSub) else { return nil }
                return user
            })
        }
    }

    /// What the migration statement's row says: the outcome, or that the record must be read again.
    private enum MigrationRow {
        case settled(MigrationOutcome)
        /// Nothing was rewritten and no conflict seen: the statement's snapshot may predate a concurrent
        /// migration that committed while this one waited for the row lock, so a fresh read of `newSub` tells
        /// `.alreadyMigrated` from `.legacyRecordMissing`.
        case readAgain
    }

    private static func migrationRow(_ rows: PostgresResult, newSub: String) throws -> MigrationRow {
        let row = rows[0]
        if let key = try row.decode(String?.self, at: 2) {
            return .settled(.migrated(LegacyUser(key: key, subject: newSub, email: try row.decode(String?.self, at: 3))))
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
        var waitForLock: Bool
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
    /// `baton bench signin` gives pgbench). With `writeEmail` false no email is written and an
    /// `email_conflict` event is recorded instead (when the policy would have written one); with `waitForLock`
    /// false a legacy row another transaction holds fails the statement (`NOWAIT`) instead of waiting for it.
    /// The text is built once per shape (``StatementTemplate``); only the values are bound here.
    package func migrationQuery(from source: OldSubjectSource, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                               transferSub: String?, method: MigrationMethod, writeEmail: Bool = true,
                               waitForLock: Bool = true) -> PostgresQuery {
        let oldSub: String?
        switch source {
        case .subject(let sub): oldSub = sub
        case .transfer: oldSub = nil
        }
        let shape = MigrationShape(bySubject: oldSub != nil, writeEmail: writeEmail, waitForLock: waitForLock)
        return templates.migration(shape).filled { slot in
            switch slot {
            case .newSub: return newSub
            case .newEmail: return newEmail
            case .isPrivateEmail: return isPrivateEmail
            case .transferSub: return transferSub
            case .oldSub: return oldSub
            case .method: return method.rawValue
            case .subject: return newSub  // not in the migration statement
            }
        }
    }

    /// The text of the migration statement for `shape`, with ``StatementSlot``s for the values.
    static func migrationStatement(_ l: BatonConfiguration.LegacyIdentifiers, _ shape: MigrationShape) -> PostgresQuery {
        let newSub = StatementSlot.newSub, newEmail = StatementSlot.newEmail, isPrivateEmail = StatementSlot.isPrivateEmail
        let transferSub = StatementSlot.transferSub, method = StatementSlot.method, writeEmail = shape.writeEmail
        let reference = l.emailTable.map { ", u.\($0.referenceColumn.quoted) AS r" } ?? ""
        let columns: PostgresQuery = """
            SELECT u.\(l.keyColumn) AS k, \(unsafeRaw: l.emailSQL) AS e, u.\(l.subjectColumn)::text AS s\(unsafeRaw: reference)
            FROM \(l.table) AS u\(unsafeRaw: l.emailJoinSQL)
            """
        var query: PostgresQuery
        if shape.bySubject {
            query = "WITH old AS (" + columns + " WHERE u.\(l.subjectColumn) = \(StatementSlot.oldSub)"
        } else {
            // The row's key, found by the first way that knows it (each an index probe; the key's arm only runs
            // when baton.transfers holds a key for this identifier); then the row itself is locked by key.
            var candidates: PostgresQuery = """
                WITH candidate AS (
                    (SELECT x.\(l.keyColumn) AS k FROM \(l.table) AS x
                     WHERE x.\(l.subjectColumn) = (SELECT old_sub FROM baton.transfers WHERE transfer_sub = \(transferSub))
                """
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
                """ + l.filterSQL(alias: "x") + " LIMIT 1) AS y) LIMIT 1)"
            query = candidates + ", old AS (" + columns
                + " WHERE u.\(l.keyColumn) = (SELECT k FROM candidate) AND u.\(l.subjectColumn) IS DISTINCT FROM \(newSub)"
        }
        query = query + l.filterSQL() + " LIMIT 1 FOR UPDATE OF u" + (shape.waitForLock ? "" : " NOWAIT") + """

            ), taken AS (
                SELECT u.\(l.keyColumn)::text AS k FROM \(l.table) AS u WHERE u.\(l.subjectColumn) = \(newSub)
            """ + l.filterSQL() + " LIMIT 1)"

        // The legacy row: subject, email (when in this table), JSON copy.
        let mayWrite: PostgresQuery = "\(writeEmail) AND \(newEmail)::text IS NOT NULL"
        var set: PostgresQuery = "\(l.subjectColumn) = \(newSub)"
        if let column = l.emailColumn, l.emailPolicy != .never {
            set = set + ", \(column) = CASE WHEN " + mayWrite
                + " AND (\(unsafeRaw: l.policySQL(stored: "u.\(column.quoted)::text"))) THEN \(newEmail) ELSE u.\(column) END"
        }
        if let json = l.json {
            set = set + ", \(json.column) = " + l.jsonSQL(json, newSub: newSub, newEmail: newEmail, write: writeEmail)
        }
        let returnedEmail = l.emailColumn.map { "u.\($0.quoted)::text" } ?? "NULL::text"
        let returnedReference = l.emailTable.map { ", u.\($0.referenceColumn.quoted) AS r" } ?? ""
        // The key may be unique only among the Apple rows (`legacy.where`): the filter is part of the write too.
        query = query + ", moved AS (UPDATE \(l.table) AS u SET " + set + " FROM old WHERE u.\(l.keyColumn) = old.k" + l.filterSQL() + """
             AND u.\(l.subjectColumn) IS DISTINCT FROM \(newSub) AND NOT EXISTS (SELECT 1 FROM taken)
                RETURNING u.\(l.keyColumn)::text AS k, \(unsafeRaw: returnedEmail) AS e\(unsafeRaw: returnedReference)
            )
            """

        // The email table, when the email lives there.
        var finalEmail = "moved.e"
        if let mail = l.emailTable, l.emailPolicy != .never {
            query = query + ", mail AS (UPDATE \(mail.table) AS m SET \(mail.column) = \(newEmail) FROM moved WHERE m.\(mail.keyColumn) = moved.r AND "
                + mayWrite + " AND m.\(mail.column) IS DISTINCT FROM \(newEmail)::text AND (\(unsafeRaw: l.policySQL(stored: "m.\(mail.column.quoted)::text")))"
                + " RETURNING m.\(mail.column)::text AS e)"
            finalEmail = "COALESCE((SELECT e FROM mail), (SELECT e FROM old))"
        } else if l.emailTable != nil {
            finalEmail = "(SELECT e FROM old)"
        }
        // The email's further copies: the user's row holding the old address gets the new one.
        query = query + l.emailCopiesSQL(from: "moved, old", user: l.copyUserInOld, oldEmail: "old.e", newEmail: newEmail, write: writeEmail, event: (
            "method, legacy_key, old_sub, new_sub, old_email, new_email, transfer_sub",
            "\(method)::text, moved.k, old.s, \(newSub)::text, old.e, \(newEmail)::text, \(transferSub)::text"))

        let rest: PostgresQuery = """
            , updated AS (
                UPDATE baton.transfers AS t SET
                    old_sub = COALESCE(t.old_sub, old.s), transfer_sub = COALESCE(t.transfer_sub, \(transferSub)::text),
                    legacy_key = moved.k, new_sub = \(newSub)::text, new_email = \(newEmail)::text,
                    is_private_email = \(isPrivateEmail), state = 'migrated', method = \(method)::text,
                    migrated_at = now(), updated_at = now(), last_error = NULL,
                    lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL
                FROM moved, old
                WHERE t.old_sub = old.s OR t.transfer_sub = \(transferSub)::text
                RETURNING 1
            ), inserted AS (
                INSERT INTO baton.transfers (old_sub, transfer_sub, legacy_key, new_sub, new_email, is_private_email,
                                             state, method, migrated_at, updated_at)
                SELECT old.s, \(transferSub)::text, moved.k, \(newSub)::text, \(newEmail)::text, \(isPrivateEmail),
                       'migrated', \(method)::text, now(), now()
                FROM moved, old WHERE NOT EXISTS (SELECT 1 FROM updated) AND (old.s IS NOT NULL OR \(transferSub)::text IS NOT NULL)
                RETURNING 1
            ), event AS (
                INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, old_email, new_email, transfer_sub)
                SELECT 'migrated', \(method)::text, moved.k, old.s, \(newSub)::text, old.e,
                       \(unsafeRaw: finalEmail), \(transferSub)::text
                FROM moved, old
            ), clash AS (
                INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, old_email, new_email, transfer_sub)
                SELECT 'email_conflict', \(method)::text, moved.k, old.s, \(newSub)::text, old.e, \(newEmail)::text,
                       \(transferSub)::text
                FROM moved, old WHERE NOT \(writeEmail)
            ), taken_event AS (
                INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, transfer_sub, detail)
                SELECT 'subject_conflict', \(method)::text, old.k::text, old.s, \(newSub)::text, \(transferSub)::text,
                       jsonb_build_object('holder_key', taken.k)
                FROM old, taken
            )
            SELECT (SELECT k::text FROM old), (SELECT k FROM taken), moved.k, \(unsafeRaw: finalEmail)
            FROM (SELECT 1) AS one LEFT JOIN moved ON true
            """
        return query + rest
    }
}
