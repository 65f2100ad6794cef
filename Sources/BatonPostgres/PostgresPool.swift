import BatonConcurrency
import BatonLogging
import Synchronization

/// What is in front of PostgreSQL, which decides what a connection may keep from one transaction to the next.
public enum PostgresPooler: String, Sendable, Codable, CaseIterable {
    /// PostgreSQL itself: connections keep named prepared statements and session settings, event loops get a
    /// pipeline. A pool checks when it opens its first connection that no transaction pooler is in front.
    case none
    /// A session-mode pooler (PgBouncer `pool_mode = session`): a client keeps its server connection while
    /// connected, so everything works as with none, except that the statement timeout is sent with `SET` after
    /// connecting (PgBouncer refuses libpq's `options`). Checked like none.
    case session
    /// A transaction-mode pooler (PgBouncer `pool_mode = transaction`): after each transaction the server
    /// connection may be another client's, so nothing outlives one. Statements run unnamed, the statement timeout
    /// is set in each transaction, and event loops get no pipeline.
    case transaction
}

/// A bounded pool of ``PostgresConnection``s that lends one connection per operation.
///
/// Opens connections on demand up to `maxConnections`; a caller that finds none free waits at most
/// `acquireTimeout`, then fails with `poolTimeout`. Connections that broke are dropped and replaced by
/// the next caller; idle ones are checked before they are lent, so a connection the server closed
/// (restart, `pg_terminate_backend`) never fails a query.
///
/// The pool's state is a few counters and lists behind one lock, so lending and taking back cost no hop to
/// another executor (it was an actor: two hops per request). Connections are lent only to async callers
/// (``withConnection(_:)``), whose libpq calls run on the connection's own queue: no thread that serves others
/// ever runs libpq synchronously. An event loop gets its own pipeline connection instead (``pipeline(on:)``).
public final class PostgresPool: Sendable {
    /// Counts for metrics.
    public struct Statistics: Sendable, Equatable {
        /// Connections open or being opened.
        public var open: Int
        /// Open connections waiting to be lent.
        public var idle: Int
        /// Callers waiting for a connection.
        public var waiting: Int
    }

    /// A caller waiting for a connection: it gets one, or nil when it may open one (a slot was freed for it).
    private typealias Waiter = (deadline: ContinuousClock.Instant, continuation: CheckedContinuation<PostgresConnection?, any Error>)

    private struct State {
        var idle: [PostgresConnection] = []
        var open = 0
        /// Callers waiting for a connection, oldest first.
        var waiters: [Waiter] = []
        /// The one task that fails waiters whose deadline passed; it runs while anyone waits. (A task per wait
        /// cost a task, a timer and a cancellation for every request once the pool was busy.)
        var expiry: Task<Void, Never>?
        var closed = false
        /// Whether a probe found no transaction pooler in front (see ``PostgresPooler/none``).
        var poolerChecked = false
    }

    private let url: String
    /// The most connections the pool opens at once.
    public let maxConnections: Int
    private let acquireTimeout: Duration
    private let statementTimeoutMilliseconds: Int?
    /// What is in front of PostgreSQL.
    public let pooler: PostgresPooler
    private let logger: Logger
    private let state = Mutex(State())
    /// Names this pool among all of the process's (an event loop keeps one pipeline per pool).
    private let identity = PostgresPool.pools.wrappingAdd(1, ordering: .relaxed).newValue
    private static let pools = Atomic<Int>(0)

    private struct PipelineKey: Hashable {
        let pool: Int
    }

    /// Creates a pool; no connection is opened until the first use.
    /// - Parameters:
    ///   - url: a libpq connection string (``PostgresConnectionString``): a URI, a multi-host URI with
    ///     `target_session_attrs=read-write`, key/value settings or a service.
    ///   - maxConnections: at least 1; default 8.
    ///   - acquireTimeout: the longest a caller waits for a free connection; default 10 s.
    ///   - statementTimeoutMilliseconds: each connection's `statement_timeout` (see
    ///     ``PostgresConnection/connect(url:statementTimeoutMilliseconds:pooler:logger:)``), replacements included;
    ///     nil or 0: none (the server's setting); default none.
    ///   - pooler: what is in front of PostgreSQL; default none. With none or session, opening the first connection
    ///     fails with `invalidConfiguration` when a transaction pooler is found in front.
    public init(url: String, maxConnections: Int = 8, acquireTimeout: Duration = .seconds(10), statementTimeoutMilliseconds: Int? = nil,
                pooler: PostgresPooler = .none, logger: Logger = .disabled()) {
        self.url = url
        self.maxConnections = max(1, maxConnections)
        self.acquireTimeout = acquireTimeout
        self.statementTimeoutMilliseconds = statementTimeoutMilliseconds.flatMap { $0 > 0 ? $0 : nil }
        self.pooler = pooler
        self.logger = logger
    }

