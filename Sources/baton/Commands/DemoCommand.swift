import Dispatch
import Foundation
import BatonPostgres

/// `baton demo`: the end-to-end scenario on a throwaway PostgreSQL and the Apple emulator.
let demoCommand = Command(
    name: "demo",
    summary: "end-to-end scenario: a transfer of 10,000 users on a throwaway PostgreSQL and the Apple emulator",
    usage: """
    usage: baton demo [--database-url URL] [--users N] [--concurrency N] [--rate R] [--stragglers N]
                      [--out FILE] [--keep-data] [--schema NAME] [--cross-company]

    Tells the story of an app transfer, step by step, with its figures: an app under team A with a legacy
    public.users table; transfer identifiers (baton transfer-ids); team B accepts; Baton's service
    (baton serve); a third of the users sign in from simulated iPhones at once; the exchange for the
    rest (baton exchange); day 61 for a few stragglers; the report (table here, HTML in FILE).
    `make demo` runs it on a throwaway PostgreSQL (scripts/pg.sh run).

      --database-url URL   an empty database (default $BATON_DATABASE_URL); the demo refuses one that
                           already has public.users or a baton schema
      --users N            users of the legacy app (default 10000, 30 to 1000000)
      --concurrency N      devices and job workers in flight (default 32)
      --rate R             requests per second of the bulk jobs (default 2000)
      --stragglers N       users the exchange leaves for after day 60 (default users/400, 3 to 25)
      --out FILE           the HTML report (default report.html)
      --keep-data          leave the app's tables and schema baton in the database afterwards
      --schema NAME        the app's tables: users (default, public.users), or the tables an auth framework
                           creates: allauth, authjs, better-auth, supabase, omniauth (docs/schemas.md); DEMO_FLAGS=--schema allauth
      --cross-company      team B is another company: team A exports keys and transfer identifiers only
                           (transfer-ids --export), team B loads them with NULL subjects into a database of
                           its own (created beside the given one) and imports key,transfer_sub

    Everything it starts (the emulator, the service, the jobs) runs in this process on 127.0.0.1 and
    stops with it, also on Ctrl-C. No secret or token is printed.
    Exit status: 0 every user accounted for, 1 a step went wrong, 2 usage errors.
    """,
    run: { arguments in
        let parsed = try Arguments(arguments, options: ["database-url", "users", "concurrency", "rate", "stragglers", "out", "schema"], flags: ["keep-data", "cross-company"])
        if let extra = parsed.positionals.first { throw CommandFailure.usage("unexpected argument '\(extra)'") }
        let environment = ProcessInfo.processInfo.environment
        guard let url = parsed.value("database-url") ?? environment["BATON_DATABASE_URL"], !url.isEmpty else {
            throw CommandFailure.usage("no database: give --database-url or set BATON_DATABASE_URL (make demo starts a throwaway one)")
        }
        let users = try parsed.integer("users", default: 10_000, in: 30...1_000_000)
        let schemaName = parsed.value("schema") ?? DemoSchema.users.rawValue
        guard let schema = DemoSchema(rawValue: schemaName) else {
            throw CommandFailure.usage("--schema must be one of \(DemoSchema.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let options = DemoOptions(
            databaseURL: url,
            users: users,
            concurrency: try parsed.integer("concurrency", default: 32, in: 1...256),
            rate: try parsed.double("rate", default: 2_000, in: 1...100_000),
            stragglers: try parsed.integer("stragglers", default: min(25, max(3, users / 400)), in: 0...users / 2),
            reportPath: parsed.value("out") ?? "report.html",
            keepData: parsed.flag("keep-data"),
            throwawayDatabase: environment["BATON_TEST_PG_DIR"] != nil && environment["BATON_TEST_DATABASE_URL"] == url,
            schema: schema,
            crossCompany: parsed.flag("cross-company")
        )
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
