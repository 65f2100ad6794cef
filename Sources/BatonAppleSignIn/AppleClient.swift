import BatonConcurrency
import Foundation
import BatonLogging

/// Makes `client_secret` values for one team's key and one client ID. ``ClientSecret`` is the real one.
public protocol ClientSecretSigner: Sendable {
    /// The team that owns the key (the secret's `iss`).
    var teamID: String { get }
    /// The key's ID (the secret's `kid`).
    var keyID: String { get }
    /// The client ID (the secret's `sub`, and `client_id` in calls).
    var clientID: String { get }
    /// A signed secret valid from `issuedAt` for `lifetime` seconds.
    /// - Throws: ``AppleClientError`` (`invalidParameter`, `keyInvalid`).
    func clientSecret(issuedAt: Date, lifetime: TimeInterval) throws -> String
}

/// When and how often ``AppleClient`` retries: on 429, 5xx and transport errors, never on other statuses.
public struct RetryPolicy: Sendable, Equatable {
    /// Attempts in all, the first included; default 4.
    public var maxAttempts: Int
    /// The first backoff's ceiling, in seconds; default 0.5.
    public var baseDelay: TimeInterval
    /// The largest backoff, in seconds; default 8.
    public var maxDelay: TimeInterval
    /// The longest `Retry-After` the client waits, in seconds; a longer one ends the retries; default 30.
    public var maxRetryAfter: TimeInterval

    /// Creates a policy.
    public init(maxAttempts: Int = 4, baseDelay: TimeInterval = 0.5, maxDelay: TimeInterval = 8, maxRetryAfter: TimeInterval = 30) {
        self.maxAttempts = max(1, maxAttempts)
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.maxRetryAfter = maxRetryAfter
    }

    /// The exponential backoff after failed attempt `attempt` (1-based), with "equal jitter": half of the ceiling
    /// `min(maxDelay, baseDelay · 2^(attempt−1))` is fixed and half is scaled by `jitter` (0...1).
    public func backoff(afterAttempt attempt: Int, jitter: Double) -> TimeInterval {
        Backoff(initial: baseDelay, cap: maxDelay).delay(afterAttempt: attempt, jitter: jitter)
    }

    /// The wait before the next attempt after failed attempt `attempt`: the `Retry-After` Apple asked for when it
    /// asked (a jittered fraction of `baseDelay` added, so clients told the same time do not return together),
    /// else the backoff; nil when Apple asked for more than ``maxRetryAfter`` (the caller should stop).
    public func delay(afterAttempt attempt: Int, retryAfter: TimeInterval?, jitter: Double) -> TimeInterval? {
        guard let retryAfter else { return backoff(afterAttempt: attempt, jitter: jitter) }
        guard retryAfter <= maxRetryAfter else { return nil }
        return max(0, retryAfter) + baseDelay * min(1, max(0, jitter))
    }

    /// The longest `Retry-After` believed, in seconds: one hour. A larger value from outside is clamped to it.
    public static let retryAfterCeiling: TimeInterval = 3_600

    /// The longest `expires_in` of an access token believed, in seconds: one day.
    public static let expiresInCeiling: TimeInterval = 86_400

    /// Parses a `Retry-After` value: delta-seconds (`120`) or an HTTP date, relative to `now`, clamped to
    /// ``retryAfterCeiling``; nil when malformed.
    public static func parseRetryAfter(_ value: String, now: Date) -> TimeInterval? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if !text.isEmpty, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            return Double(text).map { min($0, retryAfterCeiling) }
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: text) else { return nil }
        return min(max(0, date.timeIntervalSince(now)), retryAfterCeiling)
    }

    /// `seconds` as whole nanoseconds for `Task.sleep`, converted checked: negative, NaN and infinite values
    /// give 0 and the result never exceeds one day, so a number from outside cannot trap the conversion.
    public static func nanoseconds(_ seconds: TimeInterval) -> UInt64 {
        Backoff.nanoseconds(seconds)
    }
}

/// An access token from `POST /auth/token`. Its value is never printed.
public struct AccessToken: Sendable, Equatable, CustomStringConvertible, CustomReflectable {
    /// The bearer token.
    public let value: String
    /// When Apple said it expires (`expires_in` after it was received).
    public let expiresAt: Date
    /// When the client renews it: shortly before ``expiresAt``.
    public let renewAt: Date

