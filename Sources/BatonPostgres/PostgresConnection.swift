import BatonConcurrency
internal import CBatonLibPQ
import Foundation
import Dispatch
import BatonLogging
import Synchronization

/// Transaction isolation levels for ``PostgresConnection/withTransaction(isolation:_:)``.
public enum IsolationLevel: String, Sendable {
    case readCommitted = "READ COMMITTED"
    case repeatableRead = "REPEATABLE READ"
    case serializable = "SERIALIZABLE"
}

/// One libpq connection. Every blocking libpq call of the async API runs on the connection's own serial queue,
/// never on Swift's cooperative thread pool; callers suspend until it finishes. A thread that may block (a
/// server thread) runs statements on itself with ``queryBlocking(_:)`` instead, with no hop at all.
///
/// Connections are lent by ``PostgresPool``; use one from one task or thread at a time.
public final class PostgresConnection: @unchecked Sendable {
    // `@unchecked Sendable`: `connection` and `statements` are touched only by the connection's one borrower at
    // a time: on `queue`, a serial queue, for the async API, or on the borrowing thread for the blocking one (the
    // pool's lock orders one borrower after the other, and an async call has finished before it returns);
    // `broken`, `idleOutsideTransaction` and `healthCheckDue` are Mutexes.
    private let connection: OpaquePointer
    private let queue: DispatchQueue
    private var statements: [String: String] = [:]
    private let broken = Mutex(false)
    private let idleOutsideTransaction = Mutex(true)
    private let healthCheckDue = Mutex(false)
    private let logger: Logger

    /// Most distinct statements a connection keeps prepared; others run unnamed.
    static let preparedStatementLimit = 512

    private init(connection: OpaquePointer, queue: DispatchQueue, logger: Logger) {
        self.connection = connection
        self.queue = queue
        self.logger = logger
    }

    deinit {
        PQfinish(connection)
    }

    /// Opens a connection from any libpq connection string (a URI with one host or several, key/value settings,
    /// a service; see ``PostgresConnectionString``), through `PQconnectdbParams`.
    /// - Parameter statementTimeoutMilliseconds: when set, the session's `statement_timeout` (which also bounds
    ///   waiting for locks): a statement running longer fails with `queryCanceled`. It is passed as libpq's
    ///   `options` (after any `options` the string gives), so it survives reconnects.
    /// - Throws: ``PostgresError`` with code `connectionFailure`.
    public static func connect(url: String, statementTimeoutMilliseconds: Int? = nil, logger: Logger = .disabled()) async throws -> PostgresConnection {
        let queue = DispatchQueue(label: "baton.postgres.connection")
        return try await offPool(on: queue) {
            try openConnection(url: url, statementTimeoutMilliseconds: statementTimeoutMilliseconds, queue: queue, logger: logger)
        }
    }

    private static func openConnection(url: String, statementTimeoutMilliseconds: Int?, queue: DispatchQueue, logger: Logger) throws -> PostgresConnection {
        PostgresConnection(connection: try openHandle(url: url, statementTimeoutMilliseconds: statementTimeoutMilliseconds), queue: queue, logger: logger)
    }

    /// Opens a libpq connection (blocking) with Baton's defaults and the session's timeouts (`statement_timeout`,
    /// and `lock_timeout` when given); notices are dropped.
    /// - Throws: ``PostgresError`` with code `connectionFailure`.
    static func openHandle(url: String, statementTimeoutMilliseconds: Int?, lockTimeoutMilliseconds: Int? = nil) throws -> OpaquePointer {
        // Defaults first: with expand_dbname, settings in the URL override earlier keywords, and keywords after
        // the URL override it.
        var keywords = ["connect_timeout", "fallback_application_name", "dbname"]
        var values = ["5", "baton", url]
        let settings = [("statement_timeout", statementTimeoutMilliseconds), ("lock_timeout", lockTimeoutMilliseconds)]
            .compactMap { name, milliseconds in milliseconds.map { "-c \(name)=\($0)" } }
        if !settings.isEmpty {
            let given = (try? PostgresConnectionString(url))?.value(of: "options").map { $0 + " " } ?? ""
            keywords.append("options")
            values.append(given + settings.joined(separator: " "))
        }
        let pointer = withCStringArray(keywords) { keywordPointers in
            withCStringArray(values) { valuePointers in
                PQconnectdbParams(keywordPointers, valuePointers, 1)
            }
        }
        guard let pointer else {
            throw PostgresError(.connectionFailure, reason: "libpq could not allocate a connection")
        }
        guard PQstatus(pointer) == CONNECTION_OK else {
            let message = lastError(pointer)
            PQfinish(pointer)
            throw PostgresError(.connectionFailure, reason: message)
        }
        PQsetNoticeProcessor(pointer, ignoreNotice, nil)
        return pointer
    }

    /// Whether the connection is known to be unusable (it will be discarded by the pool).
    public var isBroken: Bool { broken.withLock { $0 } }

    /// Runs `query` and returns its rows.
    /// - Throws: ``PostgresError`` (the SQLSTATE's code; `connectionFailure` when the connection broke).
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresResult {
        try await onQueue { try self.run(query) }
    }

