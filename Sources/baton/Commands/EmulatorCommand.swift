import BatonEmulator
import BatonHTTPServer
import BatonLogging
import BatonCommandLine
import Foundation

/// `baton emulator`: runs the Apple stand-in until SIGINT or SIGTERM.
let emulatorCommand = Command(
    name: "emulator",
    summary: "run the appleid.apple.com emulator",
    abstract: """
    Serves Apple's endpoints, a simulated device and scenario control on loopback. docs/emulator.md
    runs a whole transfer by hand with curl, every request and answer shown.
    """,
    options: EmulatorOptions.self,
    discussion: """
    Routes (JSON bodies unless marked form; errors {"error", "reason"}, Apple's endpoints {"error"}):
    \(routeList())

    Prints 'emulator listening on http://HOST:PORT' once ready; stops gracefully on SIGINT/SIGTERM.
    """,
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

/// One line per route of the emulator: method, path, what it does.
private func routeList() -> String {
    let width = AppleEmulator.routes.map(\.path.count).max() ?? 0
    return AppleEmulator.routes.map { route in
        "  \(route.method.padding(toLength: 4, withPad: " ", startingAt: 0)) \(route.path.padding(toLength: width, withPad: " ", startingAt: 0))  \(route.summary)"
    }.joined(separator: "\n")
}
