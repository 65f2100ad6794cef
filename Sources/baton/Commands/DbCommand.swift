import Baton
import Foundation
import BatonLogging
import BatonPostgres

/// `baton db migrate [--database-url URL]`: applies Baton's pending schema migrations.
let dbCommand = Command(
    name: "db",
    summary: "apply Baton's schema migrations (db migrate) or list them (db status)",
    usage: """
        usage: baton db migrate [--database-url URL]
               baton db status  [--database-url URL]

        The URL defaults to $BATON_DATABASE_URL. Migrations run in order, each in a transaction;
        running twice, or from two processes at once, applies each one exactly once.
        """,
    run: { arguments in
        guard let action = arguments.first, ["migrate", "status"].contains(action) else {
            throw CommandFailure.usage("expected 'migrate' or 'status'")
        }
        let parsed = try Arguments(Array(arguments.dropFirst()), options: ["database-url"])
        guard parsed.positionals.isEmpty else { throw CommandFailure.usage("unexpected argument '\(parsed.positionals[0])'") }
        guard let url = parsed.value("database-url") ?? ProcessInfo.processInfo.environment["BATON_DATABASE_URL"], !url.isEmpty else {
            throw CommandFailure.usage("no database: give --database-url or set BATON_DATABASE_URL")
        }
        let pool = PostgresPool(url: url, maxConnections: 1)
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
)