    /// Runs `query` on the calling thread, which blocks until PostgreSQL answers: a thread of your own or a
    /// server's that borrowed the connection (``PostgresPool/withConnectionBlocking(_:)``), never Swift's
    /// cooperative pool.
    /// - Throws: ``PostgresError`` (the SQLSTATE's code; `connectionFailure` when the connection broke).
    @discardableResult
    package func queryBlocking(_ query: PostgresQuery) throws -> PostgresResult {
        try performDueHealthCheck()
        return try run(query)
    }

    /// Runs `query` and returns the number of rows it changed.
    @discardableResult
    public func execute(_ query: PostgresQuery) async throws -> Int {
        try await self.query(query).affectedRows
    }

    /// Runs one or more statements with no parameters through the simple-query protocol (migrations).
    public func executeScript(unsafeSQL sql: String) async throws {
        try await onQueue {
            let result = PQexec(self.connection, sql)
            _ = try self.check(result)
        }
    }

    /// Runs `body` in a transaction: commits when it returns, rolls back when it throws (the error is rethrown).
    public func withTransaction<T>(isolation: IsolationLevel = .readCommitted, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await executeScript(unsafeSQL: "BEGIN ISOLATION LEVEL \(isolation.rawValue)")
        let value: T
        do {
            value = try await body(self)
        } catch {
            try? await executeScript(unsafeSQL: "ROLLBACK")
            throw error
        }
        do {
            try await executeScript(unsafeSQL: "COMMIT")
        } catch {
            try? await executeScript(unsafeSQL: "ROLLBACK")
            throw error
        }
        return value
    }

    /// Asks for a liveness check before the next statement: the pool calls this when it lends the
    /// connection, and the check runs in the same hop to the connection's queue as that statement.
    func scheduleHealthCheck() {
        healthCheckDue.withLock { $0 = true }
    }

    /// On `queue`, when a check is due: reads anything the server sent while the connection was idle (a
    /// termination notice, say) and reconnects once when the connection has gone.
    /// - Throws: ``PostgresError`` with code `connectionFailure` when it cannot be made usable.
    private func performDueHealthCheck() throws {
        guard healthCheckDue.withLock({ due in defer { due = false }; return due }) else { return }
        if isAliveWhileIdle() { return }
        logger.info("postgres connection lost while idle; reconnecting")
        PQreset(connection)
        statements.removeAll()
        guard PQstatus(connection) == CONNECTION_OK else {
            broken.withLock { $0 = true }
            throw PostgresError(.connectionFailure, reason: PostgresConnection.lastError(connection))
        }
        broken.withLock { $0 = false }
        idleOutsideTransaction.withLock { $0 = true }
    }

    /// Whether the last statement left the connection outside any transaction block; the pool never
    /// lends a connection with an open transaction to another caller.
    var isIdleOutsideTransaction: Bool { idleOutsideTransaction.withLock { $0 } }

    /// Reads whatever the server sent since the last statement without blocking (libpq's socket is
    /// non-blocking), when the socket has anything to read: a terminated backend leaves an error and then end-of-file, which turn the
    /// connection's status bad.
    private func isAliveWhileIdle() -> Bool {
        // Usually the server sent nothing: one non-blocking poll says so without two reads that find nothing.
        var descriptor = pollfd(fd: PQsocket(connection), events: Int16(POLLIN), revents: 0)
        if PQstatus(connection) == CONNECTION_OK, descriptor.fd >= 0, poll(&descriptor, 1, 0) == 0 { return true }
        for _ in 0..<2 {
            guard PQstatus(connection) == CONNECTION_OK, PQconsumeInput(connection) == 1 else { return false }
            _ = PQisBusy(connection)  // parses what was read
        }
        return PQstatus(connection) == CONNECTION_OK
    }

    /// Marks the connection unusable so the pool discards it.
    func markBroken() {
        broken.withLock { $0 = true }
    }

