import AppleSignIn
import Baton
import BatonLogging
import HTTPServer
import JOSE
import Logging
import Postgres

/// The embedder's start-up: its own modules and Baton's side by side, each `Logger` named by its module.
public func startBaton(configuration: BatonConfiguration) async throws -> (app: Logging.Logger, engine: BatonEngine) {
    let app = Logging.Logger(label: [JOSEModule.name, PostgresModule.name, HTTPServerModule.name, AppleSignInModule.name].joined(separator: "+"))
    let engine = try await BatonEngine.start(configuration: configuration, logger: BatonLogging.Logger(label: "baton"))
    return (app, engine)
}
