import BatonCommandLine
import BatonConcurrency
import BatonEmulator
import BatonAppleSignIn
import Baton
import BatonReport
import BatonJobs
import BatonService
import Foundation
import BatonHTTPServer
import BatonJOSE
import BatonLogging
import BatonPostgres
import Synchronization

/// What `baton demo` runs with: its options as given (`options.users` is `--users`, its default when not given)
/// and what the command resolved from them.
@dynamicMemberLookup
struct DemoOptions: Sendable {
    /// The options as given.
    let given: Parsed<DemoCommandOptions>
    /// The database the demo fills (`--database-url`, else `BATON_DATABASE_URL`); it must hold neither
    /// `public.users` nor a `baton` schema.
    let databaseURL: String
    /// Users the exchange leaves for after day 60 (`--stragglers`, else users/400, 3 to 25).
    let stragglers: Int
    /// Whether the database is a throwaway cluster from `scripts/pg.sh` (for the wording only).
    let throwawayDatabase: Bool

    /// The value of one of the command's options.
    subscript<Value>(dynamicMember option: KeyPath<DemoCommandOptions, Option<Value>>) -> Value {
        given[dynamicMember: option]
    }
}

/// The demo's figures, checked at the end: every user is accounted for.
struct DemoAccount: Sendable, Equatable {
    /// Rows of the legacy table.
    var legacyUsers: Int
    /// Users migrated by a sign-in.
    var bySignIn: Int
    /// Users migrated by the exchange.
    var byExchange: Int
    /// Users migrated by re-linking.
    var byLink: Int
    /// Users not migrated (pending, failed or unresolvable).
    var unresolved: Int
    /// Legacy records whose subject is now a new-team identifier.
    var rewrittenRecords: Int
    /// `migrated` events in `baton.events`.
    var migrationEvents: Int

    /// Whether the sum is the whole table and every migration shows in the table.
    var balances: Bool {
        let migrated = bySignIn + byExchange + byLink
        return migrated + unresolved == legacyUsers && rewrittenRecords == migrated && migrationEvents == migrated
    }
}

/// The end-to-end scenario of `baton demo`: a legacy app under team A with a table of users, the transfer to
/// team B, devices signing in, the exchange for the rest, day 60 for a few stragglers, and the report.
///
/// Everything runs in this process against real servers on loopback: the Apple emulator, Baton's HTTP
/// service (`baton serve`), and Baton's bulk jobs (`baton transfer-ids`, `baton exchange`) over the given
/// PostgreSQL database. No secret or token is printed.
struct DemoScenario {
    let options: DemoOptions
    let output = DemoOutput(steps: 10)

    /// The transferred app.
    static let clientID = "com.example.app"
    /// The legacy table, as `--schema` shapes it (merging duplicates with `--late-start`).
    var legacy: BatonConfiguration.Legacy {
        var legacy = options.schema.legacy
        if options.lateStart { legacy.onDuplicate = .merge }
        return legacy
    }
    /// The application's tables, for the wording.
    var tableNames: String { options.schema.tables.joined(separator: " and ") }

    /// Runs the story; returns whether every step did what it should and every user is accounted for.
    func run() async throws -> Bool {
        let (ok, elapsed) = try await timed { try await runSteps() }
        output.write("\nThe demo took \(DemoFormat.seconds(elapsed)).\n")
        let absolute = URL(fileURLWithPath: options.out).standardizedFileURL.path
        output.write("""

            Where to look next:
              \(absolute)   progress against day 60, outcomes by method, the unresolved users
              baton report --format csv --unmasked --out unresolved.csv   the re-sign-in campaign list for a mailer
              docs/runbook.md   a real transfer, step by step: which team's key each call needs, what to run when, rollback
              docs/report.md   what each figure means, and a re-sign-in campaign from the CSV
              docs/bulk-migration.md   baton transfer-ids and baton exchange: rates, resuming, several processes
              docs/configuration.md   every configuration key, its environment variable and its default
              docs/troubleshooting.md   every Apple error Baton can meet, its cause, what to do

            """)
        return ok
    }

