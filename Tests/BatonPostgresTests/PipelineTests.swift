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

@Suite("Postgres pipeline on an event loop")
struct PipelineTests {
    @Test("statements queued in one round are answered in order; a failing read fails only the reads queued after it in its round")
    func orderAndGroups() async throws {
        let pool = PostgresPool(url: try TestDatabase.create("pipeline"), maxConnections: 1)
        defer { Task { await pool.close() } }
        let answers = try await onLoop(pool) { (pipeline, done: @escaping @Sendable ([String]) -> Void) in
            let collected = Mutex<[String]>([])
            let expected = 12
            let record = { @Sendable (index: Int, outcome: Result<PostgresResult, PostgresError>) in
                let all = collected.withLock { list -> [String]? in
                    list.append("\(index):\(describe(outcome))")
                    return list.count == expected ? list : nil
                }
                if let all { done(all) }
            }
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
            let collected = Mutex<[String]>([])
            let record = { @Sendable (label: String, outcome: Result<PostgresResult, PostgresError>) in
                let text: String
                switch outcome {
                case .success(let rows): text = "\(label) ok \(rows.affectedRows)"
                case .failure(let error): text = "\(label) \(error.code.rawValue)"
                }
                let all = collected.withLock { list -> [String]? in
                    list.append(text)
                    return list.count == 4 ? list : nil
                }
                if let all { done(all) }
            }
            pipeline.send("SELECT 1") { record("read", $0) }
            pipeline.send("INSERT INTO t VALUES (\(1))", write: true) { record("write", $0) }
            pipeline.send("INSERT INTO t VALUES (\(1))", write: true) { record("duplicate", $0) }
            pipeline.send("SELECT (1 / \(0))::text") { record("failing read", $0) }
        }
        #expect(outcomes.count == 4)
        #expect(outcomes[0] == "read ok 1")
        #expect(outcomes[1] == "write ok 1")
        #expect(outcomes[2] == "duplicate unique_violation")
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
