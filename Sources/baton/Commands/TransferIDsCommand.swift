import BatonCommandLine
import Baton
import BatonJobs
import BatonPostgres

/// `baton transfer-ids`: the sender side, creating a transfer identifier for every legacy user.
let transferIDsCommand = Command(
    name: "transfer-ids",
    summary: "sender side: create a transfer identifier for every legacy user",
    abstract: """
    Walks the legacy table (legacy.*) in key order and, for every user without a transfer
    identifier, asks Apple (sending team's credentials) for one made for the target team, and
    stores old_sub → transfer_sub in baton.transfers.
    --export FILE.csv writes instead the file a recipient in another company loads: one line per
    legacy row with a transfer identifier, 'key,transfer_sub' and the columns named by --columns. The
    sending team's identifiers and private relay addresses never go in it (such a column is refused,
    such a value stops the export). Load it into the recipient's table (transfer identifier in
    legacy.transfer_column, subject NULL), then 'baton import transfers' with 'key,transfer_sub'.
    """,
    options: TransferIDsOptions.self,
    discussion: """
    Resumable and safe to run from several processes. While a standby lags or the database is busy
    past --max-replica-lag / --max-active-backends, it claims nothing new until clear; SIGHUP rereads
    jobs.* from the file. Users Apple refused for good (unresolvable) are named after every run and dry
    run, by legacy key, with the way out (--retry-unresolvable).
    Exit status: 0 every user done, 1 some user failed or is refused or the job stopped (a dry run: 0
    when the calls a run starts with succeed), 2 usage or configuration.
    """,
    run: { parsed in
        if let path = parsed.export { return try await runExport(path, parsed) }
        return try await runBulkCommand(parsed.bulk, side: .sender, target: parsed.target, confirmed: parsed.yes)
    }
)

/// The options of `baton transfer-ids`: its own, then the bulk job's.
private struct TransferIDsOptions: CommandOptions {
    let target = Option.text("target", "TEAMID", "the recipient's team (default apple.transfer.recipient.team_id); the sending\nteam itself is refused")
    let yes = Option.flag("yes", "do not ask for confirmation after showing the target and a sample")
    let export = Option.text("export", "FILE.csv", "write the recipient's file (key, transfer_sub, --columns) instead of a run")
    let columns = Option.text("columns", "a,b", "other columns of the legacy table for --export")
    let bulk = BulkOptions()
}

/// `baton transfer-ids --export FILE.csv [--columns a,b]`.
private func runExport(_ path: String, _ parsed: Parsed<TransferIDsOptions>) async throws -> Int32 {
    guard !path.isEmpty else { throw CommandFailure.usage("--export needs a file name") }
    let columns = (parsed.columns ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    let configuration = try await loadConfiguration(parsed.bulk.config)
    let legacy = try legacyIdentifiers(configuration)
    let pool = configuration.database.pool(maxConnections: 1)
    let summary = try await withTeardown {
        _ = try await checkedLegacyStore("transfer-ids", configuration: configuration, pool: pool)
        do {
            return try await TransferExporter(pool: pool, legacy: legacy, columns: columns).export(to: path)
        } catch let error as BulkJobError {
            if error.code == .invalidColumn { throw CommandFailure.usage("baton transfer-ids: \(error.reason)") }
            throw CommandFailure.rejected("baton transfer-ids: \(error.reason)")
        } catch let error as PostgresError {
            throw CommandFailure.failed("baton transfer-ids: \(error)")
        }
    } teardown: {
        await pool.close()
    }
    print("transfer-ids: exported \(summary.rows) rows to \(path) (key, transfer_sub\(columns.isEmpty ? "" : ", " + columns.joined(separator: ", ")))")
    return 0
}