    /// Checks the database is free for the demo, runs every step, and drops what it created (unless kept).
    private func runSteps() async throws -> Bool {
        let users = options.users
        output.write("Baton demo: an app with \(DemoFormat.count(users)) Sign in with Apple users moves from team A to team B.\n")

        // 1. The database and Baton's schema.
        output.step(1, "PostgreSQL and Baton's schema (baton db migrate)")
        let pool = PostgresPool(url: options.databaseURL, maxConnections: options.concurrency + 4)
        let existing = try await pool.query("""
            SELECT bool_or(to_regclass(quote_ident(split_part(t, '.', 1)) || '.' || quote_ident(split_part(t, '.', 2))) IS NOT NULL), EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'baton')
            FROM unnest(string_to_array(\(options.schema.tables.joined(separator: ",")), ',')) AS t
            """)[0]
        if try existing.decode(Bool.self, at: 0) || existing.decode(Bool.self, at: 1) {
            await pool.close()
            throw CommandFailure.usage("the database already has \(tableNames) or a baton schema; the demo needs an empty one (make demo starts a throwaway PostgreSQL)")
        }
        output.line(options.throwawayDatabase
            ? "a throwaway cluster from scripts/pg.sh on a private Unix socket, deleted when the demo ends"
            : "the database given by --database-url (the demo creates \(tableNames) and schema baton in it)")
        do {
            let healthy = try await fromMigration(pool: pool)
            try await cleanUp(pool: pool)
            await pool.close()
            return healthy
        } catch {
            try? await cleanUp(pool: pool)
            await pool.close()
            throw error
        }
    }

    /// Drops what the demo created in the database, unless asked to keep it.
    private func cleanUp(pool: PostgresPool) async throws {
        guard !options.keepData else {
            output.line("kept \(tableNames) and schema baton in the database (--keep-data)")
            return
        }
        for statement in options.schema.drop { try await pool.execute(PostgresQuery(unsafeSQL: statement)) }
        try await pool.execute("DROP SCHEMA IF EXISTS baton CASCADE")
        output.line("dropped \(tableNames) and schema baton from the database (--keep-data keeps them)")
    }

    /// Steps 1 (the migrations) and 2 (the emulator), then the rest with the emulator running.
    private func fromMigration(pool: PostgresPool) async throws -> Bool {
        let users = options.users
        let (applied, migrateSeconds) = try await timed { try await BatonSchema.migrator().migrate(pool) }
        output.line("\(applied.count) migrations applied in \(DemoFormat.seconds(migrateSeconds)): \(applied.map { String(format: "%04d_%@", $0.version, $0.name) }.joined(separator: ", "))")
        output.line("tables: baton.transfers (one row per user to migrate), baton.events (append-only audit), baton.subjects, baton.nonces")

        // 2. Apple: the emulator, the two teams, the app and its users.
        output.step(2, "Apple: the emulator, team A's app and its users")
        var httpConfiguration = HTTPServerConfiguration()
        httpConfiguration.connectionLimit = max(httpConfiguration.connectionLimit, options.concurrency * 4)
        let emulator = try await AppleEmulator.start(configuration: httpConfiguration)
        let teamA = try emulator.createTeam()
        let teamB = try emulator.createTeam()
        try emulator.createApp(clientID: DemoScenario.clientID, teamID: teamA.teamID)
        let (people, peopleSeconds) = try await timed { try emulator.createUsers(clientID: DemoScenario.clientID, count: users) }
        let privateCount = people.filter(\.isPrivateEmail).count
        output.line("emulator of appleid.apple.com on \(emulator.baseURL.absoluteString) (keys, tokens, transfers, the 60-day window)")
        output.line("team A \(teamA.teamID) owns \(DemoScenario.clientID); team B \(teamB.teamID) will receive it; each team has an ES256 key (.p8, never printed)")
        output.line("\(DemoFormat.count(people.count)) people use the app under team A, \(DemoFormat.count(privateCount)) of them behind private relay addresses (created in \(DemoFormat.seconds(peopleSeconds)))")

        let healthy = try await withTeardown {
            try await afterEmulator(pool: pool, emulator: emulator, teamA: teamA, teamB: teamB, people: people)
        } teardown: {
            await emulator.stop()
        }
        output.line("stopped the service and the emulator")
        return healthy
    }

