import BatonCommandLine
import BatonConcurrency
import Baton
import BatonReport
import BatonJobs
import BatonAppleSignIn
import BatonEmulator
import BatonHTTPServer
import BatonLogging
import BatonPostgres
import BatonService
import Foundation
import Synchronization

/// What `baton rehearse` runs with: its options as given (`options.concurrency` is `--concurrency`, its default when
/// not given) and what the command resolved from them.
@dynamicMemberLookup
struct RehearsalOptions: Sendable {
    /// The options as given.
    let given: Parsed<RehearseOptions>
    /// The application's database (`--from`), only read.
    let source: String
    /// The team's configuration (its `legacy` section and client ID).
    let configuration: BatonConfiguration

    /// The value of one of the command's options.
    subscript<Value>(dynamicMember option: KeyPath<RehearseOptions, Option<Value>>) -> Value {
        given[dynamicMember: option]
    }
}

/// The rehearsal: a throwaway copy of the configured tables, the problems in it, then the transfer on it
/// with the in-process emulator, Baton's service and the bulk jobs (the pieces `baton demo` runs).
struct Rehearsal {
    let options: RehearsalOptions
    /// One device in this many asks Baton for the credential state first (a web or Android client).
    static let credentialStateEvery = 10
    /// `--concurrency` by default: four per core. The devices, the service and the exchange's workers share the cores
    /// with PostgreSQL; at 32 on two cores, a 200,000-user rehearsal spent a third more CPU on the devices and twice as
    /// much on the exchange (PostgreSQL's backends waiting on each other) as at 8.
    static let defaultConcurrency = min(256, 4 * ProcessInfo.processInfo.activeProcessorCount)
    /// `transfer-ids`' workers at least. Its Apple call is answered in-process and its answers are stored a batch at
    /// a time (``TransferQueue/storeTransferIdentifier(_:transferSub:)``), each batch holding the answers of the
    /// workers waiting: 4 workers stored about 4 answers a statement, and PostgreSQL's CPU per user doubled.
    static let senderWorkers = 256
    /// Where each phase's end goes (`rehearse phase=NAME seconds=S`, on standard error with the progress lines).
    let phases = PhaseClock()

    /// Runs it; the cluster is removed on every path.
    /// - Throws: ``CommandFailure`` (`usage` for a configuration the source does not match).
    func run() async throws -> RehearsalResult {
        let legacy: BatonConfiguration.LegacyIdentifiers
        do {
            legacy = try options.configuration.legacy.identifiers()
        } catch {
            throw CommandFailure.usage("\(error)")
        }
        let start = ContinuousClock.now
        let cluster = try await ThrowawayCluster.start()
        do {
            var result = try await onCopy(cluster: cluster, legacy: legacy)
            await cluster.destroy()
            let elapsed = ContinuousClock.now - start
            result.seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            return result
        } catch {
            await cluster.destroy()
            throw error
        }
    }

    private func onCopy(cluster: ThrowawayCluster, legacy: BatonConfiguration.LegacyIdentifiers) async throws -> RehearsalResult {
        let pool = PostgresPool(url: cluster.url, maxConnections: options.concurrency + 4)
        do {
            let result = try await copyAndRun(cluster: cluster, pool: pool, legacy: legacy)
            await pool.close()
            return result
        } catch {
            await pool.close()
            throw error
        }
    }

    /// What the copy holds, said after a restore error.
    static let copyScope = "(the copy holds the configured tables with the extensions, types, domains, sequences and functions their columns, defaults and triggers use; not other tables, nor other functions)"

