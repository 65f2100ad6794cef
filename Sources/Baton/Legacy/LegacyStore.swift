import Foundation
import BatonPostgres
import Synchronization

/// Baton's PostgreSQL store: the application's legacy user table (named by the configuration, every
/// identifier validated and quoted) and Baton's own tables in schema `baton`.
///
/// This is where the migration rules live, so that a sign-in (`method = signin`), a bulk exchange
/// (`method = exchange`) and a re-link (`method = link`) all rewrite records the same way: call
/// ``applyMigration(oldSub:newSub:newEmail:isPrivateEmail:transferSub:method:)``.
///
/// ```swift
/// let store = LegacyStore(pool: pool, legacy: try configuration.legacy.identifiers())
/// switch try await store.applyMigration(oldSub: old, newSub: new, newEmail: email, isPrivateEmail: true,
///                                       transferSub: transferSub, method: .exchange) {
/// case .migrated(let user), .alreadyMigrated(let user): …
/// case .legacyRecordMissing: …   // nothing to rewrite (the user was deleted, or never existed)
/// case .conflict: …              // the new identifier already belongs to another record
/// }
/// ```
///
/// Every method borrows one pooled connection for one statement (no transaction is held across an
/// `await` of the caller), so callers may run it from any task. Errors are ``PostgresError``s; those whose
/// `isTransient` is true (connection lost, pool timeout, deadlock) may be retried: every method is safe
/// to retry, since nothing is half-written.
public struct LegacyStore: BatonStore {
    /// The connection pool.
    public let pool: PostgresPool
    /// The legacy table and its columns, validated.
    public let legacy: BatonConfiguration.LegacyIdentifiers
    private let nonceCount = NonceCounter()

    /// The domain of the sending team's private relay addresses: a stored email ending in it is replaced by
    /// the recipient's address on migration.
    public static let privateRelayDomain = "@privaterelay.appleid.com"

    /// Creates a store over `pool` for the legacy table `legacy`.
    public init(pool: PostgresPool, legacy: BatonConfiguration.LegacyIdentifiers) {
        self.pool = pool
        self.legacy = legacy
    }

    // MARK: - Lookups

    /// The record whose subject column equals `sub`, or nil. Uses the subject column's index.
    /// - Throws: ``PostgresError``.
    public func lookupBySubject(_ sub: String) async throws -> LegacyUser? {
        try await lookupForSignIn(subject: sub)?.user
    }

    /// The record whose subject column equals `sub`, with the state `baton.subjects` holds for it; one statement.
    /// - Throws: ``PostgresError``.
    public func lookupForSignIn(subject sub: String) async throws -> SubjectMatch? {
        let rows = try await pool.query(lookupQuery(subject: sub))
        guard let row = rows.first else { return nil }
        let state = try row.decode(String?.self, at: 2).flatMap(SubjectState.init(rawValue:))
        return SubjectMatch(user: LegacyUser(key: try row.decode(String.self, at: 0), subject: sub,
                                             email: try row.decode(String?.self, at: 1)), state: state)
    }

    /// The sending team's identifier for `transferSub`: from `baton.transfers` first, then from the legacy
    /// table's transfer column when the configuration names one; nil when neither knows it.
    /// - Throws: ``PostgresError``.
    public func oldSubject(forTransferSubject transferSub: String) async throws -> String? {
        try await pool.query(transferLookupQuery(transferSub: transferSub)).first?.decode(String.self, at: 0)
    }

    /// The statement of ``lookupForSignIn(subject:)`` (also the SQL `baton bench signin` gives pgbench).
    package func lookupQuery(subject sub: String) -> PostgresQuery {
        let l = legacy
        return """
            SELECT u.\(l.keyColumn)::text, u.\(l.emailColumn)::text, s.state
            FROM \(l.table) AS u LEFT JOIN baton.subjects AS s ON s.sub = \(sub)
            WHERE u.\(l.subjectColumn) = \(sub) LIMIT 1
            """
    }