    /// Steps 3 to 6: the legacy table, transfer identifiers, acceptance, the service; then the rest with it running.
    private func afterEmulator(pool: PostgresPool, emulator: AppleEmulator, teamA: TeamCredentials, teamB: TeamCredentials,
                               people: [EmulatedUser]) async throws -> Bool {
        let clientID = DemoScenario.clientID
        let legacy = try self.legacy.identifiers()
        var healthy = true

        // 3. The legacy table, with one statement.
        let schema = options.schema
        output.step(3, "The app's own \(schema == .users ? "table" : "tables (\(schema.rawValue))"): \(tableNames) under team A")
        try await pool.withConnection { try await $0.executeScript(unsafeSQL: schema.ddl) }
        let subs = people.map(\.userIdentifier).joined(separator: "\n")
        let emails = people.map(\.email).joined(separator: "\n")
        let (inserted, insertSeconds) = try await timed {
            try await pool.execute(PostgresQuery(unsafeSQL: schema.insert, [subs, emails]))
        }
        output.line("\(DemoFormat.count(inserted)) rows inserted with one INSERT … SELECT unnest(…) in \(DemoFormat.seconds(insertSeconds))")
        if schema == .users {
            output.line("apple_sub holds each user's team A identifier; email their address (a relay address for \(DemoFormat.count(people.filter(\.isPrivateEmail).count)))")
        } else {
            output.line("the Apple rows are legacy.where \(legacy.filters.map(\.literalSQL).joined(separator: " AND ")); emails in \(legacy.emailTable.map { "\($0.table).\($0.column.name)" } ?? "-")\(legacy.json.map { "; claims copied in \($0.column.name) (\($0.subjectKeys.joined(separator: ", ")))" } ?? "")")
            output.line("every tenth user also has another provider's row with the same subject: Baton leaves those alone")
        }

        // 4. The sender makes transfer identifiers while it prepares its data (Apple answers it before the
        // transfer is initiated), then initiates the transfer.
        output.step(4, "Team A makes transfer identifiers (baton transfer-ids), then initiates the transfer")
        let seeded = try await LegacySeeder(pool: pool, legacy: legacy).seed()
        let sender = try appleClient(emulator, team: teamA)
        emulator.resetStats()
        let senderSummary = try await runJob(TransferQueue(pool: pool, kind: .transferIdentifiers), .transferIdentifiers(targetTeamID: teamB.teamID),
                                             client: sender, total: seeded, acceptedAt: nil)
        let senderCalls = emulator.stats()["/auth/usermigrationinfo"].calls
        output.line("\(DemoFormat.count(seeded)) users queued from public.users (keyset pages of 1,000, never all rows at once)")
        output.line("\(DemoFormat.count(senderSummary.counts.succeeded)) transfer identifiers made in \(DemoFormat.seconds(senderSummary.elapsed)) (\(DemoFormat.rate(senderSummary.counts.succeeded, senderSummary.elapsed)), limit \(DemoFormat.count(Int(options.rate)))/s): \(DemoFormat.count(senderCalls)) calls to POST /auth/usermigrationinfo with team A's key, \(senderSummary.counts.rateLimited) rate-limited, \(senderSummary.counts.errors) failed")
        output.line("a team runs: baton transfer-ids --yes --workers \(options.concurrency) --rate \(Int(options.rate))")
        output.line("look: baton.transfers now pairs each old_sub with its transfer_sub (the demo keeps it with --keep-data)")
        if senderSummary.counts.succeeded != seeded || (senderSummary.remaining ?? 0) != 0 {
            healthy = false
            output.line("NOT EVERY USER GOT A TRANSFER IDENTIFIER: \(DemoFormat.count((senderSummary.remaining ?? 0))) remain")
        }
        try emulator.initiateTransfer(clientID: clientID, toTeamID: teamB.teamID)
        output.line("App Store Connect › Transfer App: \(clientID) from team A \(teamA.teamID) to team B \(teamB.teamID), pending acceptance")

        // 5. Team B accepts: the 60-day window opens.
        output.step(5, "Team B accepts: the 60-day window opens")
        if options.lateStart { _ = try emulator.setClock(to: Date().addingTimeInterval(-3_600)) }  // accepted an hour ago
        let acceptedAt = try emulator.acceptTransfer(clientID: clientID)
        let closesAt = acceptedAt.addingTimeInterval(BatonConfiguration.Transfer.window)
        output.line("accepted \(DemoFormat.timestamp(acceptedAt)); the window closes \(DemoFormat.timestamp(closesAt))")
        output.line("until then identity tokens carry transfer_sub, and team B can exchange transfer identifiers itself")
        output.line("Baton's configuration: apple.transfer.accepted_at = \(ISO8601DateFormatter().string(from: acceptedAt))")

        let secondAccounts = options.lateStart ? try await startLate(pool: pool, emulator: emulator, people: people, acceptedAt: acceptedAt) : 0
        let recipient = options.crossCompany
            ? try await handOver(pool: pool, legacy: legacy)
            : DemoRecipient(pool: pool, url: options.databaseURL, legacy: self.legacy, appleRows: options.schema.appleRows,
                            rewrittenRows: options.schema.rewrittenRows, database: nil)
        do {
            let rest = try await fromService(pool: recipient.pool, emulator: emulator, teamB: teamB, people: people, acceptedAt: acceptedAt,
                                             recipient: recipient, secondAccounts: secondAccounts)
            try await dropRecipient(recipient, mainPool: pool)
            return healthy && rest
        } catch {
            try? await dropRecipient(recipient, mainPool: pool)
            throw error
        }
    }

