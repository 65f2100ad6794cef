import BatonCommandLine
import BatonConcurrency
import BatonEmulator
import Baton
import Dispatch
import Foundation
import BatonHTTPServer
import BatonJOSE
import BatonJSON
import BatonPostgres
import BatonProcess

/// `baton-bench signin`: sign-in throughput and latency through `baton serve`, against PostgreSQL's own
/// ceiling on the same SQL measured by pgbench in the same run.
///
/// 1. A fresh database on the given server with Baton's schema, `--users` legacy users (default 1,000,000)
///    and `--transfers` pending transfers (default 200,000), loaded by `generate_series` SQL; the first
///    `--migrations` + `--wrk-migrations` of them (default 20,000 + 40,000) are people of an in-process Apple
///    emulator, whose tokens are signed with the emulator's keys; pgbench migrates from the rest.
/// 2. `baton serve` as a child process (`--pool-size`, default 8), Apple's keys from the emulator.
/// 3. Keep-alive HTTP load, concurrency `--concurrency` (default 32): every migration token once
///    (`migrated`: a lookup, then the migration statement), then `--current-requests` sign-ins of the now current users (`current`); latency per
///    request from the load generator's send and receive times. Between them, wrk with 32 connections for
///    `--wrk-seconds` / 2 sends the `--wrk-migrations` tokens, each at most once (`wrk_migrated`): the rate, the
///    tails and the CPU of migrations measured from outside, as the current sign-ins are; every answer it counted
///    must have migrated a user. With `--nonce` those tokens carry a nonce (the native flow: the claim is the
///    SHA-256 of the nonce the body sends), so each sign-in also consumes it.
/// 4. The current users' sign-ins again, driven from outside by `wrk` (`--wrk-seconds` each, default 10) at 1, 8,
///    32 and 64 connections: requests/s, p50, p99 and max from wrk itself. With `--perf FILE`, `perf record`
///    samples `baton serve` during the 32-connection run and the samples are printed by group (OpenSSL, JSON,
///    libmicrohttpd, libpq, Swift runtime and concurrency, libc, kernel, Baton's own code).
/// 5. pgbench (`-M prepared -c 8 -j 2 -T --pgbench-seconds`) on the statements the service runs for each
///    outcome (values that the service binds become expressions of a pgbench counter): a migration's right after
///    wrk's migrations (the machine's speed drifts over a minute), the current users' `SELECT` at the end, on users
///    pgbench migrated, with the new and the transfer identifier bound as the service binds a current user's token.
///
/// The service logs at `--log-level` (default warning, as a loaded production service would).
///
/// `--schema allauth` runs the same on Django allauth's tables (`socialaccount_socialaccount` where
/// `provider = 'apple'`, a tenth of the users also with a Google row of the same subject, the email in
/// `auth_user`, the subject copied in `extra_data`); `--schema kratos` on Ory Kratos' `apple:<sub>` identifiers with the
/// subject copied into the credential's JSON array; `--schema logto` on Logto's subject inside `users.identities` JSON
/// (with the expression index Baton prints; migrations take Baton's own lock, on the async path); the default is the
/// plain `public.users` table.
///
/// The last line is one JSON object.
@Sendable
func runSigninBenchmark(_ arguments: Parsed<SigninBenchmarkOptions>) async throws -> Int32 {
    let environment = ProcessInfo.processInfo.environment
    guard let serverURL = arguments.databaseURL ?? environment["BATON_TEST_DATABASE_URL"] ?? environment["BATON_DATABASE_URL"] else {
        throw CommandFailure.usage("needs --database-url (a server where it may create a database); or run it under 'scripts/pg.sh run'")
    }
    guard arguments.transfers <= arguments.users else { throw CommandFailure.usage("--transfers (\(arguments.transfers)) must be at most --users (\(arguments.users))") }
    guard arguments.migrations + arguments.wrkMigrations <= arguments.transfers else {
        throw CommandFailure.usage("--migrations + --wrk-migrations (\(arguments.migrations + arguments.wrkMigrations)) must be at most --transfers (\(arguments.transfers))")
    }
    let wrkConnections = [1, 8, 32, 64]
    let logLevel = arguments.logLevel.description
    let baton = arguments.baton ?? URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("baton").path
    guard FileManager.default.isExecutableFile(atPath: baton) else {
        throw CommandFailure.usage("no baton executable at \(baton): build it (swift build --product baton) or give --baton")
    }
    let clientID = "com.example.bench"

    // 1. Apple: two teams, the app, its people, the transfer.
    let emulator = try await AppleEmulator.start()
    defer { Task { await emulator.stop() } }
    let sender = try emulator.createTeam()
    let recipient = try emulator.createTeam()
    try emulator.createApp(clientID: clientID, teamID: sender.teamID)
    let migrating = arguments.migrations + arguments.wrkMigrations
    let people = try emulator.createUsers(clientID: clientID, count: migrating + 256, privateEmail: true)
    try emulator.initiateTransfer(clientID: clientID, toTeamID: recipient.teamID)
    let transferIDs = try emulator.transferIdentifiers(clientID: clientID)

    // 2. The database.
    let databaseURL = try await createBenchDatabase(serverURL: serverURL)
    let pool = PostgresPool(url: databaseURL, maxConnections: 2)
    let loadStart = ContinuousClock.now
    try await loadBenchData(pool: pool, schema: arguments.schema, users: arguments.users, transfers: arguments.transfers,
                            people: people.prefix(migrating).map { ($0.userIdentifier, transferIDs[$0.userIdentifier]!, $0.email) })
    say("loaded \(arguments.users) legacy users and \(arguments.transfers) pending transfers in \(seconds(since: loadStart)) s")
    try emulator.acceptTransfer(clientID: clientID)

    // 3. Tokens, signed by the emulator (in parallel: RSA signing is the slow part).
    let tokenStart = ContinuousClock.now
    // wrk's migrating sign-ins (people migrations..<migrating) may carry a nonce: its SHA-256 in the token, itself in the body.
    let wrkPeople = arguments.migrations..<migrating
    let nonce: @Sendable (Int) -> String? = { index in arguments.nonce && wrkPeople.contains(index) ? "bench-nonce-\(index)" : nil }
    let tokens = try await signTokens(emulator: emulator, clientID: clientID, people: people.map(\.id),
                                      nonceClaim: { nonce($0).map { Digest.sha256Hex(Array($0.utf8)) } })
    let migrationBodies = tokens.prefix(arguments.migrations).map { signInBody($0) }
    let wrkMigrationBodies = wrkPeople.map { signInBody(tokens[$0], nonce: nonce($0)) }
    let warmupBodies = tokens.suffix(256).map { signInBody($0) }
    say("signed \(tokens.count) identity tokens in \(seconds(since: tokenStart)) s")

    // 4. The service, as a child process.
    let child = try await ServiceProcess.start(baton: baton, databaseURL: databaseURL, appleBaseURL: emulator.baseURL, clientID: clientID, poolSize: arguments.poolSize,
                                               legacy: arguments.schema.legacy, logLevel: logLevel)
    defer { child.terminate() }

    func load(_ bodies: [[UInt8]], total: Int) async -> (LoadReport, [Double]) {
        let recorder = LatencyRecorder(count: total, concurrency: arguments.concurrency)
        let report = await LoadClient.run(port: child.port, concurrency: arguments.concurrency, total: total) { index in
            recorder.mark(index)
            return LoadRequest(method: "POST", path: "/v1/signin", headers: [("Content-Type", "application/json")], body: bodies[index % bodies.count])
        }
        return (report, recorder.latencies())
    }

    _ = await load(warmupBodies, total: 2_000)
    let (migratedCPU, migratedDatabaseCPU) = (child.cpuSeconds(), postgresCPUByProcess())
    let (migratedReport, migratedLatencies) = await load(migrationBodies, total: arguments.migrations)
    let migratedCPUMicroseconds = (child.cpuSeconds() - migratedCPU) / Double(arguments.migrations) * 1e6
    let migratedDatabaseMicroseconds = postgresCPUSeconds(since: migratedDatabaseCPU) / Double(arguments.migrations) * 1e6
    let migratedCount = try await migratedEvents(pool)
    guard migratedReport.statuses == [200: arguments.migrations], migratedReport.failures == 0, migratedCount == arguments.migrations else {
        throw CommandFailure.failed("baton-bench signin: migrated phase went wrong: statuses \(migratedReport.statuses), failures \(migratedReport.failures), \(migratedCount) events")
    }

    // 3b. Migrations driven from outside by wrk, each token at most once.
    let wrkMigrationsPath = try writeBodies(wrkMigrationBodies)
    defer { try? FileManager.default.removeItem(atPath: wrkMigrationsPath) }
    let wrkMigrating = WrkLoad(port: child.port, path: "/v1/signin", bodiesFile: wrkMigrationsPath, seconds: max(2, arguments.wrkSeconds / 2), eachOnce: true)
    let wrkMigratedLoad = uptimeLoad()
    let wrkMigratedCPU = child.cpuSeconds()
    let wrkMigratingConnections = 32
    var wrkMigrated = try await offPool { try wrkMigrating.run(connections: wrkMigratingConnections) }
    wrkMigrated.serverCPUMicroseconds = (child.cpuSeconds() - wrkMigratedCPU) / Double(max(1, wrkMigrated.requests)) * 1e6
    // Every answer wrk counted migrated a user; wrk stops with up to one request a connection in flight, which the
    // server may have finished too. A token sent twice would answer `current` and leave the count short.
    let wrkMigratedCount = try await migratedEvents(pool) - migratedCount
    guard wrkMigrated.errors == 0, wrkMigrated.requests > 0, wrkMigrated.requests <= wrkMigratedCount,
          wrkMigratedCount <= wrkMigrated.requests + wrkMigratingConnections else {
        throw CommandFailure.failed("baton-bench signin: wrk's migrations went wrong: \(wrkMigrated.requests) answers, \(wrkMigrated.errors) errors, "
                                    + "\(wrkMigratedCount) users migrated (more answers than --wrk-migrations \(arguments.wrkMigrations) sends tokens twice)")
    }
    say(String(format: "wrk migrating -c 32: %.0f/s, p50 %.2f ms, p99 %.2f ms, max %.2f ms, CPU per sign-in: server %.1f µs, PostgreSQL %.1f µs, wrk %.1f µs (%d sign-ins; load %@)",
               wrkMigrated.perSecond, wrkMigrated.p50, wrkMigrated.p99, wrkMigrated.max, wrkMigrated.serverCPUMicroseconds,
               wrkMigrated.databaseCPUMicroseconds, wrkMigrated.clientCPUMicroseconds, wrkMigrated.requests, wrkMigratedLoad))

    // 3c. pgbench on the same statements as a migrating sign-in, right after the service's migrations (this machine's
    // speed drifts over a minute; the service is idle meanwhile), on transfers no sign-in used.
    let store = LegacyStore(pool: pool, legacy: try arguments.schema.legacy.identifiers())
    let firstSynthetic = migrating + 1
    // With --nonce, the nonce's consumption comes first, as in the service.
    let nonceStatement = arguments.nonce
        ? pgbenchSQL(store.nonceInsertQuery(NonceUse(nonce: "\u{1}nonce", subject: "\u{1}new", expiresAt: Date().addingTimeInterval(3_600), attempt: "pgbench"), now: Date())) + " ;\n"
        : ""
    let migratedScript = """
        \\set i :i + 1
        \\set n \(firstSynthetic) + (:i - 1) * 8 + :client_id
        \(nonceStatement)\(pgbenchSQL(store.lookupQuery(subject: "\u{1}new", transferSub: "\u{1}transfer"))) ;
        \(pgbenchSQL(store.migrationQuery(from: .transfer("\u{1}transfer"), newSub: "\u{1}new", newEmail: "\u{1}email",
                                          isPrivateEmail: true, transferSub: "\u{1}transfer", method: .signin))) ;

        """
    say("pgbench script, migrated: " + migratedScript.replacingOccurrences(of: "\n", with: " "))
    let pgbenchMigrated = try await offPool { try runPgbench(script: migratedScript, url: databaseURL, seconds: arguments.pgbenchSeconds) }
    // Past the last pending transfer, pgbench's transactions would migrate no one and count as fast ones.
    guard pgbenchMigrated * Double(arguments.pgbenchSeconds) < Double(arguments.transfers - migrating) else {
        throw CommandFailure.failed("baton-bench signin: pgbench ran out of pending transfers (\(arguments.transfers - migrating) left for it): raise --transfers")
    }

    let (currentCPU, currentDatabaseCPU) = (child.cpuSeconds(), postgresCPUByProcess())
    let (currentReport, currentLatencies) = await load(migrationBodies, total: arguments.currentRequests)
    let currentCPUMicroseconds = (child.cpuSeconds() - currentCPU) / Double(arguments.currentRequests) * 1e6
    let currentDatabaseMicroseconds = postgresCPUSeconds(since: currentDatabaseCPU) / Double(arguments.currentRequests) * 1e6
    guard currentReport.statuses == [200: arguments.currentRequests], currentReport.failures == 0 else {
        throw CommandFailure.failed("baton-bench signin: current phase went wrong: statuses \(currentReport.statuses), failures \(currentReport.failures)")
    }

    // 4b. The same current users' sign-ins driven from outside by wrk, at each connection count.
    let bodiesPath = try writeBodies(migrationBodies)
    defer { try? FileManager.default.removeItem(atPath: bodiesPath) }
    let wrk = WrkLoad(port: child.port, path: "/v1/signin", bodiesFile: bodiesPath, seconds: arguments.wrkSeconds)
    var wrkRuns: [WrkFigures] = []
    var profile: [(group: String, percent: Double)] = []
    for connections in wrkConnections {
        let load = uptimeLoad()
        // The profile covers the 32-connection run, after a second of warm-up, to a second before its end.
        let perf = arguments.perf.flatMap { connections == 32 ? PerfProfile(output: $0) : nil }
        let cpuBefore = child.cpuSeconds()
        let running = Task { try await offPool { try wrk.run(connections: connections) } }
        var recorder: ChildProcess?
        if let perf {
            try await Task.sleep(for: .seconds(1))
            recorder = try perf.start(pid: child.child.pid, seconds: max(1, arguments.wrkSeconds - 2))
        }
        var figures = try await running.value
        figures.serverCPUMicroseconds = (child.cpuSeconds() - cpuBefore) / Double(max(1, figures.requests)) * 1e6
        guard figures.errors == 0, figures.requests > 0 else {
            throw CommandFailure.failed("baton-bench signin: wrk at \(connections) connections saw \(figures.errors) errors")
        }
        wrkRuns.append(figures)
        say(String(format: "wrk -c %d: %.0f/s, p50 %.2f ms, p99 %.2f ms, max %.2f ms, CPU per sign-in: server %.1f µs, PostgreSQL %.1f µs, wrk %.1f µs (%d sign-ins; load %@)",
                   connections, figures.perSecond, figures.p50, figures.p99, figures.max, figures.serverCPUMicroseconds,
                   figures.databaseCPUMicroseconds, figures.clientCPUMicroseconds, figures.requests, load))
        if let recorder, let perf {
            _ = await offPool { _ = recorder.readToEnd(); return recorder.waitForExit() }
            profile = try await offPool { try perf.groups() }
            say("perf profile of baton serve under wrk -c 32 (\(perf.output)): "
                + profile.map { String(format: "%@ %.1f%%", PerfProfile.labels[$0.group] ?? $0.group, $0.percent) }.joined(separator: ", "))
        }
    }
    let rssMB = child.peakRSSMegabytes()
    await child.stop()

    // 5. pgbench on the current users' SELECT: the users pgbench migrated in 3c, looked up as the service looks up its
    // current users (by the new identifier, with the token's transfer identifier, so the lookup also probes their
    // migrated `baton.transfers` row for a legacy record still waiting).
    let lastMigratedByPgbench = try await pool.query("""
        SELECT min(g) - 1 FROM generate_series(\(firstSynthetic), \(arguments.transfers)) AS g
        WHERE NOT EXISTS (SELECT 1 FROM baton.transfers AS t WHERE t.transfer_sub = 'transfer.' || g AND t.state = 'migrated')
        """)[0].decode(Int?.self, at: 0)
    guard let lastMigratedByPgbench, lastMigratedByPgbench > firstSynthetic else {
        throw CommandFailure.failed("baton-bench signin: pgbench's migrations left no run of migrated users to look up")
    }
    let currentScript = """
        \\set n random(\(firstSynthetic), \(lastMigratedByPgbench))
        \(pgbenchSQL(store.lookupQuery(subject: "\u{1}new", transferSub: "\u{1}transfer"))) ;

        """
    say("pgbench script, current: " + currentScript.replacingOccurrences(of: "\n", with: " "))
    let pgbenchCurrent = try await offPool { try runPgbench(script: currentScript, url: databaseURL, seconds: arguments.pgbenchSeconds) }
    await pool.close()
    try await dropBenchDatabase(serverURL: serverURL, databaseURL: databaseURL)

    let migratedP99 = percentile(migratedLatencies, 0.99), currentP99 = percentile(currentLatencies, 0.99)
    say(String(format: "migrated: %.0f/s, p50 %.2f ms, p99 %.2f ms, CPU each: server %.1f µs, PostgreSQL %.1f µs (%d sign-ins); pgbench %@ %.0f tps (%.0f%%)",
                 migratedReport.perSecond, percentile(migratedLatencies, 0.5), migratedP99, migratedCPUMicroseconds, migratedDatabaseMicroseconds,
                 arguments.migrations, arguments.nonce ? "with the nonce's INSERT (these tokens carry none)" : "same SQL", pgbenchMigrated, migratedReport.perSecond / pgbenchMigrated * 100))
    say(String(format: "current:  %.0f/s, p50 %.2f ms, p99 %.2f ms, CPU each: server %.1f µs, PostgreSQL %.1f µs (%d sign-ins); pgbench same SQL %.0f tps (%.0f%%)",
                 currentReport.perSecond, percentile(currentLatencies, 0.5), currentP99, currentCPUMicroseconds, currentDatabaseMicroseconds,
                 arguments.currentRequests, pgbenchCurrent, currentReport.perSecond / pgbenchCurrent * 100))
    say(String(format: "wrk migrating -c 32%@: %.0f/s = %.2f of pgbench's %.0f tps on the same SQL", arguments.nonce ? " with a nonce" : "", wrkMigrated.perSecond,
               wrkMigrated.perSecond / pgbenchMigrated, pgbenchMigrated))
    for run in wrkRuns {
        say(String(format: "wrk -c %d: %.0f/s = %.2f of pgbench's %.0f tps on the same SELECT", run.connections, run.perSecond,
                   run.perSecond / pgbenchCurrent, pgbenchCurrent))
    }
    say("server peak RSS: \(rssMB) MB; concurrency \(arguments.concurrency), \(ProcessInfo.processInfo.activeProcessorCount) cores; tables: \(arguments.schema.rawValue); load \(uptimeLoad())")
    var figures: JSONObject = [
        "current_per_s": .number(currentReport.perSecond.rounded()),
        "migrated_per_s": .number(migratedReport.perSecond.rounded()),
        "current_p99_ms": .number((currentP99 * 100).rounded() / 100),
        "migrated_p99_ms": .number((migratedP99 * 100).rounded() / 100),
        "pgbench_current_tps": .number(pgbenchCurrent.rounded()),
        "pgbench_migrated_tps": .number(pgbenchMigrated.rounded()),
        "rss_mb": .number(Double(rssMB)),
        "migrated_server_cpu_us": .number((migratedCPUMicroseconds * 10).rounded() / 10),
        "current_server_cpu_us": .number((currentCPUMicroseconds * 10).rounded() / 10),
        "migrated_postgres_cpu_us": .number((migratedDatabaseMicroseconds * 10).rounded() / 10),
        "current_postgres_cpu_us": .number((currentDatabaseMicroseconds * 10).rounded() / 10),
    ]
    func rounded(_ value: Double, _ digits: Double = 100) -> JSONValue { .number((value * digits).rounded() / digits) }
    figures["wrk_migrated_nonce"] = .bool(arguments.nonce)
    for (prefix, run) in [("wrk_migrated_", wrkMigrated)] + wrkRuns.map({ ("wrk_c\($0.connections)_", $0) }) {
        figures[prefix + "per_s"] = rounded(run.perSecond, 1)
        figures[prefix + "p50_ms"] = rounded(run.p50)
        figures[prefix + "p99_ms"] = rounded(run.p99)
        figures[prefix + "max_ms"] = rounded(run.max)
        figures[prefix + "server_cpu_us"] = rounded(run.serverCPUMicroseconds, 10)
        figures[prefix + "postgres_cpu_us"] = rounded(run.databaseCPUMicroseconds, 10)
        figures[prefix + "wrk_cpu_us"] = rounded(run.clientCPUMicroseconds, 10)
    }
    // The target's maximum: the slowest answer of the 8- and 32-connection runs.
    figures["wrk_max_ms"] = rounded(wrkRuns.filter { [8, 32].contains($0.connections) }.map(\.max).max() ?? 0)
    for (group, percent) in profile { figures["perf_pct_" + group] = rounded(percent, 10) }
    say(JSON.serialize(.object(figures)))
    return 0
}