    deinit {
        state.withLock { $0.expiry?.cancel() }
    }

    /// Lends a connection to `body` and takes it back when `body` returns or throws.
    /// - Throws: what `body` throws, or ``PostgresError`` (`connectionFailure`, `poolTimeout`, `poolClosed`).
    public func withConnection<T>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let connection = try await acquire()
        connection.scheduleHealthCheck()
        do {
            let value = try await body(connection)
            release(connection)
            return value
        } catch {
            release(connection)
            throw error
        }
    }

    /// The pipeline connection (``PostgresPipeline``) of `loop` to the pool's database, with the pool's statement
    /// timeout: one per loop and pool, made on first use, connected in the background (``PostgresPipeline/isReady``).
    /// Call it on `loop`'s thread. Nil once the pool is closed, or behind a transaction pooler (which would hand the
    /// server connection to another client at the first of the pipeline's syncs, with results still in flight). It
    /// is not counted in ``maxConnections``.
    package func pipeline(on loop: EventLoop) -> PostgresPipeline? {
        precondition(EventLoop.current === loop, "a pipeline is used on its own loop's thread")
        guard pooler != .transaction, !state.withLock({ $0.closed }) else { return nil }
        return loop.local(PipelineKey(pool: identity)) {
            PostgresPipeline(loop: loop, url: url, statementTimeoutMilliseconds: statementTimeoutMilliseconds, pooler: pooler, logger: logger)
        }
    }

    /// Runs `body` in a transaction on a lent connection: commit on return, rollback on throw.
    public func withTransaction<T>(isolation: IsolationLevel = .readCommitted, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await withConnection { connection in
            try await connection.withTransaction(isolation: isolation, body)
        }
    }

    /// Runs one query on a lent connection.
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresResult {
        try await withConnection { try await $0.query(query) }
    }

    /// Runs one statement on a lent connection and returns the rows it changed.
    @discardableResult
    public func execute(_ query: PostgresQuery) async throws -> Int {
        try await withConnection { try await $0.execute(query) }
    }

    /// Checks that a lent connection reaches a writable primary: `transaction_read_only` is off. A connection on a
    /// standby or a demoted primary is dropped, never lent again, so the next one finds the primary a multi-host
    /// string with `target_session_attrs=read-write` names.
    /// - Throws: ``PostgresError`` `readOnly`, or what connecting throws.
    public func checkWritable() async throws {
        try await withConnection { connection in
            let readOnly = try await connection.query("SELECT current_setting('transaction_read_only')")[0].decode(String.self, at: 0)
            guard readOnly == "off" else {
                connection.markBroken()
                throw PostgresError(.readOnly, sqlState: "25006", reason: "the server is read-only (a standby, or a demoted primary)")
            }
        }
    }

    /// Current counts of open, idle and waiting.
    public func statistics() async -> Statistics {
        state.withLock { Statistics(open: $0.open, idle: $0.idle.count, waiting: $0.waiters.count) }
    }

    /// Closes idle connections, fails waiting callers, and refuses new work. Lent connections close on return.
    public func close() async {
        let (pending, closing) = state.withLock { state -> ([Waiter], [PostgresConnection]) in
            state.closed = true
            state.expiry?.cancel()
            state.expiry = nil
            let pending = state.waiters, closing = state.idle
            state.waiters.removeAll()
            state.open -= state.idle.count
            state.idle.removeAll()
            return (pending, closing)
        }
        for waiter in pending {
            waiter.continuation.resume(throwing: PostgresError(.poolClosed, reason: "the connection pool is closed"))
        }
        _ = closing  // the connections close (PQfinish) as the last reference goes, here
    }

    private enum Take { case lend(PostgresConnection), open, full, closed }

    /// An idle connection, else a slot to open one in (counted in `open`), else `full`.
    private func takeIdleOrSlot() -> Take {
        state.withLock { state -> Take in
            if state.closed { return .closed }
            if let connection = Self.popIdle(&state) { return .lend(connection) }
            guard state.open < maxConnections else { return .full }
            state.open += 1
            return .open
        }
    }

    /// An idle connection that is not known to be broken (broken ones are dropped on the way); called locked.
    private static func popIdle(_ state: inout State) -> PostgresConnection? {
        while let connection = state.idle.popLast() {
            if !connection.isBroken { return connection }
            state.open -= 1
        }
        return nil
    }

    private func acquire() async throws -> PostgresConnection {
        // Usually a connection is idle: one lock, no continuation.
        switch takeIdleOrSlot() {
        case .closed: throw PostgresError(.poolClosed, reason: "the connection pool is closed")
        case .lend(let connection): return connection
        case .open: return try await openReserved()
        case .full: break
        }
        let deadline = ContinuousClock.now + acquireTimeout
        let lent: PostgresConnection? = try await withCheckedThrowingContinuation { continuation in
            // Checked again under the lock: a connection may have come back since.
            let now = state.withLock { state -> Result<PostgresConnection?, any Error>? in
                if state.closed { return .failure(PostgresError(.poolClosed, reason: "the connection pool is closed")) }
                if let connection = Self.popIdle(&state) { return .success(connection) }
                if state.open < maxConnections {
                    state.open += 1
                    return .success(nil)
                }
                state.waiters.append((deadline, continuation))
                if state.expiry == nil {
                    state.expiry = Task { [weak self] in
                        while let deadline = self?.expireDueWaiters() {
                            try? await Task.sleep(until: deadline, clock: .continuous)
                            if Task.isCancelled { return }
                        }
                    }
                }
                return nil
            }
            if let now { continuation.resume(with: now) }
        }
        if let lent { return lent }
        return try await openReserved()
    }

    /// Opens a connection in a slot already counted in `open`; the slot is given back when that fails.
    private func openReserved() async throws -> PostgresConnection {
        do {
            try await checkPoolerOnce()
            return try await PostgresConnection.connect(url: url, statementTimeoutMilliseconds: statementTimeoutMilliseconds, pooler: pooler,
                                                        logger: logger)
        } catch {
            slotFreed()
            throw error
        }
    }

    /// Unless the pool was told a transaction pooler is in front, checks once that there is none
    /// (``PostgresConnection/probeTransactionPooler(url:)``), so the first connection fails rather than run unsafely.
    /// - Throws: ``PostgresError`` `invalidConfiguration` when one is found, or what connecting throws.
    private func checkPoolerOnce() async throws {
        guard pooler != .transaction, !state.withLock({ $0.poolerChecked }) else { return }
        if try await PostgresConnection.probeTransactionPooler(url: url) {
            throw PostgresError(.invalidConfiguration, reason: """
                a transaction-mode pooler is in front of PostgreSQL (two connections were served by one server \
                process in turn, as PgBouncer's pool_mode = transaction does): set database.pooler to "transaction" \
                (BATON_DATABASE_POOLER=transaction), or connect to PostgreSQL or through a session-mode pool
                """)
        }
        state.withLock { $0.poolerChecked = true }
    }

    /// A counted connection is gone (it broke, or never opened): the first waiter, if any, may open one in its place.
    private func slotFreed() {
        let waiter = state.withLock { state -> Waiter? in
            state.open -= 1
            guard !state.closed, !state.waiters.isEmpty else { return nil }
            state.open += 1
            return state.waiters.removeFirst()
        }
        waiter?.continuation.resume(returning: nil)
    }

    /// Fails the waiters whose deadline passed and returns the oldest remaining one's deadline; nil (and the
    /// expiry task ends) when no one waits.
    private func expireDueWaiters() -> ContinuousClock.Instant? {
        let now = ContinuousClock.now
        let (expired, next) = state.withLock { state -> ([Waiter], ContinuousClock.Instant?) in
            var expired: [Waiter] = []
            while let oldest = state.waiters.first, oldest.deadline <= now { expired.append(state.waiters.removeFirst()) }
            guard let oldest = state.waiters.first else {
                state.expiry = nil
                return (expired, nil)
            }
            return (expired, oldest.deadline)
        }
        for waiter in expired {
            waiter.continuation.resume(throwing: PostgresError(.poolTimeout, reason: "no database connection became free in time"))
        }
        return next
    }

    private func release(_ connection: PostgresConnection) {
        var usable = !connection.isBroken
        if usable, !connection.isIdleOutsideTransaction {
            // A caller left a transaction open: never lend that state to someone else.
            connection.markBroken()
            usable = false
        }
        guard usable else { return slotFreed() }
        let waiter = state.withLock { state -> Waiter? in
            if state.closed {
                state.open -= 1
                return nil
            }
            if state.waiters.isEmpty {
                state.idle.append(connection)
                return nil
            }
            return state.waiters.removeFirst()
        }
        waiter?.continuation.resume(returning: connection)
    }
}
