import BatonLogging

/// A bounded pool of ``PostgresConnection``s that lends one connection per operation.
///
/// Opens connections on demand up to `maxConnections`; a caller that finds none free waits at most
/// `acquireTimeout`, then fails with `poolTimeout`. Connections that broke are dropped and replaced by
/// the next caller; idle ones are checked before they are lent, so a connection the server closed
/// (restart, `pg_terminate_backend`) never fails a query.
public actor PostgresPool {
    /// Counts for metrics.
    public struct Statistics: Sendable, Equatable {
        /// Connections open or being opened.
        public var open: Int
        /// Open connections waiting to be lent.
        public var idle: Int
        /// Callers waiting for a connection.
        public var waiting: Int
    }

    private let url: String
    /// The most connections the pool opens at once.
    public nonisolated let maxConnections: Int
    private let acquireTimeout: Duration
    private let statementTimeoutMilliseconds: Int?
    private let logger: Logger
    private var idle: [PostgresConnection] = []
    private var open = 0
    /// Callers waiting for a connection, oldest first, each with the instant it fails with `poolTimeout`.
    private var waiters: [(deadline: ContinuousClock.Instant, continuation: CheckedContinuation<PostgresConnection, any Error>)] = []
    /// The one task that fails waiters whose deadline passed; it runs while anyone waits. (A task per wait
    /// cost a task, a timer and a cancellation for every request once the pool was busy.)
    private var expiry: Task<Void, Never>?
    private var closed = false

    /// Creates a pool; no connection is opened until the first use.
    /// - Parameters:
    ///   - url: a libpq connection string (``PostgresConnectionString``): a URI, a multi-host URI with
    ///     `target_session_attrs=read-write`, key/value settings or a service.
    ///   - maxConnections: at least 1; default 8.
    ///   - acquireTimeout: the longest a caller waits for a free connection; default 10 s.
    ///   - statementTimeoutMilliseconds: each connection's `statement_timeout` (see
    ///     ``PostgresConnection/connect(url:statementTimeoutMilliseconds:logger:)``), replacements included;
    ///     nil or 0: none (the server's setting); default none.
    public init(url: String, maxConnections: Int = 8, acquireTimeout: Duration = .seconds(10), statementTimeoutMilliseconds: Int? = nil,
                logger: Logger = .disabled()) {
        self.url = url
        self.maxConnections = max(1, maxConnections)
        self.acquireTimeout = acquireTimeout
        self.statementTimeoutMilliseconds = statementTimeoutMilliseconds.flatMap { $0 > 0 ? $0 : nil }
        self.logger = logger
    }

    /// Lends a connection to `body` and takes it back when `body` returns or throws.
    /// - Throws: what `body` throws, or ``PostgresError`` (`connectionFailure`, `poolTimeout`, `poolClosed`).
    public nonisolated func withConnection<T>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let connection = try await acquire()
        connection.scheduleHealthCheck()
        do {
            let value = try await body(connection)
            await release(connection)
            return value
        } catch {
            await release(connection)
            throw error
        }
    }

    /// Runs `body` in a transaction on a lent connection: commit on return, rollback on throw.
    public nonisolated func withTransaction<T>(isolation: IsolationLevel = .readCommitted, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await withConnection { connection in
            try await connection.withTransaction(isolation: isolation, body)
        }
    }

    /// Runs one query on a lent connection.
    @discardableResult
    public nonisolated func query(_ query: PostgresQuery) async throws -> PostgresResult {
        try await withConnection { try await $0.query(query) }
    }

    /// Runs one statement on a lent connection and returns the rows it changed.
    @discardableResult
    public nonisolated func execute(_ query: PostgresQuery) async throws -> Int {
        try await withConnection { try await $0.execute(query) }
    }

    /// Checks that a lent connection reaches a writable primary: `transaction_read_only` is off. A connection on a
    /// standby or a demoted primary is dropped, never lent again, so the next one finds the primary a multi-host
    /// string with `target_session_attrs=read-write` names.
    /// - Throws: ``PostgresError`` `readOnly`, or what connecting throws.
    public nonisolated func checkWritable() async throws {
        try await withConnection { connection in
            let readOnly = try await connection.query("SELECT current_setting('transaction_read_only')")[0].decode(String.self, at: 0)
            guard readOnly == "off" else {
                connection.markBroken()
                throw PostgresError(.readOnly, sqlState: "25006", reason: "the server is read-only (a standby, or a demoted primary)")
            }
        }
    }

    /// Current counts of open, idle and waiting.
    public func statistics() -> Statistics {
        Statistics(open: open, idle: idle.count, waiting: waiters.count)
    }

    /// Closes idle connections, fails waiting callers, and refuses new work. Lent connections close on return.
    public func close() {
        closed = true
        expiry?.cancel()
        let pending = waiters
        waiters.removeAll()
        for waiter in pending {
            waiter.continuation.resume(throwing: PostgresError(.poolClosed, reason: "the connection pool is closed"))
        }
        open -= idle.count
        idle.removeAll()
    }

    private func acquire() async throws -> PostgresConnection {
        guard !closed else { throw PostgresError(.poolClosed, reason: "the connection pool is closed") }
        while let connection = idle.popLast() {
            if !connection.isBroken { return connection }
            open -= 1
        }
        if open < maxConnections {
            open += 1
            do {
                return try await PostgresConnection.connect(url: url, statementTimeoutMilliseconds: statementTimeoutMilliseconds, logger: logger)
            } catch {
                open -= 1
                throw error
            }
        }
        let deadline = ContinuousClock.now + acquireTimeout
        return try await withCheckedThrowingContinuation { continuation in
            waiters.append((deadline, continuation))
            if expiry == nil {
                expiry = Task { [weak self] in
                    while let deadline = await self?.expireDueWaiters() {
                        try? await Task.sleep(until: deadline, clock: .continuous)
                    }
                }
            }
        }
    }

    /// Fails the waiters whose deadline passed and returns the oldest remaining one's deadline; nil (and the
    /// expiry task ends) when no one waits.
    private func expireDueWaiters() -> ContinuousClock.Instant? {
        let now = ContinuousClock.now
        while let oldest = waiters.first, oldest.deadline <= now {
            waiters.removeFirst().continuation.resume(throwing: PostgresError(.poolTimeout, reason: "no database connection became free in time"))
        }
        guard let oldest = waiters.first else {
            expiry = nil
            return nil
        }
        return oldest.deadline
    }

    private func release(_ connection: PostgresConnection) async {
        var usable = !connection.isBroken && !closed
        if usable, !connection.isIdleOutsideTransaction {
            // A caller left a transaction open: never lend that state to someone else.
            connection.markBroken()
            usable = false
        }
        if usable {
            if waiters.isEmpty {
                idle.append(connection)
            } else {
                waiters.removeFirst().continuation.resume(returning: connection)
            }
            return
        }
        open -= 1
        guard !closed, !waiters.isEmpty else { return }
        // Replace the dropped connection for the first waiter.
        open += 1
        let waiter = waiters.removeFirst()
        do {
            waiter.continuation.resume(returning: try await PostgresConnection.connect(url: url, statementTimeoutMilliseconds: statementTimeoutMilliseconds, logger: logger))
        } catch {
            open -= 1
            waiter.continuation.resume(throwing: error)
        }
    }
}
