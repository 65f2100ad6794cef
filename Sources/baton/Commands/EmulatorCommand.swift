import AppleEmulator
import Dispatch
import Foundation
import HTTPServer
import Logging

/// `baton emulator`: runs the Apple stand-in until SIGINT or SIGTERM.
let emulatorCommand = Command(
    name: "emulator",
    summary: "run the appleid.apple.com emulator",
    usage: """
    usage: baton emulator [--host H] [--port P] [--state FILE] [--log-level L]

    Serves Apple's endpoints (/auth/keys, /auth/token, /auth/usermigrationinfo), simulated devices
    (/emulator/authorize, /emulator/credential-state) and scenario control (/emulator/teams, apps,
    users, transfers, transfers/accept, revoke, clock, rotate-keys, faults, stats).

      --host H        address to bind (default 127.0.0.1)
      --port P        port, 0 for a free one (default 8090)
      --state FILE    load state from FILE if it exists; save it after every change and on exit
      --log-level L   trace|debug|info|notice|warning|error (default info)

    Prints 'emulator listening on http://HOST:PORT' once ready; stops gracefully on SIGINT/SIGTERM.
    """,
    run: { arguments in
        let parsed = try Arguments(arguments, options: ["host", "port", "state", "log-level"])
        guard parsed.positionals.isEmpty else { throw CommandFailure.usage("unexpected argument '\(parsed.positionals[0])'") }
        let port = try parsed.integer("port", default: 8090, in: 0...65535)
        let host = parsed.value("host") ?? "127.0.0.1"
        let levelName = parsed.value("log-level") ?? "info"
        guard let level = Logger.Level(name: levelName) else { throw CommandFailure.usage("--log-level must be trace, debug, info, notice, warning or error") }
        let logger = Logger(label: "baton.emulator", level: level)
        let emulator: AppleEmulator
        do {
            emulator = try await AppleEmulator.start(host: host, port: port, statePath: parsed.value("state"), logger: logger)
        } catch let error as HTTPServerError where error.code == .invalidAddress {
            throw CommandFailure.usage("--host must be a numeric IPv4 or IPv6 address or localhost")
        } catch let error as HTTPServerError {
            throw CommandFailure.failed("baton emulator: cannot listen on \(host):\(port) (\(error))")
        } catch {
            throw CommandFailure.failed("baton emulator: \(error)")
        }
        FileHandle.standardOutput.write(Data("emulator listening on \(emulator.baseURL.absoluteString)\n".utf8))
        let signal = await waitForTerminationSignal()
        logger.info("stopping", ["signal": String(signal)])
        await emulator.stop()
        return 0
    }
)

/// Suspends until the process receives SIGINT or SIGTERM; returns the signal number.
func waitForTerminationSignal() async -> Int32 {
    await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
        let queue = DispatchQueue(label: "baton.signals")
        let resumed = SignalLatch(continuation)
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { resumed.fire(number) }
            source.resume()
            resumed.keep(source)
        }
    }
}

/// Resumes a continuation once, from the signal queue, and keeps the signal sources alive.
private final class SignalLatch: @unchecked Sendable {
    // Only touched on the serial signal queue (and during setup, before any signal can fire there).
    private var continuation: CheckedContinuation<Int32, Never>?
    private var sources: [any DispatchSourceSignal] = []

    init(_ continuation: CheckedContinuation<Int32, Never>) { self.continuation = continuation }

    func keep(_ source: any DispatchSourceSignal) { sources.append(source) }

    func fire(_ number: Int32) {
        continuation?.resume(returning: number)
        continuation = nil
    }
}

/// `baton bench emulator [--concurrency N] [--requests N] [--tokens N]`: requests/s for
/// `/auth/keys` and tokens/s for `/emulator/authorize` over keep-alive connections (default 32),
/// against an in-process emulator; 100,000 key requests and 10,000 tokens by default.
@Sendable
func runEmulatorBenchmark(_ arguments: [String]) async throws -> Int32 {
    let parsed = try Arguments(arguments, options: ["concurrency", "requests", "tokens"])
    let concurrency = try parsed.integer("concurrency", default: 32, in: 1...1024)
    let requests = try parsed.integer("requests", default: 100_000, in: 1...10_000_000)
    let tokens = try parsed.integer("tokens", default: 10_000, in: 1...1_000_000)

    var configuration = HTTPServerConfiguration()
    configuration.connectionLimit = max(configuration.connectionLimit, concurrency * 2)
    let emulator = try await AppleEmulator.start(configuration: configuration)
    let team = try emulator.createTeam()
    try emulator.createApp(clientID: "com.example.bench", teamID: team.teamID)
    let users = try emulator.createUsers(clientID: "com.example.bench", count: 1_000)
    let bodies = users.map { Array("{\"client_id\":\"com.example.bench\",\"user\":\"\($0.id)\",\"nonce\":\"n\"}".utf8) }

    print("warming up")
    _ = await LoadClient.run(port: emulator.port, concurrency: concurrency, total: 2_000) { _ in LoadRequest(path: "/auth/keys") }

    print("GET /auth/keys: \(requests) requests over \(concurrency) keep-alive connections")
    let keys = await LoadClient.run(port: emulator.port, concurrency: concurrency, total: requests) { _ in LoadRequest(path: "/auth/keys") }
    print("  \(Int(keys.perSecond)) requests/s, statuses \(keys.statuses), failures \(keys.failures)")

    print("POST /emulator/authorize: \(tokens) tokens over \(concurrency) keep-alive connections")
    let authorize = await LoadClient.run(port: emulator.port, concurrency: concurrency, total: tokens) { index in
        LoadRequest(method: "POST", path: "/emulator/authorize", headers: [("Content-Type", "application/json")], body: bodies[index % bodies.count])
    }
    print("  \(Int(authorize.perSecond)) tokens/s, statuses \(authorize.statuses), failures \(authorize.failures)")
    await emulator.stop()

    let ok = keys.failures == 0 && authorize.failures == 0 && keys.statuses[200] == requests && authorize.statuses[200] == tokens
    let figures: [String: Any] = [
        "benchmark": "emulator",
        "concurrency": concurrency,
        "keys_requests": requests,
        "keys_requests_per_s": Int(keys.perSecond),
        "authorize_tokens": tokens,
        "authorize_tokens_per_s": Int(authorize.perSecond),
        "errors": keys.failures + authorize.failures + (requests - (keys.statuses[200] ?? 0)) + (tokens - (authorize.statuses[200] ?? 0)),
    ]
    let line = try JSONSerialization.data(withJSONObject: figures, options: [.sortedKeys])
    print(String(decoding: line, as: UTF8.self))
    return ok ? 0 : 1
}
