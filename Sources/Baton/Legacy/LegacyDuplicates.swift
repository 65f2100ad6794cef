import Foundation
import BatonPostgres

/// A duplicate: the fresh record a sign-in that did not go through Baton made under the receiving team's
/// identifier, and the user's legacy record, still waiting for that identifier.
public struct DuplicatePair: Sendable, Equatable, Hashable {
    /// The fresh record's key, as text.
    public var freshKey: String
    /// The legacy record's key, as text.
    public var legacyKey: String

    /// Creates a pair.
    public init(freshKey: String, legacyKey: String) {
        self.freshKey = freshKey
        self.legacyKey = legacyKey
    }
}

/// A row of `baton.duplicates`.
public struct Duplicate: Sendable, Equatable {
    /// The two records.
    public var pair: DuplicatePair
    /// The receiving team's identifier, which the fresh record holds until the merge.
    public var newSub: String
    /// The sending team's identifier of the legacy record (nil between companies).
    public var oldSub: String?
    /// The transfer identifier, when the path that found the pair knew it.
    public var transferSub: String?
    /// The path that met the pair first.
    public var foundBy: MigrationMethod
    /// The fresh record's creation time (`legacy.created_at_column`), when configured.
    public var freshCreatedAt: Date?
    /// When the pair was recorded.
    public var foundAt: Date
    /// When it was merged; nil while it waits.
    public var mergedAt: Date?
}

/// What ``LegacyStore/recordDuplicate(newSub:oldSub:transferSub:foundBy:)`` found.
public struct RecordedDuplicate: Sendable, Equatable {
    /// The pair.
    public var pair: DuplicatePair
    /// Whether this call recorded it (false: an earlier path had).
    public var isNew: Bool
    /// Whether it is still waiting for a merge (false once merged).
    public var isUnmerged: Bool

    /// Creates a finding.
    public init(pair: DuplicatePair, isNew: Bool, isUnmerged: Bool) {
        self.pair = pair
        self.isNew = isNew
        self.isUnmerged = isUnmerged
    }
}

/// What ``LegacyStore/mergeDuplicate(_:)`` did.
public struct MergedDuplicate: Sendable, Equatable {
    /// The legacy record, now carrying the receiving team's identifier.
    public var user: LegacyUser
    /// The fresh record's key.
    public var freshKey: String
    /// What the fresh record's subject column holds now: nil (NULL) when the column is nullable, otherwise
    /// ``LegacyStore/releasedSubjectPrefix`` followed by the identifier it held.
    public var releasedSubject: String?
    /// Whether both rows reference one account of the email table (`legacy.email.reference_column`): Supabase
    /// Auth links a new Apple identity to the user with the same verified email, so the merge leaves nothing for
    /// the application to move.
    public var sameAccount: Bool

    /// Creates a merge's outcome.
    public init(user: LegacyUser, freshKey: String, releasedSubject: String?, sameAccount: Bool) {
        self.user = user
        self.freshKey = freshKey
        self.releasedSubject = releasedSubject
        self.sameAccount = sameAccount
    }
}

extension LegacyStore {
    /// What a released subject column that cannot be NULL holds before the identifier it held:
    /// `baton-released:001234.abc….1234`.
    public static let releasedSubjectPrefix = "baton-released:"

    /// Records that the Apple row holding `newSub` and the legacy record are one person's (a duplicate), once:
    /// a second call for the same pair, from whichever path, writes nothing. The legacy record is the Apple row
    /// whose subject is `oldSub` when given, else the row `transferSub` leads to (as the migration statement
    /// finds it). One statement, index probes only; it writes only `baton.duplicates`.
    /// - Returns: the pair, or nil when there is none (no row holds `newSub`, no legacy record is found, they
    ///   are the same row: already migrated or merged, or Baton itself migrated a record to `newSub`: that record
    ///   is a user's own migrated account, never a fresh one to merge away).
    /// - Throws: ``PostgresError``.
    @discardableResult
    public func recordDuplicate(newSub: String, oldSub: String?, transferSub: String?, foundBy: MigrationMethod) async throws -> RecordedDuplicate? {
        try Self.recordedDuplicate(try await pool.query(recordDuplicateQuery(newSub: newSub, oldSub: oldSub, transferSub: transferSub, foundBy: foundBy)))
    }