    /// Step 6, the service on the recipient's database; then the rest with it running.
    private func fromService(pool: PostgresPool, emulator: AppleEmulator, teamB: TeamCredentials, people: [EmulatedUser], acceptedAt: Date,
                             recipient: DemoRecipient, secondAccounts: Int) async throws -> Bool {
        let clientID = DemoScenario.clientID
        // 6. Baton's service.
        output.step(6, "Baton's HTTP service (baton serve)")
        // A random admin token for GET /v1/report, never printed.
        let adminToken = (0..<4).map { _ in String(format: "%016llx", UInt64.random(in: .min ... .max)) }.joined()
        let configuration = BatonConfiguration(
            listen: .init(host: "127.0.0.1", port: 0),
            database: .init(url: recipient.url, poolSize: options.concurrency),
            apple: .init(baseURL: emulator.baseURL, clientIDs: [clientID], transfer: .init(clientID: clientID, acceptedAt: acceptedAt)),
            legacy: recipient.legacy,
            adminToken: AdminToken(adminToken)
        )
        let server = try await BatonServer.start(configuration: configuration, port: 0)
        let serviceURL = URL(string: "http://127.0.0.1:\(server.port)")!
        output.line("listening on \(serviceURL.absoluteString): POST /v1/signin, GET /v1/credential-state, POST /v1/link, GET /v1/report and GET /report (admin token), GET /metrics")
        output.line("it verifies identity tokens against the emulator's /auth/keys (RS256, iss, aud \(clientID), exp)")
        output.line("a team runs: baton serve --config baton.json (listen, database.url, apple.base_url, apple.client_ids, apple.transfer.accepted_at, legacy.*)")

        do {
            let rest = try await afterService(pool: pool, emulator: emulator, teamB: teamB, people: people, serviceURL: serviceURL, acceptedAt: acceptedAt,
                                              adminToken: adminToken, side: recipient, secondAccounts: secondAccounts)
            await server.stop()
            return rest
        } catch {
            await server.stop()
            throw error
        }
    }

