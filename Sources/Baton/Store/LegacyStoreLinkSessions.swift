import BatonPostgres
import Foundation

// MARK: - Link sessions

extension LegacyStore {
    /// Records a link session: its nonce's SHA-256 (the nonce itself is never stored), live until `expiresAt`.
    /// - Throws: ``PostgresError``.
    public func createLinkSession(nonceHash: String, expiresAt: Date) async throws {
        try await pool.execute("INSERT INTO baton.link_sessions (nonce_hash, expires_at) VALUES (\(nonceHash), \(expiresAt))")
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