    /// The statement of ``recordDuplicate(newSub:oldSub:transferSub:foundBy:)``; its rows decode with
    /// ``recordedDuplicate(_:)``.
    public func recordDuplicateQuery(newSub: String, oldSub: String?, transferSub: String?, foundBy: MigrationMethod) -> PostgresQuery {
        let l = legacy
        let created = l.createdAtColumn.map { "u.\($0.quoted)::timestamptz" } ?? "NULL::timestamptz"
        var query: PostgresQuery = """
            WITH fresh AS (SELECT u.\(l.keyColumn)::text AS k, \(unsafeRaw: created) AS c FROM \(l.table) AS u WHERE
            """ + " " + l.subjectEqualsSQL(l.storedSubjectSQL(newSub)) + l.filterSQL() + " LIMIT 1)"
        if let transferSub, oldSub == nil {
            query = query + ", candidate AS (" + Self.transferCandidate(l, transferSub: transferSub) + "), original AS ("
                + "SELECT u.\(l.keyColumn)::text AS k, \(unsafeRaw: l.subjectSQL()) AS s FROM \(l.table) AS u WHERE u.\(l.keyColumn) = (SELECT k FROM candidate)"
        } else {
            query = query + ", original AS (SELECT u.\(l.keyColumn)::text AS k, \(unsafeRaw: l.subjectSQL()) AS s FROM \(l.table) AS u WHERE "
                + l.subjectEqualsSQL(l.storedSubjectSQL(oldSub))
        }
        return query + l.filterSQL() + """
             LIMIT 1), pair AS (
                SELECT fresh.k AS f, original.k AS o, original.s AS s, fresh.c AS c FROM fresh, original
                WHERE fresh.k <> original.k AND original.s IS DISTINCT FROM \(newSub)::text
                  AND NOT EXISTS (SELECT 1 FROM baton.transfers AS t WHERE t.new_sub = \(newSub)::text AND t.state = 'migrated')
            ), recorded AS (
                INSERT INTO baton.duplicates (fresh_key, legacy_key, new_sub, old_sub, transfer_sub, found_by, fresh_created_at)
                SELECT f, o, \(newSub), s, \(transferSub), \(foundBy.rawValue), c FROM pair
                ON CONFLICT (fresh_key, legacy_key) DO NOTHING
                RETURNING 1
            )
            SELECT pair.f, pair.o, EXISTS (SELECT 1 FROM recorded),
                   NOT EXISTS (SELECT 1 FROM baton.duplicates d WHERE d.fresh_key = pair.f AND d.legacy_key = pair.o AND d.merged_at IS NOT NULL)
            FROM pair
            """
    }

    /// The pair in the rows of ``recordDuplicateQuery(newSub:oldSub:transferSub:foundBy:)``, or nil.
    /// - Throws: ``PostgresError`` (`decoding`).
    public static func recordedDuplicate(_ rows: PostgresResult) throws -> RecordedDuplicate? {
        guard let row = rows.first else { return nil }
        return RecordedDuplicate(pair: DuplicatePair(freshKey: try row.decode(String.self, at: 0), legacyKey: try row.decode(String.self, at: 1)),
                                 isNew: try row.decode(Bool.self, at: 2), isUnmerged: try row.decode(Bool.self, at: 3))
    }

    /// Moves the Apple identity from the fresh record of `pair` onto its legacy record, in one transaction:
    /// 1. locks the pair's `baton.duplicates` row (a concurrent merge of the same pair waits, then finds it merged);
    /// 2. releases the fresh record's subject: to the value a `legacy.where` filter on the subject column excludes (`''`
    ///    under `{"not": ""}`), else NULL when the column is nullable, otherwise (and inside JSON)
    ///    ``releasedSubjectPrefix`` + the identifier (nothing else of the fresh record, nor of its account, changes);
    /// 3. runs the migration statement for the legacy record (found by `old_sub`, else by `transfer_sub`), with the
    ///    fresh record's stored email as the new one: the subject, the email as `legacy.email_policy` says, the
    ///    JSON copy, the `baton.transfers` row migrated, a `migrated` event (an email another row holds is kept,
    ///    with an `email_conflict` event, as on a sign-in);
    /// 4. appends a `duplicate_merged` event (the fresh key, its subject before and after, whether both rows share
    ///    one account) and marks the pair merged.
    ///
    /// The `duplicate_merged` event alone holds every old value (both keys, the legacy record's subject and email
    /// before, the fresh record's subject, email and released subject), so the merge can be reversed by hand. No row
    /// is deleted. A pair merged already answers that merge again, writing nothing (a merge performed once more
    /// after its answer was lost still tells the fresh key).
    /// - Returns: the merge, or nil (nothing written) when the pair is unknown, or either record
    ///   changed since it was found (the fresh record no longer holds the identifier, the legacy record is gone), or
    ///   the "fresh" record is one Baton migrated to the identifier (a pair recorded before that was checked).
    /// - Throws: ``PostgresError``; nothing is half-written.
    public func mergeDuplicate(_ pair: DuplicatePair) async throws -> MergedDuplicate? {
        do {
            return try await pool.withTransaction { connection in try await merge(pair, on: connection) }
        } catch is StaleDuplicate {
            return nil
        }
    }