/// The body of `POST /v1/signin` for `token`, with `nonce` when given.
private func signInBody(_ token: String, nonce: String? = nil) -> [UInt8] {
    var body: JSONObject = ["id_token": .string(token)]
    if let nonce { body["nonce"] = .string(nonce) }
    return JSON.serializeBytes(.object(body))
}

/// Users migrated so far (the `migrated` events).
private func migratedEvents(_ pool: PostgresPool) async throws -> Int {
    try await pool.query("SELECT count(*) FROM baton.events WHERE kind = 'migrated'")[0].decode(Int.self, at: 0)
}

/// Writes request bodies to a temporary file, one a line, for wrk; returns its path.
private func writeBodies(_ bodies: [[UInt8]]) throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("baton-bench-\(UUID().uuidString).jsonl").path
    try bodies.map { String(decoding: $0, as: UTF8.self) }.joined(separator: "\n").write(toFile: path, atomically: true, encoding: .utf8)
    return path
}

/// uptime's load averages, `0.52 0.58 0.59`.
private func uptimeLoad() -> String {
    ((try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? "").split(separator: " ").prefix(3).joined(separator: " ")
}

/// Writes one line to standard output at once (progress shows even when the output is a pipe).
private func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// The application tables the sign-in benchmark runs on.
enum BenchSchema: String, CaseIterable, Sendable {
    /// A plain subject column; Django allauth's tables; Ory Kratos' prefixed identifier with its copy inside the
    /// credential's JSON array; Logto's subject inside JSON (with the expression index Baton prints, and its copy).
    case users, allauth, kratos, logto

    var legacy: BatonConfiguration.Legacy {
        switch self {
        case .users:
            BatonConfiguration.Legacy(table: "public.users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email")
        case .allauth:
            BatonConfiguration.Legacy(table: "public.socialaccount_socialaccount", keyColumn: "id", subjectColumn: "uid", emailColumn: nil,
                                      filters: ["provider": "apple"],
                                      email: LegacyEmailTable(table: "public.auth_user", column: "email", keyColumn: "id", referenceColumn: "user_id"),
                                      json: LegacyJSONCopy(column: "extra_data", subjectKeys: ["sub"], emailKeys: ["email"]))
        case .kratos:
            BatonConfiguration.Legacy(table: "public.identity_credential_identifiers", keyColumn: "id", subjectColumn: "identifier", emailColumn: nil,
                                      filters: ["nid": "1"], subjectFormat: "apple:{sub}",
                                      subjectCopies: [LegacySubjectCopy(column: "config", path: LegacyJSONPath([.key("providers"), .element(member: "provider", value: "apple"), .key("subject")]),
                                                                        table: "public.identity_credentials", keyColumn: "id", referenceColumn: "identity_credential_id")])
        case .logto:
            BatonConfiguration.Legacy(table: "public.users", keyColumn: "id", subjectColumn: "identities", emailColumn: "primary_email",
                                      filters: ["tenant_id": "t1"], subjectPath: ["apple", "userId"],
                                      subjectCopies: [LegacySubjectCopy(column: "identities", path: ["apple", "details", "id"])])
        }
    }

    /// The tables, and the synthetic users `first...users` (subject `legacy.N`).
    func script(first: Int, users: Int) -> String {
        switch self {
        case .users:
            return """
                CREATE TABLE public.users (id bigint PRIMARY KEY, apple_sub text UNIQUE, email text,
                                           created_at timestamptz NOT NULL DEFAULT now());
                INSERT INTO public.users (id, apple_sub, email)
                    SELECT g, 'legacy.' || g, 'u' || g || '@privaterelay.appleid.com' FROM generate_series(\(first), \(users)) AS g;

                """
        case .allauth:
            return """
                CREATE TABLE public.auth_user (id integer PRIMARY KEY, username varchar(150) NOT NULL UNIQUE, email varchar(254) NOT NULL,
                                               date_joined timestamptz NOT NULL DEFAULT now());
                CREATE TABLE public.socialaccount_socialaccount (id bigint PRIMARY KEY, provider varchar(200) NOT NULL, uid varchar(191) NOT NULL,
                    extra_data jsonb NOT NULL, user_id integer NOT NULL REFERENCES public.auth_user (id) DEFERRABLE INITIALLY DEFERRED,
                    UNIQUE (provider, uid));
                CREATE INDEX ON public.socialaccount_socialaccount (user_id);
                INSERT INTO public.auth_user (id, username, email)
                    SELECT g, 'u' || g, 'u' || g || '@privaterelay.appleid.com' FROM generate_series(\(first), \(users)) AS g;
                INSERT INTO public.socialaccount_socialaccount (id, provider, uid, extra_data, user_id)
                    SELECT g, 'apple', 'legacy.' || g, jsonb_build_object('sub', 'legacy.' || g, 'email', 'u' || g || '@privaterelay.appleid.com'), g
                    FROM generate_series(\(first), \(users)) AS g;
                INSERT INTO public.socialaccount_socialaccount (id, provider, uid, extra_data, user_id)
                    SELECT \(users) + g, 'google', 'legacy.' || g, jsonb_build_object('sub', 'legacy.' || g), g
                    FROM generate_series(\(first), \(users), 10) AS g;

                """
        case .kratos:
            return """
                CREATE TABLE public.identity_credentials (id bigint PRIMARY KEY, config jsonb NOT NULL);
                CREATE TABLE public.identity_credential_identifiers (id bigint PRIMARY KEY, identifier varchar(255) NOT NULL,
                    identity_credential_id bigint NOT NULL, nid integer NOT NULL, UNIQUE (nid, identifier));
                INSERT INTO public.identity_credentials (id, config)
                    SELECT g, jsonb_build_object('providers', jsonb_build_array(jsonb_build_object('provider', 'apple', 'subject', 'legacy.' || g)))
                    FROM generate_series(\(first), \(users)) AS g;
                INSERT INTO public.identity_credential_identifiers (id, identifier, identity_credential_id, nid)
                    SELECT g, 'apple:legacy.' || g, g, 1 FROM generate_series(\(first), \(users)) AS g;

                """
        case .logto:
            return """
                CREATE TABLE public.users (tenant_id varchar(21) NOT NULL, id varchar(21) PRIMARY KEY, primary_email varchar(128),
                    identities jsonb NOT NULL DEFAULT '{}'::jsonb);
                CREATE UNIQUE INDEX ON public.users ("tenant_id", (("identities"::jsonb #>> ARRAY['apple', 'userId']::text[])));
                INSERT INTO public.users (tenant_id, id, primary_email, identities)
                    SELECT 't1', g::text, 'u' || g || '@privaterelay.appleid.com', \(Self.logtoIdentities("'legacy.' || g", email: "'u' || g || '@privaterelay.appleid.com'"))
                    FROM generate_series(\(first), \(users)) AS g;

                """
        }
    }

    /// Logto's `identities` of an Apple user (SQL expressions of the subject and email).
    private static func logtoIdentities(_ sub: String, email: String) -> String {
        "jsonb_build_object('apple', jsonb_build_object('userId', \(sub), 'details', jsonb_build_object('id', \(sub), 'email', \(email))))"
    }

    /// Inserts the emulator's people (`$1`: lines `old,transfer,email`, numbered from 1) and their transfers.
    var peopleInsert: String {
        let source = """
            WITH m AS (
                SELECT split_part(line, ',', 1) AS old, split_part(line, ',', 2) AS t, split_part(line, ',', 3) AS e, n
                FROM regexp_split_to_table($1, E'\\n') WITH ORDINALITY AS x(line, n)
            )
            """
        switch self {
        case .users:
            return source + """
                , u AS (INSERT INTO public.users (id, apple_sub, email) SELECT n, old, e FROM m)
                INSERT INTO baton.transfers (old_sub, transfer_sub) SELECT old, t FROM m
                """
        case .allauth:
            return source + """
                , u AS (INSERT INTO public.auth_user (id, username, email) SELECT n, 'u' || n, e FROM m),
                s AS (INSERT INTO public.socialaccount_socialaccount (id, provider, uid, extra_data, user_id)
                      SELECT n, 'apple', old, jsonb_build_object('sub', old, 'email', e), n FROM m)
                INSERT INTO baton.transfers (old_sub, transfer_sub) SELECT old, t FROM m
                """
        case .kratos:
            return source + """
                , c AS (INSERT INTO public.identity_credentials (id, config)
                        SELECT n, jsonb_build_object('providers', jsonb_build_array(jsonb_build_object('provider', 'apple', 'subject', old))) FROM m),
                i AS (INSERT INTO public.identity_credential_identifiers (id, identifier, identity_credential_id, nid)
                      SELECT n, 'apple:' || old, n, 1 FROM m)
                INSERT INTO baton.transfers (old_sub, transfer_sub) SELECT old, t FROM m
                """
        case .logto:
            return source + """
                , u AS (INSERT INTO public.users (tenant_id, id, primary_email, identities) SELECT 't1', n::text, e, \(Self.logtoIdentities("old", email: "e")) FROM m)
                INSERT INTO baton.transfers (old_sub, transfer_sub) SELECT old, t FROM m
                """
        }
    }

    /// The tables to analyze after loading.
    var tables: [String] {
        switch self {
        case .users, .logto: ["public.users"]
        case .allauth: ["public.auth_user", "public.socialaccount_socialaccount"]
        case .kratos: ["public.identity_credentials", "public.identity_credential_identifiers"]
        }
    }
}

private func seconds(since start: ContinuousClock.Instant) -> String {
    let elapsed = ContinuousClock.now - start
    return String(format: "%.1f", Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
}

/// Creates `baton_bench_<random>` on the server and returns its URL.
private func createBenchDatabase(serverURL: String) async throws -> String {
    let name = "baton_bench_\(UUID().uuidString.prefix(8).lowercased())"
    let connection = try await PostgresConnection.connect(url: serverURL)
    try await connection.executeScript(unsafeSQL: "CREATE DATABASE \(name)")
    return try replacingDatabase(in: serverURL, with: name)
}

private func dropBenchDatabase(serverURL: String, databaseURL: String) async throws {
    guard let name = databaseURL.split(separator: "?")[0].split(separator: "/").last else { return }
    let connection = try await PostgresConnection.connect(url: serverURL)
    try await connection.executeScript(unsafeSQL: "DROP DATABASE IF EXISTS \(name)")
}

/// `postgresql://user@host/olddb?params` with the database name replaced.
private func replacingDatabase(in url: String, with name: String) throws -> String {
    guard let schemeEnd = url.range(of: "://") else { throw CommandFailure.usage("--database-url must be a postgresql:// URL") }
    let afterScheme = url[schemeEnd.upperBound...]
    let queryStart = afterScheme.firstIndex(of: "?") ?? afterScheme.endIndex
    let authorityEnd = afterScheme[..<queryStart].firstIndex(of: "/") ?? queryStart
    return String(url[..<authorityEnd]) + "/" + name + String(afterScheme[queryStart...])
}

/// Loads the legacy table and the transfers: `people` (old sub, transfer sub, email) first, then synthetic rows.
private func loadBenchData(pool: PostgresPool, schema: BenchSchema, users: Int, transfers: Int, people: [(String, String, String)]) async throws {
    _ = try await BatonSchema.migrator().migrate(pool)
    let first = people.count + 1
    try await pool.withConnection { connection in
        try await connection.executeScript(unsafeSQL: schema.script(first: first, users: users) + """
            INSERT INTO baton.transfers (old_sub, transfer_sub)
                SELECT 'legacy.' || g, 'transfer.' || g FROM generate_series(\(first), \(transfers)) AS g;
            """)
        let lines = people.map { "\($0.0),\($0.1),\($0.2)" }.joined(separator: "\n")
        try await connection.execute(PostgresQuery(unsafeSQL: schema.peopleInsert, [lines]))
        for table in schema.tables + ["baton.transfers"] {
            try await connection.executeScript(unsafeSQL: "VACUUM ANALYZE \(table)")
        }
    }
}

/// Signs one identity token per person on the emulator, spread over the cores; person i's carries `nonceClaim(i)`.
private func signTokens(emulator: AppleEmulator, clientID: String, people: [String],
                        nonceClaim: @escaping @Sendable (Int) -> String?) async throws -> [String] {
    let workers = max(1, ProcessInfo.processInfo.activeProcessorCount)
    let chunk = (people.count + workers - 1) / workers
    return try await withThrowingTaskGroup(of: (Int, [String]).self) { group in
        for worker in 0..<workers {
            let range = min(people.count, worker * chunk)..<min(people.count, (worker + 1) * chunk)
            let slice = Array(people[range])
            group.addTask {
                (worker, try zip(range, slice).map { try emulator.authorize(clientID: clientID, user: $1, nonce: nonceClaim($0)).idToken })
            }
        }
        var parts = [Int: [String]]()
        for try await (worker, tokens) in group { parts[worker] = tokens }
        return (0..<workers).flatMap { parts[$0] ?? [] }
    }
}

/// The SQL of `query` for a pgbench script: each bound sentinel value becomes an expression of `:n`.
private func pgbenchSQL(_ query: PostgresQuery) -> String {
    var sql = query.sql
    for (index, binding) in query.bindings.enumerated().reversed() {
        let value = binding.postgresValue().map { String(decoding: $0, as: UTF8.self) }
        let expression: String
        switch value {
        case "\u{1}new": expression = "('new.' || :n)"
        case "\u{1}transfer": expression = "('transfer.' || :n)"
        case "\u{1}email": expression = "('n' || :n || '@privaterelay.appleid.com')"
        case "\u{1}nonce": expression = "('nonce.' || :n)"
        case "t": expression = "true"
        // A literal: pgbench would read `:name` inside it as a variable (`'apple:_%'`), so a colon is joined in apart.
        case let text?: expression = "'" + text.replacingOccurrences(of: "'", with: "''").replacingOccurrences(of: ":", with: "' || ':' || '") + "'"
        case nil: expression = "NULL"
        }
        sql = sql.replacingOccurrences(of: "$\(index + 1)", with: expression)
    }
    return sql.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
}

/// Runs pgbench with prepared statements, 8 clients on 2 threads, and returns its tps.
private func runPgbench(script: String, url: String, seconds: Int) throws -> Double {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("baton-bench-\(UUID().uuidString).sql").path
    try script.write(toFile: path, atomically: true, encoding: .utf8)
    defer { try? FileManager.default.removeItem(atPath: path) }
    let child = try ChildProcess("/usr/bin/env", ["pgbench", "-n", "-M", "prepared", "-D", "i=0", "-f", path, "-c", "8", "-j", "2",
                                                  "-T", String(seconds), url], standardOutput: .pipe, standardError: .standardOutput)
    let data = child.readToEnd()
    let status = child.waitForExit()
    let text = String(decoding: data, as: UTF8.self)
    guard status == 0,
          let line = text.split(separator: "\n").first(where: { $0.hasPrefix("tps = ") }),
          let tps = Double(line.dropFirst(6).prefix { $0 != " " }) else {
        throw CommandFailure.failed("baton-bench signin: pgbench failed: \(text.suffix(500))")
    }
    return tps
}

private func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
    guard !sorted.isEmpty else { return 0 }
    return sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]
}

