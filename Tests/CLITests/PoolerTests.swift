import Foundation
import FoundationNetworking
import TestSupport
import Testing

/// Baton through PgBouncer (Debian's `pgbouncer`, started by the test on a private Unix socket directory in front of
/// the test cluster; `default_pool_size = 4` in transaction mode, in session mode enough for every client
/// connection, which each hold a server connection): two `baton serve` replicas, concurrent sign-ins on both, `baton db
/// migrate` from two processes at once, `baton exchange` and `baton transfer-ids`, then the database checked directly.
@Suite("Through PgBouncer in session and transaction mode", .serialized)
struct PoolerTests {
    static let users = 24
    /// Users who sign in (each on both replicas at once); the exchange migrates the others.
    static let signingIn = 12

    @Test("two replicas, sign-ins on both at once, migrate, exchange: every user migrated exactly once, each answer the user's own record",
          arguments: ["session", "transaction"])
    func replicasAndExchange(mode: String) async throws {
        try await CommandFixture.run(users: Self.users, database: .bare(sql: "SELECT 1")) { fixture in
            try await PgBouncer.with(mode: mode, in: fixture.databaseURL) { bouncer in
                let url = bouncer.url
                // Two migrating processes at once, both through the pooler.
                async let first = runBatonOffPool(["db", "migrate", "--database-url", url])
                async let second = runBatonOffPool(["db", "migrate", "--database-url", url])
                for result in try await [first, second] { #expect(result.status == 0, "\(result.stderr)") }
                #expect(try fixture.count("SELECT count(*) FROM baton.schema_migrations") > 0)
                let subjects = fixture.transfer.users.map(\.userIdentifier)
                try TestDatabase.createUsersTable(fixture.databaseURL, subjects: subjects, emails: subjects.map { "\($0)@privaterelay.appleid.com" })
                try TestDatabase.addTransfers(fixture.databaseURL, fixture.transfer.transferIdentifiers)

                // One replica's string carries an sslpassword (unused on a Unix socket): it must not reach the log.
                let replicas = try (0..<2).map { index in
                    try ServeReplica.start(fixture, name: "serve\(index).json", databaseURL: index == 0 ? url + "&sslpassword=k3y-s3cret" : url,
                                           pooler: mode)
                }
                var stderr = ""
                do {
                    for replica in replicas { try await replica.waitUntilReady() }
                    // Each signing-in user on both replicas at once: one migrates, the other answers current.
                    let people = Array(fixture.transfer.users.prefix(Self.signingIn))
                    let tokens = try people.map { try fixture.emulator.authorize(clientID: EmulatedTransfer.clientID, user: $0.id) }
                    let answers = await withTaskGroup(of: (Int, SignInAnswer).self) { group in
                        for (index, token) in tokens.enumerated() {
                            for replica in replicas { group.addTask { (index, await SignInAnswer.post(port: replica.port, token: token.idToken)) } }
                        }
                        return await group.reduce(into: [(Int, SignInAnswer)]()) { $0.append($1) }
                    }
                    #expect(answers.count == 2 * Self.signingIn)
                    for (index, answer) in answers {
                        #expect(answer.status == 200, "\(answer)")
                        #expect(answer.sub == tokens[index].userIdentifier && answer.recordSubject == tokens[index].userIdentifier,
                                "the answer carries the user's own record: \(answer)")
                    }
                    for index in tokens.indices {
                        #expect(answers.filter { $0.0 == index && $0.1.outcome == "migrated" }.count == 1, "\(answers.filter { $0.0 == index })")
                    }
                } catch {
                    for replica in replicas { _ = try? await replica.stop() }
                    throw error
                }
                for replica in replicas { stderr += try await replica.stop() }
                #expect(stderr.contains("sslpassword=<redacted>") && !stderr.contains("k3y-s3cret"), "the connection string is logged redacted")
                #expect(!stderr.contains("status=500"), "\(stderr.split(separator: "\n").filter { $0.contains("status=5") }.prefix(5))")
                #expect(!stderr.contains("level=error"), "\(stderr.split(separator: "\n").filter { $0.contains("level=error") }.prefix(5))")

                let exchange = try await runBatonOffPool(["exchange", "--config", try fixture.configuration("exchange.json") { tree, _ in
                    tree["database"] = ["url": url, "pooler": mode]
                }, "--rate", "500"])
                #expect(exchange.status == 0, "\(exchange.stdout)\(exchange.stderr)")
                try fixture.expectEveryoneMigratedOnce(Self.users)
                #expect(try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated' AND method = 'signin'") == Self.signingIn)
                #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state <> 'migrated'") == 0)
            }
        }
    }