    /// Steps 7 to 10: devices, the exchange, day 61, the report and the final account.
    private func afterService(pool: PostgresPool, emulator: AppleEmulator, teamB: TeamCredentials, people: [EmulatedUser],
                              serviceURL: URL, acceptedAt: Date, adminToken: String, side: DemoRecipient, secondAccounts: Int) async throws -> Bool {
        let clientID = DemoScenario.clientID
        let legacy = try side.legacy.identifiers()
        var healthy = true

        // 7. Devices: a third of the users open the app at once.
        let deviceUsers = people.enumerated().filter { $0.offset % 3 == 0 }.map(\.element.userIdentifier)
        output.step(7, "\(DemoFormat.count(deviceUsers.count)) iPhones open the app at once (a third of the users)")
        output.line("each does what the app does on a device, \(options.concurrency) devices in flight:")
        let devices = DemoDevices(service: serviceURL, apple: emulator.baseURL, clientID: clientID, concurrency: options.concurrency,
                                  asksCredentialState: !options.crossCompany)
        let (tally, deviceSeconds) = await timed { await devices.run(users: deviceUsers) }
        output.line(options.crossCompany
            ? "  getCredentialState on the device (team B's Baton never sees OLD_SUB) → \(DemoFormat.tally(tally.credentialStates))"
            : "  GET /v1/credential-state?user=OLD_SUB → \(DemoFormat.tally(tally.credentialStates))")
        output.line("  silent re-authorization (POST /emulator/authorize) → \(DemoFormat.count(tally.tokens)) identity tokens, \(DemoFormat.count(tally.tokensWithTransferSub)) with transfer_sub")
        output.line("  POST /v1/signin with the new token → \(DemoFormat.tally(tally.signInOutcomes))")
        let signIns = tally.signInOutcomes["migrated"] ?? 0
        output.line("\(DemoFormat.count(tally.requests)) requests in \(DemoFormat.seconds(deviceSeconds)) (\(DemoFormat.rate(tally.requests, deviceSeconds)), \(DemoFormat.rate(signIns, deviceSeconds)) sign-ins); each record rewritten once, with an event in baton.events")
        let metrics = try await devices.metrics(["baton_signin_outcomes_total", "baton_http_request_duration_seconds_sum", "baton_http_request_duration_seconds_count"])
        let outcomes = metrics.filter { $0.hasPrefix("baton_signin_outcomes_total") && !$0.hasSuffix(" 0") }
        func value(_ name: String) -> Double? {
            metrics.first { $0.hasPrefix(name + " ") }.flatMap { $0.split(separator: " ").last }.flatMap { Double($0) }
        }
        if !outcomes.isEmpty { output.line("look: GET /metrics → \(outcomes.joined(separator: ", "))") }
        if let sum = value("baton_http_request_duration_seconds_sum"), let count = value("baton_http_request_duration_seconds_count"), count > 0 {
            output.line("      mean service latency \(String(format: "%.1f", sum / count * 1000)) ms over \(DemoFormat.count(Int(count))) requests (baton_http_request_duration_seconds)")
        }
        if tally.failures > 0 || signIns != deviceUsers.count {
            healthy = false
            output.line("\(DemoFormat.count(tally.failures)) DEVICES DID NOT FINISH")
        }

        // 8. The exchange for the rest.
        let exchangeQueue = TransferQueue(pool: pool, kind: .exchange)
        let pending = try await exchangeQueue.pendingCount()
        let stragglers = min(options.stragglers, pending)
        output.step(8, "Team B exchanges the rest (baton exchange)")
        let recipient = try appleClient(emulator, team: teamB)
        let store = LegacyStore(pool: pool, legacy: legacy)
        let budget = HoldBack(allowed: pending - stragglers)
        emulator.resetStats()
        let exchangeSummary = try await runJob(exchangeQueue, .exchange(applier: store), client: recipient, total: pending - stragglers,
                                               acceptedAt: acceptedAt) { HoldBackStep(inner: $0, budget: budget) }
        let exchangeCalls = emulator.stats()["/auth/usermigrationinfo"]
        let exchanged = exchangeSummary.counts.succeeded
        output.line("\(DemoFormat.count(pending)) users did not sign in; POST /auth/usermigrationinfo with each transfer_sub and team B's key")
        output.line("\(DemoFormat.count(exchanged)) exchanged and rewritten in \(DemoFormat.seconds(exchangeSummary.elapsed)) (\(DemoFormat.rate(exchanged, exchangeSummary.elapsed)), limit \(DemoFormat.count(Int(options.rate)))/s): \(DemoFormat.count(exchangeCalls.calls)) calls, \(exchangeSummary.counts.rateLimited) rate-limited, \(exchangeSummary.counts.errors) failed, \(exchangeSummary.counts.alreadyDone) already migrated by a sign-in")
        if stragglers > 0 {
            output.line("the demo stops the job with \(DemoFormat.count((exchangeSummary.remaining ?? 0))) users to go: the stragglers nobody reaches before day 60")
        }
        output.line("a team runs: baton exchange --workers \(options.concurrency) --rate \(Int(options.rate))   (resumable; several processes may share the work)")
        if let body = try await devices.report(adminToken: adminToken), let progress = try? MigrationReport(json: body) {
            let daysLeft = progress.window.daysLeft.map { "\($0) days left in the window" } ?? "no window"
            output.line("look: GET /v1/report (admin token) → \(DemoFormat.count(progress.totals.migrated)) of \(DemoFormat.count(progress.totals.total)) migrated, \(DemoFormat.count(progress.totals.pending)) pending, \(daysLeft): the progress check for any day of the window")
        } else {
            healthy = false
            output.line("GET /v1/report DID NOT ANSWER")
        }
        if secondAccounts > 0 {
            let counts = try await MigrationReport.Duplicates.read(from: pool, limit: 0)
            output.line("\(DemoFormat.count(counts.count)) of the \(DemoFormat.count(secondAccounts)) second accounts met by the exchange (the new identifier already taken): recorded in baton.duplicates and merged at once (legacy.on_duplicate merge), \(DemoFormat.count(counts.unmerged)) left")
            output.line("a team arriving after acceptance runs: baton merge --dry-run, then baton merge --yes (docs/runbook.md, \"Arriving after acceptance\")")
            if counts.unmerged > 0 || counts.count == 0 {
                healthy = false
                output.line("THE SECOND ACCOUNTS WERE NOT MERGED")
            }
        }
        if exchanged != pending - stragglers || (exchangeSummary.remaining ?? 0) != stragglers {
            healthy = false
            output.line("THE EXCHANGE DID NOT DO EVERY USER IT WAS GIVEN")
        }

        // 9. Day 61: the window has closed.
        output.step(9, "Day 61: the window has closed")
        let day61 = try emulator.setClock(to: acceptedAt.addingTimeInterval(61 * 86_400))
        output.line("the emulator's clock moves to \(DemoFormat.timestamp(day61)), a day after the window closed")
        if (exchangeSummary.remaining ?? 0) == 0 {
            output.line("no stragglers (--stragglers 0): the exchange left nobody for after day 60")
        } else {
            let lateClient = try appleClient(emulator, team: teamB)
            emulator.resetStats()
            // Apple refuses every straggler alike: a shared cause, for which the job stops after 9 (the same-error
            // limit, 10) and leaves the rest pending. The demo lifts its limits to mark them all.
            let lateSummary = try await runJob(exchangeQueue, .exchange(applier: store), client: lateClient, total: exchangeSummary.remaining ?? 0,
                                               acceptedAt: acceptedAt, failureLimit: (exchangeSummary.remaining ?? 0) + 1)
            let lateCalls = emulator.stats()["/auth/usermigrationinfo"]
            output.line("a late exchange for the \(DemoFormat.count((exchangeSummary.remaining ?? 0))) stragglers: Apple answers \(DemoFormat.tally(lateCalls.errors))")
            output.line("Baton marks them unresolvable (\(DemoFormat.count(lateSummary.counts.unresolvable))), keeping Apple's reason in baton.transfers.last_error; their old records stay untouched")
            output.line("(only the emulator's clock moved, so Baton asked, with its stop after 10 identical refusals lifted; against Apple, baton exchange refuses to start after day 60 and counts who is left)")
            if lateSummary.counts.unresolvable != (exchangeSummary.remaining ?? 0) || (lateSummary.remaining ?? 0) != 0 {
                healthy = false
                output.line("THE LATE EXCHANGE DID NOT MARK EVERY STRAGGLER\(lateSummary.stopReason.map { ": \($0.reason)" } ?? "")")
            }
        }

        // 10. The report.
        output.step(10, "The report (baton report)")
        let account = try await accountFor(pool: pool, recipient: side, secondAccounts: secondAccounts)
        let report = try await ReportBuilder(pool: pool, legacy: side.legacy, acceptedAt: acceptedAt, now: emulator.now, limit: 100).build()
        output.write("\n" + report.renderTable(listLimit: 5).split(separator: "\n", omittingEmptySubsequences: false).map { "      " + $0 }.joined(separator: "\n") + "\n")
        let html = report.renderHTML()
        try await writeFile(options.out, html)
        let absolute = URL(fileURLWithPath: options.out).standardizedFileURL.path
        output.line("written \(absolute) (\(DemoFormat.count(html.utf8.count / 1024)) KB, self-contained: open it in a browser)")
        output.line("a team runs: baton report (a table), baton report --format html --out report.html, --format csv for a mailer")
        output.line("every user accounted for: \(DemoFormat.count(account.bySignIn)) by sign-in + \(DemoFormat.count(account.byExchange)) by exchange + \(DemoFormat.count(account.unresolved)) unresolved = \(DemoFormat.count(account.bySignIn + account.byExchange + account.byLink + account.unresolved)) of \(DemoFormat.count(account.legacyUsers)) users in \(legacy.table)")
        if let others = options.schema.otherProviderRows, !options.crossCompany {
            let untouched = try await pool.query(PostgresQuery(unsafeSQL: others))[0].decode(Int.self, at: 0)
            output.line("\(DemoFormat.count(untouched)) rows of another provider still carry the same subjects as migrated Apple users: untouched, as the where filter promises")
        }
        output.line("\(legacy.table) now holds \(DemoFormat.count(account.rewrittenRecords)) team B identifiers; baton.events holds \(DemoFormat.count(account.migrationEvents)) 'migrated' events with the old and new values, to trace or reverse each rewrite")
        if !account.balances {
            healthy = false
            output.line("THE FIGURES DO NOT ADD UP")
        }

        return healthy
    }

