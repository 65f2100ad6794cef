import Foundation
import Synchronization
import TestSupport
import Testing

/// A primary and a synchronous streaming standby (`pg_basebackup -R`, `synchronous_standby_names`) of a
/// scenario's own, on loopback TCP, driven through scripts/pg.sh; removed by ``destroy()``.
final class FailoverPair: @unchecked Sendable {
    // `@unchecked Sendable`: immutable after init; the servers are driven through scripts/pg.sh.
    let primaryDirectory: String
    let standbyDirectory: String
    /// The primary's maintenance database over its socket.
    let primaryURL: String
    let primaryPort: Int
    let standbyPort: Int

    init() throws {
        _ = try TestDatabase.serverURL()  // fail loudly outside `make test`
        primaryDirectory = try FailoverPair.temporaryDirectory()
        standbyDirectory = try FailoverPair.temporaryDirectory()
        do {
            primaryURL = try FailoverPair.pg(["primary", primaryDirectory])
            _ = try FailoverPair.pg(["standby", primaryDirectory, standbyDirectory])
            primaryPort = Int(try FailoverPair.pg(["tcp-port", primaryDirectory]))!
            standbyPort = Int(try FailoverPair.pg(["tcp-port", standbyDirectory]))!
        } catch {
            _ = try? FailoverPair.pg(["destroy", primaryDirectory])
            _ = try? FailoverPair.pg(["destroy", standbyDirectory])
            throw error
        }
    }

    /// libpq's documented multi-host URI: the writable one of the two, whichever it is.
    func multiHostURL(database: String) -> String {
        "postgresql://postgres@127.0.0.1:\(primaryPort),127.0.0.1:\(standbyPort)/\(database)?target_session_attrs=read-write&connect_timeout=2"
    }

    /// Every commit on the primary waits for the standby's flush from now on.
    func makeSynchronous() throws { _ = try FailoverPair.pg(["synchronous", primaryDirectory]) }
    /// Stops the primary at once (`-m immediate`), as a machine failure would.
    func crashPrimary() throws { _ = try FailoverPair.pg(["crash", primaryDirectory]) }
    /// Promotes the standby.
    func promoteStandby() throws { _ = try FailoverPair.pg(["promote", standbyDirectory]) }

    func destroy() throws {
        _ = try FailoverPair.pg(["destroy", primaryDirectory])
        _ = try FailoverPair.pg(["destroy", standbyDirectory])
    }

