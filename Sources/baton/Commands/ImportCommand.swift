import BatonTools
import Baton
import Foundation
import BatonPostgres

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
        changes nothing. The file streams, so its size does not matter.
        """,
        options: [
            .flag("dry-run", "check and report without loading"),
            .config,
            .databaseURL("the database (default $BATON_DATABASE_URL, else database.url of the configuration)"),
        ],
        discussion: "Exit status: 0 all lines loaded or already present, 1 some lines rejected, 2 usage or configuration.",
        run: runImport
    )]
)

@Sendable
private func runImport(_ parsed: Arguments) async throws -> Int32 {
    guard parsed.positionals.count == 1 else { throw CommandFailure.usage("expected one FILE.csv") }
    let url = try await parsed.databaseURL()
    let pool = PostgresPool(url: url, maxConnections: 1)
    let importer = TransferImporter(pool: pool)
    let summary: TransferImporter.Summary
    do {
        summary = try await importer.importFile(path: parsed.positionals[0], dryRun: parsed.flag("dry-run")) { rejection in
            printError("line \(rejection.line): \(rejection.reason)")
        }
    } catch let error as BulkJobError {
        await pool.close()
        throw CommandFailure.rejected("baton import: \(error.reason)")
    } catch let error as PostgresError {
        await pool.close()
        throw CommandFailure.failed("baton import: \(error)")
    }
    await pool.close()
    let verb = parsed.flag("dry-run") ? "would load" : "loaded"
    print("\(summary.lines) lines: \(verb) \(summary.loaded), already present \(summary.alreadyPresent), rejected \(summary.rejected)")
    return summary.rejected == 0 ? 0 : 1
}
