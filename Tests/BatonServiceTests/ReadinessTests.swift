import Baton
import BatonService
import Foundation
import TestSupport
import Testing

@Suite("/readyz: a writable primary, checked in the background", .serialized)
struct ReadinessTests {
    @Test("503 while the database is read-only (no writable primary), 200 once it is writable again", arguments: Mode.allCases)
    func readOnlyPrimary(mode: Mode) async throws {
        let f = try await ServiceFixture(mode, people: 1)
        let name = try TestDatabase.psql(f.url, "SELECT current_database()")
        #expect(try await f.readyz(expecting: 200).status == 200)
        try demote(f, name: name, readOnly: true)
        let notReady = try await f.readyz(expecting: 503)
        #expect(notReady.status == 503)
        #expect(notReady.json["database"]?.boolValue == false)
        let signIn = try await f.signIn(try f.token(f.people[0]))
        #expect(signIn.status == 503)
        #expect(signIn.error == "database_unavailable")
        try demote(f, name: name, readOnly: false)
        #expect(try await f.readyz(expecting: 200).status == 200)
        #expect(try await f.signIn(try f.token(f.people[0])).status == 200)
        await f.close()
    }

    @Test("readiness probes take no pool connection: they answer at once while every connection is busy")
    func probesTakeNoConnection() async throws {
        let f = try await ServiceFixture(.live, people: 1)
        #expect(try await f.readyz(expecting: 200).status == 200)
        let busy = (0..<f.pool.maxConnections).map { _ in
            Task { try await f.pool.query("SELECT pg_sleep(3)") }
        }
        var statistics = await f.pool.statistics()
        while statistics.idle > 0 || statistics.open < f.pool.maxConnections {
            try await Task.sleep(for: .milliseconds(10))
            statistics = await f.pool.statistics()
        }
        let started = ContinuousClock.now
        var statuses: [Int] = []
        for _ in 0..<20 { statuses.append(try await f.send("GET", "/readyz").status) }
        let elapsed = ContinuousClock.now - started
        #expect(statuses.allSatisfy { $0 == 200 }, "\(statuses)")
        #expect(elapsed < .seconds(1), "20 probes took \(elapsed) while the pool was busy")
        for task in busy { _ = try await task.value }
        await f.close()
    }

    /// Makes the database read-only (or writable again) for new sessions and ends the existing ones, as a
    /// failover does to a demoted primary's clients.
    private func demote(_ f: ServiceFixture, name: String, readOnly: Bool) throws {
        let server = try TestDatabase.serverURL()
        _ = try TestDatabase.psql(server, "ALTER DATABASE \(name) SET default_transaction_read_only = \(readOnly ? "on" : "off")")
        _ = try TestDatabase.psql(server, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(name)' AND pid <> pg_backend_pid()")
    }
}