    /// `--late-start`: the transfer was accepted an hour ago on the emulator's clock, and some users (none of those whose
    /// devices sign in through Baton later) signed in half an hour later at the login endpoint, which had no Baton in
    /// front of it yet: the application made each a second account under team B's identifier. The clock then comes
    /// back to the present, where Baton's service starts. Returns how many second accounts there are.
    private func startLate(pool: PostgresPool, emulator: AppleEmulator, people: [EmulatedUser], acceptedAt: Date) async throws -> Int {
        _ = try emulator.setClock(to: acceptedAt.addingTimeInterval(1_800))
        let early = people.enumerated().filter { $0.offset % 3 == 1 }.prefix(max(3, people.count / 100)).map(\.element)
        for person in early {
            let authorization = try emulator.authorize(clientID: DemoScenario.clientID, user: person.id)
            let email = try CompactJWS.parse(authorization.idToken).claims()["email"]?.stringValue
            try await pool.execute("INSERT INTO public.users (apple_sub, email) VALUES (\(authorization.userIdentifier), \(email))")
        }
        let now = try emulator.setClock(to: Date())
        output.line("--late-start: the transfer was accepted an hour ago; Baton's service starts only now (\(DemoFormat.timestamp(now))).")
        output.line("meanwhile \(DemoFormat.count(early.count)) users signed in at the login endpoint without it, and the app made each a SECOND account under team B's identifier")
        return early.count
    }

