import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import TestSupport

/// One answer of `baton serve` to the fault suite: the status (-1 when no answer came: connection refused or
/// reset, timeout) and the `error` code of an error body.
struct ProbeAnswer: Sendable {
    var status: Int
    var error: String?
    var reason: String?
    var outcome: String?
}

/// Plain HTTP requests to `baton serve` on loopback, through Foundation's URLSession.
enum HTTPProbe {
    static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 20
        configuration.httpMaximumConnectionsPerHost = 16
        return URLSession(configuration: configuration)
    }()

    /// Sends one request; a transport failure is status -1.
    static func send(_ method: String, port: Int, path: String, json: [String: String]? = nil) async -> ProbeAnswer {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        if let json {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = try? JSONSerialization.data(withJSONObject: json)
        }
        do {
            let (data, response) = try await session.data(for: request)
            let status = (response as? HTTPURLResponse)?.statusCode ?? -1
            let body = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
            return ProbeAnswer(status: status, error: body?["error"] as? String, reason: body?["reason"] as? String, outcome: body?["outcome"] as? String)
        } catch {
            return ProbeAnswer(status: -1, error: "transport: \(type(of: error))")
        }
    }

    /// The status of one request.
    static func status(_ method: String, port: Int, path: String) async -> Int {
        await send(method, port: port, path: path).status
    }

    /// `POST /v1/signin` with `token`.
    static func signIn(port: Int, token: String) async -> ProbeAnswer {
        await send("POST", port: port, path: "/v1/signin", json: ["id_token": token])
    }
}

/// What a sign-in load saw: every answer with the moment its request was sent, and marks for the moments
/// faults began and ended, so a scenario can ask what was answered before, during and after.
final class LoadLog: Sendable {
    struct Entry: Sendable {
        /// Seconds since the load started, when the request was sent.
        var sentAt: Double
        var answer: ProbeAnswer
    }

    private let started = ContinuousClock.now
    private let entries = Mutex<[Entry]>([])
    private let marks = Mutex<[String: Double]>([:])

    /// Seconds since the load started.
    var elapsed: Double {
        let duration = ContinuousClock.now - started
        return Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    func record(sentAt: Double, _ answer: ProbeAnswer) { entries.withLock { $0.append(Entry(sentAt: sentAt, answer: answer)) } }

    /// Records that `name` happened now.
    func mark(_ name: String) { let now = elapsed; marks.withLock { $0[name] = now } }

    /// When `name` happened.
    func time(_ name: String) -> Double { marks.withLock { $0[name] ?? .infinity } }

    /// Every answer so far.
    var all: [Entry] { entries.withLock { $0 } }

    /// Answers to requests sent in `[from, to)`.
    func answers(sentFrom from: Double, to: Double = .infinity) -> [ProbeAnswer] {
        all.filter { $0.sentAt >= from && $0.sentAt < to }.map(\.answer)
    }

    /// Statuses per second of sending (`second: [status: count]`), for failure messages.
    var perSecond: String {
        var table: [Int: [Int: Int]] = [:]
        for entry in all { table[Int(entry.sentAt), default: [:]][entry.answer.status, default: 0] += 1 }
        return table.keys.sorted().map { second in
            "\(second)s " + table[second]!.keys.sorted().map { "\($0)×\(table[second]![$0]!)" }.joined(separator: ",")
        }.joined(separator: " | ") + " marks: " + marks.withLock { $0 }.sorted { $0.value < $1.value }
            .map { "\($0.key)@\(String(format: "%.1f", $0.value))" }.joined(separator: " ")
    }
}

/// A bounded sign-in load against `baton serve`: `concurrency` loops, each signing in `people` (default all) in
/// turn (the first sign-in of each migrates them, the next ones find them current), a short pause between
/// requests, until ``stop()`` or `maxRequests` requests in all.
final class SignInLoad: Sendable {
    let log = LoadLog()
    private let control = LoadControl()
    private let task: Task<Void, Never>

    init(world: FaultWorld, people: [FaultPerson]? = nil, concurrency: Int = 4, maxRequests: Int = 4_000, pause: Duration = .milliseconds(10)) {
        let log = log, control = control, people = people ?? world.people
        task = Task {
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<concurrency {
                    group.addTask {
                        while let index = control.next(limit: maxRequests) {
                            let person = people[index % people.count]
                            guard let token = try? world.token(person) else {
                                log.record(sentAt: log.elapsed, ProbeAnswer(status: -2, error: "emulator could not mint a token"))
                                continue
                            }
                            let at = log.elapsed
                            log.record(sentAt: at, await HTTPProbe.signIn(port: world.servePort, token: token))
                            try? await Task.sleep(for: pause)
                        }
                    }
                }
            }
        }
    }

    /// Stops the loops and waits for the requests in flight.
    func stop() async -> LoadLog {
        control.stop()
        await task.value
        return log
    }
}

/// Whether a load should stop, and how many requests it sent.
private final class LoadControl: Sendable {
    private let state = Mutex<(stopped: Bool, sent: Int)>((false, 0))

    /// The next request's index, or nil once stopped or `limit` requests were sent.
    func next(limit: Int) -> Int? {
        state.withLock { state in
            guard !state.stopped, state.sent < limit else { return nil }
            state.sent += 1
            return state.sent - 1
        }
    }

