import BatonEmulator
import Foundation
import TestSupport
import Testing

/// The fault suite (issue 9): `baton serve` and `baton exchange` as child processes against a real PostgreSQL
/// (a cluster of the scenario's own when it stops the server or fills its disk) and the emulator, each
/// scenario ending with the consistency check (``ConsistencyChecker``).
/// `make test` runs the short form; `make faults` the long one (`BATON_FAULTS=long`).
@Suite("Faults", .serialized)
struct FaultsTests {
    /// Signs every person in once, one after the other, and expects 200 for each: the service has recovered
    /// and every user ends up migrated.
    static func signEveryoneIn(_ world: FaultWorld, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        var statuses: [Int: Int] = [:]
        for person in world.people {
            statuses[await HTTPProbe.signIn(port: world.servePort, token: try world.token(person)).status, default: 0] += 1
        }
        #expect(statuses == [200: world.people.count], "final sign-ins: \(statuses)", sourceLocation: sourceLocation)
        #expect(try await world.migratedCount() == world.people.count, sourceLocation: sourceLocation)
    }

    @Test("PostgreSQL stopped and restarted under sign-in load: 503 during the outage, none 5 s after, nothing half-written")
    func databaseRestart() async throws {
        try await FaultWorld.run(users: FaultLength.pick(short: 30, long: 200), privateCluster: true) { world in
            try await world.startServe(configuration: try world.writeConfiguration())
            let outages = FaultLength.pick(short: 1, long: 3)
            let load = SignInLoad(world: world, maxRequests: FaultLength.pick(short: 3_000, long: 20_000))
            for round in 0..<outages {
                try await pause(seconds: 0.5)
                load.log.mark("stopping\(round)")
                try await offPool { try world.cluster.stop() }
                load.log.mark("stopped\(round)")
                try await pause(seconds: 1)
                load.log.mark("restarting\(round)")
                try await offPool { try world.cluster.restart() }
                load.log.mark("up\(round)")
                try await pause(seconds: 6)
            }
            let log = await load.stop()
            let statuses = Set(log.all.map(\.answer.status))
            #expect(statuses.isSubset(of: [200, 503]), "\(log.perSecond)")
            #expect(log.all.filter { $0.answer.status == 503 }.allSatisfy { $0.answer.error == "database_unavailable" })
            for round in 0..<outages {
                let during = log.answers(sentFrom: log.time("stopped\(round)"), to: log.time("restarting\(round)"))
                #expect(!during.isEmpty && during.allSatisfy { $0.status == 503 }, "round \(round): \(log.perSecond)")
                let after = log.answers(sentFrom: log.time("up\(round)") + 5, to: round + 1 < outages ? log.time("stopping\(round + 1)") : .infinity)
                #expect(!after.isEmpty && after.allSatisfy { $0.status == 200 }, "round \(round): \(log.perSecond)")
            }
            try await FaultsTests.signEveryoneIn(world)
            try await world.expectConsistent()
        }
    }

    @Test("Apple unreachable: sign-ins go on with the cached key set; baton exchange pauses, resumes when Apple is back, and finishes")
    func emulatorDown() async throws {
        let users = FaultLength.pick(short: 120, long: 600)
        try await FaultWorld.run(users: users) { world in
            try world.emulator.setFaults(EmulatorFaults(latencyMilliseconds: 10))
            let config = try world.writeConfiguration()
            try await world.startServe(configuration: config)
            // A quarter of the users sign in; the exchange works through everyone (those signed in are already done).
            let load = SignInLoad(world: world, people: Array(world.people.prefix(users / 4)), concurrency: 2,
                                  maxRequests: FaultLength.pick(short: 1_500, long: 10_000))
            let exchanged = "SELECT count(*) FROM baton.events WHERE kind = 'migrated' AND method = 'exchange'"
            let exchange = try runProcessAsync(batonBinaryPath, ["exchange", "--config", config, "--workers", "4", "--rate", "50", "--lease", "5"])
            while try await world.count(exchanged) < users / 8 { try await pause(seconds: 0.05) }
            await world.emulatorDown()
            load.log.mark("down")
            try await pause(seconds: 1)
            let pausedAt = try await world.count(exchanged)
            try await pause(seconds: FaultLength.pick(short: 1, long: 4))
            #expect(try await world.count(exchanged) == pausedAt, "no user exchanged while Apple is unreachable")
            load.log.mark("restarting")
            try await world.emulatorUp()
            try world.emulator.setFaults(EmulatorFaults(latencyMilliseconds: 10))
            let result = try await offPool { try exchange.wait(timeout: 120) }
            let log = await load.stop()
            #expect(!log.answers(sentFrom: log.time("down"), to: log.time("restarting")).isEmpty)
            #expect(log.all.allSatisfy { $0.answer.status == 200 }, "\(log.perSecond)")
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            #expect(result.stdout.contains("remaining 0"))
            #expect(try await world.migratedCount() == users)
            try await world.expectConsistent()
        }
    }

