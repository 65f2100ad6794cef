import BatonConcurrency
import Dispatch
import Foundation
import BatonPostgres
import Synchronization
import TestSupport
import Testing

/// Runs `body` on a new event loop's thread with `pool`'s pipeline once it is connected, and returns what `body`
/// passes to its `done` callback (from a later round of the loop).
private func onLoop<T: Sendable>(_ pool: PostgresPool,
                                 _ body: @escaping @Sendable (PostgresPipeline, _ done: @escaping @Sendable (T) -> Void) -> Void) async throws -> T {
    let loop = try EventLoop()
    loop.start(name: "pipeline-test")
    defer { loop.stop() }
    return await withCheckedContinuation { continuation in
        @Sendable func attempt(_ tries: Int) {
            loop.execute {
                guard let pipeline = pool.pipeline(on: loop) else { return }
                guard pipeline.isReady || tries > 500 else {
                    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(10)) { attempt(tries + 1) }
                    return
                }
                let once = Mutex(false)
                body(pipeline) { value in
                    guard once.withLock({ done in defer { done = true }; return !done }) else { return }
                    continuation.resume(returning: value)
                }
            }
        }
        attempt(0)
    }
}

/// A statement's outcome as text, for comparing: its first value, or its error's code.
private func describe(_ outcome: Result<PostgresResult, PostgresError>) -> String {
    switch outcome {
    case .success(let rows): return (try? rows[0].decode(String.self, at: 0)) ?? "?"
    case .failure(let error): return "error \(error.code.rawValue)"
    }
}

/// ``describe(_:)``, and for an error also whether it had no effect (``PostgresError/didNotRun``).
private func summary(_ outcome: Result<PostgresResult, PostgresError>) -> String {
    guard case .failure(let error) = outcome, error.didNotRun else { return describe(outcome) }
    return "\(describe(outcome)) (not run)"
}

/// A write's outcome as text: the rows it changed, or its error's code, SQLSTATE and whether it had no effect.
private func changes(_ outcome: Result<PostgresResult, PostgresError>) -> String {
    switch outcome {
    case .success(let rows): return "ok \(rows.affectedRows)"
    case .failure(let error): return "\(error.code.rawValue) \(error.sqlState ?? "-")\(error.didNotRun ? " (not run)" : "")"
    }
}

/// Collects outcomes as text and passes them to `done` once there are `count`.
private func collector(_ count: Int, _ done: @escaping @Sendable ([String]) -> Void) -> @Sendable (String) -> Void {
    let collected = Mutex<[String]>([])
    return { text in
        let all = collected.withLock { list -> [String]? in
            list.append(text)
            return list.count == count ? list : nil
        }
        if let all { done(all) }
    }
}

@Suite("Postgres pipeline on an event loop")
struct PipelineTests {
    @Test("statements queued in one round are answered in order; a failing read fails only the reads queued after it in its round")
    func orderAndGroups() async throws {
        let pool = PostgresPool(url: try TestDatabase.create("pipeline"), maxConnections: 1)
        defer { Task { await pool.close() } }
        let answers = try await onLoop(pool) { (pipeline, done: @escaping @Sendable ([String]) -> Void) in
            let collect = collector(12, done)
            let record = { @Sendable (index: Int, outcome: Result<PostgresResult, PostgresError>) in collect("\(index):\(describe(outcome))") }
            for index in 0..<5 {
                pipeline.send("SELECT \(String(index * 10))::text") { record(index, $0) }
            }
            pipeline.send("SELECT (1 / \(0))::text") { record(5, $0) }
            pipeline.send("SELECT 'after'::text") { record(6, $0) }
            // The next round: a group of its own, unaffected.
            EventLoop.current?.execute {
                for index in 7..<12 {
                    pipeline.send("SELECT \(String(index))::text") { record(index, $0) }
                }
            }
        }
        #expect(answers.prefix(5) == ["0:0", "1:10", "2:20", "3:30", "4:40"])
        #expect(answers[5].hasPrefix("5:error"))
        #expect(answers[6].hasPrefix("6:error"), "a read after a failure in its group is not run")
        #expect(Array(answers.suffix(5)) == ["7:7", "8:8", "9:9", "10:10", "11:11"])
    }

