/// The one error type of the Postgres module: a stable code, the SQLSTATE when the server sent one,
/// and a message that never carries parameter values.
///
/// `description` is safe for logs; `debugDescription` adds the server's detail, which may quote values. Kept beside
/// `CodedError`: the SQLSTATE, the server's detail and ``kind`` are what retries and `database_unavailable` are decided from.
public struct PostgresError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// What kind of failure this is; callers branch on it.
    public enum Code: String, Sendable, Equatable {
        /// The connection could not be opened, or broke (SQLSTATE class 08, or libpq lost the socket).
        case connectionFailure = "connection_failure"
        /// A unique constraint was violated (23505).
        case uniqueViolation = "unique_violation"
        /// A serializable transaction could not be serialized (40001); retry it.
        case serializationFailure = "serialization_failure"
        /// Deadlock detected (40P01); retry it.
        case deadlockDetected = "deadlock_detected"
        /// The statement was canceled, e.g. by `statement_timeout` or `lock_timeout` (57014, 55P03).
        case queryCanceled = "query_canceled"
        /// The server is shutting down or refuses connections (57P01-57P03).
        case serverShutdown = "server_shutdown"
        /// The server is read-only (25006): a standby, or a primary demoted by a failover. The connection that
        /// met it is dropped, never reused; a multi-host connection string with
        /// `target_session_attrs=read-write` then finds the new primary.
        case readOnly = "read_only"
        /// The database is out of space or memory (53100, 53200, 53300).
        case resourceUnavailable = "resource_unavailable"
        /// A relation, column or schema named in the SQL does not exist (42P01, 42703, 3F000).
        case undefinedObject = "undefined_object"
        /// Any other error the server reported.
        case server = "server_error"
        /// A value in a row could not be decoded as the requested Swift type.
        case decoding = "decoding_error"
        /// No connection became free within the pool's wait limit.
        case poolTimeout = "pool_timeout"
        /// The pool was closed.
        case poolClosed = "pool_closed"
        /// The configuration (URL, pool size) is invalid.
        case invalidConfiguration = "invalid_configuration"
        /// A text parameter holds a NUL byte, which libpq would silently cut the value at; refused before sending.
        case invalidParameter = "invalid_parameter"
    }

    /// The stable code.
    public var code: Code
    /// The five-character SQLSTATE, when the server reported one.
    public var sqlState: String?
    /// Why, in words: the server's primary message or libpq's; contains no parameter values.
    public var reason: String
    /// Server detail and hint; may contain values, so only in `debugDescription`.
    public var detail: String?

    /// Creates an error.
    public init(_ code: Code, sqlState: String? = nil, reason: String, detail: String? = nil) {
        self.code = code
        self.sqlState = sqlState
        self.reason = reason
        self.detail = detail
    }

    /// What a failure means for its caller: the one classification of database errors, which retries, outage waits
    /// and the `database_unavailable` answer all read.
    public enum Kind: Sendable, Equatable {
        /// No writable primary answered: the connection broke or was refused, the server is shutting down or is
        /// read-only during a failover. Waiting may help; the statement is not wrong.
        case unreachable
        /// No connection of the pool became free within its wait limit: the wait has already happened.
        case saturated
        /// The transaction lost to a concurrent one (deadlock, serialization failure): running it again may succeed.
        case contention
        /// The server gave up on the statement: out of space or memory, or canceled by a statement or lock timeout.
        case overloaded
        /// The pool is closed: this process is stopping, and no later call succeeds.
        case closed
        /// The statement, a value or the configuration is wrong: running it again fails alike.
        case refused
    }

    /// The ``Kind`` of this failure.
    public var kind: Kind {
        switch code {
        case .connectionFailure, .serverShutdown, .readOnly: .unreachable
        case .poolTimeout: .saturated
        case .serializationFailure, .deadlockDetected: .contention
        case .resourceUnavailable, .queryCanceled: .overloaded
        case .poolClosed: .closed
        case .uniqueViolation, .undefinedObject, .server, .decoding, .invalidConfiguration, .invalidParameter: .refused
        }
    }

    /// Whether retrying the whole transaction may succeed: the database is unreachable or saturated for now, or the
    /// transaction lost to a concurrent one.
    public var isTransient: Bool { kind == .unreachable || kind == .saturated || kind == .contention }

    /// Whether the statement is known to have had no effect, so it can go another way as if it had never been sent:
    /// it did not run (a pipeline skipped it after an earlier statement of its group failed, or its Parse failed,
    /// or libpq refused its parameters), it was a pipeline's read whose connection broke, or it could not take a
    /// lock at once (55P03, `lock_timeout` or `NOWAIT`: what it did is rolled back). False does not mean it wrote:
    /// a statement PostgreSQL ran and failed (a unique violation, say) wrote nothing either. Only a pipeline's write
    /// whose connection broke before its outcome came back may have committed.
    public var didNotRun: Bool { notRun || sqlState == "55P03" }

    /// Set by ``PostgresPipeline`` on the failure of a statement it knows had no effect (see ``didNotRun``).
    var notRun = false

    /// Whether the database is out of reach for now (unreachable, or no connection free in time): worth waiting for,
    /// not the statement's fault. A closed pool is not: it never reopens.
    public var isUnavailable: Bool { kind == .unreachable || kind == .saturated }

    public var description: String {
        if let sqlState { return "postgres \(code.rawValue) (\(sqlState)): \(reason)" }
        return "postgres \(code.rawValue): \(reason)"
    }

    public var debugDescription: String {
        guard let detail else { return description }
        return "\(description) [\(detail)]"
    }

    /// Maps a SQLSTATE to a code.
    static func code(forSQLState state: String) -> Code {
        switch state {
        case "23505": return .uniqueViolation
        case "40001": return .serializationFailure
        case "40P01": return .deadlockDetected
        case "57014", "55P03": return .queryCanceled
        case "57P01", "57P02", "57P03": return .serverShutdown
        case "25006": return .readOnly
        case "53100", "53200", "53300": return .resourceUnavailable
        case "42P01", "42703", "3F000", "42883": return .undefinedObject
        default:
            return state.hasPrefix("08") ? .connectionFailure : .server
        }
    }
}
