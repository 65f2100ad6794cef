import Baton
import Foundation
import BatonPostgres

/// `baton import transfers FILE.csv`: loads `old_sub,transfer_sub` or `key,transfer_sub` pairs made elsewhere.
let importCommand = Command(
    name: "import",
    summary: "load transfer identifiers made elsewhere (import transfers FILE.csv)",
    usage: """
        usage: baton import transfers FILE.csv [--dry-run] [--config FILE] [--database-url URL]

        FILE.csv starts with the header 'old_sub,transfer_sub' (both teams' data in one database) or
        'key,transfer_sub' (between companies: the recipient's legacy key of each row it loaded from the
        sender's 'baton transfer-ids --export'), then one pair per line. Every line is
        checked (two non-empty identifiers of letters, digits, '.', '_', '-'; no repeat inside the file;
        no conflict with a pair already stored); rejected lines are printed on stderr as
        'line N: reason', and the rest are loaded in one transaction. Importing the same file again
        changes nothing. The file streams, so its size does not matter.
        --dry-run checks and reports without loading.
        The database is --database-url, else $BATON_DATABASE_URL, else database.url of the configuration.
        Exit status: 0 all lines loaded or already present, 1 some lines rejected, 2 usage or configuration.
        """,
    run: { arguments in
        guard arguments.first == "transfers" else { throw CommandFailure.usage("expected 'transfers FILE.csv'") }
        let parsed = try Arguments(Array(arguments.dropFirst()), options: ["config", "database-url"], flags: ["dry-run"])
        guard parsed.positionals.count == 1 else { throw CommandFailure.usage("expected one FILE.csv") }
        let url = try await databaseURL(parsed)
        let pool = PostgresPool(url: url, maxConnections: 1)
        let importer = TransferImporter(pool: pool)
        let summary: TransferImporter.Summary
        do {
            summary = try await importer.importFile(path: parsed.positionals[0], dryRun: parsed.flag("dry-run")) { rejection in
                printError("line \(rejection.line): \(rejection.reason)")
            }
        } catch let error as BulkJobError {
            await pool.close()
            throw CommandFailure.rejected("baton import: \(error)")
        } catch let error as PostgresError {
            await pool.close()
            throw CommandFailure.failed("baton import: \(error)")
        }
        await pool.close()
        let verb = parsed.flag("dry-run") ? "would load" : "loaded"
        print("\(summary.lines) lines: \(verb) \(summary.loaded), already present \(summary.alreadyPresent), rejected \(summary.rejected)")
        return summary.rejected == 0 ? 0 : 1
    }
)

/// The database URL: `--database-url`, else `BATON_DATABASE_URL`, else the configuration's `database.url`.
func databaseURL(_ parsed: Arguments) async throws -> String {
    if let url = parsed.value("database-url") ?? ProcessInfo.processInfo.environment["BATON_DATABASE_URL"], !url.isEmpty {
        return url
    }
    return try await loadConfiguration(parsed).database.url
}

/// The configuration from `--config` (default `baton.json`) and the `BATON_*` variables.
func loadConfiguration(_ parsed: Arguments) async throws -> BatonConfiguration {
    do {
        return try await BatonConfiguration.load(path: parsed.value("config"), environment: ProcessInfo.processInfo.environment, queue: .global())
    } catch let error as ConfigurationError {
        throw CommandFailure.usage("\(error)")
    }
}