    @Test("a write commits on its own: a read failing in the same round does not roll it back, and its callback runs after the commit")
    func writeCommitsAlone() async throws {
        let pool = PostgresPool(url: try TestDatabase.create("pipeline_write"), maxConnections: 1)
        defer { Task { await pool.close() } }
        try await pool.execute("CREATE TABLE t (n int PRIMARY KEY)")
        let outcomes = try await onLoop(pool) { (pipeline, done: @escaping @Sendable ([String]) -> Void) in
            let collect = collector(4, done)
            let record = { @Sendable (label: String, outcome: Result<PostgresResult, PostgresError>) in collect("\(label) \(changes(outcome))") }
            pipeline.send("SELECT 1") { record("read", $0) }
            pipeline.send("INSERT INTO t VALUES (\(1))", write: true) { record("write", $0) }
            pipeline.send("INSERT INTO t VALUES (\(1))", write: true) { record("duplicate", $0) }
            pipeline.send("SELECT (1 / \(0))::text") { record("failing read", $0) }
        }
        #expect(outcomes.count == 4)
        #expect(outcomes[0] == "read ok 1")
        #expect(outcomes[1] == "write ok 1")
        #expect(outcomes[2] == "duplicate unique_violation 23505")
        #expect(outcomes[3].hasPrefix("failing read "))
        #expect(try await pool.query("SELECT count(*) FROM t")[0].decode(Int.self, at: 0) == 1)
    }

    @Test("a backend terminated with statements in flight fails them as connection failures; the next use reconnects")
    func reconnects() async throws {
        let url = try TestDatabase.create("pipeline_kill")
        let pool = PostgresPool(url: url, maxConnections: 1)
        defer { Task { await pool.close() } }
        let pid = try await onLoop(pool) { (pipeline, done: @escaping @Sendable (Int) -> Void) in
            pipeline.send("SELECT pg_backend_pid()::text") { done(Int(describe($0)) ?? -1) }
        }
        #expect(pid > 0)
        // A second loop's pipeline runs a long statement; its backend is terminated meanwhile.
        let killer = PostgresPool(url: url, maxConnections: 1)
        defer { Task { await killer.close() } }
        let (failed, after) = try await onLoop(pool) { (pipeline, done: @escaping @Sendable ((String, String)) -> Void) in
            let first = Mutex<String?>(nil)
            pipeline.send("SELECT pg_backend_pid()::text") { outcome in
                let backend = describe(outcome)
                pipeline.send("SELECT pg_sleep(10)::text") { slept in
                    first.withLock { $0 = describe(slept) }
                    // Reconnects in the background; retried until a statement succeeds again.
                    @Sendable func retry(_ tries: Int) {
                        let loop = EventLoop.current
                        let queued = pipeline.send("SELECT 'again'::text") { again in
                            done((first.withLock { $0 } ?? "", describe(again)))
                        }
                        if !queued {
                            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(100)) {
                                loop?.execute { tries < 50 ? retry(tries + 1) : done((first.withLock { $0 } ?? "", "gave up")) }
                            }
                        }
                    }
                    retry(0)
                }
                Task { _ = try? await killer.query("SELECT pg_terminate_backend(\(Int(backend) ?? 0)::int)") }
            }
        }
        #expect(failed == "error connection_failure")
        #expect(after == "again")
    }
}

/// The process's open sockets, from `/proc/self/fd`.
private func openSockets() -> Set<Int32> {
    let directory = "/proc/self/fd"
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    return Set(names.compactMap { name -> Int32? in
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\(name)"),
              target.hasPrefix("socket:") else { return nil }
        return Int32(name)
    })
}

