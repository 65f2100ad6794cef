import BatonAppleSignIn
import BatonErrors
import BatonPostgres

/// The one error type of the `Baton` library: a stable ``BatonErrorCode`` (which states its HTTP status) and a
/// reason safe to show (never a token, an email, a secret or an SQL value); for ``BatonErrorCode/invalidToken``
/// the reason is the rejection reason code (`expired`, `bad_signature`, …).
public typealias BatonError = CodedError<BatonErrorCode>

/// What went wrong in the `Baton` library; the raw value is the `error` field of the HTTP answer.
public enum BatonErrorCode: String, ErrorCode, CaseIterable {
    /// The identity token was rejected; the reason is the ``VerificationErrorCode`` raw value.
    case invalidToken = "invalid_token"
    /// The nonce was already used with a token that has not expired.
    case nonceReused = "nonce_reused"
    /// A re-link token was issued too long ago.
    case staleToken = "stale_token"
    /// A re-link's legacy token names no sending-team identifier awaiting migration.
    case notLinkable = "not_linkable"
    /// The new identifier already belongs to another record.
    case conflict
    /// No legacy record carries the old identifier.
    case legacyRecordMissing = "legacy_record_missing"
    /// A server-to-server notification was not acceptable.
    case invalidNotification = "invalid_notification"
    /// The request lacks a field or has one of the wrong shape.
    case invalidRequest = "invalid_request"
    /// The database cannot be reached; nothing was half-written, so the call may be retried.
    case databaseUnavailable = "database_unavailable"
    /// Apple's key set cannot be had.
    case keysUnavailable = "keys_unavailable"
    /// The legacy table does not match the configuration (start-up).
    case invalidLegacyTable = "invalid_legacy_table"
    /// The database answered something other than what was asked (a record of another subject): nothing is
    /// answered from it. A transaction-mode pooler in front of PostgreSQL without `database.pooler` is the
    /// likely cause.
    case inconsistentDatabaseAnswer = "inconsistent_database_answer"
    /// The call needs a part of the configuration that is missing (re-linking without
    /// `apple.legacy_client_ids`, a report without a source): the operator's to fix, not the caller's.
    case notConfigured = "not_configured"
    /// As many link sessions as the configuration allows are live (`max_link_sessions`): try later.
    case tooManyLinkSessions = "too_many_link_sessions"
}

extension BatonError {
    /// The error for a rejected token.
    static func rejected(_ error: VerificationError) -> BatonError {
        if error.code == .keysUnavailable { return BatonError(.keysUnavailable, "Apple's key set cannot be fetched") }
        return BatonError(.invalidToken, error.code.rawValue)
    }

    /// Runs `body`, once more after a transient failure (a deadlock, a serialization failure, a read-only server or a
    /// connection lost mid-statement: every store method is safe to run again, each is one statement or one
    /// transaction, and a second run of a migration that committed finds it done). A saturated pool is not retried:
    /// the wait already happened.
    static func retryingTransient<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as PostgresError where error.isTransient && error.kind != .saturated {
            return try await body()
        }
    }

    /// Maps a database failure that means "try later" (any ``PostgresError/Kind`` but `refused`) to
    /// ``BatonErrorCode/databaseUnavailable``, and a text value holding a NUL to ``BatonErrorCode/invalidRequest``;
    /// other errors pass through.
    static func mapDatabase(_ error: any Error) -> any Error {
        guard let error = error as? PostgresError else { return error }
        if error.code == .invalidParameter { return BatonError(.invalidRequest, "a value contains a NUL character") }
        guard error.kind != .refused else { return error }
        return BatonError(.databaseUnavailable, "the database is unavailable (\(error.code.rawValue))")
    }
}
