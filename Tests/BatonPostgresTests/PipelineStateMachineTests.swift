import BatonPostgres
import Testing

/// The machine with statements named by labels and rows as text.
private typealias Machine = PostgresPipelineStateMachine<String, String>

/// One event of a table: what ``PostgresPipeline`` reads from libpq and the loop.
private enum Event {
    /// The pipeline is used without a connection, this long after the table started.
    case use(at: Duration)
    case connected
    case connectFailed
    /// A statement is queued; its label is where its outcome goes.
    case send(String, sql: String, write: Bool = false)
    /// A libpq call of the last send failed.
    case queueingFailed
    case endOfRound
    case flushed(pending: Bool)
    case result(Machine.Received)
    case lost
    case loopStopped

    static var end: Event { .result(.end) }
    static var sync: Event { .result(.sync) }
    static var aborted: Event { .result(.aborted) }
    static func rows(_ text: String) -> Event { .result(.rows(text)) }
    static func failed(_ sqlState: String, _ code: PostgresError.Code = .server) -> Event {
        .result(.failed(PostgresError(code, sqlState: sqlState, reason: "failed in the table")))
    }
    /// A Parse (or a statement without rows) answered.
    static var parsed: Event { .rows("") }
}

/// An outcome as text: the rows, or the error's SQLSTATE (else its code) and whether it had no effect.
private func describe(_ outcome: Result<String, PostgresError>) -> String {
    switch outcome {
    case .success(let rows): return rows
    case .failure(let error): return describe(error)
    }
}

private func describe(_ error: PostgresError) -> String {
    "\(error.sqlState ?? error.code.rawValue)\(error.didNotRun ? " (not run)" : "")"
}

private func describe(_ closing: Machine.Closing?) -> String {
    guard let closing else { return "-" }
    let failures = closing.failures.map { "\($0)=\(describe($1))" }
    return "close \(closing.error.code.rawValue): \(failures.isEmpty ? "none" : failures.joined(separator: ", "))"
}

/// Feeds `rows`' events to a new machine, in order, and expects each one's actions as text.
private func check(_ rows: [(Event, String)], sourceLocation: SourceLocation = #_sourceLocation) {
    var machine = Machine()
    let start = ContinuousClock.now
    for (index, (event, expected)) in rows.enumerated() {
        let actions: String
        switch event {
        case .use(let at):
            actions = machine.shouldConnect(now: start + at) ? "connect" : "wait"
        case .connected:
            actions = machine.connected() ? "open" : "finish it"
        case .connectFailed:
            machine.connectFailed()
            actions = "-"
        case .send(let label, let sql, let write):
            if let steps = machine.enqueue(label, sql: sql, isWrite: write) {
                let calls = [steps.syncFirst ? "sync" : nil, steps.prepare ? "prepare \(steps.name)" : nil,
                             "execute \(steps.name)", steps.syncAfter ? "sync" : nil]
                actions = calls.compactMap { $0 }.joined(separator: ", ")
            } else {
                actions = "refused"
            }
        case .queueingFailed:
            actions = describe(machine.queueingFailed(PostgresError(.connectionFailure, reason: "libpq said no")))
        case .endOfRound:
            switch machine.endOfRound() {
            case .nothing: actions = "nothing"
            case .flush(let syncFirst): actions = syncFirst ? "sync, flush" : "flush"
            }
        case .flushed(let pending):
            actions = machine.flushed(pending: pending).map { $0 ? "watch writable" : "watch readable" } ?? "-"
        case .result(let result):
            switch machine.received(result, lastError: { "no result" }) {
            case .readMore: actions = "more"
            case .waitForInput: actions = "wait"
            case .deliver(let outcomes, let serverGone):
                actions = "deliver " + outcomes.map { "\($0)=\(describe($1))" }.joined(separator: ", ") + (serverGone ? "; close" : "")
            case .close(let closing): actions = describe(closing)
            }
        case .lost:
            actions = describe(machine.connectionLost(PostgresError(.connectionFailure, reason: "lost in the table")))
        case .loopStopped:
            actions = describe(machine.loopStopped())
        }
        #expect(actions == expected, "row \(index + 1)", sourceLocation: sourceLocation)
    }
}

