import BatonConcurrency
import BatonCommandLine
import BatonAppleSignIn
import Baton
import BatonReport
import BatonJobs
import Foundation
import BatonLogging
import BatonPostgres

/// `baton exchange`: the recipient side, exchanging every pending transfer identifier.
let exchangeCommand = Command(
    name: "exchange",
    summary: "recipient side: exchange pending transfer identifiers and migrate their users",
    abstract: """
    For every pending row of baton.transfers, asks Apple (recipient team's credentials) for the
    user's new identifier and rewrites the legacy record as a sign-in would (method 'exchange').
    """,
    options: BulkOptions.self,
    discussion: """
    Resumable and safe to run from several processes and machines at once. Refuses to start once the
    60-day window after apple.transfer.accepted_at has closed. While Apple is unreachable the job
    pauses (the progress line says for how long) and goes on when it is back, up to --max-outage.
    While a standby lags or the database is busy past --max-replica-lag / --max-active-backends, it
    claims nothing new until clear (the progress line says why); SIGHUP rereads jobs.* from the file.
    Users refused for good (unresolvable) are named after every run and dry run, by legacy key.
    Exit status: 0 every user done, 1 some user failed or is refused or the job stopped (a dry run: 0
    when the credentials are accepted), 2 usage or configuration.
    """,
    run: { parsed in
        try await runBulkCommand(parsed, side: .recipient)
    }
)

/// Options shared by `baton exchange` and `baton transfer-ids`.
struct BulkOptions: CommandOptions {
    let workers = Option.integer("workers", default: 4, in: 1...256, "concurrent requests in this process")
    let rate = Option.number("rate", default: 10, in: 0.1...100_000, "requests per second for this process; lowered on 429")
    let dryRun = Option.flag("dry-run", "show what would be done and check the credentials; change nothing")
    let config = Option.config
    let lease = Option.integer("lease", "SECONDS", default: 60, in: 1...86_400, "how long a claimed row stays reserved; a dead process's rows\nare taken over after it")
    let maxFailures = Option.integer("max-failures", default: 25, in: 1...1_000_000, "consecutive failures that stop the job")
    let retryFailed = Option.flag("retry-failed", "make rows that failed their last attempt pending again first")
    let retryUnresolvable = Option.flag("retry-unresolvable", "make rows marked unresolvable pending again first (after fixing a shared\ncause: the job stops after 10 consecutive failures with the same error)")
    let databaseRetrySeconds = Option.number("db-retry-seconds", "S", default: 60, in: 0...86_400, "how long to ride out a lost database (restart, failover) before stopping:\nworkers wait with backoff, reconnect and go on")
    let metricsFile = Option.text("metrics-file", "PATH", "write the job's state there every 5 s and at its end, in Prometheus' text format\n(node_exporter's textfile collector: a .prom file in its directory)")
    let maxOutage = Option.number("max-outage", "S", default: 3_600, in: 0...5_184_000, "how long to wait while Apple answers no one (connection refused, timeouts,\n5xx, 429s) before stopping: the job pauses, retries with backoff and goes on\nwhen Apple is back; no user is failed for it")
    let throttle = ThrottleOptions()
}