    /// Runs a bulk job with the demo's rate and workers, printing its progress. `failureLimit`, when given, stands for
    /// both of the job's limits: failures in a row, and failures in a row with the same error.
    private func runJob(_ queue: TransferQueue, _ work: BulkRun.Work, client: AppleClient, total: Int, acceptedAt: Date?,
                        failureLimit: Int? = nil, wrap: (any BulkJobStep) -> any BulkJobStep = { $0 }) async throws -> BulkJobSummary {
        var jobOptions = BulkJobOptions(workers: options.concurrency, rate: options.rate)
        if let failureLimit {
            jobOptions.maxConsecutiveFailures = max(1, failureLimit)
            jobOptions.maxIdenticalFailures = max(1, failureLimit)
        }
        let run = try BulkRun(queue: queue, work: work, client: client, options: jobOptions,
                              window: TransferWindow(acceptedAt: acceptedAt), wrap: wrap)
        let output = self.output
        return await run.run(total: total, isTerminal: output.isTerminal, logInterval: 2) { text in
            if text.hasPrefix("\r") {
                output.write("\r      " + text.dropFirst())
            } else {
                output.write(text == "\n" ? text : "      " + text)
            }
        }
    }

    /// An Apple client for `team`, on the emulator's clock (a server's clock agrees with Apple's).
    private func appleClient(_ emulator: AppleEmulator, team: TeamCredentials) throws -> AppleClient {
        let secret = try ClientSecret(teamID: team.teamID, keyID: team.keyID, clientID: DemoScenario.clientID, pem: team.privateKeyPEM)
        return AppleClient(baseURL: emulator.baseURL, credentials: secret,
                           options: AppleClient.Options(retry: RetryPolicy(maxAttempts: 1), maxConnectionsPerHost: options.concurrency),
                           now: { emulator.now })
    }