    /// Merges every unmerged pair (``mergeDuplicate(_:)`` each, oldest first), awaiting `beforeEach` before each
    /// pair's transaction (`baton merge` waits there while the database is busy).
    /// - Returns: the merges made; a pair that changed since it was found is left as it is.
    /// - Throws: ``PostgresError``; the pairs merged before the failure stay merged.
    public func mergeDuplicates(beforeEach: () async -> Void = {}) async throws -> [MergedDuplicate] {
        var merged: [MergedDuplicate] = []
        for duplicate in try await duplicates(unmergedOnly: true) {
            await beforeEach()
            if let merge = try await mergeDuplicate(duplicate.pair) { merged.append(merge) }
        }
        return merged
    }

    /// The recorded pairs, oldest first.
    /// - Throws: ``PostgresError``.
    public func duplicates(unmergedOnly: Bool = false) async throws -> [Duplicate] {
        try await Self.duplicates(in: pool, unmergedOnly: unmergedOnly)
    }

    /// The pairs `baton.duplicates` holds, oldest first, `limit` at most (the report reads them without a store).
    /// - Throws: ``PostgresError``.
    public static func duplicates(in pool: PostgresPool, unmergedOnly: Bool = false, limit: Int = .max) async throws -> [Duplicate] {
        let rows = try await pool.query("""
            SELECT fresh_key, legacy_key, new_sub, old_sub, transfer_sub, found_by, fresh_created_at, found_at, merged_at
            FROM baton.duplicates WHERE NOT \(unmergedOnly) OR merged_at IS NULL ORDER BY found_at, fresh_key, legacy_key LIMIT \(limit)
            """)
        return try rows.map { row in
            let foundBy = try row.decode(String.self, at: 5)
            guard let method = MigrationMethod(rawValue: foundBy) else {
                throw PostgresError(.decoding, reason: "baton.duplicates.found_by holds an unknown path")
            }
            return Duplicate(pair: DuplicatePair(freshKey: try row.decode(String.self, at: 0), legacyKey: try row.decode(String.self, at: 1)),
                             newSub: try row.decode(String.self, at: 2), oldSub: try row.decode(String?.self, at: 3),
                             transferSub: try row.decode(String?.self, at: 4), foundBy: method,
                             freshCreatedAt: try row.decode(Date?.self, at: 6), foundAt: try row.decode(Date.self, at: 7),
                             mergedAt: try row.decode(Date?.self, at: 8))
        }
    }

    /// Thrown inside the merge's transaction to roll it back when the pair is no longer what was recorded.
    private struct StaleDuplicate: Error {}

