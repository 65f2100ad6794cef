import BatonEmulator
import Foundation
import TestSupport
import Testing

/// Issue 42: the bulk jobs yield to the production database (a lagging standby, a busy primary).
@Suite("Faults: the jobs yield", .serialized)
struct FaultsThrottleTests {
    static let exchanged = "SELECT count(*) FROM baton.events WHERE kind = 'migrated' AND method = 'exchange'"

    @Test("replay paused on a real standby mid-exchange: the job claims nothing new and says why; replay resumed: it finishes, every user migrated once")
    func replicaLag() async throws {
        let users = 80
        try await FaultWorld.run(users: users, failover: true) { world in
            let pair = try world.failoverPair ?? { throw TestSupportError("no failover pair") }()
            let standby = "postgresql://postgres@127.0.0.1:\(pair.standbyPort)/postgres"
            try world.emulator.setFaults(EmulatorFaults(latencyMilliseconds: 100))
            let exchange = try runProcessAsync(batonBinaryPath, ["exchange", "--config", try world.writeConfiguration(), "--workers", "2", "--rate", "20",
                                                                  "--max-replica-lag", "1"])
            while try await world.count(Self.exchanged) < users / 8 { try await pause(seconds: 0.05) }
            _ = try await offPool { try TestDatabase.psql(standby, "SELECT pg_wal_replay_pause()") }
            let held = try await Self.standsStill(world, within: 30)
            #expect(held < users, "the exchange went on while the standby replayed nothing")
            _ = try await offPool { try TestDatabase.psql(standby, "SELECT pg_wal_replay_resume()") }
            let result = try await offPool { try exchange.wait(timeout: 180) }
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            #expect(result.stderr.contains("throttled: replica lag"), "\(result.stderr)")
            #expect(result.stdout.contains("failed 0, remaining 0"), "\(result.stdout)")
            #expect(Self.throttledSeconds(result.stdout) >= 3, "\(result.stdout)")
            #expect(try await world.count(Self.exchanged) == users)
            #expect(try await world.migratedCount() == users)
            try await world.expectConsistent()
        }
    }

