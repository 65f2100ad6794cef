import Baton
import BatonPostgres

/// `baton transfer-ids`: the sender side, creating a transfer identifier for every legacy user.
let transferIDsCommand = Command(
    name: "transfer-ids",
    summary: "sender side: create a transfer identifier for every legacy user",
    usage: """
        usage: baton transfer-ids [--target TEAMID] [--yes] [--workers N] [--rate R] [--dry-run]
                                  [--config FILE] [--lease SECONDS] [--max-failures N] [--retry-failed]
               baton transfer-ids --export FILE.csv [--columns a,b] [--config FILE]

        Walks the legacy table (legacy.*) in key order and, for every user without a transfer
        identifier, asks Apple (sending team's credentials) for one made for the target team, and
        stores old_sub → transfer_sub in baton.transfers.
          --target TEAMID   the recipient's team (default apple.transfer.recipient.team_id); the sending
                            team itself is refused
          --yes             do not ask for confirmation after showing the target and a sample
        Other options as for 'baton exchange'. Resumable and safe to run from several processes.
        --export FILE.csv writes, after a run, the file a recipient in another company loads: one line per
        legacy row with a transfer identifier, 'key,transfer_sub' and the columns named by --columns. The
        sending team's identifiers and private relay addresses never go in it (such a column is refused,
        such a value stops the export). Load it into the recipient's table (transfer identifier in
        legacy.transfer_column, subject NULL), then 'baton import transfers' with 'key,transfer_sub'.
        Exit status: 0 every user done, 1 some user failed or the job stopped, 2 usage or configuration.
        """,
    run: { arguments in
        if arguments.contains("--export") || arguments.contains(where: { $0.hasPrefix("--export=") }) {
            return try await runExport(arguments)
        }
        return try await runBulkCommand(arguments, side: .sender)
    }
)

/// `baton transfer-ids --export FILE.csv [--columns a,b]`.
private func runExport(_ arguments: [String]) async throws -> Int32 {
    let parsed = try Arguments(arguments, options: ["export", "columns", "config"])
    if let extra = parsed.positionals.first { throw CommandFailure.usage("unexpected argument '\(extra)'") }
    guard let path = parsed.value("export"), !path.isEmpty else { throw CommandFailure.usage("--export needs a file name") }
    let columns = (parsed.value("columns") ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    let configuration = try await loadConfiguration(parsed)
    let pool = PostgresPool(url: configuration.database.url, maxConnections: 1)
    do {
        let exporter = try TransferExporter(pool: pool, legacy: try configuration.legacy.identifiers(), columns: columns)
        let summary = try await exporter.export(to: path)
        await pool.close()
        print("transfer-ids: exported \(summary.rows) rows to \(path) (key, transfer_sub\(columns.isEmpty ? "" : ", " + columns.joined(separator: ", ")))")
        return 0
    } catch let error as BulkJobError {
        await pool.close()
        if error.code == .invalidColumn { throw CommandFailure.usage("baton transfer-ids: \(error)") }
        throw CommandFailure.rejected("baton transfer-ids: \(error)")
    } catch let error as ConfigurationError {
        await pool.close()
        throw CommandFailure.usage("\(error)")
    } catch let error as PostgresError {
        await pool.close()
        throw CommandFailure.failed("baton transfer-ids: \(error)")
    }
}