    /// Counts the outcome of every user from the database.
    private func accountFor(pool: PostgresPool, recipient: DemoRecipient, secondAccounts: Int) async throws -> DemoAccount {
        let row = try await pool.query("""
            SELECT (\(unsafeRaw: recipient.appleRows)),
                   count(*) FILTER (WHERE state = 'migrated' AND method = 'signin'),
                   count(*) FILTER (WHERE state = 'migrated' AND method = 'exchange'),
                   count(*) FILTER (WHERE state = 'migrated' AND method = 'link'),
                   count(*) FILTER (WHERE state <> 'migrated'),
                   (\(unsafeRaw: recipient.rewrittenRows)),
                   (SELECT count(*) FROM baton.events WHERE kind = 'migrated')
            FROM baton.transfers
            """)[0]
        return DemoAccount(legacyUsers: try row.decode(Int.self, at: 0) - secondAccounts, bySignIn: try row.decode(Int.self, at: 1),
                           byExchange: try row.decode(Int.self, at: 2), byLink: try row.decode(Int.self, at: 3),
                           unresolved: try row.decode(Int.self, at: 4), rewrittenRecords: try row.decode(Int.self, at: 5),
                           migrationEvents: try row.decode(Int.self, at: 6))
    }

    /// Writes `text` to `path` on a dispatch queue (file I/O stays off Swift's cooperative threads).
    private func writeFile(_ path: String, _ text: String) async throws {
        try await offPool { try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic) }
    }
}

/// How many users the demo's exchange may still take before it stops.
final class HoldBack: Sendable {
    private let remaining: Mutex<Int>

    /// An allowance of `allowed` users.
    init(allowed: Int) { remaining = Mutex(allowed) }

    /// Takes one user from the allowance; false once it is spent.
    func take() -> Bool {
        remaining.withLock { count in
            guard count > 0 else { return false }
            count -= 1
            return true
        }
    }
}

/// The demo's interrupted exchange: the real ``ExchangeStep`` for as many users as the allowance holds, then a
/// stop, so the job ends with the stragglers still pending (their rows released, not leased).
struct HoldBackStep: BulkJobStep {
    /// The real exchange.
    let inner: any BulkJobStep
    /// Users it may still take.
    let budget: HoldBack

    /// Exchanges `item` while the allowance lasts; then stops the job (the item is released, untouched).
    func perform(_ item: TransferQueue.Item) async throws -> BulkStepOutcome {
        guard budget.take() else { throw DemoInterruption() }
        return try await inner.perform(item)
    }
}

/// Why the demo's exchange stopped early.
struct DemoInterruption: Error, CustomStringConvertible {
    var description: String { "the demo interrupted the exchange to leave stragglers for day 60" }
}
