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

/// One libpq connection. Every blocking libpq call runs on the connection's own serial queue, never on Swift's
/// cooperative thread pool nor on a thread that serves others; callers suspend until it finishes.
///
/// Connections are lent by ``PostgresPool``; use one from one task or thread at a time.
public final class PostgresConnection: @unchecked Sendable {
    // `@unchecked Sendable`: `connection` and `statements` are touched only on `queue`, a serial queue, by the
    // connection's one borrower at a time (the pool's lock orders one borrower after the other, and an async call
    // has finished before it returns);
    // `broken`, `idleOutsideTransaction` and `healthCheckDue` are Mutexes. `timeoutSetInTransaction` is touched like
    // `statements`.
    private let connection: OpaquePointer
    private let queue: DispatchQueue
    private let settings: SessionSettings
    private var statements: [String: String] = [:]
    private var timeoutSetInTransaction = false
    private let broken = Mutex(false)
    private let idleOutsideTransaction = Mutex(true)
    private let healthCheckDue = Mutex(false)
    private let logger: Logger

    /// Most distinct statements a connection keeps prepared; others run unnamed.
    static let preparedStatementLimit = 512

    private init(connection: OpaquePointer, queue: DispatchQueue, settings: SessionSettings, logger: Logger) {
        self.connection = connection
        self.queue = queue
        self.settings = settings
        self.logger = logger
    }

    deinit {
        PQfinish(connection)
    }

    /// Opens a connection from any libpq connection string (a URI with one host or several, key/value settings,
    /// a service; see ``PostgresConnectionString``), through `PQconnectdbParams`.
    /// - Parameters:
    ///   - statementTimeoutMilliseconds: when set, `statement_timeout` (which also bounds waiting for locks): a
    ///     statement running longer fails with `queryCanceled`. How it is sent depends on `pooler`: libpq's
    ///     `options` (after any `options` the string gives) with none, so it survives reconnects; `SET` after
    ///     connecting and reconnecting behind a session pooler (PgBouncer refuses `options`); in each transaction
    ///     behind a transaction pooler (``PostgresPooler/transaction``).
    ///   - pooler: what is in front of PostgreSQL; default none.
    /// - Throws: ``PostgresError`` with code `connectionFailure`.
    public static func connect(url: String, statementTimeoutMilliseconds: Int? = nil, pooler: PostgresPooler = .none,
                               logger: Logger = .disabled()) async throws -> PostgresConnection {
        let queue = DispatchQueue(label: "baton.postgres.connection")
        let settings = SessionSettings(statementTimeoutMilliseconds: statementTimeoutMilliseconds, pooler: pooler)
        return try await offPool(on: queue) {
            PostgresConnection(connection: try openHandle(url: url, statementTimeoutMilliseconds: statementTimeoutMilliseconds, pooler: pooler),
                               queue: queue, settings: settings, logger: logger)
        }
    }

    /// Opens a libpq connection (blocking) with Baton's defaults and the session's timeouts (`statement_timeout`,
    /// and `lock_timeout` when given) as `pooler` allows them at connect time (see
    /// ``connect(url:statementTimeoutMilliseconds:pooler:logger:)``): as libpq's `options` straight to PostgreSQL,
    /// with `SET` after connecting behind a session pooler, not at all behind a transaction pooler (where they are set
    /// in each transaction); notices are dropped.
    /// - Throws: ``PostgresError`` with code `connectionFailure`.
    static func openHandle(url: String, statementTimeoutMilliseconds: Int?, lockTimeoutMilliseconds: Int? = nil,
                           pooler: PostgresPooler = .none) throws -> OpaquePointer {
        // Defaults first: with expand_dbname, settings in the URL override earlier keywords, and keywords after
        // the URL override it.
        var keywords = ["connect_timeout", "fallback_application_name", "dbname"]
        var values = ["5", "baton", url]
        let settings = [("statement_timeout", statementTimeoutMilliseconds), ("lock_timeout", lockTimeoutMilliseconds)]
            .compactMap { name, milliseconds in milliseconds.map { (name, $0) } }
        if !settings.isEmpty, pooler == .none {
            let given = (try? PostgresConnectionString(url))?.value(of: "options").map { $0 + " " } ?? ""
            keywords.append("options")
            values.append(given + settings.map { "-c \($0.0)=\($0.1)" }.joined(separator: " "))
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
            var message = lastError(pointer)
            PQfinish(pointer)
            if message.contains("unsupported startup parameter") {
                // PgBouncer's answer to the statement timeout sent as libpq's `options`.
                message += " (a pooler such as PgBouncer is in front: set database.pooler to \"session\" or \"transaction\")"
            }
            throw PostgresError(.connectionFailure, reason: message)
        }
        PQsetNoticeProcessor(pointer, ignoreNotice, nil)
        if pooler == .session {
            do {
                for (name, milliseconds) in settings { try setSessionTimeout(pointer, name, milliseconds) }
            } catch {
                PQfinish(pointer)
                throw error
            }
        }
        return pointer
    }