    /// Copies the configured tables with pg_dump (a read-only session) and restores them into the copy: first what
    /// they need from the source (``SourceCatalog``: extensions, types, domains, sequences, functions), then the tables with
    /// `pg_restore --exit-on-error`, leaving out their foreign keys to tables not copied (listed on standard error).
    /// The first failing statement stops the copy, and its error is reported as PostgreSQL gave it.
    private func copyTables(cluster: ThrowawayCluster, pool: PostgresPool, legacy: BatonConfiguration.LegacyIdentifiers) async throws {
        let tables = [legacy.table] + (legacy.emailTable.map { [$0.table] } ?? []) + legacy.emailCopies.map(\.table)
            + legacy.subjectCopies.compactMap(\.table?.name)
        let dump = cluster.directory + "/source.dump"
        let list = cluster.directory + "/restore.list"
        let bin = ThrowawayCluster.serverBinaries() ?? "/usr/bin"
        let (source, credentials) = try dumpSource(serviceFile: cluster.directory + "/source.service")
        let environment = ProcessInfo.processInfo.environment.merging(["PGOPTIONS": "-c default_transaction_read_only=on"].merging(credentials) { $1 }) { $1 }
        await waitForQuietSource()
        do {
            try await offPool {
                try ThrowawayCluster.run("\(bin)/pg_dump", ["--dbname=\(source)", "--format=custom", "--compress=0"] + tables.map { "--table=\($0.quoted)" },
                                         log: cluster.directory + "/pg_dump.log", environment: environment, standardOutput: dump)
                try ThrowawayCluster.run("\(bin)/pg_restore", ["--list", dump], log: cluster.directory + "/pg_restore.log", standardOutput: list)
            }
        } catch let failure as ToolFailure where failure.output.contains("no matching tables") {
            throw CommandFailure.usage("the source database has no table \(tables.map(\.description).joined(separator: " or ")) (legacy.table, legacy.email.table, legacy.email_copies)")
        } catch let failure as ToolFailure {
            throw CommandFailure.failed("baton rehearse: copying the tables failed: \(failure)")
        }
        let catalog: SourceCatalog
        do {
            catalog = try await SourceCatalog.read(url: options.source, tables: tables)
        } catch let error as PostgresError {
            throw CommandFailure.failed("baton rehearse: reading what the tables need from the source failed: \(error.debugDescription)")
        }
        for foreignKey in catalog.foreignKeysLeftOut {
            printError("baton rehearse: not copied: foreign key \(foreignKey.description), a table the rehearsal does not copy")
        }
        for statement in catalog.statements {
            do {
                try await pool.execute(PostgresQuery(unsafeSQL: statement))
            } catch let error as PostgresError {
                throw CommandFailure.failed("baton rehearse: copying the tables stopped at the first error: \(error.debugDescription)\nCommand was: \(statement)\n\(Self.copyScope)")
            }
        }
        do {
            try await offPool {
                let listing = try String(contentsOfFile: list, encoding: .utf8)
                let restore = catalog.restoreList(listing)
                for policy in restore.policiesLeftOut {
                    printError("baton rehearse: not copied: \(policy) (row-level security does not bind the copy's superuser, and may read tables not copied)")
                }
                try restore.listing.write(toFile: list, atomically: false, encoding: .utf8)
                try ThrowawayCluster.run("\(bin)/pg_restore", ["--dbname=\(cluster.url)", "--use-list=\(list)", "--exit-on-error", "--no-owner", "--no-privileges",
                                                                "--no-comments", "--no-tablespaces", "--no-publications", "--no-subscriptions", "--no-security-labels", dump],
                                         log: cluster.directory + "/pg_restore.log")
            }
        } catch let failure as ToolFailure {
            // pg_restore's own words from its error on: the error, where in the statement, and the statement.
            let words = failure.output.firstRange(of: "error: ").map { String(failure.output[$0.upperBound...]) } ?? failure.output
            throw CommandFailure.failed("baton rehearse: copying the tables stopped at the first error: \(words)\n\(Self.copyScope)")
        }
    }

    /// Waits while the application's database is busy (the configuration's `jobs.max_replica_lag_seconds` and
    /// `jobs.max_active_backends`, as the bulk jobs yield to), so the copy's one long read starts when it is clear.
    /// The rehearsal's other phases run on the throwaway copy, which serves no one: they do not wait.
    private func waitForQuietSource() async {
        let pool = PostgresPool(url: options.source, maxConnections: 1)
        let throttle = JobThrottle(limits: options.configuration.jobs.throttleLimits, probe: ThrottleProbe(pool: pool), logger: Logger(label: "baton.rehearse"))
        await throttle.monitoring { await throttle.waitUntilClear() }
        await pool.close()
    }

