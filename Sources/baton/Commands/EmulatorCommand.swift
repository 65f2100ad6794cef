import BatonEmulator
import BatonHTTPServer
import BatonLogging
import BatonTools
import Foundation

/// `baton emulator`: runs the Apple stand-in until SIGINT or SIGTERM.
let emulatorCommand = Command(
    name: "emulator",
    summary: "run the appleid.apple.com emulator",
    abstract: """
    Serves Apple's endpoints (/auth/keys, /auth/token, /auth/usermigrationinfo), simulated devices
    (/emulator/authorize, /emulator/credential-state) and scenario control (/emulator/teams, apps,
    users, transfers, transfers/accept, revoke, clock, rotate-keys, faults, stats).
    """,
    options: EmulatorOptions.self,
    discussion: "Prints 'emulator listening on http://HOST:PORT' once ready; stops gracefully on SIGINT/SIGTERM.",
    run: { parsed in
        let port = parsed.port
        let host = parsed.host
        let logger = Logger(label: "baton.emulator", level: parsed.logLevel)
        let emulator: AppleEmulator
        do {
            emulator = try await AppleEmulator.start(host: host, port: port, statePath: parsed.state, logger: logger)
        } catch let error as HTTPServerError where error.code == .invalidAddress {
            throw CommandFailure.usage("--host must be a numeric IPv4 or IPv6 address or localhost")
        } catch let error as HTTPServerError {
            throw CommandFailure.failed("baton emulator: cannot listen on \(host):\(port) (\(error))")
        } catch {
            throw CommandFailure.failed("baton emulator: \(error)")
        }
        return await serveUntilTerminated(announcing: "emulator listening on \(emulator.baseURL.absoluteString)", logger: logger) { await emulator.stop() }
    }
)

/// The options of `baton emulator`.
private struct EmulatorOptions: CommandOptions {
    let host = Option.text("host", "H", default: "127.0.0.1", "address to bind")
    let port = Option.integer("port", "P", default: 8090, in: 0...65535, "port, 0 for a free one")
    let state = Option.text("state", "FILE", "load state from FILE if it exists; save it after every change and on exit")
    let logLevel = Option.logLevel()
}