    @Test("transfer-ids (sender side) finishes through transaction mode")
    func transferIdentifiers() async throws {
        try await CommandFixture.run(users: 6, accept: false, database: .migrated(seedTransfers: false)) { fixture in
            try await PgBouncer.with(mode: "transaction", in: fixture.databaseURL) { bouncer in
                let config = try fixture.configuration { tree, _ in tree["database"] = ["url": bouncer.url, "pooler": "transaction"] }
                let result = try await runBatonOffPool(["transfer-ids", "--config", config, "--yes", "--rate", "500"])
                #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
                #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub IS NOT NULL") == 6)
            }
        }
    }

    @Test("behind transaction mode, database.pooler none (the default) is refused at start-up, naming the key; behind session mode it runs")
    func transactionPoolerDetected() async throws {
        try await CommandFixture.run(users: 2) { fixture in
            try await PgBouncer.with(mode: "transaction", in: fixture.databaseURL) { bouncer in
                let config = try fixture.configuration("none.json") { tree, _ in tree["database"] = ["url": bouncer.url] }
                let serve = try await runBatonOffPool(["serve", "--config", config, "--port", "0"])
                #expect(serve.status != 0)
                #expect(serve.stderr.contains("database.pooler") && serve.stderr.contains("transaction"), "\(serve.stderr)")
                let exchange = try await runBatonOffPool(["exchange", "--config", config])
                #expect(exchange.status != 0)
                #expect(exchange.stderr.contains("database.pooler"), "\(exchange.stderr)")
                #expect(try fixture.count("SELECT count(*) FROM baton.events") == 0, "nothing ran")
            }
            try await PgBouncer.with(mode: "session", in: fixture.databaseURL) { bouncer in
                let config = try fixture.configuration("session.json") { tree, _ in tree["database"] = ["url": bouncer.url] }
                let exchange = try await runBatonOffPool(["exchange", "--config", config, "--rate", "500"])
                #expect(exchange.status == 0, "\(exchange.stdout)\(exchange.stderr)")
                try fixture.expectEveryoneMigratedOnce(2)
            }
        }
    }
}

/// A PgBouncer in front of the test cluster, listening only on a Unix socket in a directory of its own (run as
/// the `postgres` user when the tests run as root: PgBouncer refuses root), removed afterwards.
struct PgBouncer {
    let directory: String
    let database: String

    /// The URL of `database` through the pooler.
    var url: String { "postgresql://postgres@/\(database)?host=\(directory)&port=6432" }