    /// The statement of ``oldSubject(forTransferSubject:)`` (also the SQL `baton bench signin` gives pgbench).
    public func transferLookupQuery(transferSub: String) -> PostgresQuery {
        let l = legacy
        guard let column = l.transferColumn else {
            return "SELECT old_sub FROM baton.transfers WHERE transfer_sub = \(transferSub)"
        }
        return """
            SELECT old_sub FROM baton.transfers WHERE transfer_sub = \(transferSub)
            UNION ALL
            SELECT \(l.subjectColumn)::text FROM \(l.table) WHERE \(column) = \(transferSub) AND \(l.subjectColumn) IS NOT NULL
            LIMIT 1
            """
    }

    // MARK: - Migration

    /// Rewrites the legacy record of `oldSub` to `newSub`, exactly once however many callers race.
    ///
    /// One statement, hence one transaction, on one pooled connection:
    /// 1. locks the legacy row whose subject is `oldSub` (`SELECT … FOR UPDATE`);
    /// 2. checks that no record already carries `newSub`;
    /// 3. sets the subject column to `newSub`; replaces the email column by `newEmail` only when `newEmail`
    ///    is given and the stored email is a private relay address (ends with
    ///    ``privateRelayDomain``, case-insensitively): a real address the user gave is kept;
    /// 4. upserts the `baton.transfers` row of `oldSub` (its row lock is taken by the upsert, after the legacy
    ///    row's): `state = 'migrated'`, `method`, `new_sub`, `new_email`, `is_private_email`, `migrated_at`;
    ///    `transfer_sub` is kept if already set, else set to `transferSub`; lease and last error cleared;
    /// 5. appends one `baton.events` row: `kind = 'migrated'`, `method`, `legacy_key`, old and new subject,
    ///    old and new email, `transfer_sub`.
    ///
    /// Concurrent callers for the same `oldSub` wait on the legacy row's lock; once the first commits, the
    /// row no longer matches `oldSub`, so the others write nothing and return `.alreadyMigrated` with the
    /// record as the first left it. Exactly one caller returns `.migrated`, and exactly one event exists.
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
    ///   `baton.transfers` refused the rewrite). Only `.migrated` writes anything.
    /// - Throws: ``PostgresError`` for database failures; nothing is half-written.
    public func applyMigration(oldSub: String, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                               transferSub: String?, method: MigrationMethod) async throws -> MigrationOutcome {
        if oldSub == newSub {
            return try await lookupBySubject(newSub).map { .alreadyMigrated($0) } ?? .legacyRecordMissing
        }
        return try await runMigration(migrationQuery(from: .subject(oldSub), newSub: newSub, newEmail: newEmail,
                                                     isPrivateEmail: isPrivateEmail, transferSub: transferSub, method: method), newSub: newSub)
    }

    /// ``applyMigration(oldSub:newSub:newEmail:isPrivateEmail:transferSub:method:)`` with the old identifier
    /// found from `transferSub` inside the same statement (through `baton.transfers`, then the legacy table's
    /// transfer column): the sign-in path, one round trip instead of two. Same rules, locks and outcomes;
    /// an unknown `transferSub` is `.legacyRecordMissing` (or `.alreadyMigrated` when `newSub` has a record).
    /// - Throws: ``PostgresError``; nothing is half-written.
    public func applyMigration(transferSub: String, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                               method: MigrationMethod) async throws -> MigrationOutcome {
        try await runMigration(migrationQuery(from: .transfer(transferSub), newSub: newSub, newEmail: newEmail,
                                              isPrivateEmail: isPrivateEmail, transferSub: transferSub, method: method), newSub: newSub)
    }

    private func runMigration(_ query: PostgresQuery, newSub: String) async throws -> MigrationOutcome {
        let rows: PostgresResult
        do {
            rows = try await pool.query(query)
        } catch let error as PostgresError where error.code == .uniqueViolation {
            return .conflict
        }
        let row = rows[0]
        if let key = try row.decode(String?.self, at: 2) {
            return .migrated(LegacyUser(key: key, subject: newSub, email: try row.decode(String?.self, at: 3)))
        }
        let oldExists = try row.decode(String?.self, at: 0) != nil
        let newExists = try row.decode(String?.self, at: 1) != nil
        if oldExists && newExists { return .conflict }
        // The statement's snapshot may predate a concurrent migration that committed while this one waited
        // for the row lock: read again with a fresh snapshot.
        if let user = try await lookupBySubject(newSub) { return .alreadyMigrated(user) }
        return .legacyRecordMissing
    }