    private static func temporaryDirectory() throws -> String {
        // A short path: the socket's full path must fit in 107 bytes.
        try runProcess("/usr/bin/mktemp", ["-d", "/tmp/baton-pgf.XXXXXX"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @discardableResult
    private static func pg(_ arguments: [String]) throws -> String {
        let result = try runProcess(packageRoot.appendingPathComponent("scripts/pg.sh").path, arguments)
        guard result.status == 0 else { throw TestSupportError("pg.sh \(arguments[0]) failed: \(result.stderr)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// What the failover scenario's sign-in race saw.
final class FailoverTally: Sendable {
    struct State {
        var requests = 0
        var unavailable = 0
        var otherFailures: [String] = []
        /// Person → outcomes of their answered sign-ins.
        var outcomes: [String: [String]] = [:]
        /// Seconds (since the race began) of the first 200 to a request sent after the crash, per replica port.
        var firstSuccessAfterCrash: [Int: Double] = [:]
    }
    let state = Mutex(State())
    let started = ContinuousClock.now
    let crashedAt = Mutex<Double?>(nil)

    var elapsed: Double {
        let duration = ContinuousClock.now - started
        return Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    func record(_ answer: ProbeAnswer, person: String, port: Int, sentAt: Double) {
        let crash = crashedAt.withLock { $0 }
        let now = elapsed
        state.withLock { state in
            state.requests += 1
            switch answer.status {
            case 200:
                state.outcomes[person, default: []].append(answer.outcome ?? "?")
                if let crash, sentAt >= crash, state.firstSuccessAfterCrash[port] == nil { state.firstSuccessAfterCrash[port] = now - crash }
            case 503:
                state.unavailable += 1
            default:
                state.otherFailures.append("\(answer.status) \(answer.error ?? "")")
            }
        }
    }
}

@Suite("Faults: failover", .serialized)
struct FaultsFailoverTests {
    /// Issue 16: a primary with a synchronous standby, two `baton serve` replicas and one `baton exchange` on a
    /// multi-host URL; 50 users × 8 devices sign in for the first time at once, spread over both replicas, and
    /// the primary is stopped with `-m immediate` and the standby promoted mid-load.
    @Test("primary crashed and standby promoted mid-load: 503s in the gap, recovery without restarts, nothing lost or doubled")
    func primaryFailover() async throws {
        let racers = 50, devices = 8
        let others = FaultLength.pick(short: 150, long: 1_000)
        try await FaultWorld.run(users: racers + others, failover: true) { world in
            let pair = try world.failoverPair ?? { throw TestSupportError("no failover pair") }()
            let secondPort = try freeLoopbackPort()
            try await world.startServe(configuration: try world.writeConfiguration())
            let second = try runProcessAsync(batonBinaryPath, ["serve", "--config", try world.writeConfiguration(port: secondPort), "--log-level", "warning"])
            defer { second.signal(SIGKILL); _ = try? second.wait(timeout: 30) }
            while await HTTPProbe.status("GET", port: secondPort, path: "/readyz") != 200 { try await pause(seconds: 0.1) }
            let ports = [world.servePort, secondPort]

            let exchange = try runProcessAsync(batonBinaryPath, ["exchange", "--config", try world.writeConfiguration(), "--workers", "2",
                                                                  "--rate", String(FaultLength.pick(short: 60, long: 100)), "--lease", "5",
                                                                  "--db-retry-seconds", "60"])
            let tally = FailoverTally()
            let racePeople = Array(world.people.prefix(racers))
            let tokens = try racePeople.map { person in try (0..<devices).map { _ in try world.token(person) } }
            // The race: users in waves of five, each user's eight devices at once, half on each replica; a device
            // answered 503 (or not at all) tries again, as an app would, until it gets its answer.
            let race = Task {
                for wave in stride(from: 0, to: racers, by: 5) {
                    await withTaskGroup(of: Void.self) { group in
                        for index in wave..<min(racers, wave + 5) {
                            for device in 0..<devices {
                                let port = ports[device % 2], token = tokens[index][device], person = racePeople[index].id
                                group.addTask {
                                    let deadline = tally.elapsed + 90
                                    while tally.elapsed < deadline {
                                        let sentAt = tally.elapsed
                                        let answer = await HTTPProbe.signIn(port: port, token: token)
                                        tally.record(answer, person: person, port: port, sentAt: sentAt)
                                        if answer.status == 200 || (answer.status != 503 && answer.status != -1) { return }
                                        try? await Task.sleep(for: .milliseconds(50))
                                    }
                                }
                            }
                        }
                    }
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
            // Mid-load: a third of the race answered.
            while tally.state.withLock({ $0.outcomes.count }) < racers / 3 { try await pause(seconds: 0.02) }
            let acknowledgedBefore = tally.state.withLock { $0.outcomes.count }
            tally.crashedAt.withLock { $0 = tally.elapsed }
            try await offPool { try pair.crashPrimary() }
            // The gap a failover manager takes to decide; readiness must say no writable primary meanwhile.
            var readyInGap: Set<Int> = []
            let gapEnd = tally.elapsed + FaultLength.pick(short: 1.5, long: 4)
            while tally.elapsed < gapEnd {
                for port in ports { readyInGap.insert(await HTTPProbe.status("GET", port: port, path: "/readyz")) }
                try await pause(seconds: 0.1)
            }
            try await offPool { try pair.promoteStandby() }
            let promotedAt = tally.elapsed
            await race.value
            var readyAfter: [Int] = []
            for port in ports {
                var status = 0
                for _ in 0..<50 where status != 200 {
                    status = await HTTPProbe.status("GET", port: port, path: "/readyz")
                    if status != 200 { try await pause(seconds: 0.1) }
                }
                readyAfter.append(status)
            }
            let exchanged = try await offPool { try exchange.wait(timeout: 180) }

            // Figures.
            let state = tally.state.withLock { $0 }
            let crashedAt = tally.crashedAt.withLock { $0 }!
            // From the promotion until both replicas answered a request sent after the crash with 200.
            let recovery = max(0, (state.firstSuccessAfterCrash.values.max() ?? .infinity) - (promotedAt - crashedAt))
            var lost = 0
            for person in racePeople where state.outcomes[person.id]?.contains("migrated") == true {
                let held = try await world.count("SELECT count(*) FROM public.users WHERE apple_sub = '\(person.newSub)'")
                if held != 1 { lost += 1 }
            }
            let migratedTwiceByAnswers = racePeople.filter { (state.outcomes[$0.id] ?? []).filter { $0 == "migrated" }.count > 1 }.count
            let migratedTwiceByEvents = try await world.count("""
                SELECT count(*) FROM (SELECT old_sub FROM baton.events WHERE kind = 'migrated' GROUP BY old_sub HAVING count(*) > 1) d
                """)
            let exchangeRestarted = exchanged.status != 0
            print("failover: requests \(state.requests), 503s \(state.unavailable), seconds to recover after promotion \(String(format: "%.3f", recovery)) "
                  + "(gap \(String(format: "%.1f", promotedAt - crashedAt)) s), lost acknowledged migrations \(lost), "
                  + "users migrated twice \(max(migratedTwiceByAnswers, migratedTwiceByEvents)), exchange needed a restart \(exchangeRestarted ? "yes" : "no"), "
                  + "acknowledged before the crash \(acknowledgedBefore)")

            #expect(state.otherFailures.isEmpty, "answers other than 200/503: \(state.otherFailures.prefix(10))")
            #expect(state.outcomes.count == racers, "every racer got an answer")
            #expect(state.unavailable > 0, "the gap was seen as 503s")
            #expect(readyInGap.contains(503), "/readyz during the gap: \(readyInGap)")
            #expect(readyAfter == [200, 200], "/readyz after the promotion: \(readyAfter)")
            #expect(recovery < 10, "seconds to recover: \(recovery)")
            #expect(lost == 0)
            #expect(migratedTwiceByAnswers == 0 && migratedTwiceByEvents == 0)
            #expect(!exchangeRestarted, "baton exchange: \(exchanged.stdout)\(exchanged.stderr)")
            #expect(exchanged.stdout.contains("remaining 0"), "\(exchanged.stdout)")
            #expect(try await world.migratedCount() == world.people.count)
            try await world.expectConsistent()
        }
    }

    @Test("baton exchange rides out a database restart with no restart of its own; a database that never returns stops it with remaining unknown, never -1")
    func exchangeRidesOutRestart() async throws {
        let migrated = "SELECT count(*) FROM baton.events WHERE kind = 'migrated'"
        try await FaultWorld.run(users: 60, privateCluster: true) { world in
            let config = try world.writeConfiguration()
            let exchange = try runProcessAsync(batonBinaryPath, ["exchange", "--config", config, "--workers", "2", "--rate", "20", "--lease", "5"])
            while try await world.count(migrated) < 10 { try await pause(seconds: 0.02) }
            try await offPool { try world.cluster.stop() }
            try await pause(seconds: 2)
            try await offPool { try world.cluster.restart() }
            let result = try await offPool { try exchange.wait(timeout: 120) }
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            #expect(result.stdout.contains("remaining 0"), "\(result.stdout)")
            #expect(result.stdout.contains("done 60,") || result.stdout.contains("already done"), "\(result.stdout)")
            #expect(try await world.migratedCount() == 60)
            try await world.expectConsistent()
        }
        try await FaultWorld.run(users: 40, privateCluster: true) { world in
            let config = try world.writeConfiguration()
            let exchange = try runProcessAsync(batonBinaryPath, ["exchange", "--config", config, "--workers", "2", "--rate", "10", "--db-retry-seconds", "2"])
            while try await world.count(migrated) < 5 { try await pause(seconds: 0.02) }
            try await offPool { try world.cluster.stop() }
            let result = try await offPool { try exchange.wait(timeout: 60) }
            #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
            #expect(result.stdout.contains("remaining unknown"), "\(result.stdout)")
            #expect(!result.stdout.contains("remaining -1") && !result.stderr.contains("-1 users"), "\(result.stdout)\(result.stderr)")
            #expect(result.stderr.contains("rerun to continue"), "\(result.stderr)")
        }
    }
}