    /// Starts PgBouncer in `mode` (`session`, `transaction`) in front of the server `databaseURL` is on, runs `body`
    /// with it and stops it afterwards, whatever happens.
    static func with(mode: String, in databaseURL: String, _ body: (PgBouncer) async throws -> Void) async throws {
        let binary = "/usr/sbin/pgbouncer"
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw TestSupportError("\(binary) is missing: run scripts/install-deps.sh (Debian's pgbouncer)")
        }
        let server = try TestDatabase.serverURL()
        let items = URLComponents(string: server)?.queryItems ?? []
        guard let host = items.first(where: { $0.name == "host" })?.value, let port = items.first(where: { $0.name == "port" })?.value else {
            throw TestSupportError("the test server's URL names no host and port: \(server)")
        }
        let database = try TestDatabase.psql(databaseURL, "SELECT current_database()")
        // Outside TMPDIR, which only root may enter.
        let directory = "/tmp/baton-pgbouncer-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try """
            [databases]
            * = host=\(host) port=\(port)
            [pgbouncer]
            listen_addr =
            listen_port = 6432
            unix_socket_dir = \(directory)
            auth_type = trust
            auth_file = \(directory)/users.txt
            admin_users = postgres
            pool_mode = \(mode)
            default_pool_size = \(mode == "transaction" ? 4 : 60)
            max_client_conn = 200
            logfile = \(directory)/pgbouncer.log
            pidfile = \(directory)/pgbouncer.pid
            """.write(toFile: "\(directory)/pgbouncer.ini", atomically: true, encoding: .utf8)
        try "\"postgres\" \"\"\n".write(toFile: "\(directory)/users.txt", atomically: true, encoding: .utf8)
        let root = getuid() == 0
        if root { _ = try runProcess("/bin/chown", ["-R", "postgres:", directory]) }
        let started = try runProcess(root ? "/usr/sbin/runuser" : binary,
                                     (root ? ["-u", "postgres", "--", binary] : []) + ["-d", "\(directory)/pgbouncer.ini"])
        guard started.status == 0 else { throw TestSupportError("pgbouncer did not start: \(started.stderr)") }
        let bouncer = PgBouncer(directory: directory, database: database)
        // Stopped through its admin console: a process spawned from the test runner inherits its blocked signals,
        // so PgBouncer would never see a SIGTERM. SIGKILL if it is still there.
        let pid = (try? String(contentsOfFile: "\(directory)/pgbouncer.pid", encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        defer {
            _ = try? runProcess("/usr/bin/psql", ["-X", "-q", "--dbname=postgresql://postgres@/pgbouncer?host=\(directory)&port=6432", "-c", "SHUTDOWN"])
            if let pid {
                for _ in 0..<100 where isRunning(pid) { usleep(20_000) }
                if isRunning(pid) { kill(pid, SIGKILL) }
            }
        }
        // Up once psql gets an answer through it.
        var answered = false
        for _ in 0..<100 where !answered {
            answered = (try? TestDatabase.psql(bouncer.url, "SELECT 1")) == "1"
            if !answered { try await Task.sleep(for: .milliseconds(50)) }
        }
        guard answered else {
            throw TestSupportError("pgbouncer does not answer: \((try? String(contentsOfFile: "\(directory)/pgbouncer.log", encoding: .utf8)) ?? "")")
        }
        try await body(bouncer)
    }

    /// Whether `pid` runs: neither gone nor a zombie its parent has not reaped yet.
    private static func isRunning(_ pid: Int32) -> Bool {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        return !status.isEmpty && !status.contains("State:\tZ")
    }
}

/// One `baton serve` process of the fixture's transfer, with its own port and `database` section.
struct ServeReplica {
    let process: RunningProcess
    let port: Int

    static func start(_ fixture: CommandFixture, name: String, databaseURL: String, pooler: String) throws -> ServeReplica {
        let port = try freeLoopbackPort()
        let config = try fixture.configuration(name) { tree, _ in
            tree["database"] = ["url": databaseURL, "pooler": pooler, "pool_size": 8]
            tree["listen"] = "127.0.0.1:\(port)"
        }
        return ServeReplica(process: try runProcessAsync(batonBinaryPath, ["serve", "--config", config]), port: port)
    }

    func waitUntilReady() async throws {
        for _ in 0..<200 {
            if await SchemaHTTP.status("GET", port: port, path: "/healthz") == 200 { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        _ = try? await stop()
        throw TestSupportError("baton serve on port \(port) did not start")
    }

    /// Stops the process (SIGTERM) and returns what it logged.
    func stop() async throws -> String {
        process.signal(SIGTERM)
        let process = self.process
        return try await offPool { try process.wait(timeout: 30) }.stderr
    }
}

/// What `POST /v1/signin` answered: status, outcome, `sub` and the subject in the record it returned.
struct SignInAnswer: Sendable, CustomStringConvertible {
    var status: Int
    var outcome: String?
    var sub: String?
    var recordSubject: String?
    var body: String

    var description: String { "\(status) \(body)" }

    static func post(port: Int, token: String) async -> SignInAnswer {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/signin")!)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try? JSONSerialization.data(withJSONObject: ["id_token": token])
        guard let (data, response) = try? await SchemaHTTP.session.data(for: request) else {
            return SignInAnswer(status: -1, body: "no answer")
        }
        let body = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        let record = body?["user"] as? [String: Any]
        return SignInAnswer(status: (response as? HTTPURLResponse)?.statusCode ?? -1, outcome: body?["outcome"] as? String,
                            sub: body?["sub"] as? String, recordSubject: record?["sub"] as? String,
                            body: String(decoding: data, as: UTF8.self))
    }
}
