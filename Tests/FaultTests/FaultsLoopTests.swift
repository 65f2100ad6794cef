import Foundation
import Synchronization
import Testing
import TestSupport

/// The event loop of `baton serve` serves many connections on one thread: nothing the database does may hold it.
/// Each scenario runs one loop, so every request shares it, and checks the order answers arrive in, never their time.
@Suite("Faults: nothing the database does holds an event loop", .serialized)
struct FaultsLoopTests {
    /// `baton.json` of `world` with one event loop and statements allowed a minute (longer than a request's 10 s
    /// deadline: a statement waiting on the loop's pipeline would hold every request behind it past theirs).
    static func oneLoopConfiguration(_ world: FaultWorld) throws -> String {
        let path = try world.writeConfiguration(statementTimeoutMilliseconds: 60_000)
        var tree = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as! [String: Any]
        tree["server"] = ["event_loops": 1]
        return try world.directory.writeJSON("baton-one-loop.json", tree)
    }

    @Test("a row lock on a migrating user's baton.transfers row: the loop goes on answering current users while that sign-in waits on the pool")
    func heldTransferRow() async throws {
        try await FaultWorld.run(users: 12) { world in
            try await world.startServe(configuration: try Self.oneLoopConfiguration(world))
            let current = Array(world.people.prefix(6))
            #expect(try await world.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub = '\(world.people[6].transferSub)'") == 1)
            for person in current {
                #expect(await HTTPProbe.signIn(port: world.servePort, token: try world.token(person)).status == 200)
            }
            let held = world.people[6]
            let locker = try runProcessAsync("/usr/bin/psql", [world.databaseURL, "-v", "ON_ERROR_STOP=1", "-qc", """
                SET application_name = 'faults_row_locker'; BEGIN;
                SELECT 1 FROM baton.transfers WHERE transfer_sub = '\(held.transferSub)' FOR UPDATE; SELECT pg_sleep(120); COMMIT;
                """])
            while try await world.count("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'faults_row_locker' AND wait_event = 'PgSleep'") == 0 {
                try await pause(seconds: 0.05)
            }
            let order = Mutex<[String]>([])
            let heldToken = try world.token(held)
            let waiting = Task {
                let answer = await HTTPProbe.signIn(port: world.servePort, token: heldToken)
                order.withLock { $0.append("held") }
                return answer
            }
            // The held sign-in reaches the lock and waits there (on the pipeline's backend, or on a pooled one).
            var waited = 0
            while try await world.count("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()") == 0 {
                waited += 1
                #expect(waited < 400, "the held sign-in never waited for the row")
                if waited >= 400 { break }
                try await pause(seconds: 0.05)
            }
            // Current users' sign-ins on the same (only) loop are all answered while the held one still waits.
            for person in current {
                let answer = await HTTPProbe.signIn(port: world.servePort, token: try world.token(person))
                #expect(answer.status == 200 && answer.outcome == "current", "\(answer)")
                order.withLock { $0.append("current") }
            }
            #expect(order.withLock { $0 } == Array(repeating: "current", count: current.count))
            _ = try await world.psql("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'faults_row_locker'")
            _ = try await offPool { try locker.wait(timeout: 60) }
            let finished = await waiting.value
            #expect(finished.status == 200 && finished.outcome == "migrated", "\(finished)")
            try await world.expectConsistent()
        }
    }

    @Test("the pipeline's backend terminated, then the whole cluster frozen: /healthz on the loop answers while a sign-in waits for the database")
    func frozenDatabase() async throws {
        try await FaultWorld.run(users: 8, privateCluster: true) { world in
            try await world.startServe(configuration: try Self.oneLoopConfiguration(world))
            for person in world.people.prefix(3) {
                #expect(await HTTPProbe.signIn(port: world.servePort, token: try world.token(person)).status == 200)
            }
            _ = try await world.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'baton'")
            let cluster = try world.cluster
            let processes = try await offPool { try ClusterProcesses(dataDirectory: cluster.directory + "/data") }
            processes.signal(SIGSTOP)
            defer { processes.signal(SIGCONT) }
            let order = Mutex<[String]>([])
            let token = try world.token(world.people[4])
            let signIn = Task {
                let answer = await HTTPProbe.signIn(port: world.servePort, token: token)
                order.withLock { $0.append("signin") }
                return answer
            }
            try await pause(seconds: 0.3)
            for _ in 0..<5 {
                #expect(await HTTPProbe.status("GET", port: world.servePort, path: "/healthz") == 200)
                order.withLock { $0.append("healthz") }
            }
            #expect(order.withLock { $0 } == Array(repeating: "healthz", count: 5))
            processes.signal(SIGCONT)
            let answer = await signIn.value
            #expect([200, 503].contains(answer.status), "\(answer)")
            try await world.expectConsistent()
        }
    }
}

/// The postmaster of a cluster and its children (the backends and auxiliary processes), to stop and resume together.
struct ClusterProcesses: Sendable {
    let pids: [Int32]

    init(dataDirectory: String) throws {
        let pidFile = try String(contentsOfFile: dataDirectory + "/postmaster.pid", encoding: .utf8)
        guard let postmaster = pidFile.split(separator: "\n").first.flatMap({ Int32($0) }) else {
            throw TestSupportError("no postmaster pid in \(dataDirectory)")
        }
        let children = try runProcess("/usr/bin/pgrep", ["-P", String(postmaster)]).stdout
            .split(separator: "\n").compactMap { Int32($0) }
        pids = [postmaster] + children
    }

    func signal(_ signal: Int32) {
        for pid in pids { kill(pid, signal) }
    }
}
