import AppleSignIn
import Baton
import BatonLogging
import HTTPServer
import JOSE
import JSON
import Logging
import Postgres

/// The embedder's start-up: its own modules and Baton's side by side, Baton's logs going to the embedder's `Logger`.
public func startBaton(configuration: BatonConfiguration) async throws -> (app: Logging.Logger, engine: BatonEngine) {
    let app = Logging.Logger(label: [JSONModule.name, JOSEModule.name, PostgresModule.name, HTTPServerModule.name, AppleSignInModule.name].joined(separator: "+"))
    let engine = try await BatonEngine.start(configuration: configuration, logger: batonLogger(forwardingTo: app))
    return (app, engine)
}

/// Baton's logger handing each event to `app` (swift-log's API): its level, message and metadata, Baton's label
/// as the source. The bridge docs/library.md shows.
public func batonLogger(forwardingTo app: Logging.Logger) -> BatonLogging.Logger {
    BatonLogging.Logger(label: "baton", level: BatonLogging.Logger.Level(name: app.logLevel.rawValue) ?? .error) { event in
        app.log(level: Logging.Logger.Level(rawValue: event.level.description) ?? .info, "\(event.message)",
                metadata: event.metadata.mapValues { .string($0) }, source: event.label)
    }
}
