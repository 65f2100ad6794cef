/// What ``PostgresPipeline`` knows of its connection's protocol, as a value. Events go in (a statement queued, the end
/// of a round, a result read, the connection lost, the loop stopped); what to do comes out (the libpq calls that queue
/// a statement, whether to wait for writability, which outcomes to hand over, what to fail when the connection
/// closes). It calls nothing, neither libpq nor the loop nor a callback, so tables of events and actions test it
/// without a server; ``PostgresPipeline`` reads libpq into events and performs the actions.
///
/// The rules it keeps: reads queued in one round share one Sync, a write has a Sync of its own before and after it;
/// outcomes are handed over once their Sync is confirmed; a failed statement's group is skipped by the server; a
/// statement's text is prepared once per connection under a name never given twice; a connection that is lost fails
/// everything in flight (a read as ``PostgresError/didNotRun``); a stopped loop fails it as `pool_closed` and opens
/// nothing more.
///
/// `Request` is where a statement's outcome goes (the pipeline's completion; a label in tests), `Rows` what a
/// statement that succeeded returned.
package struct PostgresPipelineStateMachine<Request, Rows> {
    package typealias Outcome = Result<Rows, PostgresError>

    /// One result from libpq (`PQgetResult`), read into a value.
    package enum Received {
        /// libpq's NULL: the end of the current statement's results (at a Sync: nothing more for now).
        case end
        /// A statement's rows or command result (`PGRES_TUPLES_OK`, `PGRES_COMMAND_OK`).
        case rows(Rows)
        /// The server skipped the statement: an earlier one of its group failed (`PGRES_PIPELINE_ABORTED`).
        case aborted
        /// A Sync's confirmation (`PGRES_PIPELINE_SYNC`).
        case sync
        /// Any other result: the server's error.
        case failed(PostgresError)
    }

    /// The libpq calls that queue one statement, in this order.
    package struct Queueing: Equatable {
        /// `PQpipelineSync` first: the reads queued before a write end their group.
        package var syncFirst: Bool
        /// `PQsendPrepare` of the statement's text under ``name`` first: its first use on this connection.
        package var prepare: Bool
        /// The prepared statement to `PQsendQueryPrepared`.
        package var name: String
        /// `PQpipelineSync` after: a write commits alone.
        package var syncAfter: Bool
    }

    /// What to do at the end of a round.
    package enum Flushing: Equatable {
        /// No connection: nothing to write.
        case nothing
        /// `PQpipelineSync` (when `syncFirst`: the round's reads end their group), then `PQflush`.
        case flush(syncFirst: Bool)
    }

    /// What to do after a result was read.
    package enum Reading {
        /// Read the next result (when libpq has one without waiting).
        case readMore
        /// Nothing more for now: wait until the socket is readable.
        case waitForInput
        /// A group is over: hand each statement its outcome, in order. With `serverGone` (an outcome says the server
        /// is lost or read-only), close the connection after them.
        case deliver([(Request, Outcome)], serverGone: Bool)
        /// The result was not one the protocol allows here: the connection is out of step and closes.
        case close(Closing)
    }

    /// The connection closes: finish it, then fail each of `failures` with its error.
    package struct Closing {
        /// Why: `pool_closed` when the loop stopped, else `connection_failure`.
        package let error: PostgresError
        /// The statements in flight, in order, with their errors: a read's says it had no effect
        /// (``PostgresError/didNotRun``), a write's cannot (its Sync may have reached the server).
        package let failures: [(Request, PostgresError)]
    }

    /// What PostgreSQL will answer, in order.
    private enum Expected {
        /// The Parse of a statement's text.
        case prepare(sql: String)
        case statement(Request, isWrite: Bool)
        case sync
    }

    /// The protocol state of one open connection.
    private struct Session {
        /// The name each statement's text is prepared under on this connection.
        var names: [String: String] = [:]
        /// What PostgreSQL will answer, in order; `head` is the next.
        var expected: [Expected] = []
        var head = 0
        /// The first result of the entry at `head`, until its end (more before the end are dropped).
        var current: Outcome?
        /// Why the Parse just answered failed: the statement it was for (next in `expected`) fails with this.
        var prepareFailure: PostgresError?
        /// The group's commit just failed: libpq ends its error with a NULL before the Sync result.
        var commitFailed = false
        /// Outcomes waiting for their group's Sync.
        var settled: [(request: Request, isWrite: Bool, outcome: Outcome)] = []
        /// Reads queued since the last Sync.
        var unsynced = false
        /// Whether the socket is watched for writability.
        var waitingToWrite = false

        /// The entry at `head` is answered: the next is. Answered entries are dropped from the front, so a pipeline
        /// that never runs dry does not keep them all.
        mutating func advance() {
            head += 1
            if head == expected.count {
                expected.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 64 {
                expected.removeFirst(head)
                head = 0
            }
        }

        /// The entry at `head` ended: its first result, or a connection failure when it had none.
        mutating func takeOutcome(lastError: () -> String) -> Outcome {
            defer { current = nil }
            return current ?? .failure(PostgresError(.connectionFailure, reason: lastError()))
        }

        /// A Parse ended. When it failed, no statement of that name exists: the text gets a new name next time (other
        /// names stand), and the statement it was for fails with its error.
        mutating func finishPrepare(sql: String, lastError: () -> String) {
            let outcome = takeOutcome(lastError: lastError)
            advance()
            guard case .failure(let error) = outcome else { return }
            names[sql] = nil
            if !error.notRun { prepareFailure = error }
        }

        /// A statement ended: its outcome waits for the group's Sync.
        mutating func finishStatement(_ request: Request, isWrite: Bool, lastError: () -> String) {
            var outcome = takeOutcome(lastError: lastError)
            advance()
            if let failure = prepareFailure {
                // It was skipped because its own Parse failed: that error says why.
                prepareFailure = nil
                var notRun = failure
                notRun.notRun = true
                outcome = .failure(notRun)
            }
            settled.append((request, isWrite, outcome))
        }
    }

    private enum State {
        /// No connection; the next use opens one.
        case idle
        /// A connection is being opened (on another thread).
        case connecting
        case open(Session)
        /// The loop has stopped: nothing is sent or opened any more.
        case stopped
        /// Only while an open session is changed in place (so its arrays are not copied).
        case changing
    }

    private var state = State.idle
    /// When the next connection may be opened (at most once a second); nil: at once.
    private var nextAttempt: ContinuousClock.Instant?
    /// Prepared statements named so far: a name is never given twice, since one whose Parse failed may still stand
    /// beside those that exist on the server.
    private var statementsNamed = 0

    package init() {}

    /// Whether a connection is open: statements can be queued.
    package var isOpen: Bool {
        if case .open = state { return true }
        return false
    }

    /// Whether answers are awaited: a result read now has a statement or Sync to go to.
    package var awaitsResult: Bool {
        guard case .open(let session) = state else { return false }
        return session.head < session.expected.count
    }

    // MARK: Connecting

    /// The pipeline is used without a connection: whether to open one now. Yes when none is being opened, the loop
    /// runs, and the last attempt is a second old.
    package mutating func shouldConnect(now: ContinuousClock.Instant) -> Bool {
        guard case .idle = state, nextAttempt.map({ now >= $0 }) ?? true else { return false }
        state = .connecting
        nextAttempt = now + .seconds(1)
        return true
    }

    /// The connection being opened is ready. False: it is not wanted (the loop stopped meanwhile): finish it.
    package mutating func connected() -> Bool {
        guard case .connecting = state else { return false }
        state = .open(Session())
        return true
    }

    /// The connection could not be opened: the next use after ``shouldConnect(now:)``'s second tries again.
    package mutating func connectFailed() {
        if case .connecting = state { state = .idle }
    }

    // MARK: Writing

    /// Queues `request`'s statement of text `sql`. Returns the libpq calls to make; nil when there is no connection
    /// (the statement is refused). When one of the calls fails, report it with ``queueingFailed(_:)``.
    package mutating func enqueue(_ request: Request, sql: String, isWrite: Bool) -> Queueing? {
        let number = statementsNamed
        var named = false
        defer { if named { statementsNamed += 1 } }
        return changeSession { session in
            let syncFirst = isWrite && session.unsynced
            if syncFirst { session.expected.append(.sync) }
            var prepare = false
            let name: String
            if let known = session.names[sql] {
                name = known
            } else {
                name = "baton_p\(number)"
                named = true
                session.names[sql] = name
                session.expected.append(.prepare(sql: sql))
                prepare = true
            }
            session.expected.append(.statement(request, isWrite: isWrite))
            if isWrite {
                session.expected.append(.sync)
                session.unsynced = false
            } else {
                session.unsynced = true
            }
            return Queueing(syncFirst: syncFirst, prepare: prepare, name: name, syncAfter: isWrite)
        }
    }

    /// A libpq call of the last ``enqueue(_:sql:isWrite:)`` failed: the connection closes. That statement is dropped
    /// without an outcome (its sender hears it was refused); the others in flight fail.
    package mutating func queueingFailed(_ error: PostgresError) -> Closing? {
        changeSession { session in
            let statement = session.expected.lastIndex { if case .statement = $0 { true } else { false } }
            if let statement, statement >= session.head { session.expected.remove(at: statement) }
        }
        return connectionLost(error)
    }

    /// The end of the loop's round: the open group ends and what is queued is written.
    package mutating func endOfRound() -> Flushing {
        changeSession { session in
            let syncFirst = session.unsynced
            if syncFirst {
                session.expected.append(.sync)
                session.unsynced = false
            }
            return .flush(syncFirst: syncFirst)
        } ?? .nothing
    }

    /// `PQflush` returned; `pending` when the socket did not take everything. Returns whether to watch the socket
    /// for writability, when that changes (nil: as it is).
    package mutating func flushed(pending: Bool) -> Bool? {
        changeSession { session in
            guard pending != session.waitingToWrite else { return nil }
            session.waitingToWrite = pending
            return pending
        } ?? nil
    }

    // MARK: Reading

    /// A result was read (while ``awaitsResult``). `lastError` is libpq's message, asked for only when a statement
    /// ended without a result.
    package mutating func received(_ result: Received, lastError: () -> String) -> Reading {
        let step = changeSession { session -> Step in
            guard session.head < session.expected.count else { return .reading(.waitForInput) }
            switch (session.expected[session.head], result) {
            case (.sync, .end):
                // libpq's idle answer (wait for more), unless it ends a failed commit's error.
                guard session.commitFailed else { return .reading(.waitForInput) }
                session.commitFailed = false
                return .reading(.readMore)
            case (.sync, .failed(let error)):
                // The group's commit failed (a deferred constraint, say): nothing of it is kept. A NULL and the
                // Sync result follow.
                session.settled = session.settled.map { ($0.request, $0.isWrite, .failure(error)) }
                session.commitFailed = true
                return .reading(.readMore)
            case (.sync, .sync):
                session.advance()
                let outcomes = session.settled.map { ($0.request, $0.outcome) }
                session.settled.removeAll(keepingCapacity: true)
                let serverGone = outcomes.contains { _, outcome in
                    guard case .failure(let error) = outcome else { return false }
                    return error.code == .connectionFailure || error.code == .readOnly
                }
                return .reading(.deliver(outcomes, serverGone: serverGone))
            case (.sync, .rows), (.sync, .aborted), (.prepare, .sync), (.statement, .sync):
                return .outOfStep
            case (_, .rows(let rows)):
                if session.current == nil { session.current = .success(rows) }
                return .reading(.readMore)
            case (_, .failed(let error)):
                if session.current == nil { session.current = .failure(error) }
                return .reading(.readMore)
            case (_, .aborted):
                if session.current == nil {
                    var skipped = PostgresError(.server, reason: "not run: an earlier statement of its group failed")
                    skipped.notRun = true
                    session.current = .failure(skipped)
                }
                return .reading(.readMore)
            case (.prepare(let sql), .end):
                session.finishPrepare(sql: sql, lastError: lastError)
                return .reading(.readMore)
            case (.statement(let request, let isWrite), .end):
                session.finishStatement(request, isWrite: isWrite, lastError: lastError)
                return .reading(.readMore)
            }
        }
        switch step {
        case .reading(let reading): return reading
        case .outOfStep:
            let error = PostgresError(.connectionFailure, reason: "the pipeline's results are out of step with its queue")
            return connectionLost(error).map(Reading.close) ?? .waitForInput
        case nil: return .waitForInput
        }
    }

    private enum Step {
        case reading(Reading)
        case outOfStep
    }

    // MARK: Closing

    /// The connection is lost (libpq could not read or write, or the server is gone): everything in flight fails
    /// with `error`; the next use reconnects. Nil when there is no connection.
    package mutating func connectionLost(_ error: PostgresError) -> Closing? {
        close(with: error, then: .idle)
    }

    /// The loop has stopped (its server's shutdown deadline passed with statements in flight): each of them fails
    /// as `pool_closed`, so its sender hears back as promised, and nothing is sent or opened any more.
    package mutating func loopStopped() -> Closing? {
        close(with: PostgresError(.poolClosed, reason: "the pipeline's event loop stopped"), then: .stopped)
    }

    private mutating func close(with error: PostgresError, then next: State) -> Closing? {
        guard case .open(let session) = state else {
            if case .stopped = next { state = .stopped }
            return nil
        }
        state = next
        var readFailure = error
        readFailure.notRun = true
        var failures = session.settled.map { ($0.request, $0.isWrite ? error : readFailure) }
        for case .statement(let request, let isWrite) in session.expected[session.head...] {
            failures.append((request, isWrite ? error : readFailure))
        }
        return Closing(error: error, failures: failures)
    }

    /// Runs `body` on the open session, changed in place; nil when no connection is open.
    private mutating func changeSession<T>(_ body: (inout Session) -> T) -> T? {
        guard case .open(var session) = state else { return nil }
        state = .changing
        defer { state = .open(session) }
        return body(&session)
    }
}