    /// The source as pg_dump gets it. Its command line, which any user sees in `ps` and `/proc/PID/cmdline`,
    /// carries only the settings that are not secret; the secrets (`password`, `sslpassword`, every keyword libpq
    /// marks as one) go in a service file only this user can read, which PGSERVICEFILE and PGSERVICE name and libpq
    /// reads for the settings the command line leaves out. The file is in the throwaway cluster's directory, removed
    /// with it.
    /// - Throws: ``CommandFailure`` (usage) for a source naming a service of its own besides a secret.
    private func dumpSource(serviceFile: String) throws -> (conninfo: String, environment: [String: String]) {
        guard let source = try? PostgresConnectionString(options.source), !source.secrets.isEmpty else { return (options.source, [:]) }
        guard source.value(of: "service") == nil, !source.secrets.contains(where: { $0.value.contains("\n") }) else {
            throw CommandFailure.usage("--from names a service and holds a secret too: keep the secret in that service's file or in ~/.pgpass")
        }
        let text = (["[source]"] + source.secrets.map { "\($0.keyword)=\($0.value)" }).joined(separator: "\n") + "\n"
        let descriptor = open(serviceFile, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else { throw CommandFailure.failed("baton rehearse: cannot create \(serviceFile): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        let bytes = Array(text.utf8)
        guard write(descriptor, bytes, bytes.count) == bytes.count else {
            throw CommandFailure.failed("baton rehearse: cannot write \(serviceFile): \(String(cString: strerror(errno)))")
        }
        return (source.withoutSecrets, ["PGSERVICEFILE": serviceFile, "PGSERVICE": "source"])
    }

    private func copyAndRun(cluster: ThrowawayCluster, pool: PostgresPool, legacy: BatonConfiguration.LegacyIdentifiers) async throws -> RehearsalResult {
        try await copyTables(cluster: cluster, pool: pool, legacy: legacy)
        phases.end("copy")
        _ = try await BatonSchema.migrator().migrate(pool)
        // A throwaway copy: Baton's tables skip the write-ahead log.
        for table in ["transfers", "events", "subjects", "nonces", "transfer_counts", "transfer_count_deltas"] {
            try await pool.execute(PostgresQuery(unsafeSQL: "ALTER TABLE baton.\(table) SET UNLOGGED"))
        }
        let store = LegacyStore(pool: pool, legacy: legacy)
        let inspection = try await store.inspectLegacyTable()
        if let failure = inspection.findings.first(where: { $0.status == .failure && !$0.name.hasSuffix("uniqueness") }) {
            throw CommandFailure.usage("\(failure.detail)\(failure.fix.map { "; fix: \($0)" } ?? "")")
        }
        let selected = try await store.appleRowCount()
        var problems = try await store.findProblems()
        phases.end("checks")
        var counts: (bySignIn: Int, byExchange: Int, failedDevices: [String: Int]) = (0, 0, [:])
        var report = ""
        if try await store.setAsideProblemRowsOfCopy() {
            let rejected: LegacyProblem?
            (counts, report, rejected) = try await transfer(pool: pool, store: store, cluster: cluster)
            if let rejected { problems.append(rejected) }
            let events = try await pool.query("""
                SELECT legacy_key, count(*) OVER () FROM (SELECT DISTINCT legacy_key FROM baton.events WHERE kind = 'email_conflict') AS e
                ORDER BY legacy_key LIMIT 5
                """)
            if let first = events.first {
                let count = try first.decode(Int.self, at: 1)
                let keys = try events.map { try $0.decode(String.self, at: 0) }
                if let index = problems.firstIndex(where: { $0.kind == .emailConflict }) {
                    problems[index].count = max(problems[index].count, count)
                    problems[index].examples = Array((problems[index].examples + keys.filter { !problems[index].examples.contains($0) }).prefix(5))
                } else {
                    problems.append(LegacyProblem(kind: .emailConflict, count: count, examples: keys))
                }
            }
        }
        let order = LegacyProblemKind.allCases
        return RehearsalResult(
            selected: selected, bySignIn: counts.bySignIn, byExchange: counts.byExchange,
            problems: problems.sorted { order.firstIndex(of: $0.kind)! < order.firstIndex(of: $1.kind)! }
                .map { RehearsalResult.Problem(kind: $0.kind.rawValue, count: $0.count, examples: $0.examples) },
            projection: RehearsalResult.projection(users: counts.byExchange, rate: options.rate, processes: options.processes),
            reportTable: report, failedDevices: counts.failedDevices)
    }

    /// The transfer on the copy: transfer identifiers, acceptance, sign-ins through the service, the exchange,
    /// the report. Returns the users migrated by each method, the devices that did not end signed in (by what
    /// stopped them), the report's table, and the recipient's rows `baton import transfers` refused (as a
    /// problem), if any.
    private func transfer(pool: PostgresPool, store: LegacyStore, cluster: ThrowawayCluster) async throws
        -> (counts: (bySignIn: Int, byExchange: Int, failedDevices: [String: Int]), report: String, rejected: LegacyProblem?) {
        let configuration = options.configuration
        let clientID = configuration.apple.transfer?.clientID ?? configuration.apple.clientIDs.first ?? "com.example.app"
        // The sender's rows (a subject), then the recipient's rows between companies (a transfer identifier only),
        // loaded as the recipient loads them: `baton import transfers` with `key,transfer_sub`.
        _ = try await LegacySeeder(pool: pool, legacy: store.legacy, pageSize: 20_000).seed()
        try await store.dropMalformedTransfers()
        let rejected = try await importRecipientRows(store: store, pool: pool, directory: cluster.directory)
        // Fresh statistics for the planner: the queue's claims on a million new rows would otherwise wait for autovacuum.
        try await pool.execute("ANALYZE baton.transfers")
        let users = try await pool.query("SELECT count(*) FROM baton.transfers")[0].decode(Int.self, at: 0)
        phases.end("seed")
        guard users > 0 else { return ((0, 0, [:]), "", rejected) }

        var http = HTTPServerConfiguration()
        http.connectionLimit = max(http.connectionLimit, options.concurrency * 4)
        let emulator = try await AppleEmulator.start(configuration: http)
        do {
            let result = try await withEmulator(emulator, pool: pool, store: store, clientID: clientID, users: users, clusterURL: cluster.url)
            await emulator.stop()
            return (result.0, result.1, rejected)
        } catch {
            await emulator.stop()
            throw error
        }
    }

    /// Between companies: the copy's Apple rows holding a transfer identifier and no subject go into
    /// `baton.transfers` through ``TransferImporter`` (a `key,transfer_sub` file, as the recipient imports the
    /// sender's export). Returns the rows it refused, as a `transfer_rejected` problem, or nil.
    private func importRecipientRows(store: LegacyStore, pool: PostgresPool, directory: String) async throws -> LegacyProblem? {
        // Written a page at a time: the file, not the memory, holds every row.
        let path = directory + "/recipient-keys.csv"
        let file = try LineWriter(path: path)
        var lastKey: String?
        do {
            try await file.write(TransferImporter.keyHeader + "\n")
            while true {
                let page = try await store.rowsWithTransferIdentifierOnly(after: lastKey, limit: 50_000)
                guard let last = page.last else { break }
                lastKey = last.key
                try await file.write(page.map { $0.key + "," + $0.transferSub + "\n" }.joined())
            }
            try await file.close()
        } catch {
            try? await file.close()
            throw error
        }
        guard lastKey != nil else { return nil }
        // The refused lines arrive in line order: their count, and the first five as the examples.
        let refused = Mutex((count: 0, first: [Int]()))
        _ = try await TransferImporter(pool: pool).importFile(path: path) { rejection in
            refused.withLock { refused in
                refused.count += 1
                if refused.first.count < 5 { refused.first.append(rejection.line) }
            }
        }
        let (count, first) = refused.withLock { $0 }
        guard count > 0 else { return nil }
        // The examples' keys, read back from their lines: a key is what comes before the line's last comma.
        let wanted = Set(first)
        var examples: [String] = []
        let reader = try LineReader(path: path)
        var number = 0
        while examples.count < wanted.count {
            let lines = try await reader.next(10_000)
            if lines.isEmpty { break }
            for line in lines {
                number += 1
                if wanted.contains(number) { examples.append(String(line[..<(line.lastIndex(of: ",") ?? line.endIndex)])) }
            }
        }
        return LegacyProblem(kind: .transferRejected, count: count, examples: examples)
    }

    private func withEmulator(_ emulator: AppleEmulator, pool: PostgresPool, store: LegacyStore, clientID: String,
                              users: Int, clusterURL: String) async throws
        -> ((bySignIn: Int, byExchange: Int, failedDevices: [String: Int]), String) {
        let teamA = try emulator.createTeam()
        let teamB = try emulator.createTeam()
        try emulator.createApp(clientID: clientID, teamID: teamA.teamID)
        // Team A's users: the copy's subjects, and the transfer identifiers the copy holds (for the recipient's rows),
        // as team A generated them for team B. A cohort: derived by the emulator, not stored, whatever their number.
        try emulator.createCohort(clientID: clientID, toTeamID: teamB.teamID)
        phases.end("emulator users")
        // The sender's transfer identifiers, then the acceptance.
        let senderQueue = TransferQueue(pool: pool, kind: .transferIdentifiers)
        let needing = try await senderQueue.pendingCount()
        if needing > 0 {
            _ = try await job(senderQueue, .transferIdentifiers(targetTeamID: teamB.teamID),
                              client: appleClient(emulator, team: teamA, clientID: clientID), total: needing, acceptedAt: nil,
                              workers: max(options.concurrency, Self.senderWorkers))
        }
        phases.end("transfer-ids")
        try emulator.initiateTransfer(clientID: clientID, toTeamID: teamB.teamID)
        let acceptedAt = try emulator.acceptTransfer(clientID: clientID)

        // Baton's service on the copy; a share of the users sign in, every twentieth of them on two devices at once.
        var configuration = options.configuration
        configuration.listen = .init(host: "127.0.0.1", port: 0)
        configuration.database = .init(url: clusterURL, poolSize: options.concurrency)
        configuration.apple = .init(baseURL: emulator.baseURL, clientIDs: [clientID], transfer: .init(clientID: clientID, acceptedAt: acceptedAt))
        configuration.adminToken = nil
        configuration.serviceToken = nil
        let server = try await BatonServer.start(configuration: configuration, port: 0)
        let service = try loopback(URL(string: "http://127.0.0.1:\(server.port)")!)
        // Apple's side of each device in-process, without an authorization code: the devices only present the token.
        let authorize: @Sendable (String) throws -> String = { user in
            try emulator.authorize(clientID: clientID, user: user, issueCode: false).idToken
        }
        let devices = DeviceSchedule(pool: pool, users: users, share: options.signinShare)
        let failedDevices = try await RehearsalDevices(service: service, authorize: authorize, concurrency: options.concurrency)
            .run(total: devices.total) { try await devices.next() }
        service.close()
        await server.stop()
        phases.end("devices")

        // The exchange for the rest, then the report.
        let exchangeQueue = TransferQueue(pool: pool, kind: .exchange)
        let pending = try await exchangeQueue.pendingCount()
        if pending > 0 {
            _ = try await job(exchangeQueue, .exchange(applier: store), client: appleClient(emulator, team: teamB, clientID: clientID),
                              total: pending, acceptedAt: acceptedAt, workers: options.concurrency)
        }
        phases.end("exchange")
        let row = try await pool.query("""
            SELECT count(*) FILTER (WHERE method = 'signin'), count(*) FILTER (WHERE method = 'exchange')
            FROM baton.transfers WHERE state = 'migrated'
            """)[0]
        let report = try await ReportBuilder(pool: pool, legacy: options.configuration.legacy, acceptedAt: acceptedAt, now: emulator.now, limit: 0).build()
        phases.end("report")
        return ((try row.decode(Int.self, at: 0), try row.decode(Int.self, at: 1), failedDevices), report.renderTable(listLimit: 0))
    }

    /// A bulk job of `workers`, unthrottled (the emulator has no rate limit), progress to stderr.
    private func job(_ queue: TransferQueue, _ work: BulkRun.Work, client: AppleClient, total: Int, acceptedAt: Date?, workers: Int) async throws -> BulkJobSummary {
        let run = try BulkRun(queue: queue, work: work, client: client,
                              options: BulkJobOptions(workers: workers, rate: 100_000, maxConsecutiveFailures: 1_000),
                              window: TransferWindow(acceptedAt: acceptedAt))
        return await run.run(total: total, isTerminal: false, logInterval: 10)
    }

    /// An Apple client for `team` on the emulator's clock, answered by the in-process emulator (``InProcessAppleTransport``).
    private func appleClient(_ emulator: AppleEmulator, team: TeamCredentials, clientID: String) throws -> AppleClient {
        let secret = try ClientSecret(teamID: team.teamID, keyID: team.keyID, clientID: clientID, pem: team.privateKeyPEM)
        return AppleClient(baseURL: emulator.baseURL, credentials: secret,
                           options: AppleClient.Options(retry: RetryPolicy(maxAttempts: 1), maxConnectionsPerHost: options.concurrency),
                           transport: InProcessAppleTransport(emulator: emulator), now: { emulator.now })
    }

    /// A ``LoopbackHTTP`` client of `url` with a connection per device; the caller closes it.
    private func loopback(_ url: URL) throws -> LoopbackHTTP {
        guard let client = LoopbackHTTP(url: url, connections: options.concurrency) else {
            throw CommandFailure.failed("baton rehearse: \(url) is not a loopback address")
        }
        return client
    }
}

/// The devices of the users who sign in, a page of `baton.transfers` at a time (in `id` order), so their number
/// costs no memory. User i signs in when the running share crosses a whole number (30 % of 30 users: 9, spread
/// evenly). Within a page they go in a random order; every twentieth has a second device right after the first,
/// so both are in flight at once. One device in ten is a web or Android client, which asks Baton for the
/// credential state before it signs in (only for a user Baton knows by the sender's subject); the others are iOS
/// apps, which ask Apple on the device (`getCredentialState`), not Baton. A user the copy holds only by a transfer
/// identifier is the emulator's cohort member of that identifier.
final class DeviceSchedule {
    private let pool: PostgresPool
    private let share: Double
    private static let pageSize = 10_000
    /// The devices in all.
    let total: Int
    private var afterID: Int64 = 0
    /// Users passed, users signed in, devices made: over all pages so far.
    private var user = 0
    private var signed = 0
    private var device = 0

    init(pool: PostgresPool, users: Int, share: Double) {
        self.pool = pool
        self.share = share
        let signers = Int((Double(users) * share).rounded(.down))
        total = signers + (signers + 19) / 20
    }

    /// The next page's devices; empty after the last.
    func next() async throws -> [(user: String, asksCredentialState: Bool)] {
        while true {
            let page = try await pool.query("""
                SELECT id, old_sub, transfer_sub FROM baton.transfers WHERE id > \(afterID) ORDER BY id LIMIT \(Self.pageSize)
                """)
            guard let last = page.last else { return [] }
            afterID = try last.decode(Int64.self, at: 0)
            var signers: [(user: String, knownBySubject: Bool)] = []
            for row in page {
                defer { user += 1 }
                guard (Double(user + 1) * share).rounded(.down) > (Double(user) * share).rounded(.down) else { continue }
                if let oldSub = try row.decode(String?.self, at: 1) {
                    signers.append((oldSub, true))
                } else if let transferSub = try row.decode(String?.self, at: 2) {
                    signers.append((AppleEmulator.cohortUser(transferIdentifier: transferSub), false))
                }
            }
            var devices: [(user: String, asksCredentialState: Bool)] = []
            for signer in signers.shuffled() {
                for _ in 0..<(signed % 20 == 0 ? 2 : 1) {
                    devices.append((signer.user, signer.knownBySubject && device % Rehearsal.credentialStateEvery == 0))
                    device += 1
                }
                signed += 1
            }
            if !devices.isEmpty { return devices }
        }
    }
}

/// Times the rehearsal's phases: each ``end(_:)`` writes the seconds since the previous one (or since the clock was
/// made) to standard error, beside the jobs' progress lines, with the process's resident memory then and at its
/// peak so far (`VmRSS`, `VmHWM`), so a slow or a large phase is seen without a profiler.
final class PhaseClock: Sendable {
    private let last = Mutex(ContinuousClock.now)
    private let write: @Sendable (String) -> Void

    init(write: @escaping @Sendable (String) -> Void = { FileHandle.standardError.write(Data($0.utf8)) }) {
        self.write = write
    }

    /// Writes `rehearse phase=NAME seconds=S rss_mib=R peak_rss_mib=P` for the time since the last phase ended.
    func end(_ name: String) {
        let now = ContinuousClock.now
        let elapsed = last.withLock { last in
            defer { last = now }
            return now - last
        }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let memory = Self.residentMiB()
        write("rehearse phase=\(name) seconds=\(String(format: "%.1f", seconds)) rss_mib=\(memory.current) peak_rss_mib=\(memory.peak)\n")
    }

    /// The process's resident set now and at its peak, in MiB, from `/proc/self/status` (0 where unreadable).
    static func residentMiB() -> (current: Int, peak: Int) {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        func kibibytes(_ field: String) -> Int {
            guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }) else { return 0 }
            return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
        }
        return (kibibytes("VmRSS") / 1024, kibibytes("VmHWM") / 1024)
    }
}