    private func merge(_ pair: DuplicatePair, on connection: PostgresConnection) async throws -> MergedDuplicate {
        let l = legacy
        let recorded = try await connection.query("""
            SELECT new_sub, old_sub, transfer_sub, found_by, merged_at IS NOT NULL FROM baton.duplicates
            WHERE fresh_key = \(pair.freshKey) AND legacy_key = \(pair.legacyKey) FOR UPDATE
            """)
        guard let row = recorded.first, let method = MigrationMethod(rawValue: try row.decode(String.self, at: 3)) else { throw StaleDuplicate() }
        let newSub = try row.decode(String.self, at: 0)
        let oldSub = try row.decode(String?.self, at: 1), transferSub = try row.decode(String?.self, at: 2)
        if try row.decode(Bool.self, at: 4) { return try await merged(pair, newSub: newSub, on: connection) }

        // The legacy record as it is before the merge: its values go into the `duplicate_merged` event.
        let before = try await connection.query("""
            SELECT \(unsafeRaw: l.subjectSQL()), \(unsafeRaw: l.emailSQL) FROM \(l.table) AS u\(unsafeRaw: l.emailJoinSQL)
            WHERE u.\(l.keyColumn)::text = \(pair.legacyKey)
            """ + l.filterSQL() + " FOR UPDATE OF u")
        guard let legacyRow = before.first else { throw StaleDuplicate() }
        let legacySubject = try legacyRow.decode(String?.self, at: 0), legacyEmail = try legacyRow.decode(String?.self, at: 1)

        // The fresh record releases the identifier, so the migration statement below finds it free.
        let reference = l.emailTable.map { "u.\($0.referenceColumn.quoted)::text" } ?? "NULL::text"
        var release: PostgresQuery = """
            WITH fresh AS (
                SELECT u.\(l.keyColumn) AS k, \(unsafeRaw: l.emailSQL) AS e, \(unsafeRaw: reference) AS r FROM \(l.table) AS u\(unsafeRaw: l.emailJoinSQL)
                WHERE u.\(l.keyColumn)::text = \(pair.freshKey) AND
            """
        release = release + " " + l.subjectEqualsSQL(l.storedSubjectSQL(newSub)) + """

                  AND NOT EXISTS (SELECT 1 FROM baton.transfers AS t WHERE t.new_sub = \(newSub)::text AND t.state = 'migrated')
            """
        release = release + l.filterSQL() + """
             FOR UPDATE OF u), released AS (
                UPDATE \(l.table) AS u SET
            """ + " " + releasedSubjectSQL + " FROM fresh WHERE u.\(l.keyColumn) = fresh.k" + l.filterSQL()
            + " RETURNING \(unsafeRaw: l.subjectValueSQL())::text AS s) SELECT released.s, fresh.e, fresh.r FROM fresh, released"
        guard let fresh = try await connection.query(release).first else { throw StaleDuplicate() }
        let releasedSubject = try fresh.decode(String?.self, at: 0), email = try fresh.decode(String?.self, at: 1)
        let freshReference = try fresh.decode(String?.self, at: 2)

        // The migration statement, with the same fallbacks as everywhere for a value the table refuses (an email
        // another row holds, one too long, a JSON copy that is not JSON): fewer parts written, never a failed merge.
        let source: OldSubjectSource = oldSub.map { .subject($0) } ?? .transfer(transferSub ?? "")
        if locksNewSubject { _ = try await connection.query(Self.newSubjectLockQuery(newSub)) }
        let rows = try await Self.withRefusedValueFallbacks({ parts in
            try await connection.executeScript(unsafeSQL: "SAVEPOINT baton_merge")
            return try await connection.query(migrationQuery(from: source, newSub: newSub, newEmail: email,
                                                             isPrivateEmail: email.map(EmailPolicy.isPrivateRelay), transferSub: transferSub,
                                                             method: method, parts: parts))
        }, beforeRetry: { try await connection.executeScript(unsafeSQL: "ROLLBACK TO SAVEPOINT baton_merge") })
        guard case .settled(.migrated(let user)) = try Self.migrationRow(rows, newSub: newSub), user.key == pair.legacyKey else {
            throw StaleDuplicate()
        }

        var sameAccount: PostgresQuery = " false"
        if let mail = l.emailTable {
            sameAccount = " (SELECT u.\(mail.referenceColumn)::text FROM \(l.table) AS u WHERE "
                + l.subjectEqualsSQL(l.storedSubjectSQL(newSub)) + l.filterSQL() + " LIMIT 1) IS NOT DISTINCT FROM \(freshReference)::text"
        }
        let marked = try await connection.query("""
            WITH marked AS (
                UPDATE baton.duplicates SET merged_at = now() WHERE fresh_key = \(pair.freshKey) AND legacy_key = \(pair.legacyKey) RETURNING 1
            ), same AS (SELECT
            """ + sameAccount + """
             AS v), event AS (
                INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, old_email, new_email, transfer_sub, detail)
                SELECT 'duplicate_merged', \(method.rawValue)::text, \(pair.legacyKey)::text, \(legacySubject ?? oldSub)::text, \(newSub)::text,
                       \(legacyEmail)::text, \(user.email)::text, \(transferSub)::text,
                       jsonb_build_object('fresh_key', \(pair.freshKey)::text, 'fresh_subject', \(newSub)::text, 'fresh_email', \(email)::text,
                                          'released_subject', \(releasedSubject)::text, 'same_account', same.v)
                FROM marked, same
            )
            SELECT v FROM same
            """)
        return MergedDuplicate(user: user, freshKey: pair.freshKey, releasedSubject: releasedSubject, sameAccount: try marked[0].decode(Bool.self, at: 0))
    }

