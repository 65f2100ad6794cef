import BatonEmulator
import BatonAppleSignIn
import Foundation
import BatonHTTPServer
import Synchronization
import TestSupport
import Testing

/// A transfer scenario on a live emulator (real HTTP on loopback): a sending and a receiving team, one app
/// with users, and clients for each side whose clock follows the emulator's.
struct EmulatorScenario {
    let emulator: AppleEmulator
    let sender: TeamCredentials
    let recipient: TeamCredentials
    let clientID = "com.example.app"
    let users: [EmulatedUser]
    let clock: FakeClock

    static func start(users count: Int = 3) async throws -> EmulatorScenario {
        let emulator = try await AppleEmulator.start()
        let sender = try emulator.createTeam()
        let recipient = try emulator.createTeam()
        try emulator.createApp(clientID: "com.example.app", teamID: sender.teamID)
        let users = try emulator.createUsers(clientID: "com.example.app", count: count)
        return EmulatorScenario(emulator: emulator, sender: sender, recipient: recipient, users: users, clock: FakeClock(emulator.now))
    }

    /// Runs `body` on a fresh scenario and stops the emulator afterwards, whatever happens.
    static func run(users count: Int = 3, _ body: (EmulatorScenario) async throws -> Void) async throws {
        try await withTeardown(try await start(users: count), teardown: { await $0.emulator.stop() }, body)
    }

    func signer(_ team: TeamCredentials, clientID: String? = nil) throws -> ClientSecret {
        try ClientSecret(teamID: team.teamID, keyID: team.keyID, clientID: clientID ?? self.clientID, pem: team.privateKeyPEM)
    }

    /// A client for `team`; `sleep` defaults to recording without waiting.
    func client(
        _ team: TeamCredentials,
        retry: RetryPolicy = RetryPolicy(),
        timeout: TimeInterval = 10,
        baseURL: URL? = nil,
        sleep: (@Sendable (TimeInterval) async throws -> Void)? = nil
    ) throws -> AppleClient {
        try client(signer: try signer(team), retry: retry, timeout: timeout, baseURL: baseURL, sleep: sleep)
    }

    /// A client for any signer.
    func client(
        signer: ClientSecret,
        retry: RetryPolicy = RetryPolicy(),
        timeout: TimeInterval = 10,
        baseURL: URL? = nil,
        sleep: (@Sendable (TimeInterval) async throws -> Void)? = nil
    ) throws -> AppleClient {
        let clock = self.clock
        return AppleClient(
            baseURL: baseURL ?? emulator.baseURL,
            credentials: signer,
            // Secrets outlive the clock jumps of the tests (the emulator checks them on its own clock).
            options: AppleClient.Options(requestTimeout: timeout, retry: retry, secretLifetime: 86_400),
            now: { clock.now },
            sleep: sleep ?? { clock.sleep($0) },
            jitter: { 0 }
        )
    }

    /// Moves the emulator's clock and the clients' clock together.
    func advance(_ seconds: TimeInterval) throws {
        _ = try emulator.advanceClock(by: seconds)
        clock.advance(seconds)
    }

    /// Initiates and accepts the transfer, after the sender made each user's transfer identifier.
    func transfer(initiate: Bool = true) async throws -> [String] {
        if initiate { try emulator.initiateTransfer(clientID: clientID, toTeamID: recipient.teamID) }
        let senderClient = try client(sender)
        var identifiers: [String] = []
        for user in users {
            identifiers.append(try await senderClient.transferIdentifier(forUser: user.userIdentifier, targetTeamID: recipient.teamID))
        }
        _ = try emulator.acceptTransfer(clientID: clientID)
        return identifiers
    }

    func calls(_ path: String) -> Int { emulator.stats()[path].calls }
}

@Suite("AppleClient against the emulator over HTTP")
struct AppleClientEmulatorTests {
    @Test("sender side makes transfer identifiers; recipient side exchanges them for the new identity")
    func bothSides() async throws {
        try await EmulatorScenario.run() { scenario in
            let identifiers = try await scenario.transfer()
            let known = try scenario.emulator.transferIdentifiers(clientID: scenario.clientID)
            #expect(Set(identifiers) == Set(known.values))
            #expect(Set(identifiers).count == scenario.users.count)

            let recipient = try scenario.client(scenario.recipient)
            for (user, identifier) in zip(scenario.users, identifiers) {
                let exchanged = try await recipient.exchange(transferIdentifier: identifier)
                #expect(exchanged.sub != user.userIdentifier)
                let authorization = try scenario.emulator.authorize(clientID: scenario.clientID, user: user.id)
                #expect(exchanged.sub == authorization.userIdentifier)
                #expect(exchanged.isPrivateEmail == user.isPrivateEmail)
                #expect((exchanged.email != nil) == user.isPrivateEmail)
            }
            #expect(scenario.calls("/auth/token") == 2)
        }
    }