    @Test("kill -9 of baton serve under sign-in load, repeatedly: restart, resume, consistent")
    func killServe() async throws {
        try await FaultWorld.run(users: FaultLength.pick(short: 40, long: 200)) { world in
            let config = try world.writeConfiguration()
            try await world.startServe(configuration: config)
            let load = SignInLoad(world: world, maxRequests: FaultLength.pick(short: 3_000, long: 30_000))
            for _ in 0..<FaultLength.pick(short: 2, long: 15) {
                try await pause(seconds: 0.6)
                let killed = try await world.stopServe(signal: SIGKILL)
                #expect(killed?.status == 128 + SIGKILL)
                try await world.startServe(configuration: config)
            }
            try await pause(seconds: 0.5)
            let log = await load.stop()
            // While the service is down a request gets no answer (-1); an answer is never a 5xx.
            #expect(Set(log.all.map(\.answer.status)).isSubset(of: [200, -1]), "\(log.perSecond)")
            #expect(log.all.contains { $0.answer.status == 200 })
            try await FaultsTests.signEveryoneIn(world)
            try await world.expectConsistent()
        }
    }

    @Test("kill -9 of baton exchange mid-batch, repeatedly, with sign-ins racing it: every user migrated exactly once")
    func killExchange() async throws {
        let users = FaultLength.pick(short: 120, long: 1_000)
        try await FaultWorld.run(users: users) { world in
            try world.emulator.setFaults(EmulatorFaults(latencyMilliseconds: 20))
            let config = try world.writeConfiguration()
            try await world.startServe(configuration: config)
            let load = SignInLoad(world: world, concurrency: 2, maxRequests: FaultLength.pick(short: 150, long: 1_500), pause: .milliseconds(40))
            let kills = FaultLength.pick(short: 2, long: 12)
            for _ in 0..<kills {
                let before = try await world.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'")
                let exchange = try runProcessAsync(batonBinaryPath, ["exchange", "--config", config, "--workers", "4", "--rate", "200", "--lease", "2"])
                let target = min(users - 1, before + users / (kills + 2))
                while try await world.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") < target {
                    try await pause(seconds: 0.02)
                }
                exchange.signal(SIGKILL)
                let killed = try await offPool { try exchange.wait(timeout: 60) }
                #expect(killed.status == 128 + SIGKILL || killed.status == 0, "\(killed.stderr)")
            }
            let log = await load.stop()
            #expect(log.all.allSatisfy { $0.answer.status == 200 }, "\(log.perSecond)")
            let rerun = try await offPool { try runBaton(["exchange", "--config", config, "--workers", "4", "--rate", "200", "--lease", "2"]) }
            #expect(rerun.status == 0, "\(rerun.stdout)\(rerun.stderr)")
            #expect(rerun.stdout.contains("remaining 0"))
            #expect(try await world.migratedCount() == users)
            try await world.expectConsistent()
        }
    }

    @Test("a slow database (the legacy table locked by another session): 503 within the statement timeout, then recovery")
    func lockedTable() async throws {
        try await FaultWorld.run(users: 16) { world in
            try await world.startServe(configuration: try world.writeConfiguration(statementTimeoutMilliseconds: 500))
            for person in world.people.prefix(4) {
                #expect(await HTTPProbe.signIn(port: world.servePort, token: try world.token(person)).status == 200)
            }
            let locker = try runProcessAsync("/usr/bin/psql", [world.databaseURL, "-v", "ON_ERROR_STOP=1", "-qc",
                "SET application_name = 'faults_locker'; BEGIN; LOCK TABLE public.users IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(120); COMMIT;"])
            while try await world.count("""
                SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                WHERE c.relname = 'users' AND l.mode = 'AccessExclusiveLock' AND l.granted
                AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                """) == 0 {
                try await pause(seconds: 0.05)
            }
            // More requests at once than the pool has connections: each one times out and frees its connection.
            let answers = try await withThrowingTaskGroup(of: ProbeAnswer.self) { group in
                for person in world.people.prefix(12) {
                    let token = try world.token(person)
                    group.addTask { await HTTPProbe.signIn(port: world.servePort, token: token) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.count == 12)
            #expect(answers.allSatisfy { $0.status == 503 && $0.error == "database_unavailable" && $0.reason?.contains("query_canceled") == true },
                    "\(answers.map { "\($0.status) \($0.reason ?? "")" })")
            #expect(try await world.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 4)
            _ = try await world.psql("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'faults_locker'")
            _ = try await offPool { try locker.wait(timeout: 60) }
            #expect(await HTTPProbe.send("GET", port: world.servePort, path: "/readyz").status == 200)
            try await FaultsTests.signEveryoneIn(world)
            try await world.expectConsistent()
        }
    }

    @Test("a read-only database: sign-ins that must write get a clear 503, the exchange stops with a clear error; both recover")
    func readOnlyDatabase() async throws {
        try await FaultWorld.run(users: 12) { world in
            let config = try world.writeConfiguration()
            try await world.startServe(configuration: config)
            #expect(await HTTPProbe.signIn(port: world.servePort, token: try world.token(world.people[0])).outcome == "migrated")
            try await world.setReadOnly(true)
            let refused = await HTTPProbe.signIn(port: world.servePort, token: try world.token(world.people[1]))
            #expect(refused.status == 503)
            #expect(refused.error == "database_unavailable")
            #expect(refused.reason?.contains("resource_unavailable") == true, "\(refused)")
            #expect(await HTTPProbe.send("GET", port: world.servePort, path: "/healthz").status == 200)
            let exchange = try await offPool { try runBaton(["exchange", "--config", config, "--rate", "50"]) }
            #expect(exchange.status == 1, "\(exchange.stdout)\(exchange.stderr)")
            #expect(exchange.stderr.contains("read-only") || exchange.stderr.contains("resource_unavailable"), "\(exchange.stderr)")
            #expect(!exchange.stderr.contains("Fatal error"))
            #expect(try await world.migratedCount() == 1)
            try await world.setReadOnly(false)
            try await FaultsTests.signEveryoneIn(world)
            try await world.expectConsistent()
        }
    }

    @Test("a full disk under the database: a clear 503, the service stays up, and recovers once space is freed")
    func diskFull() async throws {
        let mount = try await offPool { try TinyFilesystem(megabytes: 48) }
        do {
            try await FaultWorld.run(users: 12, privateCluster: true, tablespace: mount.tablespace) { world in
                try await world.startServe(configuration: try world.writeConfiguration())
                try await offPool { try mount.fill() }
                for person in world.people.prefix(4) {
                    let answer = await HTTPProbe.signIn(port: world.servePort, token: try world.token(person))
                    #expect(answer.status == 503 && answer.error == "database_unavailable" && answer.reason?.contains("resource_unavailable") == true,
                            "\(answer)")
                }
                #expect(await HTTPProbe.send("GET", port: world.servePort, path: "/healthz").status == 200)
                #expect(try await world.migratedCount() == 0)
                try await offPool { try mount.free() }
                try await FaultsTests.signEveryoneIn(world)
                try await world.expectConsistent()
            }
        } catch {
            try? await offPool { try mount.remove() }
            throw error
        }
        try await offPool { try mount.remove() }
    }
}