/// Runs `baton exchange` (recipient) or `baton transfer-ids` (sender, for the team `target` or the configured
/// recipient, asking for confirmation unless `confirmed`).
func runBulkCommand(_ parsed: Parsed<BulkOptions>, side: BatonConfiguration.TransferSide, target: String? = nil, confirmed: Bool = false) async throws -> Int32 {
    let name = side == .recipient ? "exchange" : "transfer-ids"
    let job = BulkJobOptions(workers: parsed.workers, rate: parsed.rate, maxConsecutiveFailures: parsed.maxFailures,
                             databaseRetrySeconds: parsed.databaseRetrySeconds, maxOutageSeconds: parsed.maxOutage)
    let dryRun = parsed.dryRun
    let configuration = try await loadConfiguration(parsed.config)
    guard let transfer = configuration.apple.transfer else {
        throw CommandFailure.usage("no transfer is configured: set apple.transfer (see sample-config/README.md)")
    }
    let logger = Logger(label: "baton.\(name)")
    let window = TransferWindow(acceptedAt: transfer.acceptedAt)
    let now = Date()

    let pool = configuration.database.pool(maxConnections: job.workers + 2)
    defer { Task { await pool.close() } }
    let queue = TransferQueue(pool: pool, kind: side == .recipient ? .exchange : .transferIdentifiers, leaseSeconds: parsed.lease)
    let store = try await checkedLegacyStore(name, configuration: configuration, pool: pool)

    // The window: the exchange needs it open, the sender job only not closed.
    switch window.status(at: now) {
    case .notAccepted where side == .recipient:
        throw CommandFailure.usage("apple.transfer.accepted_at is not set: the recipient must accept the transfer before exchanging")
    case .notOpenYet:
        throw CommandFailure.usage("apple.transfer.accepted_at is in the future: nothing can be exchanged before the transfer is accepted")
    case .closed(let since):
        let left = (try? await queue.pendingCount()).map(String.init) ?? "an unknown number of"
        throw CommandFailure.failed("baton \(name): the 60-day window closed \(TransferWindow.describe(since)) ago (at \(window.closesAt!)); \(left) users were left pending and can no longer be exchanged")
    case .closingSoon(let remaining):
        printError("warning: the 60-day window closes in \(TransferWindow.describe(remaining)) (at \(window.closesAt!))")
    case .open, .notAccepted:
        break
    }

    // The sender job: the target team, a walk of the legacy table, and a confirmation.
    var targetTeamID = ""
    var firstSubject: String?
    if side == .sender {
        guard let target = target ?? transfer.recipient?.teamID else {
            throw CommandFailure.usage("no target team: set apple.transfer.recipient.team_id or give --target TEAMID")
        }
        guard let sender = transfer.sender else { throw CommandFailure.usage("apple.transfer.sender is not configured") }
        guard target != sender.teamID else {
            throw CommandFailure.usage("the target team \(target) is the sending team itself: transfer identifiers must be made for the recipient's team (apple.transfer.recipient.team_id)")
        }
        guard AppleIdentifierFormat.isTeamID(target) else { throw CommandFailure.usage("the target team '\(target)' is not a team ID (10 upper-case letters or digits)") }
        targetTeamID = target
        let seeder = LegacySeeder(pool: pool, legacy: try legacyIdentifiers(configuration))
        let preview: (count: Int, sample: [String])
        do { preview = try await seeder.preview() } catch let error as PostgresError {
            throw CommandFailure.failed("baton \(name): cannot read the legacy table: \(error)")
        }
        firstSubject = preview.sample.first
        print("target team: \(target) (the recipient); sending team: \(sender.teamID); client ID: \(transfer.clientID)")
        print("\(preview.count) users need a transfer identifier; for example: \(preview.sample.isEmpty ? "none" : preview.sample.joined(separator: ", "))")
        if preview.count > 0, !dryRun, !confirmed {
            guard isatty(STDIN_FILENO) == 1 else {
                throw CommandFailure.usage("confirm the target team with --yes (standard input is not a terminal)")
            }
            print("Create transfer identifiers for team \(target)? Type the team ID to confirm: ", terminator: "")
            let answer = await offPool { readLine() }
            guard answer?.trimmingCharacters(in: .whitespaces) == target else {
                throw CommandFailure.rejected("not confirmed; nothing was done")
            }
        }
        if !dryRun {
            do {
                let added = try await seeder.seed()
                if added > 0 { logger.info("legacy users queued", ["added": String(added)]) }
            } catch let error as PostgresError {
                throw CommandFailure.failed("baton \(name): cannot walk the legacy table: \(error)")
            }
        }
    }

    // The recipient between companies: rows of the legacy table carrying a transfer identifier in
    // legacy.transfer_column join the queue (what `import transfers` of that column would load).
    if side == .recipient, !dryRun {
        do {
            let added = try await LegacySeeder(pool: pool, legacy: try legacyIdentifiers(configuration)).seedTransferColumn()
            if added > 0 { logger.info("transfer identifiers of the legacy table queued", ["added": String(added)]) }
        } catch let error as PostgresError {
            throw CommandFailure.failed("baton \(name): cannot walk the legacy table: \(error)")
        }
    }
    if parsed.retryFailed, !dryRun {
        let reset = try await queue.retryFailed()
        if reset > 0 { printError("\(reset) failed rows made pending again") }
    }
    if parsed.retryUnresolvable, !dryRun {
        let reset = try await queue.retryUnresolvable()
        if reset > 0 { printError("\(reset) unresolvable rows made pending again") }
    }
    var pending: Int
    do { pending = try await queue.pendingCount() } catch let error as PostgresError {
        throw CommandFailure.failed("baton \(name): \(error)")
    }

    let options = AppleClient.Options(retry: RetryPolicy(maxAttempts: 1), maxConnectionsPerHost: job.workers)
    let client: AppleClient
    do {
        client = try await configuration.appleClient(for: side, options: options, logger: logger)
    } catch where error is ConfigurationError || error is AppleClientError {
        throw CommandFailure.usage("\(error)")
    }

    if dryRun {
        if side == .sender { pending = try await LegacySeeder(pool: pool, legacy: try legacyIdentifiers(configuration)).preview(sample: 0).count }
        if side == .recipient, let unseeded = LegacySeeder.unqueuedTransferColumnCount(try legacyIdentifiers(configuration)) {
            pending += try await pool.query(unseeded)[0].decode(Int.self, at: 0)
        }
        // The same calls a real run starts with: the access token, and for the sender one transfer identifier
        // (the first user's; Apple gives the same one again, and nothing is stored).
        do {
            _ = try await client.accessToken()
            if let firstSubject { _ = try await client.transferIdentifier(forUser: firstSubject, targetTeamID: targetTeamID) }
        } catch let error as AppleClientError {
            throw CommandFailure.failed("baton \(name) --dry-run: \(error)\n\(error.explanation)")
        }
        let minutes = Double(pending) / job.rate / 60
        let checked = firstSubject == nil ? "credentials accepted by Apple" : "credentials accepted by Apple, and a transfer identifier made for the first user"
        print("dry run: \(pending) users pending; \(checked); at \(job.rate)/s with \(job.workers) workers this takes about \(TransferWindow.describe(minutes * 60)); nothing was changed")
        _ = try await printRefused(name, side: side, pool: pool, configuration: configuration)
        return 0
    }

    let work: BulkRun.Work
    if side == .recipient {
        work = .exchange(applier: store)
    } else {
        work = .transferIdentifiers(targetTeamID: targetTeamID)
    }
    let throttle = JobThrottle(limits: parsed.throttle.limits(configuration.jobs), probe: ThrottleProbe(pool: pool), logger: logger)
    let hangUps = rereadingThrottleLimits(throttle, configurationPath: parsed.config, logger: logger)
    defer { hangUps.cancel() }
    let run = try BulkRun(queue: queue, work: work, client: client, options: job, window: window, logger: logger, throttle: throttle)
    let metrics = parsed.metricsFile.map { JobMetricsFile(path: $0, command: name, total: pending, job: run.job) }
    do { try await metrics?.start() } catch {
        throw CommandFailure.usage("baton \(name): cannot write --metrics-file: \(error)")
    }
    let summary = await run.run(total: pending)
    do { try await metrics?.finish(summary) } catch {
        printError("baton \(name): cannot write --metrics-file: \(error)")
    }
    printSummary(name, summary)
    let refused = try await printRefused(name, side: side, pool: pool, configuration: configuration)
    return summary.hasFailures || refused > 0 ? 1 : 0
}