    @Test("the token is cached, renewed after the clock passes expires_in, and shared by concurrent calls")
    func tokenCachingAndRenewal() async throws {
        try await EmulatorScenario.run(users: 8) { scenario in
            let identifiers = try await scenario.transfer()
            scenario.emulator.resetStats()
            let recipient = try scenario.client(scenario.recipient)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for identifier in identifiers {
                    group.addTask { _ = try await recipient.exchange(transferIdentifier: identifier) }
                }
                try await group.waitForAll()
            }
            #expect(scenario.calls("/auth/token") == 1)
            #expect(scenario.calls("/auth/usermigrationinfo") == 8)

            try scenario.advance(3_539)
            _ = try await recipient.exchange(transferIdentifier: identifiers[0])
            #expect(scenario.calls("/auth/token") == 1)
            try scenario.advance(2)
            _ = try await recipient.exchange(transferIdentifier: identifiers[0])
            #expect(scenario.calls("/auth/token") == 2)
        }
    }

    @Test("an access token Apple no longer accepts is renewed once on invalid_grant")
    func invalidGrantRenewal() async throws {
        try await EmulatorScenario.run() { scenario in
            let identifiers = try await scenario.transfer()
            let recipient = try scenario.client(scenario.recipient)
            _ = try await recipient.exchange(transferIdentifier: identifiers[0])
            // Apple's clock passes the token's expiry while the client's does not: the client still trusts its token.
            _ = try scenario.emulator.advanceClock(by: 3_601)
            scenario.emulator.resetStats()
            _ = try await recipient.exchange(transferIdentifier: identifiers[1])
            #expect(scenario.emulator.stats()["/auth/usermigrationinfo"].errors["invalid_grant"] == 1)
            #expect(scenario.calls("/auth/token") == 1)
            #expect(scenario.calls("/auth/usermigrationinfo") == 2)
        }
    }

    @Test("each side's calls with the other side's key are invalid_client, explained")
    func wrongSide() async throws {
        try await EmulatorScenario.run() { scenario in
            try scenario.emulator.initiateTransfer(clientID: scenario.clientID, toTeamID: scenario.recipient.teamID)

            // Before acceptance the recipient does not own the app.
            let early = await #expect(throws: AppleClientError.self) {
                try await scenario.client(scenario.recipient).transferIdentifier(forUser: scenario.users[0].userIdentifier, targetTeamID: scenario.sender.teamID)
            }
            #expect(early?.code == .invalidClient)
            #expect(early?.attempts == 1)
            #expect(early?.explanation.contains("sender team's key") == true)
            // Targeting its own team is caught before anything is sent.
            let ownTeam = await #expect(throws: AppleClientError.self) {
                try await scenario.client(scenario.recipient).transferIdentifier(forUser: scenario.users[0].userIdentifier, targetTeamID: scenario.recipient.teamID)
            }
            #expect(ownTeam?.code == .invalidParameter)

            let identifiers = try await scenario.transfer(initiate: false)
            let senderExchange = await #expect(throws: AppleClientError.self) {
                try await scenario.client(scenario.sender).exchange(transferIdentifier: identifiers[0])
            }
            #expect(senderExchange?.code == .invalidClient)
            #expect(senderExchange?.context?.teamID == scenario.sender.teamID)
            #expect(senderExchange?.explanation.contains("recipient team's key") == true)
        }
    }

    @Test("a key of another team than the secret's iss is invalid_client")
    func wrongTeamKey() async throws {
        try await EmulatorScenario.run() { scenario in
            let mixed = try ClientSecret(teamID: scenario.sender.teamID, keyID: scenario.recipient.keyID, clientID: scenario.clientID, pem: scenario.recipient.privateKeyPEM)
            let error = await #expect(throws: AppleClientError.self) { try await scenario.client(signer: mixed).accessToken() }
            #expect(error?.code == .invalidClient)
            #expect(error?.status == 400)
            #expect(scenario.calls("/auth/token") == 1)
        }
    }

    @Test("after the 60-day window the exchange is invalid_request, explained as a closed window")
    func windowClosed() async throws {
        try await EmulatorScenario.run() { scenario in
            let identifiers = try await scenario.transfer()
            try scenario.advance(61 * 86_400)
            let error = await #expect(throws: AppleClientError.self) {
                try await scenario.client(scenario.recipient).exchange(transferIdentifier: identifiers[0])
            }
            #expect(error?.code == .invalidRequest)
            #expect(error?.explanation.hasPrefix("1. The 60-day window") == true)
        }
    }

    @Test("an unknown transfer identifier is invalid_request, not retried")
    func unknownIdentifier() async throws {
        try await EmulatorScenario.run() { scenario in
            _ = try await scenario.transfer()
            scenario.emulator.resetStats()
            let error = await #expect(throws: AppleClientError.self) {
                try await scenario.client(scenario.recipient).exchange(transferIdentifier: "000000.00000000000000000000000000000000.0000")
            }
            #expect(error?.code == .invalidRequest)
            #expect(scenario.calls("/auth/usermigrationinfo") == 1)
            #expect(scenario.clock.sleeps.isEmpty)
        }
    }

    @Test("5xx answers are retried up to maxAttempts with backoff")
    func serverErrorsRetried() async throws {
        try await EmulatorScenario.run() { scenario in
            try scenario.emulator.setFaults(EmulatorFaults(errorRate: 1, errorStatus: 502))
            let error = await #expect(throws: AppleClientError.self) {
                try await scenario.client(scenario.sender, retry: RetryPolicy(maxAttempts: 3, baseDelay: 0.5)).accessToken()
            }
            #expect(error?.code == .serverError)
            #expect(error?.status == 502)
            #expect(scenario.calls("/auth/token") == 3)
            #expect(scenario.clock.sleeps == [0.25, 0.5])

            try scenario.emulator.setFaults(EmulatorFaults())
            #expect(try await scenario.client(scenario.sender).accessToken().value.isEmpty == false)
        }
    }

    @Test("the emulator's 429 Retry-After is honoured: the client waits as asked, then succeeds")
    func rateLimitHonoured() async throws {
        try await EmulatorScenario.run { scenario in
            // One request per second, bucket of one: the first call spends it, the second is told to wait 1 s.
            try scenario.emulator.setFaults(EmulatorFaults(rateLimitPerSecond: 1))
            let waits = Mutex<[TimeInterval]>([])
            let sleep: @Sendable (TimeInterval) async throws -> Void = { seconds in
                waits.withLock { $0.append(seconds) }
                try await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
            }
            _ = try await scenario.client(scenario.sender, sleep: sleep).accessToken()
            _ = try await scenario.client(scenario.sender, sleep: sleep).accessToken()
            let recorded = waits.withLock { $0 }
            let limited = scenario.emulator.stats()["/auth/token"].rateLimited
            #expect(recorded.count == limited)
            #expect(recorded.allSatisfy { (1...2).contains($0) }, "waits \(recorded)")
        }
    }

    @Test("a Retry-After above the bound stops the retries at once")
    func rateLimitBounded() async throws {
        try await EmulatorScenario.run() { scenario in
            try scenario.emulator.setFaults(EmulatorFaults(rateLimitPerSecond: 0.01))
            let error = await #expect(throws: AppleClientError.self) {
                try await scenario.client(scenario.sender, retry: RetryPolicy(maxRetryAfter: 30)).accessToken()
            }
            #expect(error?.code == .rateLimited)
            #expect((error?.retryAfter ?? 0) > 30)
            #expect(scenario.calls("/auth/token") == 1)
            #expect(scenario.clock.sleeps.isEmpty)
        }
    }

    @Test("a slow answer times out per request and is retried")
    func perRequestTimeout() async throws {
        try await EmulatorScenario.run() { scenario in
            try scenario.emulator.setFaults(EmulatorFaults(latencyMilliseconds: 3_000))
            let error = await #expect(throws: AppleClientError.self) {
                try await scenario.client(scenario.sender, retry: RetryPolicy(maxAttempts: 2), timeout: 0.5).accessToken()
            }
            #expect(error?.code == .timeout)
            #expect(error?.attempts == 2)
            #expect(scenario.clock.sleeps.count == 1)
        }
    }

    @Test("a closed port is a connection failure after the retries")
    func connectionRefused() async throws {
        let scenario = try await EmulatorScenario.start()
        let closed = scenario.emulator.baseURL
        await scenario.emulator.stop()
        let error = await #expect(throws: AppleClientError.self) {
            try await scenario.client(scenario.sender, retry: RetryPolicy(maxAttempts: 2), baseURL: closed).accessToken()
        }
        #expect(error?.code == .connectionFailed)
        #expect(error?.attempts == 2)
    }
}