    /// Where the migration statement finds the old identifier.
    public enum OldSubjectSource: Sendable {
        /// Given.
        case subject(String)
        /// Mapped from this transfer identifier (`baton.transfers`, then the legacy transfer column).
        case transfer(String)
    }

    /// The migration statement of ``applyMigration(oldSub:newSub:newEmail:isPrivateEmail:transferSub:method:)``
    /// and ``applyMigration(transferSub:newSub:newEmail:isPrivateEmail:method:)`` (also the SQL
    /// `baton bench signin` gives pgbench).
    package func migrationQuery(from source: OldSubjectSource, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                               transferSub: String?, method: MigrationMethod) -> PostgresQuery {
        let l = legacy
        let relay = "%" + LegacyStore.privateRelayDomain
        let query: PostgresQuery
        switch source {
        case .subject(let oldSub):
            query = """
                WITH old AS (
                    SELECT \(l.keyColumn) AS k, \(l.emailColumn)::text AS e, \(l.subjectColumn)::text AS s FROM \(l.table)
                    WHERE \(l.subjectColumn) = \(oldSub) FOR UPDATE
                ),
                """
        case .transfer(let transferSub):
            if let column = l.transferColumn {
                query = """
                    WITH old AS (
                        SELECT \(l.keyColumn) AS k, \(l.emailColumn)::text AS e, \(l.subjectColumn)::text AS s FROM \(l.table)
                        WHERE \(l.subjectColumn) = (
                            SELECT old_sub FROM baton.transfers WHERE transfer_sub = \(transferSub)
                            UNION ALL
                            SELECT \(l.subjectColumn)::text FROM \(l.table) WHERE \(column) = \(transferSub) AND \(l.subjectColumn) IS NOT NULL
                            LIMIT 1)
                        FOR UPDATE
                    ),
                    """
            } else {
                query = """
                    WITH old AS (
                        SELECT \(l.keyColumn) AS k, \(l.emailColumn)::text AS e, \(l.subjectColumn)::text AS s FROM \(l.table)
                        WHERE \(l.subjectColumn) = (SELECT old_sub FROM baton.transfers WHERE transfer_sub = \(transferSub))
                        FOR UPDATE
                    ),
                    """
            }
        }
        let rest: PostgresQuery = """
             taken AS (
                SELECT \(l.keyColumn)::text AS k FROM \(l.table) WHERE \(l.subjectColumn) = \(newSub) LIMIT 1
            ), moved AS (
                UPDATE \(l.table) AS u SET \(l.subjectColumn) = \(newSub),
                    \(l.emailColumn) = CASE WHEN \(newEmail)::text IS NOT NULL AND lower(u.\(l.emailColumn)::text) LIKE \(relay)
                                            THEN \(newEmail) ELSE u.\(l.emailColumn) END
                FROM old WHERE u.\(l.keyColumn) = old.k AND NOT EXISTS (SELECT 1 FROM taken)
                RETURNING u.\(l.keyColumn)::text AS k, u.\(l.emailColumn)::text AS e
            ), transfer AS (
                INSERT INTO baton.transfers AS t (old_sub, transfer_sub, new_sub, new_email, is_private_email,
                                                  state, method, migrated_at, updated_at)
                SELECT old.s, \(transferSub)::text, \(newSub)::text, \(newEmail)::text, \(isPrivateEmail),
                       'migrated', \(method.rawValue)::text, now(), now() FROM moved, old
                ON CONFLICT (old_sub) DO UPDATE SET
                    transfer_sub = COALESCE(t.transfer_sub, EXCLUDED.transfer_sub), new_sub = EXCLUDED.new_sub,
                    new_email = EXCLUDED.new_email, is_private_email = EXCLUDED.is_private_email, state = 'migrated',
                    method = EXCLUDED.method, migrated_at = now(), updated_at = now(), last_error = NULL,
                    lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL
                RETURNING 1
            ), event AS (
                INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, old_email, new_email, transfer_sub)
                SELECT 'migrated', \(method.rawValue)::text, moved.k, old.s, \(newSub)::text, old.e, moved.e,
                       \(transferSub)::text
                FROM moved, old
            )
            SELECT (SELECT k::text FROM old), (SELECT k FROM taken), moved.k, moved.e
            FROM (SELECT 1) AS one LEFT JOIN moved ON true
            """
        return LegacyStore.concatenate(query, rest)
    }

