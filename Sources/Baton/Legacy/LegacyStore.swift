import Foundation
import BatonPostgres
import Synchronization

/// Baton's PostgreSQL store: the application's legacy user table (named by the configuration, every
/// identifier validated and quoted) and Baton's own tables in schema `baton`.
///
/// The table may be a users table with an `apple_sub` column or a multi-provider identity table: every
/// statement reads and writes only the Apple rows (`legacy.where`), finds the email where it lives (a column,
/// or the users table the row references), rewrites the JSON copy's keys with the subject, and writes emails
/// (and their further copies, `legacy.email_copies`) only as `legacy.email_policy` allows. The statements are built from the fragments in `Legacy/LegacySQL.swift`;
/// the migration is in `Legacy/LegacyMigration.swift`, the start-up inspection in `Legacy/LegacyInspection.swift`.
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
    /// The sign-in path's statements, built once (``StatementTemplate``).
    let templates: Templates

    /// The domain of the sending team's private relay addresses: a stored email ending in it is replaced by
    /// the recipient's address on migration.
    public static let privateRelayDomain = "@privaterelay.appleid.com"

    /// Creates a store over `pool` for the legacy table `legacy`.
    public init(pool: PostgresPool, legacy: BatonConfiguration.LegacyIdentifiers) {
        self.pool = pool
        self.legacy = legacy
        self.templates = Templates(legacy)
    }

    /// The lookup and every variant of the migration statement, for one configuration.
    struct Templates: Sendable {
        let lookup: StatementTemplate
        private let migrations: [MigrationShape: StatementTemplate]

        init(_ legacy: BatonConfiguration.LegacyIdentifiers) {
            lookup = StatementTemplate(LegacyStore.lookupStatement(legacy))
            var migrations: [MigrationShape: StatementTemplate] = [:]
            for bySubject in [true, false] {
                for (writeEmail, writeJSON) in [(true, true), (false, true), (false, false)] {
                    for waitForLock in [true, false] {
                        let shape = MigrationShape(bySubject: bySubject, writeEmail: writeEmail, writeJSON: writeJSON, waitForLock: waitForLock)
                        migrations[shape] = StatementTemplate(LegacyStore.migrationStatement(legacy, shape))
                    }
                }
            }
            self.migrations = migrations
        }

        func migration(_ shape: MigrationShape) -> StatementTemplate {
            migrations[shape]!  // every shape is built above
        }
    }

    // MARK: - Lookups

    /// The record whose subject column equals `sub`, or nil. Uses the subject column's index.
    /// - Throws: ``PostgresError``.
    public func lookupBySubject(_ sub: String) async throws -> LegacyUser? {
        try await lookupForSignIn(subject: sub, transferSub: nil)?.user
    }

    /// The record whose subject column equals `sub`, with the state `baton.subjects` holds for it and, given the
    /// token's `transferSub`, whether another record still waits for that transfer identifier (a duplicate); one
    /// statement.
    /// - Throws: ``PostgresError``.
    public func lookupForSignIn(subject sub: String, transferSub: String?) async throws -> SubjectMatch? {
        try Self.subjectMatch(try await pool.query(lookupQuery(subject: sub, transferSub: transferSub)))
    }

    /// The record ``lookupQuery(subject:transferSub:)`` found, with the subject as the row holds it (the sign-in decision checks
    /// that it is the one asked for).
    static func subjectMatch(_ rows: PostgresResult) throws -> SubjectMatch? {
        guard let row = rows.first else { return nil }
        let state = try row.decode(String?.self, at: 2).flatMap(SubjectState.init(rawValue:))
        return SubjectMatch(user: LegacyUser(key: try row.decode(String.self, at: 0), subject: try row.decode(String.self, at: 3),
                                             email: try row.decode(String?.self, at: 1), accountKey: try row.decode(String?.self, at: 5)), state: state,
                            legacyWaiting: try row.decode(Bool.self, at: 4))
    }

    /// The sending team's identifier for `transferSub`: from `baton.transfers` first, then from the legacy
    /// table's transfer column when the configuration names one; nil when neither knows it.
    /// - Throws: ``PostgresError``.
    public func oldSubject(forTransferSubject transferSub: String) async throws -> String? {
        try await pool.query(transferLookupQuery(transferSub: transferSub)).first?.decode(String.self, at: 0)
    }

    /// The statement of ``lookupForSignIn(subject:)`` (also the SQL `baton-bench signin` gives pgbench): the
    /// Apple row carrying `sub`, its email (joined from the email table when it lives there) and its state.
    package func lookupQuery(subject sub: String, transferSub: String?) -> PostgresQuery {
        templates.lookup.filled { slot in slot == .transferSub ? transferSub : sub }
    }

    /// The text of ``lookupQuery(subject:transferSub:)``, with slots for the subject and the transfer identifier.
    /// The last column tells a record made under the new identifier while the user's legacy record still waits for
    /// the transfer identifier (a pending `baton.transfers` row, or a legacy row holding it in the transfer
    /// column): an index probe each, and nothing when the token carries no transfer identifier.
    static func lookupStatement(_ l: BatonConfiguration.LegacyIdentifiers) -> PostgresQuery {
        let sub = StatementSlot.subject, transferSub = StatementSlot.transferSub
        var waiting: PostgresQuery = """
            (\(transferSub)::text IS NOT NULL AND (EXISTS (SELECT 1 FROM baton.transfers AS t
                WHERE t.transfer_sub = \(transferSub)::text AND t.state <> 'migrated' AND t.old_sub IS NOT NULL)
            """
        if let column = l.transferColumn {
            waiting = waiting + " OR EXISTS (SELECT 1 FROM \(l.table) AS x WHERE x.\(column) = \(transferSub)::text AND \(unsafeRaw: l.subjectValueSQL(alias: "x")) IS DISTINCT FROM " + l.storedSubjectSQL(expression: "\(sub)::text")
                + l.filterSQL(alias: "x") + ")"
        }
        return "SELECT u.\(l.keyColumn)::text, \(unsafeRaw: l.emailSQL), s.state, \(unsafeRaw: l.subjectSQL()), " + waiting + """
            )), \(unsafeRaw: l.accountKeySQL)
            FROM \(l.table) AS u\(unsafeRaw: l.emailJoinSQL) LEFT JOIN baton.subjects AS s ON s.sub = \(sub)
            WHERE
            """ + " " + l.subjectEqualsSQL(l.storedSubjectSQL(sub)) + l.filterSQL() + " LIMIT 1"
    }

    /// The statement of ``oldSubject(forTransferSubject:)`` (also the SQL `baton-bench signin` gives pgbench).
    public func transferLookupQuery(transferSub: String) -> PostgresQuery {
        let l = legacy
        guard let column = l.transferColumn else {
            return "SELECT old_sub FROM baton.transfers WHERE transfer_sub = \(transferSub) AND old_sub IS NOT NULL"
        }
        return """
            SELECT old_sub FROM baton.transfers WHERE transfer_sub = \(transferSub) AND old_sub IS NOT NULL
            UNION ALL
            SELECT \(unsafeRaw: l.subjectSQL()) FROM \(l.table) AS u WHERE u.\(column) = \(transferSub) AND \(unsafeRaw: l.subjectValueSQL()) IS NOT NULL
            """ + l.filterSQL() + " LIMIT 1"
    }

    /// `first` followed by `second`, whose `$n` placeholders are renumbered after `first`'s bindings.
    /// (Baton's statements contain no `$` other than placeholders.) Works on UTF-8 bytes, copying runs between
    /// placeholders at once: the migration statement is some fifteen of these per sign-in, and walking it
    /// `Character` by `Character` cost more CPU than PostgreSQL spent running it.
    static func concatenate(_ first: PostgresQuery, _ second: PostgresQuery) -> PostgresQuery {
        let offset = first.bindings.count
        guard offset > 0, !second.bindings.isEmpty else {
            return PostgresQuery(unsafeSQL: first.sql + second.sql, first.bindings + second.bindings)
        }
        var output = Array(first.sql.utf8)
        let source = Array(second.sql.utf8)
        output.reserveCapacity(output.count + source.count + 2 * second.bindings.count)
        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
        var runStart = 0, index = 0
        while index < source.count {
            guard source[index] == UInt8(ascii: "$"), index + 1 < source.count, isDigit(source[index + 1]) else {
                index += 1
                continue
            }
            output.append(contentsOf: source[runStart...index])  // up to and including the `$`
            var number = 0
            index += 1
            while index < source.count, isDigit(source[index]) {
                number = number * 10 + Int(source[index] - UInt8(ascii: "0"))
                index += 1
            }
            output.append(contentsOf: String(number + offset).utf8)
            runStart = index
        }
        output.append(contentsOf: source[runStart...])
        return PostgresQuery(unsafeSQL: String(decoding: output, as: UTF8.self), first.bindings + second.bindings)
    }

    /// The sending-team identifier that may be re-linked to `currentSub` (`POST /v1/link`), as the database holds
    /// it, when asked for `legacySub`; nil when it may not. It is a `baton.transfers.old_sub` not yet migrated (or
    /// migrated to `currentSub` already: a repeated link), or a legacy row's subject that is neither in
    /// `baton.transfers` nor the new subject of any migration. A current-team identifier that a migration wrote is
    /// never accepted as the sending team's. One statement, on indexed columns.
    /// - Throws: ``PostgresError``.
    public func linkableSubject(legacySubject legacySub: String, currentSubject currentSub: String) async throws -> String? {
        let l = legacy
        // The row must be one of the Apple rows (`legacy.where`): another provider's subject is never linkable.
        let onRecord: PostgresQuery = "SELECT \(unsafeRaw: l.subjectSQL()) FROM \(l.table) AS u WHERE " + l.subjectEqualsSQL(l.storedSubjectSQL(legacySub)) + l.filterSQL()
        let rows = try await pool.query("""
            (SELECT old_sub FROM baton.transfers WHERE old_sub = \(legacySub) AND (state <> 'migrated' OR new_sub = \(currentSub)))
            UNION ALL (
            """ + onRecord + """
                AND NOT EXISTS (SELECT 1 FROM baton.transfers WHERE old_sub = \(legacySub))
                AND NOT EXISTS (SELECT 1 FROM baton.events WHERE kind = 'migrated' AND new_sub = \(legacySub)))
            LIMIT 1
            """)
        return try rows.first?.decode(String.self, at: 0)
    }

    // MARK: - Current users

    /// How emails are replaced (`legacy.email_policy`; `never` when no email location is configured).
    public var emailPolicy: EmailPolicy { legacy.emailPolicy }

    /// What a sign-in does with a duplicate (`legacy.on_duplicate`).
    public var duplicatePolicy: DuplicatePolicy { legacy.duplicatePolicy }

    /// Replaces the email of `user` (matched by key and subject) with `email` when ``emailPolicy`` allows it
    /// for the stored email, and appends an `email_changed` event; the JSON copy's email keys and the email copies
    /// (`legacy.email_copies`: the user's row holding the old address) follow. When
    /// another row already holds `email` under a unique constraint, the email is left as it was and an
    /// `email_conflict` event records both values. Returns the record as stored (its key and subject as the row
    /// holds them, for the caller to check against `user`), or nil when it no longer matches.
    /// - Throws: ``PostgresError``.
    public func updateEmail(of user: LegacyUser, to email: String) async throws -> LegacyUser? {
        guard legacy.hasEmail, legacy.emailPolicy != .never else { return user }
        let rows: PostgresResult
        do {
            rows = try await pool.query(updateEmailQuery(user, email, write: true))
        } catch let error as PostgresError where error.isRefusedValue {
            // Another row holds the email, or the table refuses it (too long, a CHECK): it is kept as it was.
            rows = try await pool.query(updateEmailQuery(user, email, write: false))
        }
        guard let row = rows.first else { return nil }
        return LegacyUser(key: try row.decode(String.self, at: 0), subject: try row.decode(String.self, at: 2), email: try row.decode(String?.self, at: 1),
                          accountKey: try row.decode(String?.self, at: 3))
    }

    private func updateEmailQuery(_ user: LegacyUser, _ email: String, write: Bool) -> PostgresQuery {
        let l = legacy
        let reference = l.emailTable.map { ", u.\($0.referenceColumn.quoted) AS r" } ?? ""
        var query: PostgresQuery = """
            WITH old AS (
                SELECT u.\(l.keyColumn) AS k, \(unsafeRaw: l.emailSQL) AS e, \(unsafeRaw: l.subjectSQL()) AS s\(unsafeRaw: reference)
                FROM \(l.table) AS u\(unsafeRaw: l.emailJoinSQL)
                WHERE u.\(l.keyColumn)::text = \(user.key) AND
            """ + " " + l.subjectEqualsSQL(l.storedSubjectSQL(user.subject))
        query = query + l.filterSQL() + " FOR UPDATE OF u)"
        let wanted: PostgresQuery = " \(write) AND old.e IS DISTINCT FROM \(email)::text AND (\(unsafeRaw: l.policySQL(stored: "old.e")))"
        if let column = l.emailColumn {
            var set: PostgresQuery = "\(column) = " + BatonConfiguration.LegacyIdentifiers.assignedSQL(email, else: "u.\(column.quoted)", write: write)
                + l.derivedSQL(l.emailDerived, alias: "u", email: "\(email)", when: "\(unsafeRaw: write ? "true" : "false")")
            if let json = l.json, !json.emailKeys.isEmpty {
                set = set + ", \(json.column) = " + l.jsonSQL(json, newSub: nil as String?, newEmail: email, write: true)
            }
            // The key may be unique only among the Apple rows: the filter is part of every write.
            query = query + ", changed AS (UPDATE \(l.table) AS u SET " + set + " FROM old WHERE u.\(l.keyColumn) = old.k" + l.filterSQL()
                + " AND" + wanted + " RETURNING u.\(l.keyColumn)::text AS k, u.\(column)::text AS e)"
        } else if let mail = l.emailTable {
            var set: PostgresQuery = "\(mail.column) = " + BatonConfiguration.LegacyIdentifiers.assignedSQL(email, else: "m.\(mail.column.quoted)", write: write)
                + l.derivedSQL(mail.derived, alias: "m", email: "\(email)", when: "\(unsafeRaw: write ? "true" : "false")")
            if let json = l.json, let column = json.emailTableColumn, !json.emailKeys.isEmpty {
                set = set + ", \(column) = " + l.jsonSQL(json, in: "m.\(column.quoted)", held: ("NULL", "old.e"), newSub: nil as String?, newEmail: email, write: true)
            }
            query = query + ", changed AS (UPDATE \(mail.table) AS m SET " + set + " FROM old WHERE m.\(mail.keyColumn) = old.r AND "
                + wanted + " RETURNING old.k::text AS k, m.\(mail.column)::text AS e)"
            if let json = l.json, !json.emailKeys.isEmpty {
                query = query + ", json_copy AS (UPDATE \(l.table) AS u SET \(json.column) = "
                    + l.jsonSQL(json, newSub: nil as String?, newEmail: email, write: true)
                    + " FROM old WHERE u.\(l.keyColumn) = old.k AND EXISTS (SELECT 1 FROM changed)" + l.filterSQL() + ")"
            }
        }
        query = query + l.emailCopiesSQL(from: "old", user: l.copyUserInOld, oldEmail: "old.e", newEmail: email, write: write, event: (
            "legacy_key, old_sub, new_sub, old_email, new_email", "old.k::text, \(user.subject)::text, \(user.subject)::text, old.e, \(email)::text"))
        return query + """
            , event AS (
                INSERT INTO baton.events (kind, legacy_key, old_sub, new_sub, old_email, new_email)
                SELECT 'email_changed', changed.k, \(user.subject)::text, \(user.subject)::text, old.e, changed.e
                FROM changed, old
            ), clash AS (
                INSERT INTO baton.events (kind, legacy_key, old_sub, new_sub, old_email, new_email)
                SELECT 'email_conflict', old.k::text, \(user.subject)::text, \(user.subject)::text, old.e, \(email)::text
                FROM old WHERE NOT \(write)
            )
            SELECT old.k::text, COALESCE(changed.e, old.e), old.s, \(unsafeRaw: l.emailTable == nil ? "NULL::text" : "old.r::text")
            FROM old LEFT JOIN changed ON true
            """
    }

    /// Appends an `unmatched` event, once per subject and transfer identifier (`baton.signals_once`): a sign-in
    /// whose `transfer_sub` leads to no record (the report counts them); a replay of the same token appends nothing.
    /// - Throws: ``PostgresError``.
    public func recordUnmatched(transferSub: String, sub: String) async throws {
        try await pool.execute(unmatchedQuery(transferSub: transferSub, sub: sub))
    }

    /// The statement of ``recordUnmatched(transferSub:sub:)``.
    func unmatchedQuery(transferSub: String, sub: String) -> PostgresQuery {
        """
        WITH first AS (
            INSERT INTO baton.signals_once (kind, sub, transfer_sub) VALUES ('unmatched', \(sub), \(transferSub))
            ON CONFLICT DO NOTHING RETURNING 1
        )
        INSERT INTO baton.events (kind, new_sub, transfer_sub) SELECT 'unmatched', \(sub), \(transferSub) FROM first
        """
    }

    /// Marks `sub` authorized again in `baton.subjects` with an `authorized` event, when it was revoked; the
    /// sign-in's time becomes the subject's latest `event_time`, so a revocation older than it is ignored.
    /// - Throws: ``PostgresError``.
    public func restoreAuthorization(subject sub: String) async throws {
        try await pool.execute(restoreAuthorizationQuery(subject: sub))
    }

    /// The statement of ``restoreAuthorization(subject:)``.
    func restoreAuthorizationQuery(subject sub: String) -> PostgresQuery {
        """
            WITH changed AS (
                UPDATE baton.subjects SET state = 'authorized', updated_at = now(), event_time = GREATEST(event_time, now())
                WHERE sub = \(sub) AND state = 'revoked' RETURNING sub
            )
            INSERT INTO baton.events (kind, old_sub, detail)
            SELECT 'authorized', sub, '{"reason":"signin"}'::jsonb FROM changed
            """
    }

    /// Records `use.nonce` as used by `use.subject` until `use.expiresAt`; false when another attempt of that subject
    /// already used it and it has not expired by `now` (the same attempt repeating the statement gets true again).
    /// Expiry is set and compared on the application's clock (`now` is bound, not PostgreSQL's `now()`), so a
    /// database clock ahead of it cannot reopen a replay window. Every 1,000th call also deletes expired nonces.
    /// - Throws: ``PostgresError``.
    public func consumeNonce(_ use: NonceUse, now: Date) async throws -> Bool {
        try Self.nonceConsumed(try await pool.query(nonceInsertQuery(use, now: now)), use)
    }

    /// Every how many nonces recorded by one store the statement also deletes expired ones (at most twice as many).
    static let noncePurgeInterval = 1_000

    /// The statement of ``consumeNonce(_:now:)`` (also the SQL `baton-bench signin --nonce` gives pgbench): records
    /// the nonce unless its subject holds it unexpired; the row back when it was recorded.
    package func nonceInsertQuery(_ use: NonceUse, now: Date) -> PostgresQuery {
        var query: PostgresQuery = ""
        if nonceCount.next() % Self.noncePurgeInterval == 0 {
            // Bounded, so it never grows with a backlog on an event loop's pipeline: the oldest expired rows by their
            // index, twice as many as were recorded since the last purge, so a backlog shrinks at every purge.
            query = """
                WITH purge AS (
                    DELETE FROM baton.nonces WHERE ctid = ANY (ARRAY(
                        SELECT ctid FROM baton.nonces WHERE expires_at < \(now) AND NOT (sub = \(use.subject) AND nonce = \(use.nonce))
                        ORDER BY expires_at LIMIT \(2 * Self.noncePurgeInterval) FOR UPDATE SKIP LOCKED))
                )

                """
        }
        return query + """
            INSERT INTO baton.nonces AS n (sub, nonce, expires_at, attempt)
            VALUES (\(use.subject), \(use.nonce), \(use.expiresAt), \(use.attempt))
            ON CONFLICT (sub, nonce) DO UPDATE SET expires_at = EXCLUDED.expires_at, attempt = EXCLUDED.attempt
            WHERE n.expires_at < \(now) OR n.attempt = EXCLUDED.attempt
            RETURNING n.sub, n.nonce
            """
    }

    /// Whether ``nonceInsertQuery(_:now:)`` recorded `use`; a row for another nonce or subject is an inconsistent answer.
    static func nonceConsumed(_ rows: PostgresResult, _ use: NonceUse) throws -> Bool {
        guard let row = rows.first else { return false }
        guard try row.decode(String.self, at: 0) == use.subject, try row.decode(String.self, at: 1) == use.nonce else {
            throw BatonError(.inconsistentDatabaseAnswer, "a database answer did not match its question")
        }
        return true
    }

    /// Forgets a nonce ``consumeNonce(_:now:)`` recorded for `use.attempt` (never another attempt's use of it), so a
    /// sign-in that failed before writing can be retried with it.
    /// - Throws: ``PostgresError``.
    public func releaseNonce(_ use: NonceUse) async throws {
        try await pool.execute(releaseNonceQuery(use))
    }

    /// The statement of ``releaseNonce(_:)``.
    func releaseNonceQuery(_ use: NonceUse) -> PostgresQuery {
        "DELETE FROM baton.nonces WHERE sub = \(use.subject) AND nonce = \(use.nonce) AND attempt = \(use.attempt)"
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

/// Counts nonce consumptions so expired nonces and link sessions are purged now and then.
private final class NonceCounter: Sendable {
    private let value = Mutex(0)
    func next() -> Int { value.withLock { $0 += 1; return $0 } }
}
