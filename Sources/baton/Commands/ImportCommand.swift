import BatonCommandLine
import Baton
import BatonJobs
import Foundation
import BatonPostgres
import BatonLogging

/// `baton import transfers FILE.csv`: loads `old_sub,transfer_sub` or `key,transfer_sub` pairs made elsewhere.
let importCommand = Command(
    name: "import",
    summary: "load transfer identifiers made elsewhere (import transfers FILE.csv)",
    subcommands: [Command(
        name: "transfers",
        summary: "load old_sub,transfer_sub (or key,transfer_sub) pairs from a CSV file",
        arguments: "FILE.csv",
        abstract: """
        FILE.csv starts with the header 'old_sub,transfer_sub' (both teams' data in one database) or
        'key,transfer_sub' (between companies: the recipient's legacy key of each row it loaded from the
        sender's 'baton transfer-ids --export'), then one pair per line. Every line is
        checked (two non-empty identifiers of letters, digits, '.', '_', '-'; no repeat inside the file;
        no conflict with a pair already stored); rejected lines are printed on stderr as
        'line N: reason', and the rest are loaded in one transaction. Importing the same file again
        changes nothing. The file streams, so its size does not matter. While the database is busy
        (--max-replica-lag, --max-active-backends), it waits before its transaction and between its
        batches of 5,000 lines, holding its transaction open meanwhile.
        """,
        options: ImportOptions.self,
        discussion: "Exit status: 0 all lines loaded or already present, 1 some lines rejected, 2 usage or configuration.",
        run: runImport
    )]
)

/// The options of `baton import transfers`.
private struct ImportOptions: CommandOptions {
    let dryRun = Option.flag("dry-run", "check and report without loading")
    let config = Option.config
    let databaseURL = Option.databaseURL("the database (default $BATON_DATABASE_URL, else database.url of the configuration)")
    let throttle = ThrottleOptions()
}

@Sendable
private func runImport(_ parsed: Parsed<ImportOptions>) async throws -> Int32 {
    guard parsed.positionals.count == 1 else { throw CommandFailure.usage("expected one FILE.csv") }
    // The configuration's pooler and statement timeout; a bare URL gets what `db migrate` uses, safe through any pooler.
    // The throttle probes on a connection of its own: the import holds its one for its whole transaction.
    let pool: PostgresPool, probePool: PostgresPool
    let configuration: BatonConfiguration?
    if let given = databaseURLOrEnvironment(parsed.databaseURL) {
        pool = PostgresPool(url: given, maxConnections: 1, pooler: .transaction)
        probePool = PostgresPool(url: given, maxConnections: 1, pooler: .transaction)
        configuration = parsed.config == nil ? nil : try await loadConfiguration(parsed.config)
    } else {
        let loaded = try await loadConfiguration(parsed.config)
        pool = loaded.database.pool(maxConnections: 1)
        probePool = loaded.database.pool(maxConnections: 1)
        configuration = loaded
    }
    let logger = Logger(label: "baton.import")
    let throttle = JobThrottle(limits: parsed.throttle.limits(configuration?.jobs ?? BatonConfiguration.Jobs()), probe: ThrottleProbe(pool: probePool), logger: logger)
    let hangUps = configuration.map { _ in rereadingThrottleLimits(throttle, configurationPath: parsed.config, logger: logger) }
    defer { hangUps?.cancel() }
    let started = ContinuousClock.now
    let summary = try await withTeardown {
        do {
            return try await TransferImporter(pool: pool, throttle: throttle).importFile(path: parsed.positionals[0], dryRun: parsed.dryRun) { rejection in
                printError("line \(rejection.line): \(rejection.reason)")
            }
        } catch let error as BulkJobError {
            throw CommandFailure.rejected("baton import: \(error.reason)")
        } catch let error as PostgresError {
            throw CommandFailure.failed("baton import: \(error)")
        }
    } teardown: {
        await pool.close()
        await probePool.close()
    }
    let verb = parsed.dryRun ? "would load" : "loaded"
    print("\(summary.lines) lines: \(verb) \(summary.loaded), already present \(summary.alreadyPresent), rejected \(summary.rejected); \(throttledText(throttle, since: started))")
    return summary.rejected == 0 ? 0 : 1
}
