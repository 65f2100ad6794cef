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
/// ``send(_:write:_:)`` says no.
///
/// Use it only on its loop's thread.
package final class PostgresPipeline: @unchecked Sendable {
    // `@unchecked Sendable`: every property is touched only on the loop's thread; a connection opened on another
    // thread reaches the pipeline through ``EventLoop/execute(_:)``.
    /// What a statement came to.
    package typealias Completion = (Result<PostgresResult, PostgresError>) -> Void

    private enum Expected {
        case prepare
        case statement(Completion)
        case sync
    }

    private let loop: EventLoop
    private let url: String
    private let statementTimeoutMilliseconds: Int?
    private let logger: Logger
    private var connection: OpaquePointer?
    private var descriptor: Int32 = -1
    private var statements: [String: String] = [:]
    /// What PostgreSQL will answer, in order; `head` is the next.
    private var expected: [Expected] = []
    private var head = 0
    /// The result of the statement at `head` until its end (libpq's NULL).
    private var currentResult: OpaquePointer?
    /// Outcomes waiting for their group's Sync.
    private var settled: [(Completion, Result<PostgresResult, PostgresError>)] = []
    /// Reads queued since the last Sync.
    private var unsynced = false
    private var waitingToWrite = false
    private var connecting = false
    private var nextAttempt = ContinuousClock.now

    /// A pipeline on `loop` (call it on the loop's thread); it connects on first use.
    package init(loop: EventLoop, url: String, statementTimeoutMilliseconds: Int?, logger: Logger) {
        self.loop = loop
        self.url = url
        self.statementTimeoutMilliseconds = statementTimeoutMilliseconds
        self.logger = logger
        loop.atEndOfRound { [weak self] in self?.flush() }
    }

    deinit {
        if let connection { PQfinish(connection) }
        currentResult.map { PQclear($0) }
    }

    /// Whether statements can be queued now; when not, a connection is being opened.
    package var isReady: Bool {
        if connection == nil { connect() }
        return connection != nil
    }

    /// Queues `query`; `completion` runs on the loop's thread with its outcome. A `write` commits on its own.
    /// Returns false, and never calls `completion`, when there is no connection (being opened) or it just broke.
    @discardableResult
    package func send(_ query: PostgresQuery, write: Bool = false, _ completion: @escaping Completion) -> Bool {
        guard isReady, let connection else { return false }
        let parameters: BoundParameters
        do {
            parameters = try BoundParameters(query.bindings)
        } catch {
            completion(.failure(error as? PostgresError ?? PostgresError(.invalidParameter, reason: "\(error)")))
            return true
        }
        if write && unsynced { guard sync() else { return false } }
        var name = statements[query.sql]
        if name == nil {
            let newName = "baton_p\(statements.count)"
            guard PQsendPrepare(connection, newName, query.sql, parameters.count, parameters.types) == 1 else { return broke() }
            expected.append(.prepare)
            statements[query.sql] = newName
            name = newName
        }
        let sent = parameters.withPointers { pointers in
            PQsendQueryPrepared(connection, name, parameters.count, pointers, parameters.lengths, parameters.formats, 0)
        }
        guard sent == 1 else { return broke() }
        expected.append(.statement(completion))
        if write { return sync() }
        unsynced = true
        return true
    }

    // MARK: Writing

    /// Ends the group: PostgreSQL commits it and answers with a Sync result.
    private func sync() -> Bool {
        guard let connection else { return false }
        unsynced = false
        guard PQpipelineSync(connection) == 1 else { return broke() }
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
                // A Sync result, not followed by a NULL. (A NULL here would be libpq's idle answer: wait for more.)
                guard let result else { break reading }
                PQclear(result)
                head += 1
                let outcomes = settled
                settled.removeAll(keepingCapacity: true)
                for (completion, outcome) in outcomes {
                    if case .failure(let error) = outcome, error.code == .connectionFailure || error.code == .readOnly { lostServer = true }
                    // A callback may queue the next statement, and a write that fails drops the connection.
                    completion(outcome)
                    if self.connection == nil { return }
                }
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

    /// The statement at `head` ended: its outcome waits for the group's Sync.
    private func finishStatement(_ entry: Expected, _ connection: OpaquePointer) {
        let result = currentResult
        currentResult = nil
        let outcome: Result<PostgresResult, PostgresError>
        if let result {
            let status = PQresultStatus(result)
            if status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK {
                outcome = .success(PostgresResult(handle: ResultHandle(result)))
            } else if status == PGRES_PIPELINE_ABORTED {
                PQclear(result)
                outcome = .failure(PostgresError(.server, reason: "not run: an earlier statement of its group failed"))
            } else {
                outcome = .failure(PostgresConnection.failure(of: result, on: connection))
                PQclear(result)
            }
        } else {
            outcome = .failure(PostgresError(.connectionFailure, reason: PostgresConnection.lastError(connection)))
        }
        if case .statement(let completion) = entry { settled.append((completion, outcome)) }
        if case .prepare = entry, case .failure = outcome {
            // The statement it was for fails with it (aborted); prepare it again next time.
            statements.removeAll()
        }
    }

    // MARK: Connecting and breaking

    /// Opens a connection on another thread (libpq's connect blocks), at most once a second; the loop adopts it.
    private func connect() {
        guard !connecting, ContinuousClock.now >= nextAttempt else { return }
        connecting = true
        nextAttempt = ContinuousClock.now + .seconds(1)
        let (url, timeout, loop) = (url, statementTimeoutMilliseconds, loop)
        DispatchQueue.global().async { [weak self] in
            let opened = Result { try OpenedHandle(PostgresConnection.openHandle(url: url, statementTimeoutMilliseconds: timeout)) }
            loop.execute { [weak self] in
                guard let self else {
                    if case .success(let handle) = opened { PQfinish(handle.pointer) }
                    return
                }
                self.adopt(opened)
            }
        }
    }

    private func adopt(_ opened: Result<OpenedHandle, any Error>) {
        connecting = false
        switch opened {
        case .failure(let error):
            logger.warning("pipeline connection failed", ["error": String(describing: error)])
        case .success(let handle):
            let pointer = handle.pointer
            guard PQsetnonblocking(pointer, 1) == 0, PQenterPipelineMode(pointer) == 1 else {
                logger.warning("pipeline mode unavailable", ["error": PostgresConnection.lastError(pointer)])
                PQfinish(pointer)
                return
            }
            connection = pointer
            descriptor = PQsocket(pointer)
            waitingToWrite = false
            loop.watch(descriptor) { [weak self] readable, writable in
                if writable { self?.writePending() }
                if readable { self?.readable() }
            }
        }
    }

    /// A write to libpq failed: the connection is done for.
    private func broke() -> Bool {
        failAll(PostgresError(.connectionFailure, reason: connection.map(PostgresConnection.lastError) ?? "no connection"))
        return false
    }

    /// Fails everything in flight with `error` and drops the connection; the next use reconnects.
    private func failAll(_ error: PostgresError) {
        guard let connection else { return }
        logger.info("pipeline connection dropped", ["error": error.reason])
        loop.unwatch(descriptor)
        PQfinish(connection)
        self.connection = nil
        descriptor = -1
        currentResult.map { PQclear($0) }
        currentResult = nil
        statements.removeAll()
        unsynced = false
        let outcomes = settled
        let pending = expected[head...]
        settled.removeAll()
        expected.removeAll()
        head = 0
        for (completion, _) in outcomes { completion(.failure(error)) }
        for case .statement(let completion) in pending { completion(.failure(error)) }
    }
}

/// A connection opened on another thread, handed to the loop that adopts it (nothing else touches it meanwhile).
private struct OpenedHandle: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}