    /// The assignment releasing the fresh record's subject (`u`): to the value a `legacy.where` filter on the subject
    /// column excludes (Casdoor's `''`: the row stops being an Apple row), else to NULL where the column allows it, else
    /// (and inside JSON, `legacy.subject_path`) to the identifier behind ``releasedSubjectPrefix``.
    private var releasedSubjectSQL: PostgresQuery {
        let l = legacy
        let prefixed = l.subjectAssignmentSQL("\(Self.releasedSubjectPrefix) || \(unsafeRaw: l.subjectValueSQL())::text")
        guard l.subjectPath == nil else { return prefixed }
        for filter in l.filters where filter.column == l.subjectColumn {
            if case .notEquals(let excluded) = filter.condition { return "\(l.subjectColumn) = \(excluded)" }
        }
        return "\(l.subjectColumn) = CASE WHEN (SELECT a.attnotnull FROM pg_attribute AS a WHERE a.attrelid = \(l.table.quoted)::regclass"
            + " AND a.attname = \(l.subjectColumn.name)) THEN \(Self.releasedSubjectPrefix) || u.\(l.subjectColumn)::text END"
    }

    /// The merge of `pair` made earlier, as its `duplicate_merged` event recorded it, while the legacy record still
    /// holds `newSub`: the same answer again for a merge performed once more after its answer was lost.
    private func merged(_ pair: DuplicatePair, newSub: String, on connection: PostgresConnection) async throws -> MergedDuplicate {
        let l = legacy
        let rows = try await connection.query("""
            SELECT u.\(l.keyColumn)::text, \(unsafeRaw: l.emailSQL), \(unsafeRaw: l.subjectSQL()), e.detail->>'released_subject',
                   coalesce((e.detail->>'same_account')::boolean, false), \(unsafeRaw: l.accountKeySQL)
            FROM \(l.table) AS u\(unsafeRaw: l.emailJoinSQL),
                 LATERAL (SELECT detail FROM baton.events WHERE kind = 'duplicate_merged' AND legacy_key = \(pair.legacyKey)
                          AND detail->>'fresh_key' = \(pair.freshKey) ORDER BY id DESC LIMIT 1) AS e
            WHERE u.\(l.keyColumn)::text = \(pair.legacyKey) AND
            """ + " " + l.subjectEqualsSQL(l.storedSubjectSQL(newSub)) + l.filterSQL())
        guard let row = rows.first else { throw StaleDuplicate() }
        return MergedDuplicate(user: LegacyUser(key: try row.decode(String.self, at: 0), subject: try row.decode(String.self, at: 2),
                                                email: try row.decode(String?.self, at: 1), accountKey: try row.decode(String?.self, at: 5)),
                               freshKey: pair.freshKey, releasedSubject: try row.decode(String?.self, at: 3), sameAccount: try row.decode(Bool.self, at: 4))
    }
}

/// What the legacy table says about who Baton can reach, for the pre-flight checks (`baton doctor`).
public struct LegacyReach: Sendable, Equatable {
    /// The Apple rows (`legacy.where`).
    public var appleRows: Int
    /// Apple rows with neither a subject nor a transfer identifier (`legacy.transfer_column`): no sign-in and no
    /// exchange finds them; only `/v1/link` or re-verifying their email can.
    public var unreachable: Int
    /// Apple rows whose email is a private relay address.
    public var relayEmails: Int
    /// Duplicates recorded and not merged yet.
    public var unmergedDuplicates: Int
}

extension LegacyStore {
    /// Counts the Apple rows Baton cannot find (the record a merged duplicate released aside), those with a relay address, and the duplicates waiting; one statement.
    /// - Throws: ``PostgresError``.
    public func reach() async throws -> LegacyReach {
        let l = legacy
        let transfer = l.transferColumn.map { " AND u.\($0.quoted) IS NULL" } ?? ""
        let query: PostgresQuery = """
            SELECT count(*), count(*) FILTER (WHERE \(unsafeRaw: l.subjectValueSQL()) IS NULL\(unsafeRaw: transfer)
                                              AND NOT EXISTS (SELECT 1 FROM baton.duplicates AS d WHERE d.fresh_key = u.\(l.keyColumn)::text AND d.merged_at IS NOT NULL)),
                   count(*) FILTER (WHERE \(unsafeRaw: BatonConfiguration.LegacyIdentifiers.isRelaySQL(l.emailSQL))),
                   (SELECT count(*) FROM baton.duplicates WHERE merged_at IS NULL)
            FROM \(l.table) AS u\(unsafeRaw: l.emailJoinSQL) WHERE true
            """ + l.filterSQL()
        let row = try await pool.query(query)[0]
        return LegacyReach(appleRows: try row.decode(Int.self, at: 0), unreachable: try row.decode(Int.self, at: 1),
                           relayEmails: try row.decode(Int.self, at: 2), unmergedDuplicates: try row.decode(Int.self, at: 3))
    }
}
