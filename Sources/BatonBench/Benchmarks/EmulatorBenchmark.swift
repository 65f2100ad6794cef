import BatonAppleSignIn
import BatonCommandLine
import BatonEmulator
import BatonHTTPServer
import BatonJSON
import Foundation
import FoundationNetworking

/// `baton-bench emulator [--concurrency N] [--requests N] [--tokens N] [--exchanges N]`:
/// requests/s for `/auth/keys`, tokens/s for `/emulator/authorize` and requests/s for the
/// recipient side of `/auth/usermigrationinfo`, over keep-alive connections (default 32), against
/// an in-process emulator; 100,000 key requests, 10,000 tokens and 20,000 exchanges by default.
@Sendable
func runEmulatorBenchmark(_ parsed: Parsed<EmulatorBenchmarkOptions>) async throws -> Int32 {
    let concurrency = parsed.concurrency
    let requests = parsed.requests
    let tokens = parsed.tokens
    let exchanges = parsed.exchanges

    var configuration = HTTPServerConfiguration()
    configuration.connectionLimit = max(configuration.connectionLimit, concurrency * 2)
    let emulator = try await AppleEmulator.start(configuration: configuration)
    let clientID = "com.example.bench"
    let sender = try emulator.createTeam(), recipient = try emulator.createTeam()
    try emulator.createApp(clientID: clientID, teamID: sender.teamID)
    let users = try emulator.createUsers(clientID: clientID, count: 1_000)
    let bodies = users.map { JSON.serializeBytes(["client_id": .string(clientID), "user": .string($0.id), "nonce": "n"]) }
    try emulator.initiateTransfer(clientID: clientID, toTeamID: recipient.teamID)
    let transferSubs = Array(try emulator.transferIdentifiers(clientID: clientID).values)
    try emulator.acceptTransfer(clientID: clientID)
    let secret = try ClientSecret(teamID: recipient.teamID, keyID: recipient.keyID, clientID: clientID, pem: recipient.privateKeyPEM)
        .clientSecret(issuedAt: emulator.now, lifetime: 86_400)
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
    let figures: [(String, JSONValue)] = [
        ("benchmark", "emulator"),
        ("concurrency", .number(Double(concurrency))),
        ("keys_requests", .number(Double(requests))),
        ("keys_requests_per_s", .number(Double(Int(keys.perSecond)))),
        ("authorize_tokens", .number(Double(tokens))),
        ("authorize_tokens_per_s", .number(Double(Int(authorize.perSecond)))),
        ("exchange_requests", .number(Double(exchanges))),
        ("exchange_requests_per_s", .number(Double(Int(exchange.perSecond)))),
        ("errors", .number(Double(errors))),
    ]
    var line = JSONObject()
    for (name, value) in figures.sorted(by: { $0.0 < $1.0 }) { line[name] = value }
    print(JSON.serialize(.object(line)))
    return errors == 0 ? 0 : 1
}

/// One `client_credentials` access token from the emulator.
private func benchAccessToken(_ base: URL, clientID: String, secret: String) async throws -> String {
    var request = URLRequest(url: base.appendingPathComponent("auth/token"))
    request.httpMethod = "POST"
    request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
    request.httpBody = Data("grant_type=client_credentials&scope=user.migration&client_id=\(clientID)&client_secret=\(secret)".utf8)
    let (data, _) = try await URLSession.shared.data(for: request)
    guard case .string(let token)? = try JSON.parseObject(Array(data))["access_token"] else {
        throw CommandFailure.failed("baton-bench emulator: the emulator issued no access token")
    }
    return token
}