    @Test("jobs.max_active_backends set by SIGHUP mid-exchange, then more client backends busy: the job claims nothing new and says why; once they end it finishes")
    func activeBackends() async throws {
        let users = 80
        try await FaultWorld.run(users: users) { world in
            try world.emulator.setFaults(EmulatorFaults(latencyMilliseconds: 100))
            let config = try world.writeConfiguration()
            let metrics = world.directory.path("exchange.prom")
            let exchange = try runProcessAsync(batonBinaryPath, ["exchange", "--config", config, "--workers", "2", "--rate", "20", "--metrics-file", metrics])
            while try await world.count(Self.exchanged) < users / 8 { try await pause(seconds: 0.05) }
            // The limit arrives while the job runs. The job's own other connections (two workers, one claim) are at
            // most 3 active: the limit sits there.
            var tree = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: config))) as? [String: Any])
            tree["jobs"] = ["max_active_backends": 3]
            try JSONSerialization.data(withJSONObject: tree).write(to: URL(fileURLWithPath: config))
            exchange.signal(SIGHUP)
            let sleepers = try (0..<4).map { _ in try runProcessAsync("/usr/bin/psql", [world.databaseURL, "-qAtc", "SELECT pg_sleep(15)"]) }
            let held = try await Self.standsStill(world, within: 12)
            #expect(held < users, "the exchange went on while the database was busy")
            // The metrics file (rewritten every 5 s) says so while the sleepers run.
            let throttledNow = "baton_job_throttled{command=\"exchange\",reason=\"active_backends\"} 1\n"
            var seen = false
            for _ in 0..<40 where !seen {
                seen = await offPool { (try? String(contentsOfFile: metrics, encoding: .utf8)) ?? "" }.contains(throttledNow)
                if !seen { try await pause(seconds: 0.25) }
            }
            #expect(seen, "the metrics file never said the job was throttled by active backends")
            for sleeper in sleepers { #expect(try await offPool { try sleeper.wait(timeout: 60) }.status == 0) }
            let result = try await offPool { try exchange.wait(timeout: 180) }
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            #expect(result.stderr.contains("throttle limits changed"), "\(result.stderr)")
            #expect(result.stderr.contains("throttled: active backends"), "\(result.stderr)")
            #expect(result.stdout.contains("failed 0, remaining 0"), "\(result.stdout)")
            #expect(Self.throttledSeconds(result.stdout) >= 3, "\(result.stdout)")
            let written = try String(contentsOfFile: metrics, encoding: .utf8)
            #expect(Self.sample(written, "baton_job_throttled_seconds_total{command=\"exchange\"}") >= 3, "\(written)")
            #expect(written.contains("baton_job_throttled{command=\"exchange\",reason=\"active_backends\"} 0\n"), "\(written)")
            #expect(written.contains("baton_job_throttled{command=\"exchange\",reason=\"replica_lag\"} 0\n"), "\(written)")
            #expect(try await world.count(Self.exchanged) == users)
            try await world.expectConsistent()
        }
    }

    @Test("import transfers: client backends busy mid-import: it waits between its batches, its transaction open; once they end it loads every line once")
    func importWaits() async throws {
        let directory = try KeyDirectory()
        defer { directory.remove() }
        let url = try TestDatabase.create("import_throttle")
        #expect(try await runBatonOffPool(["db", "migrate", "--database-url", url]).status == 0)
        // The file comes through a pipe, so the test decides when the import has its second batch.
        let pipe = directory.path("t.csv")
        #expect(mkfifo(pipe, 0o600) == 0)
        func lines(_ range: Range<Int>) -> Data { Data(range.map { "old.\($0),transfer.\($0)\n" }.joined().utf8) }
        let first = Data("old_sub,transfer_sub\n".utf8) + lines(0..<5_000), rest = lines(5_000..<12_000)
        let importer = try runProcessAsync(batonBinaryPath, ["import", "transfers", pipe, "--database-url", url, "--max-active-backends", "1"],
                                           environment: ["PGAPPNAME": "baton_import"])
        let writer = try await offPool { try FileHandle(forWritingTo: URL(fileURLWithPath: pipe)) }
        try await offPool { try writer.write(contentsOf: first) }
        // The first batch (5,000 lines) is in: the import's transaction is open, its read waits for more.
        // The import's own connection (its throttle's probe has another).
        let state = "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'baton_import' AND state = 'idle in transaction'"
        var idle = false
        for _ in 0..<400 where !idle {
            idle = try await offPool { try TestDatabase.psql(url, state) } == "t"
            if !idle { try await pause(seconds: 0.05) }
        }
        #expect(idle, "the import never opened its transaction")
        let busy = try await BusyBackends(2, on: url)
        try await pause(seconds: 2) // the throttle probes every second
        try await offPool {
            try writer.write(contentsOf: rest)
            try writer.close()
        }
        // The rest of the file is there, but the import holds its transaction open and writes nothing.
        for _ in 0..<3 {
            try await pause(seconds: 1)
            #expect(try await offPool { try TestDatabase.psql(url, state) } == "t")
        }
        #expect(try await BusyBackends.active(url) == 2)
        try await busy.end()
        let result = try await offPool { try importer.wait(timeout: 120) }
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("12000 lines: loaded 12000, already present 0, rejected 0; throttled "), "\(result.stdout)")
        #expect(Self.throttledSeconds(result.stdout) >= 3, "\(result.stdout)")
        #expect(result.stderr.contains("pausing: claiming no new work until the database is clear"), "\(result.stderr)")
        #expect(result.stderr.contains("throttled: active backends"), "\(result.stderr)")
        #expect(try await offPool { try TestDatabase.psql(url, "SELECT count(*), count(DISTINCT transfer_sub) FROM baton.transfers") } == "12000|12000")
    }

    /// Waits until the exchanged count stays the same for 3 s (the rows in flight finished), at most `within` s;
    /// returns it. Throws when it never stood still.
    static func standsStill(_ world: FaultWorld, within seconds: Double) async throws -> Int {
        let deadline = Date().addingTimeInterval(seconds)
        var last = try await world.count(exchanged)
        while Date() < deadline {
            try await pause(seconds: 3)
            let now = try await world.count(exchanged)
            if now == last { return now }
            last = now
        }
        throw TestSupportError("the exchange never stood still within \(seconds) s (at \(last))")
    }

    /// The value of `series` in a metrics file, or -1.
    static func sample(_ text: String, _ series: String) -> Double {
        text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.dropFirst(series.count + 1)) } ?? -1
    }

    /// The seconds in the summary's `throttled N s`, or -1.
    static func throttledSeconds(_ summary: String) -> Double {
        guard let range = summary.range(of: "throttled ") else { return -1 }
        return Double(summary[range.upperBound...].prefix { $0 == "." || $0.isNumber }) ?? -1
    }
}
