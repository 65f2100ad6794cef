import BatonTools
import Baton
import BatonService
import Foundation
import BatonHTTPServer
import BatonLogging
import BatonPostgres

/// `baton serve`: the HTTP service, until SIGTERM or SIGINT (which drain in-flight requests).
let serveCommand = Command(
    name: "serve",
    summary: "run the HTTP service (/v1/signin, /v1/credential-state, /v1/link, /v1/notifications, …)",
    abstract: """
    Loads the configuration (default baton.json; BATON_* environment variables override it), checks the
    database (Baton's schema and the legacy table, whose subject column must be unique), loads Apple's
    key set, and serves the HTTP API on `listen`.
    """,
    options: ServeOptions.self,
    discussion: """
    Prints 'baton listening on http://HOST:PORT' once ready. SIGTERM or SIGINT stop accepting
    connections, let in-flight requests finish, and exit 0.
    """,
    run: { parsed in
        let port = parsed.port
        let logger = Logger(label: "baton.service", level: parsed.logLevel)
        let configuration = try await loadConfiguration(parsed.config)
        let server: BatonServer
        do {
            server = try await BatonServer.start(configuration: configuration, port: port, logger: logger)
        } catch let error as BatonError {
            throw CommandFailure.failed("baton serve: \(error)")
        } catch let error as HTTPServerError {
            throw CommandFailure.failed("baton serve: cannot listen on \(configuration.listen) (\(error))")
        }
        // Which servers it uses, with the password redacted: the string was checked by libpq at load.
        logger.info("database", ["connection": (try? PostgresConnectionString(configuration.database.url))?.redacted ?? "unparsable"])
        let host = configuration.listen.host.contains(":") ? "[\(configuration.listen.host)]" : configuration.listen.host
        return await serveUntilTerminated(announcing: "baton listening on http://\(host):\(server.port)", logger: logger) { await server.stop() }
    }
)

/// The options of `baton serve`.
private struct ServeOptions: CommandOptions {
    let config = Option.config
    let port = Option.integer("port", "P", in: 0...65535, "override the listen port (0: a free one)")
    let logLevel = Option.logLevel()
}
