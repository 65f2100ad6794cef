import BatonCommandLine
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
    Prints 'baton listening on http://HOST:PORT' once ready. SIGHUP rereads the configuration: it
    applies apple.transfer.accepted_at at once (set it when the transfer is accepted; credential state
    answers 'transferred' from then on), names any other changed key as needing a restart, and keeps
    the running configuration when the file is invalid. SIGTERM or SIGINT stop accepting connections,
    let in-flight requests finish, and exit 0.
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
        let reloader = ConfigurationReloader(path: parsed.config, running: configuration, engine: server.service.engine, logger: logger)
        return await serveUntilTerminated(announcing: "baton listening on http://\(host):\(server.port)", logger: logger,
                                          hangUp: { await reloader.reload() }) { await server.stop() }
    }
)

/// What SIGHUP does to a running `baton serve`: rereads the configuration, applies the keys a transfer changes while
/// the service runs (`apple.transfer.accepted_at`), logs each key that changed (names only, never values), and keeps
/// the running configuration when the file is invalid.
actor ConfigurationReloader {
    /// The keys applied without a restart.
    static let liveKeys: Set<String> = ["apple.transfer.accepted_at"]
    private let path: String?
    private var running: BatonConfiguration
    private let engine: BatonEngine
    private let logger: Logger

    init(path: String?, running: BatonConfiguration, engine: BatonEngine, logger: Logger) {
        self.path = path
        self.running = running
        self.engine = engine
        self.logger = logger
    }

    /// Rereads and applies; never throws: a refused file is logged and changes nothing.
    func reload() async {
        let fresh: BatonConfiguration
        do {
            fresh = try await loadConfiguration(path)
        } catch {
            logger.error("configuration reload refused: the running configuration stays", ["error": String(describing: error)])
            return
        }
        let changed = Self.changedKeys(running, fresh)
        let live = changed.filter(Self.liveKeys.contains), later = changed.filter { !Self.liveKeys.contains($0) }
        if live.contains("apple.transfer.accepted_at") {
            engine.updateTransferAcceptedAt(fresh.apple.transfer?.acceptedAt)
            running.apple.transfer?.acceptedAt = fresh.apple.transfer?.acceptedAt
        }
        logger.info("configuration reloaded", ["applied": live.isEmpty ? "nothing" : live.joined(separator: ",")])
        if !later.isEmpty {
            logger.warning("configuration changed where only a restart applies it", ["keys": later.joined(separator: ",")])
        }
    }

    /// The dotted keys whose values differ between `old` and `new` (from their JSON forms), sorted.
    static func changedKeys(_ old: BatonConfiguration, _ new: BatonConfiguration) -> [String] {
        let (before, after) = (leaves(old), leaves(new))
        return Set(before.keys).union(after.keys).filter { before[$0] != after[$0] }.sorted()
    }

    private static func leaves(_ configuration: BatonConfiguration) -> [String: String] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        guard let data = try? encoder.encode(configuration), let tree = try? JSONSerialization.jsonObject(with: data) else { return [:] }
        var leaves: [String: String] = [:]
        func walk(_ value: Any, _ path: String) {
            if let object = value as? [String: Any] {
                for (key, child) in object { walk(child, path.isEmpty ? key : "\(path).\(key)") }
            } else if let data = try? JSONSerialization.data(withJSONObject: [value], options: .sortedKeys) {
                leaves[path] = String(decoding: data, as: UTF8.self)
            }
        }
        walk(tree, "")
        return leaves
    }
}

/// The options of `baton serve`.
private struct ServeOptions: CommandOptions {
    let config = Option.config
    let port = Option.integer("port", "P", in: 0...65535, "override the listen port (0: a free one)")
    let logLevel = Option.logLevel()
}
