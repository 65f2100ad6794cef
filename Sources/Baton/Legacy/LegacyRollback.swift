import Foundation
import BatonPostgres

/// A migration as its `migrated` event recorded it, not rolled back yet.
public struct RecordedMigration: Sendable, Equatable {
    /// The event's `id` in `baton.events`.
    public var eventID: Int64
    /// When the record was rewritten.
    public var at: Date
    /// The path that rewrote it.
    public var method: String?
    /// The record's key, as text.
    public var legacyKey: String
    /// The subject before (nil: the record had none, between companies).
    public var oldSub: String?
    /// The subject the migration wrote.
    public var newSub: String
    /// The email before.
    public var oldEmail: String?
    /// The email after.
    public var newEmail: String?
    /// The transfer identifier.
    public var transferSub: String?
}

/// What ``LegacyStore/rollBack(_:)`` did with one migration.
public enum RollbackOutcome: Sendable, Equatable {
    /// The record holds its old values again, its transfer row is pending, a `rolled_back` event records it.
    case rolledBack
    /// Nothing was written: the record changed since the migration, or the migration is not one to roll back here.
    case refused(reason: String)
}

extension LegacyStore {
    /// The migrations not rolled back yet, newest first: of the record `legacyKey`, or made at or after `since`
    /// (both: both must hold). Read from the append-only audit trail (`baton.events`, `kind = 'migrated'`).
    /// - Throws: ``PostgresError``.
    public func migrations(legacyKey: String?, since: Date?) async throws -> [RecordedMigration] {
        let rows = try await pool.query("""
            SELECT e.id, e.at, e.method, e.legacy_key, e.old_sub, e.new_sub, e.old_email, e.new_email, e.transfer_sub
            FROM baton.events AS e
            WHERE e.kind = 'migrated' AND e.legacy_key IS NOT NULL AND e.new_sub IS NOT NULL
              AND (\(legacyKey)::text IS NULL OR e.legacy_key = \(legacyKey)::text)
              AND (\(since)::timestamptz IS NULL OR e.at >= \(since)::timestamptz)
              AND NOT EXISTS (SELECT 1 FROM baton.events AS r WHERE r.kind = 'rolled_back' AND r.detail->>'event' = e.id::text)
            ORDER BY e.id DESC
            """)
        return try rows.map { row in
            RecordedMigration(eventID: Int64(try row.decode(Int.self, at: 0)), at: try row.decode(Date.self, at: 1),
                              method: try row.decode(String?.self, at: 2), legacyKey: try row.decode(String.self, at: 3),
                              oldSub: try row.decode(String?.self, at: 4), newSub: try row.decode(String.self, at: 5),
                              oldEmail: try row.decode(String?.self, at: 6), newEmail: try row.decode(String?.self, at: 7),
                              transferSub: try row.decode(String?.self, at: 8))
        }
    }

    /// Reverses `migration` in one transaction, where the record still holds what it wrote: the subject and the
    /// JSON copy's subject keys go back to the old subject; the email (in this table or the users table), the JSON
    /// copies' email keys and the email copies (`legacy.email_copies`: the user's rows holding the new address) go back
    /// to the old email; the `baton.transfers` row the migration closed is pending again (its new identifier forgotten, so the
    /// exchange or a sign-in migrates it afresh); a `rolled_back` event records every value, old and new.
    ///
    /// Refused, writing nothing, when the record is gone, when its subject or email is no longer what the migration
    /// wrote (the application or the user changed it since: rolling back would lose that), when a later migration's
    /// merge moved a duplicate onto it (reverse the merge by hand, as the runbook says), when it was rolled back, or
    /// when a unique constraint refuses an old value that another row holds now.
    /// - Throws: ``PostgresError``; nothing is half-written.
    public func rollBack(_ migration: RecordedMigration) async throws -> RollbackOutcome {
        do {
            return try await pool.withTransaction { connection in try await rollBack(migration, on: connection) }
        } catch let refusal as RollbackRefusal {
            return .refused(reason: refusal.reason)
        } catch let error as PostgresError where error.code == .uniqueViolation {
            return .refused(reason: "another row holds one of its old values now (a unique constraint refused it)")
        }
    }

    /// Thrown inside the rollback's transaction to undo it and say why.
    private struct RollbackRefusal: Error {
        var reason: String
    }

