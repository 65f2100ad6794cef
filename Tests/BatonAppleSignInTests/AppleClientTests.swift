import BatonAppleSignIn
import Foundation
import Testing

@Suite("AppleClient with a scripted transport")
struct AppleClientTests {
    let exchangeOK = ScriptedTransport.Step.respond(200, #"{"sub":"001234.new","email":"x@privaterelay.appleid.com","is_private_email":true}"#)

    @Test("the token request is a form-encoded client_credentials grant for user.migration")
    func tokenRequestShape() async throws {
        let transport = ScriptedTransport()
        let client = makeClient(transport, clock: FakeClock())
        _ = try await client.accessToken()
        let request = try #require(transport.requests(to: "token").first)
        #expect(request.url.absoluteString == "https://apple.test/auth/token")
        #expect(request.headers["Content-Type"] == "application/x-www-form-urlencoded")
        #expect(request.headers["Authorization"] == nil)
        let fields = ScriptedTransport.fields(request)
        #expect(fields == [
            "grant_type": "client_credentials", "scope": "user.migration",
            "client_id": "com.example.app", "client_secret": "secret-1-SECRETMATERIAL",
        ])
    }

    @Test("form bodies percent-encode every byte but ASCII letters, digits and -._~, in upper-case hex")
    func formEncoding() async throws {
        let transport = ScriptedTransport()
        transport.script("usermigrationinfo", [.respond(200, #"{"transfer_sub":"T.1"}"#)])
        let client = makeClient(transport, clock: FakeClock())
        _ = try await client.transferIdentifier(forUser: "a b+c/é~-._&=%", targetTeamID: "CCCCCCCCCC")
        let request = try #require(transport.requests(to: "usermigrationinfo").first)
        let body = String(decoding: request.body, as: UTF8.self)
        #expect(body.hasPrefix("sub=a%20b%2Bc%2F%C3%A9~-._%26%3D%25&target=CCCCCCCCCC&client_id=com.example.app&client_secret="))
        #expect(ScriptedTransport.fields(request)["sub"] == "a b+c/é~-._&=%")
    }

    @Test("usermigrationinfo calls carry the bearer token, client ID and secret")
    func migrationRequestShape() async throws {
        let transport = ScriptedTransport()
        transport.script("usermigrationinfo", [.respond(200, #"{"transfer_sub":"T.1"}"#), exchangeOK])
        let client = makeClient(transport, clock: FakeClock())
        #expect(try await client.transferIdentifier(forUser: "000111.old", targetTeamID: "CCCCCCCCCC") == "T.1")
        let user = try await client.exchange(transferIdentifier: "T.1")
        #expect(user == ExchangedUser(sub: "001234.new", email: "x@privaterelay.appleid.com", isPrivateEmail: true))

        let calls = transport.requests(to: "usermigrationinfo")
        #expect(calls.count == 2)
        #expect(calls.allSatisfy { $0.headers["Authorization"] == "Bearer TOKEN-1-SECRET" })
        #expect(ScriptedTransport.fields(calls[0]) == ["sub": "000111.old", "target": "CCCCCCCCCC", "client_id": "com.example.app", "client_secret": "secret-1-SECRETMATERIAL"])
        #expect(ScriptedTransport.fields(calls[1]) == ["transfer_sub": "T.1", "client_id": "com.example.app", "client_secret": "secret-1-SECRETMATERIAL"])
    }

    @Test("malformed arguments are refused before any call", arguments: [("", "AAAAAAAAAA"), ("000111.old", "aaaaaaaaaa"), ("000111.old", "BBBBBBBBBB")])
    func malformedArguments(_ sub: String, _ target: String) async throws {
        let transport = ScriptedTransport()
        let client = makeClient(transport, clock: FakeClock())
        let error = await #expect(throws: AppleClientError.self) { try await client.transferIdentifier(forUser: sub, targetTeamID: target) }
        #expect(error?.code == .invalidParameter)
        let empty = await #expect(throws: AppleClientError.self) { try await client.exchange(transferIdentifier: "") }
        #expect(empty?.code == .invalidParameter)
        #expect(transport.requests.isEmpty)
    }

    @Test("is_private_email may be a string, and email may be absent")
    func exchangeVariants() async throws {
        let transport = ScriptedTransport()
        transport.script("usermigrationinfo", [
            .respond(200, #"{"sub":"s1","email":"a@b.c","is_private_email":"false"}"#),
            .respond(200, #"{"sub":"s2"}"#),
            .respond(200, #"{"email":"a@b.c"}"#),
            .respond(200, #"{"sub":"s3","is_private_email":"maybe"}"#),
        ])
        let client = makeClient(transport, clock: FakeClock())
        #expect(try await client.exchange(transferIdentifier: "t") == ExchangedUser(sub: "s1", email: "a@b.c", isPrivateEmail: false))
        #expect(try await client.exchange(transferIdentifier: "t") == ExchangedUser(sub: "s2", email: nil, isPrivateEmail: nil))
        for _ in 0..<2 {
            let error = await #expect(throws: AppleClientError.self) { try await client.exchange(transferIdentifier: "t") }
            #expect(error?.code == .invalidResponse)
        }
    }

    @Test("the access token is cached until shortly before expires_in, then renewed")
    func tokenCaching() async throws {
        let transport = ScriptedTransport()
        let clock = FakeClock()
        let client = makeClient(transport, clock: clock)
        let first = try await client.accessToken()
        #expect(first.expiresAt == clock.now.addingTimeInterval(3600))
        #expect(first.renewAt == clock.now.addingTimeInterval(3540))
        clock.advance(3539)
        #expect(try await client.accessToken() == first)
        #expect(transport.requests(to: "token").count == 1)
        clock.advance(1)
        let second = try await client.accessToken()
        #expect(second.value == "TOKEN-2-SECRET")
        #expect(transport.requests(to: "token").count == 2)
    }

    @Test("a short-lived token is renewed a tenth of its life early")
    func shortTokenMargin() async throws {
        let transport = ScriptedTransport()
        transport.script("token", [.respond(200, #"{"access_token":"short","token_type":"bearer","expires_in":100}"#)])
        let clock = FakeClock()
        let token = try await makeClient(transport, clock: clock).accessToken()
        #expect(token.renewAt == clock.now.addingTimeInterval(90))
    }

    @Test("numbers from outside are clamped: expires_in to a day, Retry-After to an hour, waits converted checked")
    func clamps() async throws {
        let transport = ScriptedTransport()
        transport.script("token", [.respond(200, #"{"access_token":"long","token_type":"bearer","expires_in":1e300}"#)])
        let clock = FakeClock()
        let token = try await makeClient(transport, clock: clock).accessToken()
        #expect(token.expiresAt == clock.now.addingTimeInterval(86_400))
        let now = Date()
        #expect(RetryPolicy.parseRetryAfter("9300000000", now: now) == 3_600)
        #expect(RetryPolicy.parseRetryAfter(String(repeating: "9", count: 400), now: now) == 3_600)
        #expect(RetryPolicy.parseRetryAfter("120", now: now) == 120)
        #expect(RetryPolicy.nanoseconds(9_300_000_000) == 86_400 * 1_000_000_000)
        #expect(RetryPolicy.nanoseconds(.infinity) == 0 && RetryPolicy.nanoseconds(.nan) == 0 && RetryPolicy.nanoseconds(-1) == 0)
        #expect(RetryPolicy.nanoseconds(0.25) == 250_000_000)
    }

    @Test("concurrent callers share one token request")
    func oneTokenRequestInFlight() async throws {
        let transport = ScriptedTransport(tokenDelay: 0.2)
        transport.script("usermigrationinfo", Array(repeating: exchangeOK, count: 20))
        let client = makeClient(transport, clock: FakeClock())
        try await withThrowingTaskGroup(of: ExchangedUser.self) { group in
            for index in 0..<20 {
                group.addTask { try await client.exchange(transferIdentifier: "T.\(index)") }
            }
            for try await user in group { #expect(user.sub == "001234.new") }
        }
        #expect(transport.requests(to: "token").count == 1)
        #expect(transport.requests(to: "usermigrationinfo").count == 20)
    }

    @Test("a failed token request is not cached: the next call tries again")
    func failedTokenNotCached() async throws {
        let transport = ScriptedTransport()
        transport.script("token", [.respond(400, #"{"error":"invalid_client"}"#)])
        let client = makeClient(transport, clock: FakeClock())
        let error = await #expect(throws: AppleClientError.self) { try await client.accessToken() }
        #expect(error?.code == .invalidClient)
        #expect(try await client.accessToken().value == "TOKEN-1-SECRET")
    }

    @Test("invalid_grant on use renews the access token once")
    func invalidGrantRenewsOnce() async throws {
        let transport = ScriptedTransport()
        transport.script("usermigrationinfo", [.respond(400, #"{"error":"invalid_grant"}"#), exchangeOK])
        let client = makeClient(transport, clock: FakeClock())
        #expect(try await client.exchange(transferIdentifier: "T.1").sub == "001234.new")
        let calls = transport.requests(to: "usermigrationinfo")
        #expect(calls.map { $0.headers["Authorization"] } == ["Bearer TOKEN-1-SECRET", "Bearer TOKEN-2-SECRET"])
    }

    @Test("a second invalid_grant is an error, after exactly one renewal")
    func invalidGrantTwice() async throws {
        let transport = ScriptedTransport()
        transport.script("usermigrationinfo", [.respond(400, #"{"error":"invalid_grant"}"#), .respond(400, #"{"error":"invalid_grant"}"#)])
        let client = makeClient(transport, clock: FakeClock())
        let error = await #expect(throws: AppleClientError.self) { try await client.exchange(transferIdentifier: "T.1") }
        #expect(error?.code == .invalidGrant)
        #expect(error?.context?.operation == .exchange)
        #expect(transport.requests(to: "token").count == 2)
        #expect(transport.requests(to: "usermigrationinfo").count == 2)
    }

    @Test("client secrets are short-lived and renewed before they expire")
    func secretRenewal() async throws {
        let transport = ScriptedTransport()
        let clock = FakeClock()
        let signer = FakeSigner()
        let client = makeClient(transport, clock: clock, signer: signer)
        transport.script("usermigrationinfo", Array(repeating: exchangeOK, count: 3))
        _ = try await client.exchange(transferIdentifier: "a")
        clock.advance(3000)
        _ = try await client.exchange(transferIdentifier: "b")
        #expect(signer.issuedAt.count == 1)
        clock.advance(300)
        _ = try await client.exchange(transferIdentifier: "c")
        #expect(signer.issuedAt.count == 2)
        #expect(ScriptedTransport.fields(transport.requests(to: "usermigrationinfo")[2])["client_secret"] == "secret-2-SECRETMATERIAL")
    }

    @Test("5xx answers are retried with exponential backoff and jitter")
    func retriesServerErrors() async throws {
        let transport = ScriptedTransport()
        transport.script("token", [.respond(503, ""), .respond(500, #"{"error":"server_error"}"#), .fail(.connectionFailed("reset"))])
        let clock = FakeClock()
        let client = makeClient(transport, clock: clock)
        #expect(try await client.accessToken().value == "TOKEN-1-SECRET")
        #expect(transport.requests(to: "token").count == 4)
        let policy = RetryPolicy()
        #expect(clock.sleeps == [1, 2, 3].map { policy.backoff(afterAttempt: $0, jitter: 0.5) })
        #expect(clock.sleeps == [0.375, 0.75, 1.5])
    }

    @Test("retries stop after maxAttempts with the last error")
    func retriesBounded() async throws {
        let transport = ScriptedTransport()
        transport.script("token", Array(repeating: .respond(502, ""), count: 4))
        let clock = FakeClock()
        let client = makeClient(transport, clock: clock)
        let error = await #expect(throws: AppleClientError.self) { try await client.accessToken() }
        #expect(error?.code == .serverError)
        #expect(error?.status == 502)
        #expect(error?.attempts == 4)
        #expect(clock.sleeps.count == 3)
    }

    @Test("timeouts and connection failures are retried, then reported")
    func transportErrors() async throws {
        let transport = ScriptedTransport()
        transport.script("token", Array(repeating: .fail(.timeout), count: 4))
        transport.script("token", Array(repeating: .fail(.connectionFailed("cannot connect to host")), count: 4))
        let client = makeClient(transport, clock: FakeClock())
        let timeout = await #expect(throws: AppleClientError.self) { try await client.accessToken() }
        #expect(timeout?.code == .timeout)
        let refused = await #expect(throws: AppleClientError.self) { try await client.accessToken() }
        #expect(refused?.code == .connectionFailed)
        #expect(refused?.description.contains("cannot connect to host") == true)
    }

    @Test("429 honours Retry-After")
    func honoursRetryAfter() async throws {
        let transport = ScriptedTransport()
        transport.script("token", [.respond(429, "", headers: ["Retry-After": "7"])])
        let clock = FakeClock()
        _ = try await makeClient(transport, clock: clock).accessToken()
        #expect(clock.sleeps == [7.25])
    }

    @Test("a Retry-After beyond the bound ends the retries at once")
    func boundedRetryAfter() async throws {
        let transport = ScriptedTransport()
        transport.script("token", [.respond(429, #"{"error":"rate_limited"}"#, headers: ["retry-after": "120"])])
        let clock = FakeClock()
        let error = await #expect(throws: AppleClientError.self) { try await makeClient(transport, clock: clock).accessToken() }
        #expect(error?.code == .rateLimited)
        #expect(error?.retryAfter == 120)
        #expect(clock.sleeps.isEmpty)
        #expect(transport.requests(to: "token").count == 1)
    }

    @Test("429 without Retry-After backs off")
    func rateLimitedBacksOff() async throws {
        let transport = ScriptedTransport()
        transport.script("token", Array(repeating: .respond(429, ""), count: 4))
        let clock = FakeClock()
        let error = await #expect(throws: AppleClientError.self) { try await makeClient(transport, clock: clock).accessToken() }
        #expect(error?.code == .rateLimited)
        #expect(clock.sleeps == [0.375, 0.75, 1.5])
    }

    /// Every 4xx: Apple's error value → code; none is retried.
    static let appleErrors: [(Int, String, AppleClientError.Code, String?)] = [
        (400, #"{"error":"invalid_request"}"#, .invalidRequest, "invalid_request"),
        (400, #"{"error":"invalid_client"}"#, .invalidClient, "invalid_client"),
        (401, #"{"error":"invalid_client"}"#, .invalidClient, "invalid_client"),
        (400, #"{"error":"invalid_grant"}"#, .invalidGrant, "invalid_grant"),
        (400, #"{"error":"unauthorized_client"}"#, .unauthorizedClient, "unauthorized_client"),
        (400, #"{"error":"unsupported_grant_type"}"#, .unsupportedGrantType, "unsupported_grant_type"),
        (400, #"{"error":"invalid_scope"}"#, .invalidScope, "invalid_scope"),
        (400, #"{"error":"invalid_token"}"#, .otherAppleError, "invalid_token"),
        (400, #"{"error":"eyJhbGciOiJFUzI1NiJ9.reflected secret"}"#, .unexpectedStatus, nil),
        (403, "forbidden", .unexpectedStatus, nil),
        (404, "", .unexpectedStatus, nil),
        (302, "", .unexpectedStatus, nil),
    ]

    @Test("each Apple error is mapped and not retried", arguments: appleErrors.indices)
    func appleErrorMapping(_ index: Int) async throws {
        let (status, body, code, appleError) = Self.appleErrors[index]
        let transport = ScriptedTransport()
        transport.script("token", [.respond(status, body)])
        let clock = FakeClock()
        let error = await #expect(throws: AppleClientError.self) { try await makeClient(transport, clock: clock).accessToken() }
        #expect(error?.code == code)
        #expect(error?.status == status)
        #expect(error?.appleError == appleError)
        #expect(error?.attempts == 1)
        #expect(transport.requests(to: "token").count == 1)
        #expect(clock.sleeps.isEmpty)
        #expect(error?.description.contains("reflected") == false)
    }

    @Test("a 200 that is not a token is an invalid response", arguments: [
        "", "[]", #"{"token_type":"bearer","expires_in":3600}"#, #"{"access_token":"a","expires_in":0}"#,
        #"{"access_token":"a","expires_in":"soon"}"#, #"{"access_token":"a","token_type":"mac","expires_in":3600}"#,
    ])
    func invalidTokenResponses(_ body: String) async throws {
        let transport = ScriptedTransport()
        transport.script("token", [.respond(200, body)])
        let error = await #expect(throws: AppleClientError.self) { try await makeClient(transport, clock: FakeClock()).accessToken() }
        #expect(error?.code == .invalidResponse)
    }

    @Test("an exchange answer of the wrong shape is an invalid response naming the member", arguments: [
        ("", "no sub"), (#"{"email":"x@example.com"}"#, "no sub"), (#"{"sub":""}"#, "no sub"),
        (#"{"sub":"001.a","email":5}"#, "email is not a string"), (#"{"sub":"001.a","email":""}"#, "email is not a string"),
        (#"{"sub":"001.a","is_private_email":"yes"}"#, "is_private_email is not a boolean"),
    ])
    func invalidExchangeResponses(_ body: String, _ reason: String) async throws {
        let transport = ScriptedTransport()
        transport.script("usermigrationinfo", [.respond(200, body)])
        let error = await #expect(throws: AppleClientError.self) { try await makeClient(transport, clock: FakeClock()).exchange(transferIdentifier: "T.1") }
        #expect(error?.code == .invalidResponse)
        #expect(error?.reason == reason)
    }

    @Test("an exchange answer takes is_private_email as a Boolean or as the string Apple sometimes sends")
    func exchangeFlagShapes() async throws {
        let transport = ScriptedTransport()
        transport.script("usermigrationinfo", [
            .respond(200, #"{"sub":"001.a","email":null,"is_private_email":"true"}"#), .respond(200, #"{"sub":"001.b","is_private_email":false}"#),
        ])
        let client = makeClient(transport, clock: FakeClock())
        #expect(try await client.exchange(transferIdentifier: "T.1") == ExchangedUser(sub: "001.a", email: nil, isPrivateEmail: true))
        #expect(try await client.exchange(transferIdentifier: "T.2") == ExchangedUser(sub: "001.b", email: nil, isPrivateEmail: false))
    }

    @Test("secrets and tokens appear in no log line and no error")
    func noSecretsLeak() async throws {
        let transport = ScriptedTransport()
        transport.script("token", [.respond(503, "")])
        transport.script("usermigrationinfo", [.respond(400, #"{"error":"invalid_grant"}"#), .respond(429, "", headers: ["Retry-After": "1"]), .respond(400, #"{"error":"invalid_client"}"#)])
        let logs = LogCapture()
        let client = makeClient(transport, clock: FakeClock(), logs: logs)
        let error = await #expect(throws: AppleClientError.self) { try await client.exchange(transferIdentifier: "T.SECRETTRANSFER") }
        #expect(error?.code == .invalidClient)
        #expect(logs.all.count >= 3)
        var dumped = ""
        dump(transport.requests, to: &dumped)
        dump(try await client.accessToken(), to: &dumped)
        for text in logs.all + [error.map { "\($0)" } ?? "", error?.explanation ?? "", String(reflecting: try await client.accessToken()),
                                "\(transport.requests)", dumped] {
            #expect(!text.contains("SECRET"), "leaked: \(text)")
        }
    }
}

@Suite("RetryPolicy")
struct RetryPolicyTests {
    @Test("the backoff doubles up to its ceiling, half of it jittered")
    func schedule() {
        let policy = RetryPolicy(maxAttempts: 10, baseDelay: 0.5, maxDelay: 8, maxRetryAfter: 30)
        #expect((1...7).map { policy.backoff(afterAttempt: $0, jitter: 1) } == [0.5, 1, 2, 4, 8, 8, 8])
        #expect((1...7).map { policy.backoff(afterAttempt: $0, jitter: 0) } == [0.25, 0.5, 1, 2, 4, 4, 4])
        #expect(policy.backoff(afterAttempt: 3, jitter: 7) == 2)
    }

    @Test("Retry-After is honoured up to the bound")
    func retryAfterBound() {
        let policy = RetryPolicy(baseDelay: 0.5, maxRetryAfter: 30)
        #expect(policy.delay(afterAttempt: 1, retryAfter: 30, jitter: 0) == 30)
        #expect(policy.delay(afterAttempt: 1, retryAfter: 10, jitter: 1) == 10.5)
        #expect(policy.delay(afterAttempt: 1, retryAfter: 31, jitter: 0) == nil)
        #expect(policy.delay(afterAttempt: 2, retryAfter: nil, jitter: 1) == 1)
    }

    @Test("Retry-After parses seconds and HTTP dates")
    func parsing() {
        let now = Date(timeIntervalSince1970: 1_445_412_480) // Wed, 21 Oct 2015 07:28:00 GMT
        #expect(RetryPolicy.parseRetryAfter("120", now: now) == 120)
        #expect(RetryPolicy.parseRetryAfter(" 0 ", now: now) == 0)
        #expect(RetryPolicy.parseRetryAfter("Wed, 21 Oct 2015 07:28:30 GMT", now: now) == 30)
        #expect(RetryPolicy.parseRetryAfter("Wed, 21 Oct 2015 07:27:00 GMT", now: now) == 0)
        #expect(RetryPolicy.parseRetryAfter("-5", now: now) == nil)
        #expect(RetryPolicy.parseRetryAfter("soon", now: now) == nil)
        #expect(RetryPolicy.parseRetryAfter("1.5", now: now) == nil)
    }
}

@Suite("AppleClientError")
struct AppleClientErrorTests {
    func context(_ operation: AppleCallContext.Operation) -> AppleCallContext {
        AppleCallContext(operation: operation, teamID: "BBBBBBBBBB", keyID: "KEYB000001", clientID: "com.example.app")
    }

    @Test("invalid_client lists the likely causes in order")
    func invalidClientExplanation() throws {
        let error = AppleClientError(.invalidClient, context: context(.exchange), status: 400, appleError: "invalid_client", attempts: 1)
        let text = error.explanation
        let markers = ["not transferred yet", "wrong side's", "includes the team ID", "team other than the app's", "secret expired"]
        let positions = try markers.map { marker in try #require(text.range(of: marker)?.lowerBound, "missing: \(marker)") }
        #expect(positions == positions.sorted())
        #expect(text.contains("recipient team's key"))
        #expect(text.contains("team BBBBBBBBBB's key KEYB000001"))
        #expect(error.description == "Apple rejected the exchange (recipient side) for com.example.app with team BBBBBBBBBB's key KEYB000001: invalid_client [HTTP 400]")
    }

    @Test("the sender side's explanation asks for the sender's key")
    func senderExplanation() {
        let error = AppleClientError(.invalidClient, context: context(.transferIdentifier), status: 400, appleError: "invalid_client")
        #expect(error.explanation.contains("sender team's key"))
    }

    @Test("a client ID with a team prefix is shown without it in the fix")
    func teamPrefixFix() {
        let context = AppleCallContext(operation: .accessToken, teamID: "BBBBBBBBBB", keyID: "KEYB000001", clientID: "BBBBBBBBBB.com.example.app")
        let error = AppleClientError(.invalidClient, context: context, status: 400, appleError: "invalid_client")
        #expect(error.explanation.contains("send 'com.example.app', not 'TEAMID.com.example.app'"))
    }

    @Test("every code has a description and an explanation", arguments: [
        AppleClientError.Code.keyUnreadable, .keyInvalid, .invalidParameter, .invalidRequest, .invalidClient, .invalidGrant,
        .unauthorizedClient, .unsupportedGrantType, .invalidScope, .otherAppleError, .rateLimited, .serverError,
        .unexpectedStatus, .invalidResponse, .timeout, .connectionFailed,
    ])
    func everyCode(_ code: AppleClientError.Code) {
        let error = AppleClientError(code, context: context(.accessToken), status: 400, retryAfter: 5, attempts: 2)
        #expect(!error.description.isEmpty)
        #expect(error.explanation.hasPrefix("1. "))
    }

    @Test("identifier formats")
    func identifierFormats() {
        #expect(AppleIdentifierFormat.isTeamID("A1B2C3D4E5"))
        #expect(!AppleIdentifierFormat.isTeamID("a1b2c3d4e5"))
        #expect(!AppleIdentifierFormat.isTeamID("A1B2C3D4E"))
        #expect(AppleIdentifierFormat.isKeyID("KeyA000001"))
        #expect(!AppleIdentifierFormat.isKeyID("KEY-000001"))
        #expect(AppleIdentifierFormat.clientIDProblem("com.example.app") == nil)
        #expect(AppleIdentifierFormat.clientIDProblem("A1B2C3D4E5.com.example.app") != nil)
        #expect(AppleIdentifierFormat.clientIDProblem("com.example app") != nil)
        #expect(AppleIdentifierFormat.clientIDProblem("") != nil)
        #expect(AppleIdentifierFormat.strippingTeamPrefix("A1B2C3D4E5.com.example.app") == "com.example.app")
        #expect(AppleIdentifierFormat.strippingTeamPrefix("com.example.app") == "com.example.app")
    }
}