@Suite("URLSessionAppleTransport")
struct URLSessionAppleTransportTests {
    @Test("a redirect is not followed, so the secret never reaches another URL")
    func refusesRedirects() async throws {
        let hits = Mutex<[String]>([])
        var router = Router()
        router.post("/auth/token") { request in
            hits.withLock { $0.append("token") }
            return HTTPResponse(status: 307, headers: ["Location": "/elsewhere/auth/token"], body: [])
        }
        router.post("/elsewhere/auth/token") { request in
            hits.withLock { $0.append("elsewhere \(String(decoding: request.body, as: UTF8.self))") }
            return HTTPResponse.json(serialized: #"{"access_token":"stolen","token_type":"Bearer","expires_in":3600}"#)
        }
        try await withServer(router) { _, port in
            let clock = FakeClock()
            let client = AppleClient(
                baseURL: URL(string: "http://127.0.0.1:\(port)")!, credentials: FakeSigner(),
                options: AppleClient.Options(retry: RetryPolicy(maxAttempts: 1)),
                transport: URLSessionAppleTransport(timeout: 30), now: { clock.now }, sleep: { clock.sleep($0) }
            )
            let error = await #expect(throws: AppleClientError.self) { try await client.accessToken() }
            #expect(error?.code == .unexpectedStatus)
            #expect(error?.status == 307)
            #expect(hits.withLock { $0 } == ["token"])
        }
    }

    @Test("an answer past the size limit is abandoned unread: a transport failure")
    func refusesOversizeAnswers() async throws {
        var router = Router()
        router.post("/auth/token") { _ in
            HTTPResponse.json(serialized: #"{"access_token":"\#(String(repeating: "a", count: 2_000))","token_type":"Bearer","expires_in":3600}"#)
        }
        try await withServer(router) { _, port in
            let clock = FakeClock()
            let client = AppleClient(
                baseURL: URL(string: "http://127.0.0.1:\(port)")!, credentials: FakeSigner(),
                options: AppleClient.Options(retry: RetryPolicy(maxAttempts: 1)),
                transport: URLSessionAppleTransport(timeout: 30, maxBodyBytes: 1_000), now: { clock.now }, sleep: { clock.sleep($0) }
            )
            let error = await #expect(throws: AppleClientError.self) { try await client.accessToken() }
            #expect(error?.code == .connectionFailed)
            #expect(error?.reason == "answer larger than 1000 bytes")
        }
    }

    @Test("Retry-After from a live server is waited exactly, then the call succeeds")
    func exactRetryAfter() async throws {
        let calls = Mutex(0)
        var router = Router()
        router.post("/auth/token") { _ in
            let call = calls.withLock { count in
                count += 1
                return count
            }
            if call == 1 {
                return HTTPResponse(status: 429, headers: ["Retry-After": "2"], body: Array(#"{"error":"rate_limited"}"#.utf8))
            }
            return HTTPResponse.json(serialized: #"{"access_token":"t","token_type":"Bearer","expires_in":3600}"#)
        }
        try await withServer(router) { _, port in
            let clock = FakeClock()
            let client = AppleClient(
                baseURL: URL(string: "http://127.0.0.1:\(port)")!, credentials: FakeSigner(),
                now: { clock.now }, sleep: { clock.sleep($0) }, jitter: { 0 }
            )
            let token = try await client.accessToken()
            #expect(token.value == "t")
            #expect(clock.sleeps == [2])
            #expect(calls.withLock { $0 } == 2)
        }
    }

    @Test("form fields are percent-encoded and reach the server intact")
    func formEncoding() async throws {
        let received = Mutex<[String: String]>([:])
        var router = Router()
        router.post("/auth/usermigrationinfo") { request in
            received.withLock { $0 = (try? request.formValues()) ?? [:] }
            return HTTPResponse.json(serialized: #"{"sub":"s"}"#)
        }
        router.post("/auth/token") { _ in
            HTTPResponse.json(serialized: #"{"access_token":"t","token_type":"Bearer","expires_in":3600}"#)
        }
        try await withServer(router) { _, port in
            let client = AppleClient(baseURL: URL(string: "http://127.0.0.1:\(port)")!, credentials: FakeSigner())
            _ = try await client.exchange(transferIdentifier: "a+b/c=d&e f.é")
            #expect(received.withLock { $0["transfer_sub"] } == "a+b/c=d&e f.é")
            #expect(received.withLock { $0["client_id"] } == "com.example.app")
        }
    }
}