/// Per-request latency from the load generator's own timing: each worker thread asks for its next request
/// right after the previous answer arrived, so request i took the time between the calls for i and
/// i + concurrency (the last request of each worker has no such pair and is left out).
private final class LatencyRecorder: @unchecked Sendable {
    // `@unchecked Sendable`: slot i is written only by the one worker thread that sends request i, and
    // read only after every worker finished.
    private let stamps: UnsafeMutableBufferPointer<UInt64>
    private let concurrency: Int

    init(count: Int, concurrency: Int) {
        stamps = .allocate(capacity: count)
        stamps.initialize(repeating: 0)
        self.concurrency = concurrency
    }

    deinit { stamps.deallocate() }

    func mark(_ index: Int) { stamps[index] = DispatchTime.now().uptimeNanoseconds }

    /// Latencies in milliseconds, sorted.
    func latencies() -> [Double] {
        var result: [Double] = []
        result.reserveCapacity(stamps.count)
        for index in 0..<max(0, stamps.count - concurrency) where stamps[index] > 0 && stamps[index + concurrency] > 0 {
            result.append(Double(stamps[index + concurrency] - stamps[index]) / 1e6)
        }
        return result.sorted()
    }
}

/// `baton serve` as a child process, configured through a temporary file.
private final class ServiceProcess: Sendable {
    let child: ChildProcess
    let port: Int
    private let configPath: String