/// A connection opened.
private var opened: [(Event, String)] { [(.use(at: .zero), "connect"), (.connected, "open")] }

@Suite("Postgres pipeline's state machine, as tables without a server")
struct PipelineStateMachineTests {
    @Test("reads of one round share a Sync and their outcomes are handed over in order once it is confirmed; a text is prepared once")
    func pipelining() {
        check(opened + [
            (.send("a", sql: "SELECT 1"), "prepare baton_p0, execute baton_p0"),
            (.send("b", sql: "SELECT 1"), "execute baton_p0"),
            (.send("c", sql: "SELECT 2"), "prepare baton_p1, execute baton_p1"),
            (.endOfRound, "sync, flush"),
            (.flushed(pending: true), "watch writable"),
            (.flushed(pending: true), "-"),
            (.flushed(pending: false), "watch readable"),
            (.parsed, "more"), (.end, "more"),
            (.rows("1"), "more"), (.end, "more"),
            // More than one result before the NULL: the first is the statement's.
            (.rows("1"), "more"), (.rows("extra"), "more"), (.end, "more"),
            (.parsed, "more"), (.end, "more"),
            (.rows("2"), "more"), (.end, "more"),
            (.sync, "deliver a=1, b=1, c=2"),
            (.end, "wait"),
            (.endOfRound, "flush"),
            (.send("d", sql: "SELECT 2"), "execute baton_p1"),
            (.send("e", sql: "SELECT 1"), "execute baton_p0"),
            (.endOfRound, "sync, flush"),
            // Between a group's statements and its Sync, libpq's NULL means wait for more.
            (.rows("2"), "more"), (.end, "more"),
            (.rows("1"), "more"), (.end, "more"),
            (.end, "wait"),
            (.sync, "deliver d=2, e=1"),
        ])
    }

    @Test("an error in the middle of a group: the server skips the rest until the Sync, and the reads after it fail as not run")
    func errorInTheMiddle() {
        check(opened + [
            (.send("a", sql: "SELECT 1"), "prepare baton_p0, execute baton_p0"),
            (.send("b", sql: "SELECT 1/0"), "prepare baton_p1, execute baton_p1"),
            (.send("c", sql: "SELECT 3"), "prepare baton_p2, execute baton_p2"),
            (.send("d", sql: "SELECT 1"), "execute baton_p0"),
            (.endOfRound, "sync, flush"),
            (.parsed, "more"), (.end, "more"),
            (.rows("1"), "more"), (.end, "more"),
            (.parsed, "more"), (.end, "more"),
            (.failed("22012"), "more"), (.end, "more"),
            (.aborted, "more"), (.end, "more"),
            (.aborted, "more"), (.end, "more"),
            (.aborted, "more"), (.end, "more"),
            (.sync, "deliver a=1, b=22012, c=server_error (not run), d=server_error (not run)"),
            // The next group is answered; the skipped Parse's name was never made, so the text gets a new one.
            (.send("c", sql: "SELECT 3"), "prepare baton_p3, execute baton_p3"),
            (.send("b", sql: "SELECT 1/0"), "execute baton_p1"),
            (.endOfRound, "sync, flush"),
            (.parsed, "more"), (.end, "more"),
            (.rows("3"), "more"), (.end, "more"),
            (.failed("22012"), "more"), (.end, "more"),
            (.sync, "deliver c=3, b=22012"),
        ])
    }