    /// `access token (expires 2026-…)`; never the value.
    public var description: String { "access token (expires \(expiresAt))" }

    /// Only the dates, so `dump` does not show the value either.
    public var customMirror: Mirror { Mirror(self, children: ["expiresAt": expiresAt, "renewAt": renewAt]) }
}

/// What the receiving team learns from exchanging a transfer identifier.
public struct ExchangedUser: Sendable, Equatable {
    /// The user's identifier under the receiving team.
    public var sub: String
    /// The user's private relay address for the receiving team, present only if they used one.
    public var email: String?
    /// Whether ``email`` is a private relay address.
    public var isPrivateEmail: Bool?

    /// Creates a result.
    public init(sub: String, email: String?, isPrivateEmail: Bool?) {
        self.sub = sub
        self.email = email
        self.isPrivateEmail = isPrivateEmail
    }
}

/// The client for Apple's user-migration endpoints, for one team's credentials.
///
/// - `POST /auth/token` (`client_credentials`, scope `user.migration`): the access token is cached and renewed
///   shortly before `expires_in`, one request in flight however many callers wait;
/// - `POST /auth/usermigrationinfo`: ``transferIdentifier(forUser:targetTeamID:)`` (sending team) and
///   ``exchange(transferIdentifier:)`` (receiving team); an `invalid_grant` renews the access token once;
/// - retries with exponential backoff and jitter on 429 (honouring `Retry-After` up to a bound), 5xx and
///   transport errors, never on other statuses; a per-request timeout; connections reused.
///
/// Client secrets are made by the client from the ``ClientSecretSigner``, short-lived (an hour by default) and
/// renewed before they expire. Secrets and tokens are never logged or put into errors. Use the sender's
/// credentials for sender calls and the recipient's for exchanges: one client per team.
public final class AppleClient: Sendable {
    /// Tunables, all with defaults.
    public struct Options: Sendable {
        /// The whole request's time limit, in seconds; default 10.
        public var requestTimeout: TimeInterval
        /// Retries; see ``RetryPolicy``.
        public var retry: RetryPolicy
        /// How long before `expires_in` the token is renewed, in seconds; default 60, at most a tenth of the
        /// token's lifetime.
        public var tokenRenewalMargin: TimeInterval
        /// Lifetime of the client secrets the client makes, in seconds; default 3600.
        public var secretLifetime: TimeInterval
        /// Connections kept open to Apple; default 8.
        public var maxConnectionsPerHost: Int

        /// Creates options.
        public init(
            requestTimeout: TimeInterval = 10,
            retry: RetryPolicy = RetryPolicy(),
            tokenRenewalMargin: TimeInterval = 60,
            secretLifetime: TimeInterval = 3600,
            maxConnectionsPerHost: Int = 8
        ) {
            self.requestTimeout = requestTimeout
            self.retry = retry
            self.tokenRenewalMargin = tokenRenewalMargin
            self.secretLifetime = secretLifetime
            self.maxConnectionsPerHost = maxConnectionsPerHost
        }
    }

    /// Apple's base URL (the emulator's in tests).
    public let baseURL: URL
    /// The tunables.
    public let options: Options
    private let signer: any ClientSecretSigner
    private let transport: any AppleTransport
    private let cache = CredentialCache()
    private let logger: Logger
    private let now: @Sendable () -> Date
    private let sleep: @Sendable (TimeInterval) async throws -> Void
    private let jitter: @Sendable () -> Double