extension FaultWorld {
    /// Makes the application's database read-only for new transactions (`default_transaction_read_only`), or
    /// writable again, and ends the service's sessions so its pool reconnects with the new default.
    func setReadOnly(_ readOnly: Bool) async throws {
        let server = serverURL, name = databaseName
        _ = try await offPool {
            try TestDatabase.psql(server, readOnly ? "ALTER DATABASE \(name) SET default_transaction_read_only = on"
                                                   : "ALTER DATABASE \(name) RESET default_transaction_read_only")
        }
        _ = try await offPool {
            // With a timeout, pg_terminate_backend waits until each session is gone (otherwise the service could
            // still lend one that is about to die, and see a lost connection instead of the read-only error).
            try TestDatabase.psql(server, "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity WHERE datname = '\(name)'")
        }
    }
}

/// A small tmpfs for a tablespace, owned by `postgres`, that can be filled to the last byte (needs root).
struct TinyFilesystem: Sendable {
    let path: String
    /// The directory given to `CREATE TABLESPACE`.
    var tablespace: String { path + "/ts" }

    init(megabytes: Int) throws {
        path = try runProcess("/usr/bin/mktemp", ["-d", "/tmp/baton-full.XXXXXX"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try TinyFilesystem.run("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", path])
        try TinyFilesystem.run("/usr/bin/mkdir", [path + "/ts"])
        try TinyFilesystem.run("/usr/bin/chown", ["postgres:", path + "/ts"])
    }

    /// Writes zeros until the filesystem is full.
    func fill() throws {
        _ = try runProcess("/usr/bin/dd", ["if=/dev/zero", "of=\(path)/filler", "bs=64k"])
        let left = try runProcess("/usr/bin/df", ["--output=avail", path]).stdout
        guard left.split(separator: "\n").last?.trimmingCharacters(in: .whitespaces) == "0" else {
            throw TestSupportError("the tmpfs is not full: \(left)")
        }
    }

    /// Deletes the filler.
    func free() throws { try FileManager.default.removeItem(atPath: path + "/filler") }

    /// Unmounts and deletes the directory (after the cluster using it is gone).
    func remove() throws {
        try TinyFilesystem.run("/usr/bin/umount", [path])
        try FileManager.default.removeItem(atPath: path)
    }

    private static func run(_ tool: String, _ arguments: [String]) throws {
        let result = try runProcess(tool, arguments)
        guard result.status == 0 else { throw TestSupportError("\(tool) \(arguments.joined(separator: " ")) failed: \(result.stderr)") }
    }
}
