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
            let exchange = try runProcessAsync(batonBinaryPath, ["exchange", "--config", config, "--workers", "2", "--rate", "20"])
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
            for sleeper in sleepers { #expect(try await offPool { try sleeper.wait(timeout: 60) }.status == 0) }
            let result = try await offPool { try exchange.wait(timeout: 180) }
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            #expect(result.stderr.contains("throttle limits changed"), "\(result.stderr)")
            #expect(result.stderr.contains("throttled: active backends"), "\(result.stderr)")
            #expect(result.stdout.contains("failed 0, remaining 0"), "\(result.stdout)")
            #expect(Self.throttledSeconds(result.stdout) >= 3, "\(result.stdout)")
            #expect(try await world.count(Self.exchanged) == users)
            try await world.expectConsistent()
        }
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

    /// The seconds in the summary's `throttled N s`, or -1.
    static func throttledSeconds(_ summary: String) -> Double {
        guard let range = summary.range(of: "throttled ") else { return -1 }
        return Double(summary[range.upperBound...].prefix { $0 == "." || $0.isNumber }) ?? -1
    }
}