    /// Creates a client.
    /// - Parameters:
    ///   - baseURL: `https://appleid.apple.com`, or the emulator's URL.
    ///   - credentials: the team's key and the client ID (a ``ClientSecret``).
    ///   - options: timeouts, retries, renewal margins.
    ///   - logger: receives one line per retry and per token renewal, at info or below; never secrets.
    ///   - transport: how requests are sent; default a ``URLSessionAppleTransport`` with the options' timeout.
    ///   - now: the clock, for token and secret expiry.
    ///   - sleep: waits between attempts (seconds).
    ///   - jitter: a random number in 0...1 for backoff jitter.
    public init(
        baseURL: URL,
        credentials: any ClientSecretSigner,
        options: Options = Options(),
        logger: Logger = .disabled(),
        transport: (any AppleTransport)? = nil,
        now: @escaping @Sendable () -> Date = { Date() },
        sleep: @escaping @Sendable (TimeInterval) async throws -> Void = { seconds in try await Task.sleep(nanoseconds: RetryPolicy.nanoseconds(seconds)) },
        jitter: @escaping @Sendable () -> Double = { Double.random(in: 0...1) }
    ) {
        self.baseURL = baseURL
        self.signer = credentials
        self.options = options
        self.logger = logger
        self.transport = transport ?? URLSessionAppleTransport(timeout: options.requestTimeout, maxConnectionsPerHost: options.maxConnectionsPerHost)
        self.now = now
        self.sleep = sleep
        self.jitter = jitter
    }

    /// The team whose key signs this client's secrets.
    public var teamID: String { signer.teamID }
    /// The client ID this client sends.
    public var clientID: String { signer.clientID }

    // MARK: - Calls

    /// A valid access token: the cached one, or a new one from `POST /auth/token` when it is missing or due for
    /// renewal. Concurrent callers share one request.
    /// - Throws: ``AppleClientError``; `invalidClient` when Apple refuses the credentials.
    public func accessToken() async throws -> AccessToken {
        try await accessToken(purpose: nil)
    }

    /// ``accessToken()`` on the way to `purpose` (the call the token is for), which errors name so their
    /// explanation asks for the right side's credentials.
    /// - Throws: ``AppleClientError``.
    public func accessToken(purpose: AppleCallContext.Operation?) async throws -> AccessToken {
        try await cache.token(now: now()) { [self] in
            try await self.requestAccessToken(purpose: purpose)
        }
    }

    /// Sender side: the transfer identifier of the sending team's user `sub` for the receiving team `targetTeamID`.
    /// - Throws: ``AppleClientError``; `invalidParameter`, before any call, when `sub` is empty or `targetTeamID`
    ///   is not a team ID or is this client's own team (the target is the recipient's team).
    public func transferIdentifier(forUser sub: String, targetTeamID: String) async throws -> String {
        guard !sub.isEmpty else { throw AppleClientError(.invalidParameter, context: context(.transferIdentifier), reason: "empty user identifier") }
        guard AppleIdentifierFormat.isTeamID(targetTeamID) else {
            throw AppleClientError(.invalidParameter, context: context(.transferIdentifier), reason: "the target must be the recipient's team ID: 10 upper-case letters or digits")
        }
        guard targetTeamID != signer.teamID else {
            throw AppleClientError(.invalidParameter, context: context(.transferIdentifier), reason: "the target is the sending team itself: it must be the recipient's team ID")
        }
        let response = try await authorizedMigrationCall(.transferIdentifier, fields: [("sub", sub), ("target", targetTeamID)])
        let context = context(.transferIdentifier)
        guard let answer = try? JSONDecoder().decode(TransferIdentifierAnswer.self, from: response.body), !answer.transferSub.isEmpty else {
            throw AppleClientError(.invalidResponse, context: context, status: response.status, reason: "no transfer_sub")
        }
        return answer.transferSub
    }

    /// Recipient side: exchanges a transfer identifier for the user's identifier under the receiving team.
    /// - Throws: ``AppleClientError``; `invalidParameter`, before any call, for an empty identifier.
    public func exchange(transferIdentifier: String) async throws -> ExchangedUser {
        guard !transferIdentifier.isEmpty else {
            throw AppleClientError(.invalidParameter, context: context(.exchange), reason: "empty transfer identifier")
        }
        let response = try await authorizedMigrationCall(.exchange, fields: [("transfer_sub", transferIdentifier)])
        let context = context(.exchange)
        let answer: ExchangeAnswer
        do {
            answer = try JSONDecoder().decode(ExchangeAnswer.self, from: response.body)
        } catch let error as DecodingError {
            throw AppleClientError(.invalidResponse, context: context, status: response.status, reason: ExchangeAnswer.problem(error))
        }
        guard !answer.sub.isEmpty else {
            throw AppleClientError(.invalidResponse, context: context, status: response.status, reason: "no sub")
        }
        guard answer.email != "" else {
            throw AppleClientError(.invalidResponse, context: context, status: response.status, reason: "email is not a string")
        }
        return ExchangedUser(sub: answer.sub, email: answer.email, isPrivateEmail: answer.isPrivateEmail?.value)
    }