/// The one socket opened since `before`: the pipeline's, when it is the only connection opened meanwhile (the
/// tests run one at a time, `--no-parallel`); nil when there is not exactly one.
private func pipelineSocket(openedSince before: Set<Int32>) -> Int32? {
    let opened = openSockets().subtracting(before)
    return opened.count == 1 ? opened.first : nil
}

/// Makes libpq's next flush on `socket` fail as it does when a server stops reading and its connection then ends:
/// fills the socket's send buffer (its backend is busy and reads nothing), then ends the socket's reading side,
/// so the write that finds the buffer full reads the end of the stream. Returns whether the buffer filled.
private func jam(_ socket: Int32) -> Bool {
    let filler = [UInt8](repeating: 0, count: 4096)
    var full = false
    for _ in 0..<10_000 where !full {
        full = filler.withUnsafeBytes { write(socket, $0.baseAddress, $0.count) } < 0 && errno == EAGAIN
    }
    return full && shutdown(socket, Int32(SHUT_RD)) == 0
}

/// The pipeline's busy statement in the tests below, and how the server names its wait.
private let busyStatement: PostgresQuery = "SELECT pg_sleep(600)::text"
private let busyBackends: PostgresQuery = "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()"

@Suite("Postgres pipeline under failure")
struct PipelineFailureTests {
    @Test("a callback that breaks the connection leaves the rest of its group their outcomes, each exactly once")
    func callbackBreakingTheConnection() async throws {
        let pool = PostgresPool(url: try TestDatabase.create("pipeline_break"), maxConnections: 1)
        defer { Task { await pool.close() } }
        let (outcomes, refused) = try await onLoop(pool) { (pipeline, done: @escaping @Sendable (([String], Bool)) -> Void) in
            let collected = Mutex<[String]>([])
            let record = { @Sendable (label: String, outcome: Result<PostgresResult, PostgresError>) in
                collected.withLock { $0.append("\(label):\(describe(outcome))") }
            }
            pipeline.send("SELECT 'a'::text") { outcome in
                record("a", outcome)
                // libpq refuses to send this one (more parameters than the protocol carries): the connection drops.
                let tooMany = PostgresQuery(unsafeSQL: "SELECT 'too many'::text", Array(repeating: 0, count: 65_536))
                let queued = pipeline.send(tooMany) { record("too many", $0) }
                // The next round: by then the whole group has had its outcomes.
                EventLoop.current?.execute { done((collected.withLock { $0 }, !queued)) }
            }
            pipeline.send("SELECT 'b'::text") { record("b", $0) }
            pipeline.send("SELECT 'c'::text") { record("c", $0) }
        }
        #expect(outcomes == ["a:a", "b:b", "c:c"])
        #expect(refused)
    }

    @Test("a write whose Sync cannot be sent is refused: send says false and its completion never runs")
    func sendContract() async throws {
        let pool = PostgresPool(url: try TestDatabase.create("pipeline_contract"), maxConnections: 1)
        defer { Task { await pool.close() } }
        try await pool.execute("CREATE TABLE t (n int PRIMARY KEY)")
        let before = openSockets()
        let (jammed, queued, calls) = try await onLoop(pool) { (pipeline, done: @escaping @Sendable ((Bool, Bool, [String])) -> Void) in
            let socket = pipelineSocket(openedSince: before)
            let calls = Mutex<[String]>([])
            let record = { @Sendable (label: String, outcome: Result<PostgresResult, PostgresError>) in
                calls.withLock { $0.append("\(label):\(summary(outcome))") }
            }
            pipeline.send(busyStatement) { record("busy", $0) }
            guard let socket, let loop = EventLoop.current else { return done((false, true, [])) }
            // Once the backend sleeps (it reads nothing more), its socket is jammed and a write is queued.
            Task {
                var tries = 0
                while (try? await pool.query(busyBackends).isEmpty) != false, tries < 1_000 {
                    tries += 1
                    try? await Task.sleep(for: .milliseconds(10))
                }
                loop.execute {
                    let jammed = jam(socket)
                    let queued = pipeline.send("INSERT INTO t VALUES (\(1))", write: true) { record("write", $0) }
                    EventLoop.current?.execute { done((jammed, queued, calls.withLock { $0 })) }
                }
            }
        }
        _ = try await pool.query("SELECT pg_terminate_backend(pid) FROM (\(unsafeRaw: busyBackends.sql)) AS busy")
        #expect(jammed, "the pipeline's socket (the one opened while it connected) filled up")
        #expect(!queued)
        #expect(calls == ["busy:error connection_failure (not run)"], "the read in flight fails once; the refused write never hears back")
        #expect(try await pool.query("SELECT count(*) FROM t")[0].decode(Int.self, at: 0) == 0)
    }