    /// `SET name = milliseconds` for the session (a session pooler's client keeps its server connection); `name` is
    /// one of Baton's own timeout settings.
    private static func setSessionTimeout(_ pointer: OpaquePointer, _ name: String, _ milliseconds: Int) throws {
        guard let result = PQexec(pointer, "SET \(name) = \(milliseconds)") else {
            throw PostgresError(.connectionFailure, reason: lastError(pointer))
        }
        defer { PQclear(result) }
        guard PQresultStatus(result) == PGRES_COMMAND_OK else { throw failure(of: result, on: pointer) }
    }

    /// Whether a transaction-mode pooler serves `url`: two connections ask in turn, twice each, which PostgreSQL
    /// process serves them. Straight to PostgreSQL, or through a session pooler, each connection keeps a process
    /// of its own; a transaction pooler lends one per transaction, so a connection's process changes, or two
    /// connections share one (PgBouncer gives the most recently used server connection). A question kept waiting
    /// (a session pooler with no server connection free for a second client) counts as no transaction pooler, and
    /// one whose every server connection is busy may go unnoticed.
    /// - Throws: ``PostgresError`` when connecting or asking fails.
    static func probeTransactionPooler(url: String) async throws -> Bool {
        try await offPool(on: DispatchQueue(label: "baton.postgres.probe")) {
            let first = try openHandle(url: url, statementTimeoutMilliseconds: nil, pooler: .transaction)
            defer { PQfinish(first) }
            let second = try openHandle(url: url, statementTimeoutMilliseconds: nil, pooler: .transaction)
            defer { PQfinish(second) }
            var processes: [[String]] = [[], []]
            for _ in 0..<2 {
                for (index, handle) in [first, second].enumerated() {
                    guard let process = try backendProcess(of: handle, waitingAtMost: .seconds(2)) else { return false }
                    processes[index].append(process)
                }
            }
            return Set(processes[0]).count > 1 || Set(processes[1]).count > 1 || !Set(processes[0]).isDisjoint(with: processes[1])
        }
    }