    // MARK: - Internals

    private func context(_ operation: AppleCallContext.Operation, purpose: AppleCallContext.Operation? = nil) -> AppleCallContext {
        AppleCallContext(operation: operation, purpose: purpose, teamID: signer.teamID, keyID: signer.keyID, clientID: signer.clientID)
    }

    private func endpoint(_ name: String) -> URL {
        baseURL.appendingPathComponent("auth").appendingPathComponent(name)
    }

    /// A current client secret, made when none is cached or the cached one is due for renewal.
    private func clientSecret() async throws -> String {
        let lifetime = options.secretLifetime
        return try await cache.secret(now: now(), lifetime: lifetime) { [signer] issuedAt in
            try signer.clientSecret(issuedAt: issuedAt, lifetime: lifetime)
        }
    }

    /// `POST /auth/token`, uncached.
    private func requestAccessToken(purpose: AppleCallContext.Operation?) async throws -> AccessToken {
        let context = context(.accessToken, purpose: purpose)
        let secret = try await clientSecret()
        let response = try await send(context, url: endpoint("token"), fields: [
            ("grant_type", "client_credentials"),
            ("scope", "user.migration"),
            ("client_id", signer.clientID),
            ("client_secret", secret),
        ], bearer: nil)
        let received = now()
        guard let answer = try? JSONDecoder().decode(TokenAnswer.self, from: response.body),
              !answer.accessToken.isEmpty, answer.expiresIn > 0, answer.expiresIn.isFinite
        else {
            throw AppleClientError(.invalidResponse, context: context, status: response.status, reason: "no access_token or expires_in")
        }
        // A token announced for longer than a day is renewed after a day, and the number is never converted unchecked.
        let (value, expiresIn) = (answer.accessToken, min(answer.expiresIn, RetryPolicy.expiresInCeiling))
        if let type = answer.tokenType, type.lowercased() != "bearer" {
            throw AppleClientError(.invalidResponse, context: context, status: response.status, reason: "token_type is not bearer")
        }
        let margin = min(options.tokenRenewalMargin, expiresIn / 10)
        logger.info("apple access token renewed", ["team": signer.teamID, "expires_in": String(Int(expiresIn))])
        return AccessToken(value: value, expiresAt: received.addingTimeInterval(expiresIn), renewAt: received.addingTimeInterval(expiresIn - margin))
    }

    /// `POST /auth/usermigrationinfo` with the client's credentials and bearer token; an `invalid_grant`
    /// renews the token and tries once more.
    private func authorizedMigrationCall(_ operation: AppleCallContext.Operation, fields: [(String, String)]) async throws -> AppleHTTPResponse {
        let context = context(operation)
        var renewed = false
        while true {
            let token = try await accessToken(purpose: operation)
            let secret = try await clientSecret()
            do {
                return try await send(context, url: endpoint("usermigrationinfo"), fields: fields + [
                    ("client_id", signer.clientID),
                    ("client_secret", secret),
                ], bearer: token.value)
            } catch let error as AppleClientError where error.code == .invalidGrant && !renewed {
                renewed = true
                await cache.invalidate(token)
                logger.info("apple answered invalid_grant: renewing the access token once", ["operation": operation.rawValue])
            }
        }
    }