    @Test("a write commits alone: the reads before it end their group, and it has a Sync of its own")
    func writeCommitsAlone() {
        check(opened + [
            (.send("r", sql: "SELECT 1"), "prepare baton_p0, execute baton_p0"),
            (.send("w", sql: "INSERT 1", write: true), "sync, prepare baton_p1, execute baton_p1, sync"),
            (.send("duplicate", sql: "INSERT 1", write: true), "execute baton_p1, sync"),
            (.send("r2", sql: "SELECT 1"), "execute baton_p0"),
            (.endOfRound, "sync, flush"),
            (.parsed, "more"), (.end, "more"), (.rows("1"), "more"), (.end, "more"),
            (.sync, "deliver r=1"),
            (.parsed, "more"), (.end, "more"), (.rows("INSERT 1"), "more"), (.end, "more"),
            (.sync, "deliver w=INSERT 1"),
            (.failed("23505"), "more"), (.end, "more"),
            (.sync, "deliver duplicate=23505"),
            (.rows("1"), "more"), (.end, "more"),
            (.sync, "deliver r2=1"),
            (.endOfRound, "flush"),
        ])
    }

    @Test("a connection lost with statements in flight fails each once (a read as not run, a write as maybe run); the next use reconnects after a second")
    func connectionLost() {
        check(opened + [
            (.send("a", sql: "SELECT 1"), "prepare baton_p0, execute baton_p0"),
            (.send("w", sql: "INSERT 1", write: true), "sync, prepare baton_p1, execute baton_p1, sync"),
            (.send("b", sql: "SELECT 1"), "execute baton_p0"),
            (.endOfRound, "sync, flush"),
            (.parsed, "more"), (.end, "more"), (.rows("1"), "more"), (.end, "more"),
            // `a` is answered and waits for its Sync; `w` and `b` are on their way.
            (.lost, "close connection_failure: a=connection_failure (not run), w=connection_failure, b=connection_failure (not run)"),
            (.send("c", sql: "SELECT 1"), "refused"),
            (.endOfRound, "nothing"),
            (.result(.end), "wait"),
            (.lost, "-"),
            (.use(at: .milliseconds(500)), "wait"),
            (.use(at: .seconds(1)), "connect"),
            (.use(at: .seconds(3)), "wait"),
            (.connectFailed, "-"),
            (.use(at: .seconds(3)), "connect"),
            (.connected, "open"),
            // A new connection prepares again, under a name never given before.
            (.send("c", sql: "SELECT 1"), "prepare baton_p2, execute baton_p2"),
        ])
    }

    @Test("a statement ended without a result, or failing as the server's loss or read-only, closes the connection after its group's outcomes")
    func serverGone() {
        check(opened + [
            (.send("a", sql: "SELECT 1"), "prepare baton_p0, execute baton_p0"),
            (.endOfRound, "sync, flush"),
            (.parsed, "more"), (.end, "more"),
            (.end, "more"),
            (.sync, "deliver a=connection_failure; close"),
            (.send("w", sql: "INSERT 1", write: true), "prepare baton_p1, execute baton_p1, sync"),
            (.parsed, "more"), (.end, "more"),
            (.failed("25006", .readOnly), "more"), (.end, "more"),
            (.sync, "deliver w=25006; close"),
        ])
    }

    @Test("a result the protocol does not allow where it comes closes the connection instead of handing it to the wrong statement")
    func outOfStep() {
        check(opened + [
            (.send("a", sql: "SELECT 1"), "prepare baton_p0, execute baton_p0"),
            (.endOfRound, "sync, flush"),
            (.sync, "close connection_failure: a=connection_failure (not run)"),
            (.use(at: .seconds(1)), "connect"), (.connected, "open"),
            (.send("b", sql: "SELECT 1"), "prepare baton_p1, execute baton_p1"),
            (.endOfRound, "sync, flush"),
            (.parsed, "more"), (.end, "more"), (.rows("1"), "more"), (.end, "more"),
            (.rows("stray"), "close connection_failure: b=connection_failure (not run)"),
        ])
    }

