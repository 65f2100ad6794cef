import BatonPostgres
import Foundation

// MARK: - Link sessions

extension LegacyStore {
    /// Records a link session for `attempt`: its nonce's SHA-256 (the nonce itself is never stored), live until
    /// `expiresAt`, unless `maxLive` sessions are live at `now` (concurrent calls may each pass the count, so the
    /// table holds at most `maxLive` + the pool's connections). The same statement deletes at most
    /// ``LinkSession/purgeBatch`` expired sessions, skipping rows another call is deleting, so the route itself keeps
    /// the table at its live sessions. True when the session is recorded, also when `attempt` repeats the call (its
    /// first answer lost with the connection, its row found by its creator); false at the limit.
    /// - Throws: ``PostgresError``; ``BatonError`` `inconsistent_database_answer` when the row answered is another
    ///   session's or another attempt's.
    public func createLinkSession(nonceHash: String, expiresAt: Date, attempt: String, now: Date, maxLive: Int) async throws -> Bool {
        try Self.linkSessionCreated(try await pool.query(createLinkSessionQuery(nonceHash: nonceHash, expiresAt: expiresAt, attempt: attempt,
                                                                                now: now, maxLive: maxLive)),
                                    nonceHash: nonceHash, attempt: attempt)
    }

    /// The statement of ``createLinkSession(nonceHash:expiresAt:attempt:now:maxLive:)``: the session's row with its
    /// creator, recorded now or by an earlier send of the same statement; no row at the limit.
    func createLinkSessionQuery(nonceHash: String, expiresAt: Date, attempt: String, now: Date, maxLive: Int) -> PostgresQuery {
        """
        WITH purge AS (
            DELETE FROM baton.link_sessions WHERE ctid = ANY (ARRAY(
                SELECT ctid FROM baton.link_sessions WHERE expires_at < \(now) LIMIT \(LinkSession.purgeBatch) FOR UPDATE SKIP LOCKED))
        ), live AS (
            SELECT count(*) AS sessions FROM (SELECT 1 FROM baton.link_sessions WHERE expires_at > \(now) LIMIT \(maxLive)) s
        ), created AS (
            INSERT INTO baton.link_sessions (nonce_hash, expires_at, created_by)
            SELECT \(nonceHash), \(expiresAt), \(attempt) FROM live WHERE sessions < \(maxLive)
            ON CONFLICT (nonce_hash) DO NOTHING
            RETURNING nonce_hash, created_by
        )
        SELECT nonce_hash, created_by FROM created
        UNION ALL
        SELECT nonce_hash, created_by FROM baton.link_sessions WHERE nonce_hash = \(nonceHash) AND NOT EXISTS (SELECT FROM created)
        """
    }

    /// Whether ``createLinkSessionQuery(nonceHash:expiresAt:attempt:now:maxLive:)`` answered the session of
    /// `nonceHash` recorded by `attempt`; no row is the limit, a row of another session or creator an inconsistent answer.
    static func linkSessionCreated(_ rows: PostgresResult, nonceHash: String, attempt: String) throws -> Bool {
        guard let row = rows.first else { return false }
        guard try row.decode(String.self, at: 0) == nonceHash, try row.decode(String?.self, at: 1) == attempt else {
            throw BatonError(.inconsistentDatabaseAnswer, "a database answer did not match its question")
        }
        return true
    }

    /// Uses up the link session of `nonceHash` for `attempt`: true when it was live at `now` (and is used from now on)
    /// or was used by this same attempt, false when unknown, used by another or expired.
    /// - Throws: ``PostgresError``; ``BatonError`` `inconsistent_database_answer` when the row answered is another
    ///   session's or was used by another attempt.
    public func consumeLinkSession(nonceHash: String, attempt: String, now: Date) async throws -> Bool {
        try Self.linkSessionConsumed(try await pool.query("""
            UPDATE baton.link_sessions SET used_at = \(now), used_by = \(attempt)
            WHERE nonce_hash = \(nonceHash) AND ((used_at IS NULL AND expires_at > \(now)) OR used_by = \(attempt))
            RETURNING nonce_hash, used_by
            """), nonceHash: nonceHash, attempt: attempt)
    }

    /// Whether ``consumeLinkSession(nonceHash:attempt:now:)`` used up the session of `nonceHash` for `attempt`; a row
    /// of another session or attempt is an inconsistent answer.
    static func linkSessionConsumed(_ rows: PostgresResult, nonceHash: String, attempt: String) throws -> Bool {
        guard let row = rows.first else { return false }
        guard rows.count == 1, try row.decode(String.self, at: 0) == nonceHash, try row.decode(String?.self, at: 1) == attempt else {
            throw BatonError(.inconsistentDatabaseAnswer, "a database answer did not match its question")
        }
        return true
    }
}
