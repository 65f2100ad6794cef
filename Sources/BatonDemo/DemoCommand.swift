import Dispatch
import Foundation
import BatonCommandLine
import BatonPostgres

/// `baton demo`: the end-to-end scenario on a throwaway PostgreSQL and the Apple emulator.
package let demoCommand = Command(
    name: "demo",
    summary: "end-to-end scenario: a transfer of 10,000 users on a throwaway PostgreSQL and the Apple emulator",
    abstract: """
    Tells the story of an app transfer, step by step, with its figures: an app under team A with a legacy
    public.users table; transfer identifiers (baton transfer-ids); team B accepts; Baton's service
    (baton serve); a third of the users sign in from simulated iPhones at once; the exchange for the
    rest (baton exchange); day 61 for a few stragglers; the report (table here, HTML in FILE).
    `make demo` runs it on a throwaway PostgreSQL (scripts/pg.sh run).
    """,
    options: DemoCommandOptions.self,
    discussion: """
    Everything it starts (the emulator, the service, the jobs) runs in this process on 127.0.0.1 and
    stops with it, also on Ctrl-C. No secret or token is printed.
    Exit status: 0 every user accounted for, 1 a step went wrong, 2 usage errors.
    """,
    run: { parsed in
        let environment = ProcessInfo.processInfo.environment
        guard let url = databaseURLOrEnvironment(parsed.databaseURL) else {
            throw CommandFailure.usage("no database: give --database-url or set BATON_DATABASE_URL (make demo starts a throwaway one)")
        }
        if parsed.lateStart && (parsed.schema != .users || parsed.crossCompany) {
            throw CommandFailure.usage("--late-start runs on the users schema, without --cross-company")
        }
        let options = DemoOptions(
            given: parsed, databaseURL: url,
            stragglers: try parsed.value(of: \.stragglers, default: min(25, max(3, parsed.users / 400)), in: 0...parsed.users / 2),
            throwawayDatabase: environment["BATON_TEST_PG_DIR"] != nil && environment["BATON_TEST_DATABASE_URL"] == url)
        stopOnInterrupt()
        do {
            return try await DemoScenario(options: options).run() ? 0 : 1
        } catch let failure as CommandFailure {
            throw failure
        } catch {
            throw CommandFailure.failed("baton demo: \(error)")
        }
    }
)

/// The options of `baton demo` (``DemoOptions`` adds what the command resolves from them).
struct DemoCommandOptions: CommandOptions {
    let databaseURL = Option.databaseURL("an empty database (default $BATON_DATABASE_URL); the demo refuses one that\nalready has public.users or a baton schema")
    let users = Option.integer("users", default: 10_000, in: 30...1_000_000, "users of the legacy app")
    let concurrency = Option.integer("concurrency", default: 32, in: 1...256, "devices and job workers in flight")
    let rate = Option.number("rate", default: 2_000, in: 1...100_000, "requests per second of the bulk jobs")
    let stragglers = Option.integer("stragglers", in: 0...500_000, "users the exchange leaves for after day 60 (default users/400, 3 to 25)")
    let out = Option.text("out", "FILE", default: "report.html", "the HTML report")
    let keepData = Option.flag("keep-data", "leave the app's tables and schema baton in the database afterwards")
    let schema = Option.choice("schema", default: DemoSchema.users,
                               "the app's tables: users (public.users), or the tables an auth framework creates\n(docs/schemas.md); DEMO_FLAGS=--schema allauth")
    let crossCompany = Option.flag("cross-company", "team B is another company: team A exports keys and transfer identifiers only\n(transfer-ids --export), team B loads them with NULL subjects into a database of\nits own (created beside the given one) and imports key,transfer_sub")
    let lateStart = Option.flag("late-start", "Baton's service starts an hour after acceptance: users who signed in meanwhile got\na second account, which the exchange finds and merges (users schema only)")
}

/// On Ctrl-C or SIGTERM, says what happens to what the demo started and exits 130: the emulator, the service
/// and the jobs live in this process and stop with it; `scripts/pg.sh` deletes its throwaway cluster.
private func stopOnInterrupt() {
    Task.detached {
        let signal = await waitForTerminationSignal()
        printError("\nbaton demo: interrupted (signal \(signal)); the emulator, the service and the jobs stop with this process")
        // `_exit`, not `exit`: the jobs' threads are still running, and `exit` would tear OpenSSL and libpq down
        // under them (atexit handlers); the kernel closes the sockets either way.
        _exit(130)
    }
}