    @Test("a pipeline that never runs dry stays in step over many groups")
    func manyGroups() {
        var rows = opened + [(Event.send("first", sql: "SELECT 0"), "prepare baton_p0, execute baton_p0"), (.endOfRound, "sync, flush"),
                             (.parsed, "more"), (.end, "more")]
        for round in 0..<100 {
            // The next group is queued before the last one's answers are read.
            rows += [(.send("r\(round)", sql: "SELECT 0"), "execute baton_p0"), (.endOfRound, "sync, flush"),
                     (.rows("\(round)"), "more"), (.end, "more"), (.sync, "deliver \(round == 0 ? "first" : "r\(round - 1)")=\(round)")]
        }
        rows += [(.rows("last"), "more"), (.end, "more"), (.sync, "deliver r99=last"), (.end, "wait")]
        check(rows)
    }
}

/// A row for each defect the pipeline had (`git log -- Sources/BatonPostgres/PostgresPipeline.swift`).
@Suite("Postgres pipeline's state machine: its past defects")
struct PipelineStateMachineDefectTests {
    @Test("58da1c0: a callback that breaks the connection leaves the rest of its group their outcomes; the statement it queued is refused, the next group fails")
    func callbackBreakingTheConnection() {
        check(opened + [
            (.send("a", sql: "SELECT 'a'"), "prepare baton_p0, execute baton_p0"),
            (.send("b", sql: "SELECT 'a'"), "execute baton_p0"),
            (.endOfRound, "sync, flush"),
            (.send("next", sql: "SELECT 'a'"), "execute baton_p0"),
            (.endOfRound, "sync, flush"),
            (.parsed, "more"), (.end, "more"), (.rows("a"), "more"), (.end, "more"), (.rows("b"), "more"), (.end, "more"),
            (.sync, "deliver a=a, b=b"),
            // `a`'s callback queues a statement libpq refuses.
            (.send("too many", sql: "SELECT 'too many'"), "prepare baton_p1, execute baton_p1"),
            (.queueingFailed, "close connection_failure: next=connection_failure (not run)"),
            (.send("later", sql: "SELECT 'a'"), "refused"),
        ])
    }

    @Test("58da1c0: a write whose Sync cannot be queued is refused, never failed; the reads in flight fail once")
    func writeRefused() {
        check(opened + [
            (.send("busy", sql: "SELECT pg_sleep(600)"), "prepare baton_p0, execute baton_p0"),
            (.endOfRound, "sync, flush"),
            (.send("w", sql: "INSERT 1", write: true), "prepare baton_p1, execute baton_p1, sync"),
            (.queueingFailed, "close connection_failure: busy=connection_failure (not run)"),
            (.use(at: .seconds(1)), "connect"), (.connected, "open"),
            // The Sync before a write fails: the reads of the open group fail, the write is refused.
            (.send("r", sql: "SELECT 1"), "prepare baton_p2, execute baton_p2"),
            (.send("w", sql: "INSERT 1", write: true), "sync, prepare baton_p3, execute baton_p3, sync"),
            (.queueingFailed, "close connection_failure: r=connection_failure (not run)"),
        ])
    }

    @Test("58da1c0: a failed Parse forgets only its own name, names are never given twice, and its statement carries the Parse's error")
    func failedPrepare() {
        check(opened + [
            (.send("a", sql: "SELECT 'a'"), "prepare baton_p0, execute baton_p0"),
            (.endOfRound, "sync, flush"),
            (.parsed, "more"), (.end, "more"), (.rows("a"), "more"), (.end, "more"), (.sync, "deliver a=a"),
            (.send("zero", sql: "SELECT 1/0"), "prepare baton_p1, execute baton_p1"),
            (.send("c", sql: "SELECT 'c'"), "prepare baton_p2, execute baton_p2"),
            (.endOfRound, "sync, flush"),
            (.parsed, "more"), (.end, "more"), (.failed("22012"), "more"), (.end, "more"),
            // Its Parse is skipped, so the name it was given never exists.
            (.aborted, "more"), (.end, "more"), (.aborted, "more"), (.end, "more"),
            (.sync, "deliver zero=22012, c=server_error (not run)"),
            // Its Parse fails on the server.
            (.send("typo", sql: "SELEC 'typo'"), "prepare baton_p3, execute baton_p3"),
            (.endOfRound, "sync, flush"),
            (.failed("42601"), "more"), (.end, "more"), (.aborted, "more"), (.end, "more"),
            (.sync, "deliver typo=42601 (not run)"),
            (.send("b", sql: "SELECT 'b'"), "prepare baton_p4, execute baton_p4"),
            (.send("c", sql: "SELECT 'c'"), "prepare baton_p5, execute baton_p5"),
            (.send("a", sql: "SELECT 'a'"), "execute baton_p0"),
            (.send("zero", sql: "SELECT 1/0"), "execute baton_p1"),
        ])
    }