    /// `first` followed by `second`, whose `$n` placeholders are renumbered after `first`'s bindings.
    /// (Baton's statements contain no `$` other than placeholders.)
    static func concatenate(_ first: PostgresQuery, _ second: PostgresQuery) -> PostgresQuery {
        let offset = first.bindings.count
        var sql = first.sql
        var characters = second.sql.makeIterator()
        var pending = characters.next()
        while let character = pending {
            pending = characters.next()
            guard character == "$", let next = pending, next.isASCII, next.isNumber else {
                sql.append(character)
                continue
            }
            var digits = ""
            while let digit = pending, digit.isASCII, digit.isNumber {
                digits.append(digit)
                pending = characters.next()
            }
            sql += "$\(Int(digits)! + offset)"
        }
        return PostgresQuery(unsafeSQL: sql, first.bindings + second.bindings)
    }

    /// Whether `legacySub` may be re-linked to `currentSub` (`POST /v1/link`): it is a `baton.transfers.old_sub`
    /// not yet migrated (or migrated to `currentSub` already: a repeated link), or a legacy row's subject that
    /// is neither in `baton.transfers` nor the new subject of any migration. A current-team identifier that a
    /// migration wrote is never accepted as the sending team's. One statement, on indexed columns.
    /// - Throws: ``PostgresError``.
    public func isLinkable(legacySubject legacySub: String, currentSubject currentSub: String) async throws -> Bool {
        let l = legacy
        let rows = try await pool.query("""
            SELECT EXISTS (SELECT 1 FROM baton.transfers WHERE old_sub = \(legacySub) AND (state <> 'migrated' OR new_sub = \(currentSub)))
                OR (EXISTS (SELECT 1 FROM \(l.table) WHERE \(l.subjectColumn) = \(legacySub))
                    AND NOT EXISTS (SELECT 1 FROM baton.transfers WHERE old_sub = \(legacySub))
                    AND NOT EXISTS (SELECT 1 FROM baton.events WHERE kind = 'migrated' AND new_sub = \(legacySub)))
            """)
        return try rows[0].decode(Bool.self, at: 0)
    }

    // MARK: - Current users

    /// Replaces the email of `user` (matched by key and subject) with `email` and appends an `email_changed`
    /// event; returns the updated record, or nil when the record no longer matches.
    /// - Throws: ``PostgresError``.
    public func updateEmail(of user: LegacyUser, to email: String) async throws -> LegacyUser? {
        let l = legacy
        let rows = try await pool.query("""
            WITH old AS (
                SELECT \(l.keyColumn) AS k, \(l.emailColumn)::text AS e FROM \(l.table)
                WHERE \(l.subjectColumn) = \(user.subject) AND \(l.keyColumn)::text = \(user.key) FOR UPDATE
            ), changed AS (
                UPDATE \(l.table) AS u SET \(l.emailColumn) = \(email) FROM old
                WHERE u.\(l.keyColumn) = old.k AND old.e IS DISTINCT FROM \(email)::text
                RETURNING u.\(l.keyColumn)::text AS k, u.\(l.emailColumn)::text AS e
            ), event AS (
                INSERT INTO baton.events (kind, legacy_key, old_sub, new_sub, old_email, new_email)
                SELECT 'email_changed', changed.k, \(user.subject)::text, \(user.subject)::text, old.e, changed.e
                FROM changed, old
            )
            SELECT old.k::text, COALESCE(changed.e, old.e) FROM old LEFT JOIN changed ON true
            """)
        guard let row = rows.first else { return nil }
        return LegacyUser(key: try row.decode(String.self, at: 0), subject: user.subject, email: try row.decode(String?.self, at: 1))
    }