/// Names the users refused for good at this side's step, by this run or an earlier one (they stay `unresolvable`
/// until `--retry-unresolvable`), with what it means and the way out; returns how many.
func printRefused(_ name: String, side: BatonConfiguration.TransferSide, pool: PostgresPool, configuration: BatonConfiguration) async throws -> Int {
    let refused: RefusedUsers
    do {
        refused = try await RefusedUsers.read(pool: pool, step: side == .sender ? .transferIdentifiers : .exchange, legacy: try legacyIdentifiers(configuration))
    } catch let error as PostgresError {
        throw CommandFailure.failed("baton \(name): cannot read the refused users: \(error)")
    }
    if refused.count > 0 {
        print("refused at \(refused.step.rawValue): \(refused.summary)")
        print("  " + refused.advice)
    }
    return refused.count
}

/// Prints the end-of-run summary on standard output (and the stop reason on standard error).
func printSummary(_ name: String, _ summary: BulkJobSummary) {
    let counts = summary.counts
    let remaining = summary.remaining.map(String.init) ?? "unknown (the database did not answer)"
    let perSecond = summary.elapsed > 0 ? Double(counts.requests) / summary.elapsed : 0
    print("\(name): done \(counts.succeeded), already done \(counts.alreadyDone), unresolvable \(counts.unresolvable), failed \(counts.failed), remaining \(remaining); \(counts.requests) requests in \(String(format: "%.1f", summary.elapsed)) s (\(String(format: "%.1f", perSecond))/s), \(counts.rateLimited) rate-limited, \(throttledText(summary.throttledSeconds, of: summary.elapsed))")
    if let reason = summary.stopReason {
        printError("baton \(name): \(reason.reason)")
        let left = summary.remaining.map { "\($0) users were" } ?? "users were"
        if reason.code == .windowClosed {
            printError("\(left) left pending and can no longer be exchanged")
        } else {
            printError("\(left) left pending; rerun to continue")
        }
    }
}

/// The store over the application's table, once the checks `baton serve` runs at start-up pass
/// (``LegacyStore/validateLegacyTable()``): every command that reads or rewrites that table calls it first, so none
/// runs on a shape serve refuses. A failure is the check's finding and its fix.
func checkedLegacyStore(_ name: String, configuration: BatonConfiguration, pool: PostgresPool) async throws -> LegacyStore {
    let store = LegacyStore(pool: pool, legacy: try legacyIdentifiers(configuration))
    do {
        try await store.validateLegacyTable()
    } catch let error as BatonError {
        throw CommandFailure.failed("baton \(name): \(error)")
    } catch let error as PostgresError {
        throw CommandFailure.failed("baton \(name): cannot check the legacy table: \(error)")
    }
    return store
}

/// The configuration's legacy table, validated; a usage error when it is not.
func legacyIdentifiers(_ configuration: BatonConfiguration) throws -> BatonConfiguration.LegacyIdentifiers {
    do {
        return try configuration.legacy.identifiers()
    } catch let error as ConfigurationError {
        throw CommandFailure.usage("\(error)")
    }
}
