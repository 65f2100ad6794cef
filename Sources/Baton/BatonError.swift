import BatonAppleSignIn
import BatonPostgres

/// The one error type of the `Baton` library: a stable ``Code``, an HTTP status the service answers with,
/// and a reason safe to show (never a token, an email, a secret or an SQL value).
public struct BatonError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong; the raw value is the `error` field of the HTTP answer.
    public enum Code: String, Sendable, Equatable, CaseIterable {
        /// The identity token was rejected; ``BatonError/reason`` is the ``VerificationError/Reason`` code (401).
        case invalidToken = "invalid_token"
        /// The nonce was already used with a token that has not expired (401).
        case nonceReused = "nonce_reused"
        /// A re-link token was issued too long ago (401).
        case staleToken = "stale_token"
        /// A re-link's legacy token names no sending-team identifier awaiting migration (409).
        case notLinkable = "not_linkable"
        /// The new identifier already belongs to another record (409).
        case conflict
        /// No legacy record carries the old identifier (404).
        case legacyRecordMissing = "legacy_record_missing"
        /// A server-to-server notification was not acceptable (400).
        case invalidNotification = "invalid_notification"
        /// The request lacks a field or has one of the wrong shape (400).
        case invalidRequest = "invalid_request"
        /// The database cannot be reached (503); nothing was half-written, so the call may be retried.
        case databaseUnavailable = "database_unavailable"
        /// Apple's key set cannot be had (503).
        case keysUnavailable = "keys_unavailable"
        /// The legacy table does not match the configuration (start-up).
        case invalidLegacyTable = "invalid_legacy_table"
    }

    /// The stable code.
    public var code: Code
    /// A short explanation, or for ``Code/invalidToken`` the rejection reason code (`expired`, `bad_signature`, …).
    public var reason: String

    /// Creates an error.
    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    /// The HTTP status the service answers with.
    public var httpStatus: Int {
        switch code {
        case .invalidToken, .nonceReused, .staleToken: 401
        case .conflict, .notLinkable: 409
        case .legacyRecordMissing: 404
        case .invalidNotification, .invalidRequest: 400
        case .databaseUnavailable, .keysUnavailable: 503
        case .invalidLegacyTable: 500
        }
    }

    /// `code: reason`.
    public var description: String { "\(code.rawValue): \(reason)" }

    /// The error for a rejected token.
    static func rejected(_ error: VerificationError) -> BatonError {
        if error.reason == .keysUnavailable { return BatonError(.keysUnavailable, "Apple's key set cannot be fetched") }
        return BatonError(.invalidToken, error.reason.rawValue)
    }

    /// Maps a database failure that means "unreachable" to ``Code/databaseUnavailable``; other errors pass through.
    static func mapDatabase(_ error: any Error) -> any Error {
        guard let error = error as? PostgresError else { return error }
        switch error.code {
        case .connectionFailure, .serverShutdown, .poolTimeout, .poolClosed, .resourceUnavailable, .queryCanceled:
            return BatonError(.databaseUnavailable, "the database is unavailable (\(error.code.rawValue))")
        case .invalidParameter:
            return BatonError(.invalidRequest, "a value contains a NUL character")
        default:
            return error
        }
    }
}
