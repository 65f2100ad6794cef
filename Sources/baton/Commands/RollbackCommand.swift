import BatonCommandLine
import Baton
import Foundation
import BatonPostgres

/// `baton rollback`: reverses migrations from the audit trail, for one record or every migration since a moment.
let rollbackCommand = Command(
    name: "rollback",
    summary: "reverse migrations from the audit trail: one record (--legacy-key) or every one since a moment (--since)",
    abstract: """
    Every rewrite Baton makes appends a 'migrated' event holding the old and new values. This command puts the
    old values back, newest migration first, one transaction per migration, for whatever shape the configuration
    describes: the subject, the email (in the table or the users table), the JSON copy's keys and the email
    copies; the user's baton.transfers row is pending again (the exchange or a sign-in migrates it afresh), and a
    'rolled_back' event records it. A record changed since its migration (another subject or email) is refused
    and left as it is, with the reason. Running it again rolls back 0.
    """,
    options: RollbackOptions.self,
    discussion: """
    Exit status: 0 every migration found was rolled back (or would be), 1 some were refused or the database
    failed, 2 usage or configuration errors (neither --legacy-key nor --since, or neither --dry-run nor --yes).
    """,
    run: runRollback
)

/// The options of `baton rollback`.
private struct RollbackOptions: CommandOptions {
    let legacyKey = Option.text("legacy-key", "KEY", "the migrations of this record (the key column's value)")
    let since = Option.text("since", "TIME", "the migrations made at or after this moment (ISO 8601, or UNIX seconds)")
    let dryRun = Option.flag("dry-run", "print what would be rolled back and change nothing")
    let yes = Option.flag("yes", "roll them back")
    let config = Option.config
}

@Sendable
private func runRollback(_ parsed: Parsed<RollbackOptions>) async throws -> Int32 {
    let dryRun = parsed.dryRun
    guard dryRun != parsed.yes else {
        throw CommandFailure.usage("give --dry-run to see what would be rolled back, or --yes to roll it back")
    }
    let legacyKey = parsed.legacyKey
    guard legacyKey != nil || parsed.since != nil else {
        throw CommandFailure.usage("name what to roll back: --legacy-key KEY, --since TIME, or both")
    }
    let since = try parsed.since.map { try parseTime($0, option: "since") }
    let configuration = try await loadConfiguration(parsed.config)
    let store = LegacyStore(pool: configuration.database.pool(maxConnections: 1), legacy: try legacyIdentifiers(configuration))
    var refused = 0
    try await withTeardown {
        do {
            let migrations = try await store.migrations(legacyKey: legacyKey, since: since)
            for migration in migrations {
                let what = "migration \(migration.eventID) of legacy \(migration.legacyKey) (\(migration.method ?? "unknown"), "
                    + "\(ISO8601DateFormatter().string(from: migration.at)))"
                if dryRun {
                    print("would roll back \(what)")
                    continue
                }
                switch try await store.rollBack(migration) {
                case .rolledBack:
                    print("rolled back \(what)")
                case .refused(let reason):
                    refused += 1
                    print("refused \(what): \(reason)")
                }
            }
            print(dryRun ? "would roll back \(migrations.count)" : "rolled back \(migrations.count - refused), refused \(refused)")
        } catch let error as PostgresError {
            throw CommandFailure.failed("baton rollback: \(error)")
        }
    } teardown: {
        await store.pool.close()
    }
    return refused == 0 ? 0 : 1
}