    @Test("58da1c0: a group whose commit fails (a deferred constraint) fails its statements and the next group is answered")
    func failedCommit() {
        check(opened + [
            (.send("duplicate", sql: "INSERT 1", write: true), "prepare baton_p0, execute baton_p0, sync"),
            (.send("read", sql: "SELECT 'after'"), "prepare baton_p1, execute baton_p1"),
            (.send("write", sql: "INSERT 2", write: true), "sync, prepare baton_p2, execute baton_p2, sync"),
            (.parsed, "more"), (.end, "more"), (.rows("INSERT 1"), "more"), (.end, "more"),
            // The commit's error, its NULL, then the Sync.
            (.failed("23505"), "more"), (.end, "more"),
            (.sync, "deliver duplicate=23505"),
            (.parsed, "more"), (.end, "more"), (.rows("after"), "more"), (.end, "more"),
            (.sync, "deliver read=after"),
            (.parsed, "more"), (.end, "more"), (.rows("inserted"), "more"), (.end, "more"),
            (.sync, "deliver write=inserted"),
        ])
    }

    @Test("6fee4f6: a write that cannot take its lock at once fails as not run (55P03); the read after it is answered")
    func lockTimeout() {
        check(opened + [
            (.send("write", sql: "UPDATE t", write: true), "prepare baton_p0, execute baton_p0, sync"),
            (.send("read", sql: "SELECT 'after'"), "prepare baton_p1, execute baton_p1"),
            (.endOfRound, "sync, flush"),
            (.parsed, "more"), (.end, "more"), (.failed("55P03", .queryCanceled), "more"), (.end, "more"),
            (.sync, "deliver write=55P03 (not run)"),
            (.parsed, "more"), (.end, "more"), (.rows("after"), "more"), (.end, "more"),
            (.sync, "deliver read=after"),
        ])
    }

    @Test("463396e, 4a021f9: a loop stopped with statements in flight fails each once as pool_closed (a close, not a drop); a send from their callbacks is refused and nothing reconnects")
    func loopStopped() {
        check(opened + [
            (.send("busy", sql: "SELECT pg_sleep(600)"), "prepare baton_p0, execute baton_p0"),
            (.send("write", sql: "INSERT 1", write: true), "sync, prepare baton_p1, execute baton_p1, sync"),
            (.endOfRound, "flush"),
            (.loopStopped, "close pool_closed: busy=pool_closed (not run), write=pool_closed"),
            (.send("again", sql: "SELECT 'again'"), "refused"),
            (.use(at: .seconds(10)), "wait"),
            (.endOfRound, "nothing"),
            (.lost, "-"),
            (.loopStopped, "-"),
        ])
    }

    @Test("463396e: a loop stopped while a connection is being opened opens nothing more: the connection that arrives is finished")
    func loopStoppedWhileConnecting() {
        check([
            (.use(at: .zero), "connect"),
            (.loopStopped, "-"),
            (.connected, "finish it"),
            (.use(at: .seconds(10)), "wait"),
            (.send("again", sql: "SELECT 1"), "refused"),
        ])
    }
}