    /// Sends one form-encoded POST with retries; returns a 2xx response or throws the mapped error.
    private func send(_ context: AppleCallContext, url: URL, fields: [(String, String)], bearer: String?) async throws -> AppleHTTPResponse {
        var headers = [
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        ]
        if let bearer { headers["Authorization"] = "Bearer \(bearer)" }
        let request = AppleHTTPRequest(url: url, headers: headers, body: Data(AppleClient.formEncode(fields).utf8))
        let policy = options.retry
        var attempt = 0
        while true {
            attempt += 1
            let outcome: Result<AppleHTTPResponse, AppleTransportError>
            do {
                outcome = .success(try await transport.send(request))
            } catch let error as AppleTransportError {
                outcome = .failure(error)
            }
            let failure: AppleClientError
            var retryAfter: TimeInterval?
            switch outcome {
            case .success(let response):
                if (200..<300).contains(response.status) { return response }
                retryAfter = response.headers["retry-after"].flatMap { RetryPolicy.parseRetryAfter($0, now: now()) }
                failure = AppleClient.error(for: response, context: context, retryAfter: retryAfter, attempts: attempt)
                guard response.status == 429 || (500...599).contains(response.status) else { throw failure }
            case .failure(.timeout):
                failure = AppleClientError(.timeout, context: context, attempts: attempt)
            case .failure(.connectionFailed(let reason)):
                failure = AppleClientError(.connectionFailed, context: context, attempts: attempt, reason: reason)
            }
            guard attempt < policy.maxAttempts,
                  let delay = policy.delay(afterAttempt: attempt, retryAfter: retryAfter, jitter: jitter())
            else { throw failure }
            logger.info("retrying apple call", [
                "operation": context.operation.rawValue, "attempt": String(attempt), "error": failure.code.rawValue,
                "status": failure.status.map(String.init) ?? "-", "delay_ms": String(Int(delay * 1000)),
            ])
            try await sleep(delay)
        }
    }

    /// Maps a non-2xx answer to an error: Apple's `error` value when the body has one, else the status.
    static func error(for response: AppleHTTPResponse, context: AppleCallContext, retryAfter: TimeInterval?, attempts: Int) -> AppleClientError {
        var appleError: String?
        if let value = (try? JSONDecoder().decode(ErrorAnswer.self, from: response.body))?.error, AppleClientError.isPlausibleAppleError(value) {
            appleError = value
        }
        let code: AppleClientError.Code
        switch response.status {
        case 429: code = .rateLimited
        case 500...599: code = .serverError
        default: code = appleError.map(AppleClientError.code(forAppleError:)) ?? .unexpectedStatus
        }
        return AppleClientError(code, context: context, status: response.status, appleError: appleError, retryAfter: retryAfter, attempts: attempts)
    }

    /// `application/x-www-form-urlencoded` text of `fields`, in order: ASCII letters, digits and `-._~` as they
    /// are, every other UTF-8 byte as `%XX` (upper-case hex). Works on bytes: Foundation's
    /// `addingPercentEncoding` went through UTF-16 and a character-set lookup per character, a visible share of
    /// a bulk job's CPU at a million calls.
    static func formEncode(_ fields: [(String, String)]) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(fields.reduce(0) { $0 + $1.0.utf8.count + $1.1.utf8.count + 2 } + 16)
        func append(_ text: String) {
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                     UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                    out.append(byte)
                default:
                    out.append(UInt8(ascii: "%"))
                    out.append(hex[Int(byte >> 4)])
                    out.append(hex[Int(byte & 0x0F)])
                }
            }
        }
        for (index, field) in fields.enumerated() {
            if index > 0 { out.append(UInt8(ascii: "&")) }
            append(field.0)
            out.append(UInt8(ascii: "="))
            append(field.1)
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// The cached access token and client secret, shared by every call of one client.
private actor CredentialCache {
    private var token: AccessToken?
    private var tokenRequest: Task<AccessToken, any Error>?
    private var secret: (value: String, renewAt: Date)?

    /// The cached token while `now` is before its renewal time; else the result of `fetch`, which runs once for
    /// all callers waiting at the same time.
    func token(now: Date, fetch: @escaping @Sendable () async throws -> AccessToken) async throws -> AccessToken {
        if let token, now < token.renewAt { return token }
        if let tokenRequest { return try await tokenRequest.value }
        let request = Task { try await fetch() }
        tokenRequest = request
        defer { tokenRequest = nil }
        let fresh = try await request.value
        token = fresh
        return fresh
    }

    /// Forgets `used` if it is still the cached token (a newer one, renewed by another caller, is kept).
    func invalidate(_ used: AccessToken) {
        if token == used { token = nil }
    }

    /// The cached secret until a tenth of its lifetime (at most five minutes) before it expires; else a new one
    /// from `make(now)`.
    func secret(now: Date, lifetime: TimeInterval, make: @Sendable (Date) throws -> String) throws -> String {
        if let secret, now < secret.renewAt { return secret.value }
        let issuedAt = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let value = try make(issuedAt)
        secret = (value, issuedAt.addingTimeInterval(lifetime - min(300, lifetime / 10)))
        return value
    }
}