    /// `pg_backend_pid()` as seen through `handle`, or nil when no answer came within `limit`.
    private static func backendProcess(of handle: OpaquePointer, waitingAtMost limit: Duration) throws -> String? {
        guard PQsendQuery(handle, "SELECT pg_backend_pid()") == 1 else {
            throw PostgresError(.connectionFailure, reason: lastError(handle))
        }
        let deadline = ContinuousClock.now + limit
        while PQisBusy(handle) == 1 {
            let left = (deadline - ContinuousClock.now).components
            let milliseconds = left.seconds * 1000 + left.attoseconds / 1_000_000_000_000_000
            guard milliseconds > 0 else { return nil }
            var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, Int32(milliseconds))
            guard PQconsumeInput(handle) == 1 else { throw PostgresError(.connectionFailure, reason: lastError(handle)) }
        }
        var process: String?
        var error: PostgresError?
        while let result = PQgetResult(handle) {
            defer { PQclear(result) }
            if PQresultStatus(result) == PGRES_TUPLES_OK, PQntuples(result) == 1, let value = PQgetvalue(result, 0, 0) {
                process = String(cString: value)
            } else {
                error = error ?? failure(of: result, on: handle)
            }
        }
        if let error { throw error }
        return process
    }

    /// Whether the connection is known to be unusable (it will be discarded by the pool).
    public var isBroken: Bool { broken.withLock { $0 } }

    /// Runs `query` and returns its rows.
    /// - Throws: ``PostgresError`` (the SQLSTATE's code; `connectionFailure` when the connection broke).
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresResult {
        try await onQueue { try self.run(query) }
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
        if settings.pooler == .session, let timeout = settings.statementTimeoutMilliseconds {
            do {
                try Self.setSessionTimeout(connection, "statement_timeout", timeout)
            } catch {
                broken.withLock { $0 = true }
                throw error
            }
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

    /// Executes on `queue`: prepares the statement once per connection (unnamed behind a transaction pooler,
    /// where a name would outlive the transaction's server connection), then runs it with its parameters.
    private func run(_ query: PostgresQuery) throws -> PostgresResult {
        let parameters = try BoundParameters(query.bindings)
        if let timeout = settings.transactionTimeoutMilliseconds, needsTransactionTimeout {
            return try runAfterSettingTimeout(query.sql, parameters, milliseconds: timeout)
        }
        var name = statements[query.sql]
        if name == nil, settings.pooler != .transaction, statements.count < PostgresConnection.preparedStatementLimit {
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

    /// Whether the next statement needs the statement timeout set first, in its transaction: outside a transaction
    /// block (the statement is its own transaction), or in a block that has not set it yet. Never in a failed block,
    /// where only a rollback runs.
    private var needsTransactionTimeout: Bool {
        switch PQtransactionStatus(connection) {
        case PQTRANS_IDLE: true
        case PQTRANS_INTRANS: !timeoutSetInTransaction
        default: false
        }
    }

    /// Sends `set_config('statement_timeout', …, true)` and the statement in one libpq pipeline with one sync, so
    /// both run in one transaction (the implicit one of the extended protocol, or the open block) on whichever
    /// server connection a transaction pooler gives it, in one round trip; the setting ends with the transaction.
    private func runAfterSettingTimeout(_ sql: String, _ parameters: BoundParameters, milliseconds: Int) throws -> PostgresResult {
        guard PQenterPipelineMode(connection) == 1 else {
            throw PostgresError(.connectionFailure, reason: PostgresConnection.lastError(connection))
        }
        defer {
            if PQexitPipelineMode(connection) != 1 { broken.withLock { $0 = true } }
        }
        let sent = parameters.withPointers { pointers in
            PQsendQueryParams(connection, "SELECT set_config('statement_timeout', '\(milliseconds)', true)", 0, nil, nil, nil, nil, 0) == 1
                && PQsendQueryParams(connection, sql, parameters.count, parameters.types, pointers, parameters.lengths, parameters.formats, 0) == 1
                && PQpipelineSync(connection) == 1
        }
        guard sent else {
            if PQstatus(connection) != CONNECTION_OK { broken.withLock { $0 = true } }
            throw PostgresError(.connectionFailure, reason: PostgresConnection.lastError(connection))
        }
        // Results: the setting's, then the statement's, each followed by nil, then the sync's. Every one is read
        // (the pipeline must be drained before it ends); the first failure is thrown after.
        var rows: PostgresResult?
        var firstFailure: (any Error)?
        for index in 0..<2 {
            let result = PQgetResult(connection)
            do {
                let handle = try check(result)
                if index == 1 { rows = PostgresResult(handle: handle) }
            } catch {
                firstFailure = firstFailure ?? error
            }
            if result == nil { break }
            while let extra = PQgetResult(connection) { PQclear(extra) }
        }
        while let sync = PQgetResult(connection) {
            let status = PQresultStatus(sync)
            PQclear(sync)
            if status == PGRES_PIPELINE_SYNC { break }
        }
        let transactionStatus = PQtransactionStatus(connection)
        idleOutsideTransaction.withLock { $0 = transactionStatus == PQTRANS_IDLE }
        timeoutSetInTransaction = transactionStatus == PQTRANS_INTRANS
        if let firstFailure { throw firstFailure }
        guard let rows else { throw PostgresError(.connectionFailure, reason: PostgresConnection.lastError(connection)) }
        return rows
    }

    /// Turns a libpq result into a handle, or throws the error it carries (read before `PQclear`).
    private func check(_ result: OpaquePointer?) throws -> ResultHandle {
        let transactionStatus = PQtransactionStatus(connection)
        idleOutsideTransaction.withLock { $0 = transactionStatus == PQTRANS_IDLE }
        if transactionStatus != PQTRANS_INTRANS && transactionStatus != PQTRANS_INERROR { timeoutSetInTransaction = false }
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

/// What a connection sets up for its session, and how, given what is in front of PostgreSQL.
struct SessionSettings {
    var statementTimeoutMilliseconds: Int?
    var pooler: PostgresPooler

    /// The timeout to set in every transaction: only behind a transaction pooler, where a session setting would
    /// stay on a server connection other clients get next.
    var transactionTimeoutMilliseconds: Int? { pooler == .transaction ? statementTimeoutMilliseconds : nil }
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
