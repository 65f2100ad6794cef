import Baton
import Foundation
import BatonHTTPServer
import BatonLogging
import BatonReport

/// `baton serve` as a library: the engine from the configuration, the routes on an ``HTTPServer``.
///
/// ```swift
/// let server = try await BatonServer.start(configuration: configuration, logger: logger)
/// print(server.port)
/// await server.stop()   // drains in-flight requests, then closes the database pool
/// ```
public final class BatonServer: Sendable {
    /// The service behind the server.
    public let service: BatonAPI
    /// The bound port.
    public let port: Int
    private let server: HTTPServer

    private init(service: BatonAPI, server: HTTPServer, port: Int) {
        self.service = service
        self.server = server
        self.port = port
    }

    /// The body limit of the service's requests: 32 KiB (a token is at most 16 KiB).
    public static let maxBodySize = 32 * 1024

    /// Event loops serving HTTP unless `server.event_loops` says otherwise: one per core. Sign-ins start on them (verification, then their statements queued
    /// on the loop's own pipeline connection, ``PostgresPipeline``), so a loop keeps many sign-ins in flight and
    /// PostgreSQL answers them in batches, without a thread waking per request; the rest of the work goes to tasks.
    public static let eventLoops = ProcessInfo.processInfo.activeProcessorCount

    /// The service's `statement_timeout` when `database.statement_timeout_ms` is not set: 5,000 ms, so a locked
    /// or stalled database answers 503 rather than holding requests. 0 in the configuration sends none.
    public static let defaultStatementTimeoutMilliseconds = 5_000

    /// Starts the engine (``BatonEngine/start(configuration:logger:)``) and listens on `configuration.listen`
    /// (`port` overrides its port; 0 binds a free one), with ``defaultStatementTimeoutMilliseconds`` unless the
    /// configuration sets one.
    /// - Throws: ``BatonError`` from the engine's start-up checks, `HTTPServerError` when the address cannot be bound.
    public static func start(configuration: BatonConfiguration, port: Int? = nil, logger: Logger = .disabled()) async throws -> BatonServer {
        var configuration = configuration
        if configuration.database.statementTimeoutMilliseconds == nil {
            configuration.database.statementTimeoutMilliseconds = defaultStatementTimeoutMilliseconds
        }
        let engine = try await BatonEngine.start(configuration: configuration, logger: logger)
        let legacy = configuration.legacy
        let reportBuilder = engine.pool.map { pool in
            { @Sendable (now: Date, acceptedAt: Date?) in ReportBuilder(pool: pool, legacy: legacy, acceptedAt: acceptedAt, now: now) }
        }
        return try await start(engine: engine, host: configuration.listen.host, port: port ?? configuration.listen.port,
                               adminToken: configuration.adminToken, serviceToken: configuration.serviceToken,
                               reportRefreshSeconds: configuration.reportRefreshSeconds, reportBuilder: reportBuilder,
                               limits: configuration.server, logger: logger)
    }

    /// Serves `engine` on `host:port`; the engine is shut down with the server.
    /// - Parameters:
    ///   - adminToken: guards `/v1/report` and `/report`; nil disables them.
    ///   - serviceToken: when given, `/v1/credential-state` and `/v1/link/session` require it.
    ///   - reportRefreshSeconds: how often `GET /report` reloads itself (0: never; default 300).
    ///   - reportBuilder: the report's source on the engine's pool (``BatonAPI/migrationReport()``); nil disables it.
    ///   - limits: the handler deadline, the request-head deadline and the per-address connection limit.
    /// - Throws: `HTTPServerError` when the address cannot be bound.
    public static func start(engine: BatonEngine, host: String = "127.0.0.1", port: Int = 0, adminToken: AdminToken? = nil,
                             serviceToken: AdminToken? = nil, reportRefreshSeconds: Int = 300,
                             reportBuilder: (@Sendable (_ now: Date, _ acceptedAt: Date?) -> ReportBuilder)? = nil,
                             limits: BatonConfiguration.Server = BatonConfiguration.Server(),
                             logger: Logger = .disabled()) async throws -> BatonServer {
        let service = BatonAPI(engine: engine, adminToken: adminToken, serviceToken: serviceToken, reportRefreshSeconds: reportRefreshSeconds,
                              reportBuilder: reportBuilder, logger: logger)
        var configuration = HTTPServerConfiguration()
        configuration.maxBodySize = maxBodySize
        configuration.handlerTimeout = .milliseconds(limits.requestTimeoutMilliseconds)
        configuration.requestHeadTimeout = .milliseconds(limits.requestHeadTimeoutMilliseconds)
        configuration.connectionsPerAddress = limits.connectionsPerIP
        configuration.eventLoops = limits.eventLoops ?? eventLoops
        configuration.batchScheduledLoops = limits.batchScheduling
        let server = HTTPServer(router: service.router(), configuration: configuration, logger: logger)
        do {
            let bound = try await server.start(host: host, port: port)
            return BatonServer(service: service, server: server, port: bound)
        } catch {
            await engine.shutdown()
            throw error
        }
    }

    /// Stops accepting connections, lets in-flight requests finish, then closes the engine's pool.
    public func stop() async {
        await server.stop()
        service.stopReadinessChecks()
        await service.engine.shutdown()
    }
}