    private func rollBack(_ m: RecordedMigration, on connection: PostgresConnection) async throws -> RollbackOutcome {
        let l = legacy
        // The event, locked: two rollbacks of one migration run one after the other, and the second finds it done.
        let event = try await connection.query("""
            SELECT EXISTS (SELECT 1 FROM baton.events WHERE kind = 'rolled_back' AND detail->>'event' = \(String(m.eventID))),
                   EXISTS (SELECT 1 FROM baton.events WHERE kind = 'duplicate_merged' AND legacy_key = \(m.legacyKey) AND new_sub = \(m.newSub)
                           AND id > \(Int(m.eventID)))
            FROM baton.events WHERE id = \(Int(m.eventID)) AND kind = 'migrated' FOR UPDATE
            """)
        guard let flags = event.first else { throw RollbackRefusal(reason: "no such migration in the audit trail") }
        if try flags.decode(Bool.self, at: 0) { throw RollbackRefusal(reason: "already rolled back") }
        if try flags.decode(Bool.self, at: 1) {
            throw RollbackRefusal(reason: "a duplicate was merged onto this record: reverse the merge by hand (docs/runbook.md)")
        }

        let reference = l.emailTable.map { ", u.\($0.referenceColumn.quoted)::text" } ?? ", NULL::text"
        let current = try await connection.query("""
            SELECT \(unsafeRaw: l.subjectSQL()), \(unsafeRaw: l.emailSQL)\(unsafeRaw: reference) FROM \(l.table) AS u\(unsafeRaw: l.emailJoinSQL)
            WHERE u.\(l.keyColumn)::text = \(m.legacyKey)
            """ + l.filterSQL() + " FOR UPDATE OF u")
        guard let row = current.first else { throw RollbackRefusal(reason: "the record is gone") }
        guard try row.decode(String?.self, at: 0) == m.newSub else {
            throw RollbackRefusal(reason: "its subject changed since the migration")
        }
        if l.hasEmail, try row.decode(String?.self, at: 1) != m.newEmail {
            throw RollbackRefusal(reason: "its email changed since the migration")
        }
        let restoresEmail = l.hasEmail && l.emailPolicy != .never && m.oldEmail != nil && m.oldEmail != m.newEmail

        // The record: subject (and its copies in the row), email where it lives in this table, the JSON copy's keys holding the new values
        // (`r`: the migration's new subject and email, bound).
        let held: PostgresQuery = " FROM (SELECT \(m.newSub)::text AS s, \(m.newEmail)::text AS e) AS r"
        var set = l.subjectAssignmentSQL(l.storedSubjectSQL(m.oldSub), copies: ("r.s", "\(m.oldSub)::text"))
        if let column = l.emailColumn, restoresEmail {
            set = set + ", \(column) = \(m.oldEmail)" + l.derivedSQL(l.emailDerived, alias: "u", email: "\(m.oldEmail)", when: "true")
        }
        if let json = l.json {
            set = set + ", \(json.column) = " + l.jsonSQL(json, held: ("r.s", "r.e"), newSub: m.oldSub, newEmail: m.oldEmail, write: restoresEmail)
        }
        try await connection.execute("UPDATE \(l.table) AS u SET " + set + held + " WHERE u.\(l.keyColumn)::text = \(m.legacyKey)" + l.filterSQL())

        // The subject's copies in other tables holding the new subject go back to the old one.
        if l.subjectCopies.contains(where: { $0.table != nil }) {
            try await connection.execute("WITH old AS (SELECT u.\(l.keyColumn) AS k\(unsafeRaw: l.subjectCopyReferencesSQL) FROM \(l.table) AS u WHERE u.\(l.keyColumn)::text = \(m.legacyKey)"
                + l.filterSQL() + "), r AS (SELECT \(m.newSub)::text AS s)" + l.subjectCopiesSQL(from: "old, r", old: "r.s", new: "\(m.oldSub)::text") + " SELECT 1")
        }

        // The users table, when the email lives there.
        let userKey = try row.decode(String?.self, at: 2)
        if let mail = l.emailTable, let userKey {
            var mailSet: PostgresQuery = "\(mail.column) = m.\(mail.column)"
            if restoresEmail { mailSet = "\(mail.column) = \(m.oldEmail)" + l.derivedSQL(mail.derived, alias: "m", email: "\(m.oldEmail)", when: "true") }
            if let json = l.json, let column = json.emailTableColumn {
                mailSet = mailSet + ", \(column) = "
                    + l.jsonSQL(json, in: "m.\(column.quoted)", held: ("r.s", "r.e"), newSub: m.oldSub, newEmail: m.oldEmail, write: restoresEmail)
            }
            try await connection.execute("UPDATE \(mail.table) AS m SET " + mailSet + held + " WHERE m.\(mail.keyColumn)::text = \(userKey)")
        }

        // The email copies: the user's rows holding the new address go back to the old one (`r`: the record's key
        // and its users row's key in their own types, as the copies' user columns hold them).
        if restoresEmail, let oldEmail = m.oldEmail {
            let reference = l.emailTable.map { "u.\($0.referenceColumn.quoted)" } ?? "NULL"
            for copy in l.emailCopies {
                let row = l.copyRowSQL(copy, user: l.emailTable == nil ? "r.k" : "r.uk", oldEmail: "r.e", newEmail: oldEmail, write: true)
                try await connection.execute("UPDATE \(copy.table) AS c SET " + l.copySetSQL(copy, oldEmail: "r.e", newEmail: oldEmail, write: true)
                    + " FROM (SELECT u.\(l.keyColumn) AS k, "
                    + "\(unsafeRaw: reference) AS uk, \(m.newEmail)::text AS e FROM \(l.table) AS u WHERE u.\(l.keyColumn)::text = \(m.legacyKey)"
                    + l.filterSQL() + ") AS r WHERE " + row)
            }
        }

        // The transfer row the migration closed, and the event.
        try await connection.execute("""
            WITH reopened AS (
                UPDATE baton.transfers SET state = 'pending', method = NULL, new_sub = NULL, new_email = NULL, is_private_email = NULL,
                    migrated_at = NULL, attempts = 0, next_attempt_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
                    last_error = 'rolled back', updated_at = now()
                WHERE new_sub = \(m.newSub) AND state = 'migrated'
                RETURNING 1
            )
            INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, old_email, new_email, transfer_sub, detail)
            SELECT 'rolled_back', \(m.method)::text, \(m.legacyKey)::text, \(m.newSub)::text, \(m.oldSub)::text, \(m.newEmail)::text,
                   \(restoresEmail ? m.oldEmail : m.newEmail)::text, \(m.transferSub)::text,
                   jsonb_build_object('event', \(String(m.eventID))::text, 'transfers_reopened', (SELECT count(*) FROM reopened))
            """)
        return .rolledBack
    }
}
