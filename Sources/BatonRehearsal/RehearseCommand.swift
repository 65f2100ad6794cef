import Baton
import BatonCommandLine
import Foundation

/// `baton rehearse`: the whole transfer on a throwaway copy of the application's own tables.
package let rehearseCommand = Command(
    name: "rehearse",
    summary: "the whole transfer on a throwaway copy of your tables: problems found, migrations counted, the exchange's days",
    abstract: """
    Copies the tables the configuration names (legacy.table and the email table, with the extensions, types,
    domains and sequences they use) from the database at --from, else the configuration's database.url
    (read-only: pg_dump in a read-only session), into a PostgreSQL cluster of its own, seeds the Apple
    emulator with the copy's subjects as team A's users, and runs the real code paths on the copy:
    transfer-ids, the acceptance, sign-ins through Baton's service for a share of the users (some on several
    devices at once), the exchange for the rest, the report. It lists every problem it met (kind, count, up
    to five keys), projects how long the exchange takes at --rate per process, and says what a rehearsal
    cannot predict.
    """,
    options: RehearseOptions.self,
    discussion: """
    The source is never written: pg_dump runs with default_transaction_read_only=on, and what the tables
    need is read in a read-only transaction. The copy stops at its first error, printed as PostgreSQL gave
    it, with the statement. The copy, the emulator and the service live in this process and its temporary
    directory, and are removed at the end, also on failure and on SIGINT or SIGTERM. Exit status: 0 no
    problem found, 1 problems found (listed) or a failed run, 2 usage or configuration errors.
    """,
    run: { parsed in
        let configuration = try await rehearsalConfiguration(path: parsed.config, from: parsed.from)
        let options = RehearsalOptions(given: parsed, source: configuration.database.url, configuration: configuration)
        // Interrupted: the throwaway cluster is stopped and deleted before the process exits.
        let watcher = Task {
            let number = await waitForTerminationSignal()
            await ThrowawayCluster.destroyRunning()
            exit(128 + number)
        }
        defer { watcher.cancel() }
        let result = try await Rehearsal(options: options).run()
        print(result.renderText(), terminator: "")
        if let path = parsed.json {
            do {
                try result.json().write(to: URL(fileURLWithPath: path), options: .atomic)
            } catch {
                throw CommandFailure.failed("baton rehearse: cannot write \(path): \(error)")
            }
        }
        return result.problems.isEmpty ? 0 : 1
    }
)

/// The configuration as ``loadConfiguration(_:)`` reads it, with `--from` as its `database.url` (the source): `--from`
/// overrides the file and `BATON_DATABASE_URL`, so a configuration written for the rehearsal needs no `database.url`;
/// without `--from`, `database.url` is the source (only read, as `--from` is).
/// - Throws: ``CommandFailure/usage(_:)`` for a configuration error, a `--from` libpq refuses, or no source at all.
private func rehearsalConfiguration(path: String?, from: String?) async throws -> BatonConfiguration {
    var environment = ProcessInfo.processInfo.environment
    if let from, !from.isEmpty { environment["BATON_DATABASE_URL"] = from }
    do {
        return try await BatonConfiguration.load(path: path, environment: environment, queue: .global())
    } catch let error as ConfigurationError where error.key == "database.url" && from?.isEmpty == false {
        throw CommandFailure.usage("--from: \(error.reason)")
    } catch let error as ConfigurationError where error.code == .missing && ["database", "database.url"].contains(error.key) {
        throw CommandFailure.usage("no source database: give --from URL or database.url in the configuration")
    } catch let error as ConfigurationError {
        throw CommandFailure.usage("\(error)")
    }
}

/// The options of `baton rehearse`.
struct RehearseOptions: CommandOptions {
    let config = Option.config
    let from = Option.text("from", "URL", "the application's database (default database.url of the configuration; only read: the copy is made\nwith pg_dump --table)")
    let signinShare = Option.number("signin-share", default: 0.3, in: 0...1, "share of the users who sign in during the window")
    let rate = Option.number("rate", default: 10, in: 0.1...100_000, "exchange requests per second per process, for the projection")
    let processes = Option.integer("processes", default: 1, in: 1...1_000, "exchange processes, for the projection")
    let json = Option.text("json", "FILE", "also write the result as JSON to FILE")
    let concurrency = Option.integer("concurrency", default: Rehearsal.defaultConcurrency, in: 1...256, "devices and job workers in flight during the rehearsal")
}