    private init(child: ChildProcess, port: Int, configPath: String) {
        self.child = child
        self.port = port
        self.configPath = configPath
    }

    static func start(baton: String, databaseURL: String, appleBaseURL: URL, clientID: String, poolSize: Int, legacy: BatonConfiguration.Legacy,
                      logLevel: String) async throws -> ServiceProcess {
        let configuration: JSONValue = [
            "listen": "127.0.0.1:0",
            "database": ["url": .string(databaseURL), "pool_size": .number(Double(poolSize))],
            "apple": ["base_url": .string(appleBaseURL.absoluteString), "client_ids": [.string(clientID)]],
            "legacy": .object(try JSON.parseObject(Array(try JSONEncoder().encode(legacy)))),
            // The load comes from one address: the per-address connection limit must not cap the concurrency.
            "server": ["connections_per_ip": 10_000],
        ]
        let text = JSON.serialize(configuration)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("baton-bench-\(UUID().uuidString).json").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        // At info the service logs one line per request; they go to /dev/null so the pipe never fills.
        let child = try ChildProcess(baton, ["serve", "--config", path, "--log-level", logLevel], standardOutput: .pipe, standardError: .discard)
        let line = await offPool { child.readLine() }
        guard line.hasPrefix("baton listening on "), let portText = line.split(separator: ":").last, let port = Int(portText) else {
            child.signal(SIGKILL)
            _ = await child.exitStatus()
            throw CommandFailure.failed("baton-bench signin: baton serve did not start")
        }
        return ServiceProcess(child: child, port: port, configPath: path)
    }

    /// The child's peak resident set (VmHWM), in MB.
    func peakRSSMegabytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(child.pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
              let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") else { return -1 }
        return (kilobytes + 1023) / 1024
    }

    /// The child's CPU time so far, user and system, in seconds (`/proc/PID/stat`, clock ticks): what a request
    /// costs the server stays comparable when the machine is shared, unlike requests per second.
    func cpuSeconds() -> Double {
        processCPUSeconds(child.pid)
    }

    /// SIGTERM (the service drains and exits), then waits for it.
    func stop() async {
        child.signal(SIGTERM)
        _ = await child.exitStatus()
        try? FileManager.default.removeItem(atPath: configPath)
    }

    func terminate() {
        child.signal(SIGKILL)
    }
}
