import BatonEmulator
import Dispatch
import Foundation
import FoundationNetworking
import BatonJOSE
import BatonHTTPServer
import BatonLogging

/// `baton emulator`: runs the Apple stand-in until SIGINT or SIGTERM.
let emulatorCommand = Command(
    name: "emulator",
    summary: "run the appleid.apple.com emulator",
    abstract: """
    Serves Apple's endpoints (/auth/keys, /auth/token, /auth/usermigrationinfo), simulated devices
    (/emulator/authorize, /emulator/credential-state) and scenario control (/emulator/teams, apps,
    users, transfers, transfers/accept, revoke, clock, rotate-keys, faults, stats).
    """,
    options: [
        .text("host", "H", default: "127.0.0.1", "address to bind"),
        .integer("port", "P", default: 8090, in: 0...65535, "port, 0 for a free one"),
        .text("state", "FILE", "load state from FILE if it exists; save it after every change and on exit"),
        .logLevel,
    ],
    discussion: "Prints 'emulator listening on http://HOST:PORT' once ready; stops gracefully on SIGINT/SIGTERM.",
    run: { parsed in
        let port = parsed.integer("port")
        let host = parsed.required("host")
        let level = parsed.logLevel
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

/// `baton bench emulator [--concurrency N] [--requests N] [--tokens N] [--exchanges N]`:
/// requests/s for `/auth/keys`, tokens/s for `/emulator/authorize` and requests/s for the
/// recipient side of `/auth/usermigrationinfo`, over keep-alive connections (default 32), against
/// an in-process emulator; 100,000 key requests, 10,000 tokens and 20,000 exchanges by default.
@Sendable
func runEmulatorBenchmark(_ parsed: Arguments) async throws -> Int32 {
    let concurrency = parsed.integer("concurrency")
    let requests = parsed.integer("requests")
    let tokens = parsed.integer("tokens")
    let exchanges = parsed.integer("exchanges")

    var configuration = HTTPServerConfiguration()
    configuration.connectionLimit = max(configuration.connectionLimit, concurrency * 2)
    let emulator = try await AppleEmulator.start(configuration: configuration)
    let clientID = "com.example.bench"
    let sender = try emulator.createTeam(), recipient = try emulator.createTeam()
    try emulator.createApp(clientID: clientID, teamID: sender.teamID)
    let users = try emulator.createUsers(clientID: clientID, count: 1_000)
    let bodies = users.map { Array("{\"client_id\":\"\(clientID)\",\"user\":\"\($0.id)\",\"nonce\":\"n\"}".utf8) }
    try emulator.initiateTransfer(clientID: clientID, toTeamID: recipient.teamID)
    let transferSubs = Array(try emulator.transferIdentifiers(clientID: clientID).values)
    try emulator.acceptTransfer(clientID: clientID)
    let secret = try benchClientSecret(recipient, clientID: clientID, now: emulator.now)
    let accessToken = try await benchAccessToken(emulator.baseURL, clientID: clientID, secret: secret)
    let exchangeBodies = transferSubs.map { Array("transfer_sub=\($0)&client_id=\(clientID)&client_secret=\(secret)".utf8) }

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

    print("POST /auth/usermigrationinfo (recipient side): \(exchanges) requests over \(concurrency) keep-alive connections")
    let exchange = await LoadClient.run(port: emulator.port, concurrency: concurrency, total: exchanges) { index in
        LoadRequest(method: "POST", path: "/auth/usermigrationinfo",
                    headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Authorization", "Bearer \(accessToken)")],
                    body: exchangeBodies[index % exchangeBodies.count])
    }
    print("  \(Int(exchange.perSecond)) requests/s, statuses \(exchange.statuses), failures \(exchange.failures)")
    await emulator.stop()

    let runs = [(keys, requests), (authorize, tokens), (exchange, exchanges)]
    let errors = runs.reduce(0) { $0 + $1.0.failures + ($1.1 - ($1.0.statuses[200] ?? 0)) }
    let figures: [String: Any] = [
        "benchmark": "emulator",
        "concurrency": concurrency,
        "keys_requests": requests,
        "keys_requests_per_s": Int(keys.perSecond),
        "authorize_tokens": tokens,
        "authorize_tokens_per_s": Int(authorize.perSecond),
        "exchange_requests": exchanges,
        "exchange_requests_per_s": Int(exchange.perSecond),
        "errors": errors,
    ]
    let line = try JSONSerialization.data(withJSONObject: figures, options: [.sortedKeys])
    print(String(decoding: line, as: UTF8.self))
    return errors == 0 ? 0 : 1
}

/// An ES256 client secret for `team`, valid for a day (what `baton client-secret` prints).
private func benchClientSecret(_ team: TeamCredentials, clientID: String, now: Date) throws -> String {
    let issuedAt = Double(Int64(now.timeIntervalSince1970))
    let claims: JSONObject = ["iss": .string(team.teamID), "iat": .number(issuedAt), "exp": .number(issuedAt + 86_400),
                              "aud": "https://appleid.apple.com", "sub": .string(clientID)]
    return try JWS.signES256(payload: JSON.serializeBytes(.object(claims)), key: try P256PrivateKey(pkcs8PEM: team.privateKeyPEM), kid: team.keyID)
}

/// One `client_credentials` access token from the emulator.
private func benchAccessToken(_ base: URL, clientID: String, secret: String) async throws -> String {
    var request = URLRequest(url: base.appendingPathComponent("auth/token"))
    request.httpMethod = "POST"
    request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
    request.httpBody = Data("grant_type=client_credentials&scope=user.migration&client_id=\(clientID)&client_secret=\(secret)".utf8)
    let (data, _) = try await URLSession.shared.data(for: request)
    guard case .string(let token)? = try JSON.parseObject(Array(data))["access_token"] else {
        throw CommandFailure.failed("baton bench emulator: the emulator issued no access token")
    }
    return token
}