    /// Marks `sub` authorized again in `baton.subjects` with an `authorized` event, when it was revoked; the
    /// sign-in's time becomes the subject's latest `event_time`, so a revocation older than it is ignored.
    /// - Throws: ``PostgresError``.
    public func restoreAuthorization(subject sub: String) async throws {
        try await pool.execute("""
            WITH changed AS (
                UPDATE baton.subjects SET state = 'authorized', updated_at = now(), event_time = GREATEST(event_time, now())
                WHERE sub = \(sub) AND state = 'revoked' RETURNING sub
            )
            INSERT INTO baton.events (kind, old_sub, detail)
            SELECT 'authorized', sub, '{"reason":"signin"}'::jsonb FROM changed
            """)
    }

    /// Records `nonce` as used by `sub` until `expiresAt`; false when `sub` already used it and it has not
    /// expired. Every 1,000th call also deletes expired nonces.
    /// - Throws: ``PostgresError``.
    public func consumeNonce(_ nonce: String, subject sub: String, expiresAt: Date) async throws -> Bool {
        if nonceCount.next() % 1_000 == 0 {
            try await pool.execute("DELETE FROM baton.nonces WHERE expires_at < now()")
        }
        let rows = try await pool.query("""
            INSERT INTO baton.nonces AS n (sub, nonce, expires_at) VALUES (\(sub), \(nonce), \(expiresAt))
            ON CONFLICT (sub, nonce) DO UPDATE SET expires_at = EXCLUDED.expires_at WHERE n.expires_at < now()
            RETURNING 1
            """)
        return rows.count == 1
    }

    /// Deletes the nonce `sub` consumed, so a sign-in that failed before writing can be retried with it.
    /// - Throws: ``PostgresError``.
    public func releaseNonce(_ nonce: String, subject sub: String) async throws {
        try await pool.execute("DELETE FROM baton.nonces WHERE sub = \(sub) AND nonce = \(nonce)")
    }

    // MARK: - Credential state and notifications

    /// Applies one server-to-server notification: `consent-revoked` → `revoked`, `account-delete(d)` →
    /// `deleted`, `email-disabled`/`email-enabled` → `email_enabled`. A duplicate (nothing would change)
    /// writes nothing and returns false; otherwise `baton.subjects` is upserted and a
    /// `notification` event appended, and it returns true. An event whose `eventTime` is not later than the
    /// subject's latest applied one (a replay, or a late delivery) writes nothing and returns false.
    /// - Throws: ``PostgresError``.
    public func applyNotification(_ kind: NotificationKind, subject sub: String, eventTime: Date) async throws -> Bool {
        let state: String?
        let emailEnabled: Bool?
        switch kind {
        case .consentRevoked: state = SubjectState.revoked.rawValue; emailEnabled = nil
        case .accountDelete, .accountDeleted: state = SubjectState.deleted.rawValue; emailEnabled = nil
        case .emailDisabled: state = nil; emailEnabled = false
        case .emailEnabled: state = nil; emailEnabled = true
        }
        let rows = try await pool.query("""
            WITH up AS (
                INSERT INTO baton.subjects AS s (sub, state, email_enabled, event_time)
                VALUES (\(sub), COALESCE(\(state)::text, 'authorized'), \(emailEnabled), \(eventTime))
                ON CONFLICT (sub) DO UPDATE SET
                    state = COALESCE(\(state)::text, s.state), email_enabled = COALESCE(\(emailEnabled), s.email_enabled),
                    updated_at = now(), event_time = EXCLUDED.event_time
                WHERE (s.event_time IS NULL OR s.event_time < EXCLUDED.event_time)
                  AND (s.state, s.email_enabled) IS DISTINCT FROM (COALESCE(\(state)::text, s.state), COALESCE(\(emailEnabled), s.email_enabled))
                RETURNING sub, state
            )
            INSERT INTO baton.events (kind, old_sub, detail)
            SELECT 'notification', sub, jsonb_build_object('type', \(kind.rawValue)::text, 'state', state) FROM up
            RETURNING 1
            """)
        return rows.count == 1
    }