    @Test("a loop stopped with statements in flight fails each of them once as pool_closed; a send from their callbacks is refused")
    func loopStoppedInFlight() async throws {
        let pool = PostgresPool(url: try TestDatabase.create("pipeline_stop"), maxConnections: 1)
        defer { Task { await pool.close() } }
        try await pool.execute("CREATE TABLE t (n int PRIMARY KEY)")
        let loop = try EventLoop()
        loop.start(name: "pipeline-stop-test")
        let calls = Mutex<[String]>([])
        let record = { @Sendable (label: String, outcome: Result<PostgresResult, PostgresError>) in
            calls.withLock { $0.append("\(label):\(summary(outcome))") }
        }
        let sent = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            @Sendable func attempt(_ tries: Int) {
                loop.execute {
                    guard let pipeline = pool.pipeline(on: loop) else { return continuation.resume(returning: false) }
                    guard pipeline.isReady || tries > 500 else {
                        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(10)) { attempt(tries + 1) }
                        return
                    }
                    let read = pipeline.send(busyStatement) { outcome in
                        record("busy", outcome)
                        let again = pipeline.send("SELECT 'again'::text") { record("again", $0) }
                        calls.withLock { $0.append("sent again: \(again)") }
                    }
                    let write = pipeline.send("INSERT INTO t VALUES (1)", write: true) { record("write", $0) }
                    continuation.resume(returning: read && write)
                }
            }
            attempt(0)
        }
        #expect(sent)
        var tries = 0
        while try await pool.query(busyBackends).isEmpty, tries < 1_000 {
            tries += 1
            try await Task.sleep(for: .milliseconds(10))
        }
        // Both statements are on the server (the write queued behind the sleeping read) when the loop stops.
        await offPool { loop.stop() }
        #expect(calls.withLock { $0 } == ["busy:error pool_closed (not run)", "sent again: false", "write:error pool_closed"])
        _ = try await pool.query("SELECT pg_terminate_backend(pid) FROM (\(unsafeRaw: busyBackends.sql)) AS busy")
        #expect(try await pool.query("SELECT count(*) FROM t")[0].decode(Int.self, at: 0) == 0)
    }

    @Test("a statement that fails to prepare costs no other statement its name: later ones prepare and run")
    func failedPrepare() async throws {
        let pool = PostgresPool(url: try TestDatabase.create("pipeline_prepare"), maxConnections: 1)
        defer { Task { await pool.close() } }
        let answers = try await onLoop(pool) { (pipeline, done: @escaping @Sendable ([String]) -> Void) in
            let collected = Mutex<[String]>([])
            let record = { @Sendable (outcome: Result<PostgresResult, PostgresError>) in
                let text: String
                switch outcome {
                case .success(let rows): text = (try? rows[0].decode(String.self, at: 0)) ?? "?"
                case .failure(let error): text = "error \(error.sqlState ?? error.code.rawValue)\(error.didNotRun ? " (not run)" : "")"
                }
                collected.withLock { $0.append(text) }
            }
            let rounds: [[PostgresQuery]] = [
                ["SELECT 'a'::text"],
                // Its Parse is skipped (the group failed before it), so the name it was given never exists.
                ["SELECT (1 / \(0))::text", "SELECT 'c'::text"],
                // Its Parse fails on the server.
                ["SELEC 'typo'"],
                ["SELECT 'b'::text", "SELECT 'c'::text", "SELECT 'a'::text"],
            ]
            @Sendable func run(_ round: Int) {
                guard round < rounds.count else { return done(collected.withLock { $0 }) }
                let last = rounds[round].count - 1
                for (index, query) in rounds[round].enumerated() {
                    pipeline.send(query) { outcome in
                        record(outcome)
                        if index == last { run(round + 1) }
                    }
                }
            }
            run(0)
        }
        #expect(answers.count == 7)
        #expect(answers.prefix(2) == ["a", "error 22012"])
        #expect(answers[2] == "error server_error (not run)", "skipped after the division by zero")
        #expect(answers[3] == "error 42601 (not run)", "the statement that failed to prepare carries the server's error")
        #expect(Array(answers.suffix(3)) == ["b", "c", "a"])
    }

    @Test("a write that needs a row another session holds fails at once as lock_not_available; the read after it is answered")
    func lockedRow() async throws {
        let url = try TestDatabase.create("pipeline_lock")
        // The statement timeout only ends the wait of a pipeline that does not give up on the lock by itself.
        let pool = PostgresPool(url: url, maxConnections: 1, statementTimeoutMilliseconds: 10_000)
        defer { Task { await pool.close() } }
        try await pool.execute("CREATE TABLE transfers (n int PRIMARY KEY, state text)")
        try await pool.execute("INSERT INTO transfers VALUES (1, 'pending')")
        let holder = try await PostgresConnection.connect(url: url)
        try await holder.executeScript(unsafeSQL: "BEGIN")
        try await holder.query("SELECT n FROM transfers WHERE n = \(1) FOR UPDATE")
        let outcomes = try await onLoop(pool) { (pipeline, done: @escaping @Sendable ([String]) -> Void) in
            let collect = collector(2, done)
            let record = { @Sendable (label: String, outcome: Result<PostgresResult, PostgresError>) in collect("\(label) \(changes(outcome))") }
            pipeline.send("UPDATE transfers SET state = 'done' WHERE n = \(1)", write: true) { record("write", $0) }
            pipeline.send("SELECT 'after'::text") { record("read", $0) }
        }
        try await holder.executeScript(unsafeSQL: "ROLLBACK")
        #expect(outcomes == ["write query_canceled 55P03 (not run)", "read ok 1"])
        #expect(try await pool.query("SELECT state FROM transfers WHERE n = 1")[0].decode(String.self, at: 0) == "pending")
    }

    @Test("a write whose commit fails (a deferred constraint) gets the commit's error; the next group is answered")
    func failedCommit() async throws {
        let pool = PostgresPool(url: try TestDatabase.create("pipeline_commit"), maxConnections: 1)
        defer { Task { await pool.close() } }
        try await pool.execute("CREATE TABLE d (n int, CONSTRAINT d_unique UNIQUE (n) DEFERRABLE INITIALLY DEFERRED)")
        try await pool.execute("INSERT INTO d VALUES (1)")
        let outcomes = try await onLoop(pool) { (pipeline, done: @escaping @Sendable ([String]) -> Void) in
            let collect = collector(3, done)
            let record = { @Sendable (label: String, outcome: Result<PostgresResult, PostgresError>) in collect("\(label):\(summary(outcome))") }
            pipeline.send("INSERT INTO d VALUES (\(1))", write: true) { record("duplicate", $0) }
            pipeline.send("SELECT 'after'::text") { record("read", $0) }
            pipeline.send("INSERT INTO d VALUES (\(2)) RETURNING 'inserted'::text", write: true) { record("write", $0) }
        }
        #expect(outcomes == ["duplicate:error unique_violation", "read:after", "write:inserted"])
        #expect(try await pool.query("SELECT count(*) FROM d")[0].decode(Int.self, at: 0) == 2)
    }
}