    func stop() { state.withLock { $0.stopped = true } }
}

/// Pauses the scenario (off the pool's threads it blocks nothing: `Task.sleep` suspends).
func pause(seconds: Double) async throws {
    try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
}

/// The legacy table's row count and a digest of its key set.
struct LegacySnapshot: Equatable, Sendable {
    var rows: Int
    var keyDigest: String

    /// Reads the snapshot with `psql` (blocking: call off the pool).
    static func take(_ url: String) throws -> LegacySnapshot {
        let line = try TestDatabase.psql(url, "SELECT count(*) || ' ' || md5(coalesce(string_agg(id::text, ',' ORDER BY id), '')) FROM public.users")
        let parts = line.split(separator: " ")
        guard parts.count == 2, let rows = Int(parts[0]) else { throw TestSupportError("unexpected snapshot: \(line)") }
        return LegacySnapshot(rows: rows, keyDigest: String(parts[1]))
    }
}

/// The consistency check run after every scenario, in SQL over `baton.transfers`, `baton.events` and the
/// application's `public.users`, through `psql` (independent of the code under test):
/// every migrated transfer has exactly one migration event and exactly one legacy row under its new
/// identifier, and the identifier is the one Apple gave that person; no legacy row was lost or duplicated
/// (count and key set unchanged); no identifier is mapped to two records; nothing is half-written (a user
/// not migrated still has their record under the old identifier, and no event exists without its migration).
struct ConsistencyChecker {
    let world: FaultWorld

    /// Each rule: a name and a query counting the rows that break it.
    static let rules: [(String, String)] = [
        ("migrated transfer without exactly one migration event", """
            SELECT count(*) FROM baton.transfers t WHERE t.state = 'migrated'
            AND (SELECT count(*) FROM baton.events e WHERE e.kind = 'migrated' AND e.old_sub = t.old_sub) <> 1
            """),
        ("migration event without its migrated transfer (old and new identifier alike)", """
            SELECT count(*) FROM baton.events e WHERE e.kind = 'migrated' AND NOT EXISTS
            (SELECT 1 FROM baton.transfers t WHERE t.old_sub = e.old_sub AND t.new_sub = e.new_sub AND t.state = 'migrated')
            """),
        ("migrated transfer without exactly one legacy row under its new identifier", """
            SELECT count(*) FROM baton.transfers t WHERE t.state = 'migrated'
            AND (SELECT count(*) FROM public.users u WHERE u.apple_sub = t.new_sub) <> 1
            """),
        ("migration event naming another record than the one holding the new identifier", """
            SELECT count(*) FROM baton.events e WHERE e.kind = 'migrated' AND NOT EXISTS
            (SELECT 1 FROM public.users u WHERE u.apple_sub = e.new_sub AND u.id::text = e.legacy_key)
            """),
        ("legacy row still under the old identifier of a migrated transfer", """
            SELECT count(*) FROM baton.transfers t JOIN public.users u ON u.apple_sub = t.old_sub WHERE t.state = 'migrated'
            """),
        ("user not migrated whose record left its old identifier (half-written)", """
            SELECT count(*) FROM baton.transfers t WHERE t.state <> 'migrated'
            AND NOT EXISTS (SELECT 1 FROM public.users u WHERE u.apple_sub = t.old_sub)
            """),
        ("new identifier mapped to two transfers", """
            SELECT count(*) FROM (SELECT new_sub FROM baton.transfers WHERE new_sub IS NOT NULL GROUP BY new_sub HAVING count(*) > 1) d
            """),
        ("identifier mapped to two records by migration events", """
            SELECT count(*) FROM (SELECT new_sub FROM baton.events WHERE kind = 'migrated' GROUP BY new_sub
            HAVING count(DISTINCT old_sub) > 1 OR count(DISTINCT legacy_key) > 1) d
            """),
        ("subject held by two legacy rows", """
            SELECT count(*) FROM (SELECT apple_sub FROM public.users WHERE apple_sub IS NOT NULL GROUP BY apple_sub HAVING count(*) > 1) d
            """),
    ]

    /// The rules broken, with how many rows break each; empty when consistent.
    func violations() async throws -> [String] {
        var broken: [String] = []
        for (name, sql) in ConsistencyChecker.rules {
            let rows = try await world.count(sql)
            if rows != 0 { broken.append("\(name): \(rows)") }
        }
        let url = world.databaseURL
        let snapshot = try await offPool { try LegacySnapshot.take(url) }
        if snapshot.rows != world.baseline.rows { broken.append("legacy rows \(world.baseline.rows) → \(snapshot.rows)") }
        if snapshot.keyDigest != world.baseline.keyDigest { broken.append("legacy key set changed") }
        let migrated = try await world.psql("SELECT old_sub || ' ' || new_sub FROM baton.transfers WHERE state = 'migrated'")
        let expected = Dictionary(uniqueKeysWithValues: world.people.map { ($0.oldSub, $0.newSub) })
        let misattributed = migrated.split(separator: "\n").filter { line in
            let parts = line.split(separator: " ").map(String.init)
            return parts.count != 2 || expected[parts[0]] != parts[1]
        }
        if !misattributed.isEmpty { broken.append("\(misattributed.count) users migrated to an identifier Apple did not give them") }
        return broken
    }
}
