import BatonCommandLine
import Baton
import Foundation
import BatonLogging
import BatonPostgres

/// `baton db migrate|status [--database-url URL] [--config FILE]`: applies Baton's pending schema migrations, or lists them.
let dbCommand = Command(
    name: "db",
    summary: "apply Baton's schema migrations (db migrate) or list them (db status)",
    discussion: """
    Migrations run in order, each in a transaction; running twice, or from two processes at once, applies
    each one exactly once.
    """,
    subcommands: [
        dbSubcommand("migrate", "apply the pending migrations"),
        dbSubcommand("status", "list the migrations, applied or pending"),
    ]
)

/// `baton db ACTION`: both actions take the same options.
private func dbSubcommand(_ action: String, _ summary: String) -> Command {
    Command(
        name: action,
        summary: summary,
        options: DbOptions.self,
        run: { parsed in try await runDb(action, parsed) }
    )
}

/// The options of `baton db migrate` and `baton db status`.
private struct DbOptions: CommandOptions {
    let databaseURL = Option.databaseURL("the database (default $BATON_DATABASE_URL, else database.url of --config FILE)")
    let config = Option.text("config", "FILE", "a configuration file whose database.url to use (read only when given; BATON_* variables override it)")
}

/// The database: `--database-url`, else `BATON_DATABASE_URL`, else `database.url` of the configuration, read only when
/// `--config` names one (a schema change does not pick up a `baton.json` of the current directory unasked).
private func databaseURL(_ parsed: Parsed<DbOptions>) async throws -> String {
    if let url = databaseURLOrEnvironment(parsed.databaseURL) { return url }
    guard let path = parsed.config else {
        throw CommandFailure.usage("no database: give --database-url URL, set BATON_DATABASE_URL, or --config FILE (its database.url)")
    }
    return try await loadConfiguration(path).database.url
}

private func runDb(_ action: String, _ parsed: Parsed<DbOptions>) async throws -> Int32 {
    let url = try await databaseURL(parsed)
    // Migrations keep nothing from one transaction to the next (Migrator), so they run alike straight to
    // PostgreSQL and through any pooler, with no need to tell which.
    let pool = PostgresPool(url: url, maxConnections: 1, pooler: .transaction)
    let migrator = try BatonSchema.migrator()
    do {
        if action == "status" {
            let applied = Set(try await migrator.appliedVersions(pool))
            for migration in migrator.migrations {
                print("\(applied.contains(migration.version) ? "applied" : "pending")  \(String(format: "%04d", migration.version))_\(migration.name)")
            }
            return 0
        }
        let applied = try await migrator.migrate(pool)
        if applied.isEmpty {
            print("schema is up to date (\(migrator.migrations.count) migrations)")
        } else {
            for migration in applied {
                print("applied \(String(format: "%04d", migration.version))_\(migration.name)")
            }
        }
        return 0
    } catch let error as PostgresError {
        throw CommandFailure.failed("baton db \(action): \(error)")
    }
}