    /// Checks that the database answers and is writable (``PostgresPool/checkWritable()``).
    /// - Throws: ``PostgresError`` when the database does not answer, or `readOnly`.
    public func ping() async throws {
        try await pool.checkWritable()
    }
}

/// Counts nonce consumptions so expired nonces are purged now and then.
private final class NonceCounter: Sendable {
    private let value = Mutex(0)
    func next() -> Int { value.withLock { $0 += 1; return $0 } }
}

// MARK: - Start-up checks

extension LegacyStore {
    /// What ``inspectLegacyTable()`` found about the configured legacy table.
    public struct LegacyTableReport: Sendable, Equatable {
        /// Whether the table exists.
        public var tableExists: Bool
        /// Configured columns the table lacks (as configured, unquoted).
        public var missingColumns: [String]
        /// Whether a unique index or constraint covers exactly the subject column.
        public var subjectIsUnique: Bool
        /// Whether Baton's schema has been applied (`baton.transfers` exists).
        public var batonSchemaApplied: Bool

        /// The SQL an operator runs to add the unique constraint the subject column needs.
        public var uniqueConstraintAdvice: String
    }

    /// Inspects the configured legacy table in the live database (catalog queries only).
    /// - Throws: ``PostgresError``.
    public func inspectLegacyTable() async throws -> LegacyTableReport {
        let l = legacy
        let columns = [l.keyColumn, l.subjectColumn, l.emailColumn] + (l.transferColumn.map { [$0] } ?? [])
        let rows = try await pool.query("""
            SELECT to_regclass(\(l.table.quoted)) IS NOT NULL,
                   to_regclass('baton.transfers') IS NOT NULL,
                   ARRAY(SELECT attname::text FROM pg_attribute
                         WHERE attrelid = to_regclass(\(l.table.quoted)) AND attnum > 0 AND NOT attisdropped)::text,
                   EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                           WHERE i.indrelid = to_regclass(\(l.table.quoted)) AND i.indisunique AND i.indnkeyatts = 1
                             AND i.indpred IS NULL AND i.indexprs IS NULL AND a.attname = \(l.subjectColumn.name))
            """)
        let row = rows[0]
        let present = Set(try row.decode(String.self, at: 2).trimmingCharacters(in: CharacterSet(charactersIn: "{}"))
            .split(separator: ",").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) })
        let tableExists = try row.decode(Bool.self, at: 0)
        let constraintName = "\(l.table.name)_\(l.subjectColumn.name)_key"
        return LegacyTableReport(
            tableExists: tableExists,
            missingColumns: tableExists ? columns.map(\.name).filter { !present.contains($0) } : columns.map(\.name),
            subjectIsUnique: try row.decode(Bool.self, at: 3),
            batonSchemaApplied: try row.decode(Bool.self, at: 1),
            uniqueConstraintAdvice: "ALTER TABLE \(l.table.quoted) ADD CONSTRAINT \"\(constraintName.prefix(63))\" UNIQUE (\(l.subjectColumn.quoted));"
        )
    }

    /// Checks at start-up that the legacy table and its columns exist, that the subject column is unique, and
    /// that Baton's schema is applied.
    /// - Throws: ``BatonError`` `invalid_legacy_table` naming what is missing (and how to add a unique
    ///   constraint); ``PostgresError`` when the database cannot be reached.
    public func validateLegacyTable() async throws {
        let report = try await inspectLegacyTable()
        guard report.tableExists else {
            throw BatonError(.invalidLegacyTable, "legacy.table \(legacy.table) does not exist in the database")
        }
        guard report.missingColumns.isEmpty else {
            throw BatonError(.invalidLegacyTable, "legacy.table \(legacy.table) has no column \(report.missingColumns.joined(separator: ", "))")
        }
        guard report.subjectIsUnique else {
            throw BatonError(.invalidLegacyTable, "legacy.subject_column \(legacy.subjectColumn) has no unique constraint; add one: \(report.uniqueConstraintAdvice)")
        }
        guard report.batonSchemaApplied else {
            throw BatonError(.invalidLegacyTable, "Baton's schema is not applied: run 'baton db migrate'")
        }
    }
}