    private func onQueue<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await offPool(on: queue) {
            try self.performDueHealthCheck()
            return try work()
        }
    }

    /// Executes on `queue`: prepares the statement once per connection, then runs it with its parameters.
    private func run(_ query: PostgresQuery) throws -> PostgresResult {
        let parameters = try BoundParameters(query.bindings)
        var name = statements[query.sql]
        if name == nil, statements.count < PostgresConnection.preparedStatementLimit {
            let newName = "baton_s\(statements.count)"
            _ = try check(PQprepare(connection, newName, query.sql, parameters.count, parameters.types))
            statements[query.sql] = newName
            name = newName
        }
        return try parameters.withPointers { pointers in
            let result: OpaquePointer?
            if let name {
                result = PQexecPrepared(connection, name, parameters.count, pointers, parameters.lengths, parameters.formats, 0)
            } else {
                result = PQexecParams(connection, query.sql, parameters.count, parameters.types, pointers, parameters.lengths,
                                      parameters.formats, 0)
            }
            return PostgresResult(handle: try check(result))
        }
    }

    /// Turns a libpq result into a handle, or throws the error it carries (read before `PQclear`).
    private func check(_ result: OpaquePointer?) throws -> ResultHandle {
        let transactionStatus = PQtransactionStatus(connection)
        idleOutsideTransaction.withLock { $0 = transactionStatus == PQTRANS_IDLE }
        guard let result else {
            if PQstatus(connection) != CONNECTION_OK { broken.withLock { $0 = true } }
            throw PostgresError(.connectionFailure, reason: PostgresConnection.lastError(connection))
        }
        let handle = ResultHandle(result)
        let status = PQresultStatus(result)
        if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY {
            return handle
        }
        let error = Self.failure(of: result, on: connection)
        if error.code == .connectionFailure || error.code == .readOnly { broken.withLock { $0 = true } }
        throw error
    }

    /// The error a failed result carries (read before `PQclear`). `connectionFailure` when the connection is gone,
    /// `readOnly` on a read-only server: either way the connection must not be used again.
    static func failure(of result: OpaquePointer, on connection: OpaquePointer) -> PostgresError {
        let field = { (code: UInt8) -> String? in
            PQresultErrorField(result, Int32(code)).map { String(cString: $0) }
        }
        let sqlState = field(UInt8(ascii: "C"))  // PG_DIAG_SQLSTATE
        let primary = field(UInt8(ascii: "M")) ?? PostgresConnection.lastError(connection)  // PG_DIAG_MESSAGE_PRIMARY
        var detail = [field(UInt8(ascii: "D")), field(UInt8(ascii: "H"))].compactMap { $0 }.joined(separator: "; ")
        var reason = primary
        if sqlState?.hasPrefix("22") == true {
            // A data exception's primary message may quote the value (`invalid input syntax for type
            // integer: "…"`): it goes to the detail, which only `debugDescription` shows.
            reason = "a value does not fit its type (data exception)"
            detail = detail.isEmpty ? primary : "\(primary); \(detail)"
        }
        var code = sqlState.map(PostgresError.code(forSQLState:)) ?? .server
        // On a read-only server (a standby, or a primary demoted by a failover) the connection is never reused:
        // the pool replaces it, and a multi-host string with target_session_attrs=read-write finds the primary.
        if PQstatus(connection) != CONNECTION_OK && code != .readOnly { code = .connectionFailure }
        return PostgresError(code, sqlState: sqlState, reason: reason, detail: detail.isEmpty ? nil : detail)
    }

    static func lastError(_ connection: OpaquePointer) -> String {
        guard let message = PQerrorMessage(connection) else { return "unknown libpq error" }
        let text = String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? "unknown libpq error" : text
    }
}

/// libpq prints notices to stderr by default; Baton's logs stay one line per event, so they are dropped.
private func ignoreNotice(_ argument: UnsafeMutableRawPointer?, _ message: UnsafePointer<CChar>?) {}

/// Calls `body` with a NULL-terminated array of C strings.
private func withCStringArray<R>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    let duplicates = strings.map { strdup($0) }
    defer { duplicates.forEach { free($0) } }
    return body(duplicates.map { UnsafePointer($0) } + [nil])
}

/// A statement's parameters as libpq takes them: types, formats, lengths and values.
struct BoundParameters {
    var types: [UInt32] = [], formats: [Int32] = [], lengths: [Int32] = []
    var values: [[UInt8]?] = []
    var count: Int32 { Int32(values.count) }

    /// - Throws: ``PostgresError`` `invalidParameter` for a text value holding a NUL byte.
    init(_ bindings: [any PostgresEncodable]) throws {
        types.reserveCapacity(bindings.count)
        formats.reserveCapacity(bindings.count)
        lengths.reserveCapacity(bindings.count)
        values.reserveCapacity(bindings.count)
        for binding in bindings {
            let bindingType = type(of: binding)
            let value = binding.postgresValue()
            // Text parameters travel as C strings: a NUL would end the value early, so a different value would be
            // compared or stored than the caller gave.
            if !bindingType.isBinary, value?.contains(0) == true {
                throw PostgresError(.invalidParameter, reason: "a text parameter contains a NUL byte")
            }
            types.append(bindingType.postgresType)
            formats.append(bindingType.isBinary ? 1 : 0)
            lengths.append(Int32(value?.count ?? 0))
            values.append(value)
        }
    }

    /// Calls `body` with C pointers to each value (NUL-terminated; nil for NULL).
    func withPointers<R>(_ body: ([UnsafePointer<CChar>?]) throws -> R) rethrows -> R {
        let total = values.reduce(0) { $0 + ($1?.count ?? 0) + 1 }
        let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: max(total, 1))
        defer { buffer.deallocate() }
        var pointers = [UnsafePointer<CChar>?]()
        pointers.reserveCapacity(values.count)
        var offset = 0
        for value in values {
            guard let value else {
                pointers.append(nil)
                continue
            }
            value.withUnsafeBufferPointer { source in
                if let base = source.baseAddress { (buffer + offset).update(from: base, count: source.count) }
            }
            buffer[offset + value.count] = 0
            pointers.append(UnsafeRawPointer(buffer + offset).assumingMemoryBound(to: CChar.self))
            offset += value.count + 1
        }
        return try body(pointers)
    }
}
