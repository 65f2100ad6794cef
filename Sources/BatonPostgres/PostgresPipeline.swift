import BatonConcurrency
internal import CBatonLibPQ
import Foundation
import BatonLogging

/// One libpq connection in pipeline mode, driven by an ``EventLoop``: statements are queued without waiting for
/// one another, written together at the end of the loop's round, and each one's outcome is handed to its callback
/// on the loop's thread. Many requests of one thread thus share a write, a read and PostgreSQL's wake-ups.
///
/// Reads queued in one round share one Sync (one implicit transaction); a write gets a Sync of its own before and
/// after it, so it commits alone. Outcomes are handed over once their Sync is confirmed, so a write's callback only
/// ever sees a committed statement. A failed statement fails the reads queued with it (PostgreSQL skips the rest
/// of the group): their callbacks get the error, and the caller takes another way. A connection that breaks fails
/// every statement in flight; the next use reconnects (on another thread, at most once a second), and until then
/// ``send(_:write:_:)`` says no. ``PostgresError/didNotRun`` tells a failure that wrote nothing, whose statement
/// can go another way as if it had never been sent.
///
/// The loop's thread never waits here: libpq runs non-blocking, connecting happens on another thread, and the
/// session's `lock_timeout` (``lockTimeoutMilliseconds``) fails a statement that would wait for a lock, so one
/// request's locked row never holds up the others on the one backend.
///
/// Use it only on its loop's thread.
package final class PostgresPipeline: @unchecked Sendable {
    // `@unchecked Sendable`: every property is touched only on the loop's thread; a connection opened on another
    // thread reaches the pipeline through ``EventLoop/execute(_:)``.
    /// What a statement came to.
    package typealias Completion = (Result<PostgresResult, PostgresError>) -> Void

    /// The pipeline session's `lock_timeout`: a statement waiting longer for a lock (a row another session holds
    /// `FOR UPDATE`, say) fails with `lock_not_available` (55P03, ``PostgresError/Code/queryCanceled``), and its
    /// caller takes the wait elsewhere. Every request of the loop waits behind that statement, so the wait is kept
    /// to a few milliseconds; it is still above how long a one-statement transaction holds its row (its commit's
    /// WAL flush, about a millisecond on an SSD), so two sign-ins meeting on one row rarely need the other way.
    package static let lockTimeoutMilliseconds = 5

    private struct Statement {
        let completion: Completion
        let isWrite: Bool
    }

    private enum Expected {
        /// The Parse of a statement's text, named once per connection.
        case prepare(sql: String)
        case statement(Statement)
        case sync
    }

    private let loop: EventLoop
    private let url: String
    private let statementTimeoutMilliseconds: Int?
    /// What is in front of PostgreSQL: behind a session pooler the timeouts are set after connecting.
    private let pooler: PostgresPooler
    private let logger: Logger
    private var connection: OpaquePointer?
    private var descriptor: Int32 = -1
    /// The name each statement's text is prepared under on this connection.
    private var statements: [String: String] = [:]
    /// Prepared statements named so far: a name is never given twice, since one whose Parse failed may still
    /// stand beside those that exist on the server.
    private var statementsNamed = 0
    /// What PostgreSQL will answer, in order; `head` is the next.
    private var expected: [Expected] = []
    private var head = 0
    /// The result of the statement at `head` until its end (libpq's NULL).
    private var currentResult: OpaquePointer?
    /// Why the Parse just answered failed: the statement it was for (next in `expected`) fails with this.
    private var prepareFailure: PostgresError?
    /// The group's commit just failed: libpq ends its error with a NULL before the Sync result.
    private var commitFailed = false
    /// Outcomes waiting for their group's Sync.
    private var settled: [(Statement, Result<PostgresResult, PostgresError>)] = []
    /// Reads queued since the last Sync.
    private var unsynced = false
    private var waitingToWrite = false
    private var connecting = false
    /// The loop has stopped: nothing is sent or connected any more.
    private var loopStopped = false
    private var nextAttempt = ContinuousClock.now

    /// A pipeline on `loop` (call it on the loop's thread); it connects on first use.
    package init(loop: EventLoop, url: String, statementTimeoutMilliseconds: Int?, pooler: PostgresPooler = .none, logger: Logger) {
        self.loop = loop
        self.url = url
        self.statementTimeoutMilliseconds = statementTimeoutMilliseconds
        self.pooler = pooler
        self.logger = logger
        loop.atEndOfRound { [weak self] in self?.flush() }
        loop.atStop { [weak self] in self?.loopHasStopped() }
    }

    deinit {
        if let connection { PQfinish(connection) }
        currentResult.map { PQclear($0) }
    }

    /// Whether statements can be queued now; when not, a connection is being opened.
    package var isReady: Bool {
        if connection == nil && !loopStopped { connect() }
        return connection != nil
    }

    /// Queues `query`; `completion` runs on the loop's thread with its outcome, once its group is over. A `write`
    /// commits on its own.
    ///
    /// The answer is the contract. True: `completion` runs exactly once (at once, for a parameter libpq cannot
    /// take; else in a later round or when the connection breaks). False: `completion` has not run and never will,
    /// and the statement was not committed: there is no connection (one is being opened, or the loop has stopped),
    /// or it broke while the statement was queued (the statements in flight then fail).
    @discardableResult
    package func send(_ query: PostgresQuery, write: Bool = false, _ completion: @escaping Completion) -> Bool {
        guard isReady, let connection else { return false }
        let parameters: BoundParameters
        do {
            parameters = try BoundParameters(query.bindings)
        } catch {
            var refused = error as? PostgresError ?? PostgresError(.invalidParameter, reason: "\(error)")
            refused.notRun = true
            completion(.failure(refused))
            return true
        }
        if write && unsynced { guard sync() else { return false } }
        var name = statements[query.sql]
        if name == nil {
            let newName = "baton_p\(statementsNamed)"
            statementsNamed += 1
            guard PQsendPrepare(connection, newName, query.sql, parameters.count, parameters.types) == 1 else { return broke() }
            expected.append(.prepare(sql: query.sql))
            statements[query.sql] = newName
            name = newName
        }
        let sent = parameters.withPointers { pointers in
            PQsendQueryPrepared(connection, name, parameters.count, pointers, parameters.lengths, parameters.formats, 0)
        }
        guard sent == 1 else { return broke() }
        let statement = Expected.statement(Statement(completion: completion, isWrite: write))
        if write { return sync(after: statement) }
        expected.append(statement)
        unsynced = true
        return true
    }

    // MARK: Writing

    /// Ends the group: PostgreSQL commits it and answers with a Sync result. A write's `statement` joins the group
    /// only once its Sync is queued, so when queueing fails, the failure of everything in flight does not reach it.
    private func sync(after statement: Expected? = nil) -> Bool {
        guard let connection else { return false }
        unsynced = false
        guard PQpipelineSync(connection) == 1 else { return broke() }
        if let statement { expected.append(statement) }
        expected.append(.sync)
        return true
    }

    /// At the end of every round: closes the open group and writes what is queued; what the socket does not take
    /// now is written when it is writable.
    private func flush() {
        guard connection != nil else { return }
        if unsynced { guard sync() else { return } }
        writePending()
    }

    private func writePending() {
        guard let connection else { return }
        let left = PQflush(connection)
        if left < 0 { return failAll(PostgresError(.connectionFailure, reason: PostgresConnection.lastError(connection))) }
        let wantsWrite = left == 1
        if wantsWrite != waitingToWrite {
            waitingToWrite = wantsWrite
            loop.change(descriptor, readable: true, writable: wantsWrite)
        }
    }

    // MARK: Reading

    private func readable() {
        guard let connection else { return }
        guard PQconsumeInput(connection) == 1 else {
            return failAll(PostgresError(.connectionFailure, reason: PostgresConnection.lastError(connection)))
        }
        var lostServer = false
        reading: while head < expected.count, PQisBusy(connection) == 0 {
            let result = PQgetResult(connection)
            switch expected[head] {
            case .sync:
                // A Sync result, not followed by a NULL. (A NULL here is libpq's idle answer, wait for more, unless
                // it ends a failed commit's error.)
                guard let result else {
                    guard commitFailed else { break reading }
                    commitFailed = false
                    continue
                }
                guard PQresultStatus(result) == PGRES_PIPELINE_SYNC else {
                    // The group's commit failed (a deferred constraint, say): nothing of it is kept. A NULL and the
                    // Sync result follow.
                    let error = PostgresConnection.failure(of: result, on: connection)
                    PQclear(result)
                    settled = settled.map { statement, _ in (statement, .failure(error)) }
                    commitFailed = true
                    continue
                }
                PQclear(result)
                head += 1
                let outcomes = settled
                settled.removeAll(keepingCapacity: true)
                // Every outcome is handed over, even when a callback breaks the connection (a write it queues that
                // cannot be sent drops it): these statements are over, whatever comes next.
                for (statement, outcome) in outcomes {
                    if case .failure(let error) = outcome, error.code == .connectionFailure || error.code == .readOnly { lostServer = true }
                    statement.completion(outcome)
                }
                if self.connection == nil { return }
            case .prepare, .statement:
                if let result {
                    // The first result is the statement's; anything more before its NULL is dropped.
                    if currentResult == nil { currentResult = result } else { PQclear(result) }
                    continue
                }
                finishStatement(expected[head], connection)
                head += 1
            }
            if PQstatus(connection) != CONNECTION_OK { lostServer = true }
            if lostServer { break reading }
        }
        // Answered entries are dropped from the front, so a pipeline that never runs dry does not keep them all.
        if head == expected.count {
            expected.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64 {
            expected.removeFirst(head)
            head = 0
        }
        if lostServer || PQstatus(connection) != CONNECTION_OK {
            failAll(PostgresError(.connectionFailure, reason: "the server is gone or read-only"))
        }
    }

    /// The statement or Parse at `head` ended: a statement's outcome waits for the group's Sync.
    private func finishStatement(_ entry: Expected, _ connection: OpaquePointer) {
        let result = currentResult
        currentResult = nil
        var outcome: Result<PostgresResult, PostgresError>
        if let result {
            let status = PQresultStatus(result)
            if status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK {
                outcome = .success(PostgresResult(handle: ResultHandle(result)))
            } else if status == PGRES_PIPELINE_ABORTED {
                PQclear(result)
                var skipped = PostgresError(.server, reason: "not run: an earlier statement of its group failed")
                skipped.notRun = true
                outcome = .failure(skipped)
            } else {
                outcome = .failure(PostgresConnection.failure(of: result, on: connection))
                PQclear(result)
            }
        } else {
            outcome = .failure(PostgresError(.connectionFailure, reason: PostgresConnection.lastError(connection)))
        }
        switch entry {
        case .prepare(let sql):
            guard case .failure(let error) = outcome else { return }
            // No statement by that name exists now: the text gets a new name next time. Other names stand.
            statements[sql] = nil
            if !error.notRun { prepareFailure = error }
        case .statement(let statement):
            if let failure = prepareFailure {
                // It was skipped because its own Parse failed: that error says why.
                prepareFailure = nil
                var notRun = failure
                notRun.notRun = true
                outcome = .failure(notRun)
            }
            settled.append((statement, outcome))
        case .sync:
            break
        }
    }

    // MARK: Connecting and breaking

    /// Opens a connection on another thread (libpq's connect blocks), at most once a second; the loop adopts it,
    /// already non-blocking and in pipeline mode.
    private func connect() {
        guard !connecting, ContinuousClock.now >= nextAttempt else { return }
        connecting = true
        nextAttempt = ContinuousClock.now + .seconds(1)
        let (url, timeout, pooler, loop) = (url, statementTimeoutMilliseconds, pooler, loop)
        DispatchQueue.global().async { [weak self] in
            let opened = Result { try OpenedHandle(PostgresPipeline.openForPipeline(url: url, statementTimeoutMilliseconds: timeout, pooler: pooler)) }
            loop.execute { [weak self] in
                guard let self else {
                    if case .success(let handle) = opened { PQfinish(handle.pointer) }
                    return
                }
                self.adopt(opened)
            }
        }
    }

    /// Opens a connection (blocking: not on the loop) and readies it for the loop: non-blocking, in pipeline mode.
    /// - Throws: ``PostgresError`` `connectionFailure`.
    private static func openForPipeline(url: String, statementTimeoutMilliseconds: Int?, pooler: PostgresPooler) throws -> OpaquePointer {
        let pointer = try PostgresConnection.openHandle(url: url, statementTimeoutMilliseconds: statementTimeoutMilliseconds,
                                                        lockTimeoutMilliseconds: lockTimeoutMilliseconds, pooler: pooler)
        guard PQsetnonblocking(pointer, 1) == 0, PQenterPipelineMode(pointer) == 1 else {
            let message = PostgresConnection.lastError(pointer)
            PQfinish(pointer)
            throw PostgresError(.connectionFailure, reason: "pipeline mode unavailable: \(message)")
        }
        return pointer
    }

    private func adopt(_ opened: Result<OpenedHandle, any Error>) {
        connecting = false
        switch opened {
        case .failure(let error):
            logger.warning("pipeline connection failed", ["error": String(describing: error)])
        case .success(let handle):
            let pointer = handle.pointer
            connection = pointer
            descriptor = PQsocket(pointer)
            waitingToWrite = false
            loop.watch(descriptor) { [weak self] readable, writable in
                if writable { self?.writePending() }
                if readable { self?.readable() }
            }
        }
    }

    /// The loop has stopped (its server's shutdown deadline passed with statements in flight): each of them fails as
    /// `pool_closed`, so its callback runs as ``send(_:write:_:)`` promised, and the connection closes.
    private func loopHasStopped() {
        loopStopped = true
        failAll(PostgresError(.poolClosed, reason: "the pipeline's event loop stopped"))
    }

    /// A write to libpq failed: the connection is done for.
    private func broke() -> Bool {
        failAll(PostgresError(.connectionFailure, reason: connection.map(PostgresConnection.lastError) ?? "no connection"))
        return false
    }

    /// Fails everything in flight with `error` and drops the connection; the next use reconnects. A read's failure
    /// says it wrote nothing (``PostgresError/didNotRun``); a write's cannot: its Sync may have reached the server.
    private func failAll(_ error: PostgresError) {
        guard let connection else { return }
        if error.code == .poolClosed {
            logger.debug("pipeline closed with its event loop")
        } else {
            logger.info("pipeline connection dropped", ["error": error.reason])
        }
        loop.unwatch(descriptor)
        PQfinish(connection)
        self.connection = nil
        descriptor = -1
        currentResult.map { PQclear($0) }
        currentResult = nil
        prepareFailure = nil
        commitFailed = false
        statements.removeAll()
        unsynced = false
        let outcomes = settled
        let pending = expected[head...]
        settled.removeAll()
        expected.removeAll()
        head = 0
        var readFailure = error
        readFailure.notRun = true
        let fail = { (statement: Statement) in statement.completion(.failure(statement.isWrite ? error : readFailure)) }
        for (statement, _) in outcomes { fail(statement) }
        for case .statement(let statement) in pending { fail(statement) }
    }
}

/// A connection opened on another thread, handed to the loop that adopts it (nothing else touches it meanwhile).
private struct OpenedHandle: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}
