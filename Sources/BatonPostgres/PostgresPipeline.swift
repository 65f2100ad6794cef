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
/// The protocol's rules live in ``PostgresPipelineStateMachine``, a value tested without a server; this class reads
/// libpq into its events and performs its actions (libpq calls, the loop's watch, the callbacks).
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

    private typealias Machine = PostgresPipelineStateMachine<Completion, PostgresResult>

    private let loop: EventLoop
    private let url: String
    private let statementTimeoutMilliseconds: Int?
    /// What is in front of PostgreSQL: behind a session pooler the timeouts are set after connecting.
    private let pooler: PostgresPooler
    private let logger: Logger
    /// The protocol's state: what is in flight, what to send, when to close. This class only performs its actions.
    private var machine = Machine()
    /// The open connection, while `machine` says it is open.
    private var connection: OpaquePointer?
    private var descriptor: Int32 = -1

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
    }

    /// Whether statements can be queued now; when not, a connection is being opened.
    package var isReady: Bool {
        if !machine.isOpen, machine.shouldConnect(now: .now) { connect() }
        return machine.isOpen
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
        guard let steps = machine.enqueue(completion, sql: query.sql, isWrite: write) else { return false }
        guard !steps.syncFirst || PQpipelineSync(connection) == 1,
              !steps.prepare || PQsendPrepare(connection, steps.name, query.sql, parameters.count, parameters.types) == 1,
              parameters.withPointers({ pointers in
                  PQsendQueryPrepared(connection, steps.name, parameters.count, pointers, parameters.lengths, parameters.formats, 0)
              }) == 1,
              !steps.syncAfter || PQpipelineSync(connection) == 1 else {
            close(machine.queueingFailed(lastFailure(connection)))
            return false
        }
        return true
    }

    // MARK: Writing

    /// At the end of every round: closes the open group and writes what is queued; what the socket does not take
    /// now is written when it is writable.
    private func flush() {
        guard case .flush(let syncFirst) = machine.endOfRound(), let connection else { return }
        if syncFirst && PQpipelineSync(connection) != 1 { return close(machine.connectionLost(lastFailure(connection))) }
        writePending()
    }

    private func writePending() {
        guard let connection else { return }
        let left = PQflush(connection)
        if left < 0 { return close(machine.connectionLost(lastFailure(connection))) }
        if let writable = machine.flushed(pending: left == 1) {
            loop.change(descriptor, readable: true, writable: writable)
        }
    }

    // MARK: Reading

    private func readable() {
        guard let connection else { return }
        guard PQconsumeInput(connection) == 1 else { return close(machine.connectionLost(lastFailure(connection))) }
        var serverGone = false
        reading: while !serverGone, machine.awaitsResult, PQisBusy(connection) == 0 {
            let received = Self.read(PQgetResult(connection), on: connection)
            switch machine.received(received, lastError: { PostgresConnection.lastError(connection) }) {
            case .readMore:
                break
            case .waitForInput:
                break reading
            case .deliver(let outcomes, let gone):
                // Every outcome is handed over, even when a callback breaks the connection (a write it queues that
                // cannot be sent drops it): these statements are over, whatever comes next.
                for (completion, outcome) in outcomes { completion(outcome) }
                if self.connection == nil { return }
                serverGone = gone
            case .close(let closing):
                return close(closing)
            }
            if PQstatus(connection) != CONNECTION_OK { serverGone = true }
        }
        if serverGone || PQstatus(connection) != CONNECTION_OK {
            close(machine.connectionLost(PostgresError(.connectionFailure, reason: "the server is gone or read-only")))
        }
    }

    /// libpq's result (NULL: the end of a statement's results) as a value, cleared once its value is made.
    private static func read(_ result: OpaquePointer?, on connection: OpaquePointer) -> Machine.Received {
        guard let result else { return .end }
        let status = PQresultStatus(result)
        if status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK { return .rows(PostgresResult(handle: ResultHandle(result))) }
        defer { PQclear(result) }
        if status == PGRES_PIPELINE_SYNC { return .sync }
        if status == PGRES_PIPELINE_ABORTED { return .aborted }
        return .failed(PostgresConnection.failure(of: result, on: connection))
    }

    // MARK: Connecting and closing

    /// Opens a connection on another thread (libpq's connect blocks); the loop adopts it, already non-blocking and in
    /// pipeline mode.
    private func connect() {
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
        switch opened {
        case .failure(let error):
            machine.connectFailed()
            logger.warning("pipeline connection failed", ["error": String(describing: error)])
        case .success(let handle):
            guard machine.connected() else { return PQfinish(handle.pointer) }
            connection = handle.pointer
            descriptor = PQsocket(handle.pointer)
            loop.watch(descriptor) { [weak self] readable, writable in
                if writable { self?.writePending() }
                if readable { self?.readable() }
            }
        }
    }

    /// The loop has stopped (its server's shutdown deadline passed with statements in flight): each of them fails as
    /// `pool_closed`, so its callback runs as ``send(_:write:_:)`` promised, and the connection closes.
    private func loopHasStopped() {
        close(machine.loopStopped())
    }

    /// Why libpq failed on `connection`.
    private func lastFailure(_ connection: OpaquePointer) -> PostgresError {
        PostgresError(.connectionFailure, reason: PostgresConnection.lastError(connection))
    }

    /// Finishes the connection, then fails what was in flight as `closing` says; the next use reconnects.
    private func close(_ closing: Machine.Closing?) {
        guard let closing, let connection else { return }
        if closing.error.code == .poolClosed {
            logger.debug("pipeline closed with its event loop")
        } else {
            logger.info("pipeline connection dropped", ["error": closing.error.reason])
        }
        loop.unwatch(descriptor)
        PQfinish(connection)
        self.connection = nil
        descriptor = -1
        for (completion, error) in closing.failures { completion(.failure(error)) }
    }
}

/// A connection opened on another thread, handed to the loop that adopts it (nothing else touches it meanwhile).
private struct OpenedHandle: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}
