import BatonAppleSignIn
import BatonConcurrency
import Foundation
import Synchronization
import BatonJOSE
import BatonJSON
import BatonLogging
import BatonPostgres

/// Baton's public library API: sign-in correlation, credential state, re-linking and Apple's
/// server-to-server notifications, for the HTTP service and for Swift servers that embed Baton.
///
/// ```swift
/// let engine = try await BatonEngine.start(configuration: configuration, logger: logger)
/// let result = try await engine.signIn(idToken: token, nonce: .native(raw: sessionNonce))
/// switch result.outcome {
/// case .current, .migrated: openSession(for: result.user!.key)
/// case .new: createAccount(sub: result.sub)
/// case .unmatched: askToLinkTheOldAccount()  // a transferred user Baton cannot resolve: never a new account
/// }
/// await engine.shutdown()
/// ```
///
/// Every method throws ``BatonError`` for what a caller can act on (a rejected token is `invalid_token` with
/// the reason; an unreachable database `database_unavailable`, with nothing half-written); anything else is
/// an internal failure. The engine is `Sendable`: share one instance between all requests.
public final class BatonEngine: Sendable {
    /// The store (PostgreSQL in production).
    public let store: any BatonStore
    /// Verifies identity tokens of the current team (`apple.client_ids`).
    public let verifier: IdentityTokenVerifier
    /// Verifies the sending team's tokens for re-linking (`apple.legacy_client_ids`); nil when none are configured.
    public let legacyVerifier: IdentityTokenVerifier?
    /// The longest a re-link token may have been issued before the request, in seconds (default 600).
    public let linkMaxAge: TimeInterval
    /// Link sessions live at once beyond which ``openLinkSession()`` refuses (default ``LinkSession/defaultMaxLive``).
    public let maxLinkSessions: Int
    /// Whether ``signIn(idToken:nonce:)`` refuses a call without a nonce (default false).
    public let requireNonce: Bool
    /// The oldest server-to-server notification accepted, by its `iat`, in seconds (default 86,400).
    public let notificationMaxAge: TimeInterval
    /// How long after a token's `exp` + leeway its consumed nonce is still kept, in seconds: 300.
    public static let nonceRetentionMargin: TimeInterval = 300
    private let driver: SignInDriver
    private let keys: any VerificationKeyProvider
    private let keysReady: @Sendable () -> Bool
    /// The pool the engine owns, if any (the service builds its report on it).
    package let pool: PostgresPool?
    /// The engine's clock.
    package let now: @Sendable () -> Date
    /// `apple.transfer.accepted_at`, which a running service rereads (``updateTransferAcceptedAt(_:)``).
    private let acceptance: Mutex<Date?>
    /// Until when ``openLinkSession()`` refuses without a statement: a second after the store found
    /// ``maxLinkSessions`` live, so a flood at the limit costs the database no count per request.
    private let linkSessionsFullUntil = Mutex(Date.distantPast)

    /// Creates an engine from its parts (tests and embedders with their own pool and keys).
    /// - Parameters:
    ///   - store: the store, usually a ``LegacyStore``.
    ///   - keys: Apple's keys (a ``KeySetCache`` in production).
    ///   - clientIDs: accepted `aud` values of identity tokens and notifications; must not be empty.
    ///   - legacyClientIDs: accepted `aud` of the sending team's tokens for re-linking; empty disables `link`.
    ///   - issuer: the required `iss` (default Apple's).
    ///   - linkMaxAge: freshness of re-link tokens in seconds (default 600).
    ///   - maxLinkSessions: link sessions live at once (default ``LinkSession/defaultMaxLive``).
    ///   - requireNonce: refuse sign-ins without a nonce (default false).
    ///   - notificationMaxAge: the oldest notification accepted, in seconds (default 86,400).
    ///   - keysReady: whether a usable key set is held (readiness); default always true.
    ///   - pool: a pool the engine owns and closes at ``shutdown()``.
    ///   - transferAcceptedAt: `apple.transfer.accepted_at`; sending-team identifiers are `transferred` from then on.
    ///   - now: the clock.
    public init(store: any BatonStore, keys: any VerificationKeyProvider, clientIDs: [String], legacyClientIDs: [String] = [],
                issuer: String = IdentityTokenVerifier.appleIssuer, linkMaxAge: TimeInterval = 600,
                maxLinkSessions: Int = LinkSession.defaultMaxLive, requireNonce: Bool = false, notificationMaxAge: TimeInterval = 86_400,
                keysReady: @escaping @Sendable () -> Bool = { true }, pool: PostgresPool? = nil,
                transferAcceptedAt: Date? = nil,
                now: @escaping @Sendable () -> Date = { Date() }) {
        // A token is told to be the sending team's only by its `aud` (see `BatonConfiguration.validate()`).
        precondition(Set(clientIDs).isDisjoint(with: legacyClientIDs), "a client ID is both current and legacy")
        self.store = store
        self.keys = keys
        self.verifier = IdentityTokenVerifier(clientIDs: clientIDs, keys: keys, issuer: issuer, now: now)
        self.legacyVerifier = legacyClientIDs.isEmpty ? nil
            : IdentityTokenVerifier(clientIDs: legacyClientIDs, keys: keys, issuer: issuer, now: now)
        self.linkMaxAge = linkMaxAge
        self.maxLinkSessions = maxLinkSessions
        self.requireNonce = requireNonce
        self.notificationMaxAge = notificationMaxAge
        self.driver = SignInDriver(store: store, now: now)
        self.keysReady = keysReady
        self.pool = pool
        self.acceptance = Mutex(transferAcceptedAt)
        self.now = now
    }

    /// Builds an engine from the configuration: opens the pool, checks Baton's schema and the legacy table
    /// (``LegacyStore/validateLegacyTable()``), and loads Apple's key set (a failure there only leaves the
    /// engine not ready: the cache retries).
    /// - Throws: ``BatonError`` (`database_unavailable`, `invalid_legacy_table`), ``ConfigurationError``.
    public static func start(configuration: BatonConfiguration, logger: Logger = .disabled()) async throws -> BatonEngine {
        let pool = configuration.database.pool(maxConnections: configuration.database.poolSize, logger: logger)
        do {
            let store = LegacyStore(pool: pool, legacy: try configuration.legacy.identifiers())
            do {
                for finding in try await store.validateLegacyTable().findings {
                    logger.info("legacy table checked", ["check": finding.name, "status": finding.status.rawValue, "detail": finding.detail])
                }
            } catch {
                throw BatonError.mapDatabase(error)
            }
            let cache = KeySetCache(url: configuration.apple.keysURL, logger: logger)
            do {
                try await cache.refresh()
            } catch {
                logger.warning("apple key set not loaded yet", ["error": String(describing: error)])
            }
            return BatonEngine(store: store, keys: cache, clientIDs: configuration.apple.clientIDs,
                               legacyClientIDs: configuration.apple.legacyClientIDs, issuer: configuration.apple.issuer,
                               maxLinkSessions: configuration.maxLinkSessions, requireNonce: configuration.requireNonce,
                               notificationMaxAge: TimeInterval(configuration.apple.notificationMaxAgeSeconds),
                               keysReady: { cache.isReady }, pool: pool,
                               transferAcceptedAt: configuration.apple.transfer?.acceptedAt)
        } catch {
            await pool.close()
            throw error
        }
    }

    /// Closes the pool the engine owns, if any.
    public func shutdown() async {
        await pool?.close()
    }

    // MARK: - Sign-in

    /// Verifies an identity token and correlates it with the application's records, by the rules of
    /// ``SignInDecision``.
    ///
    /// - Parameters:
    ///   - idToken: the identity token from Apple.
    ///   - nonce: the nonce the caller's session issued and the flow it went through (``ExpectedNonce``); the
    ///     verifier checks the token's claim against it. Required when ``requireNonce``. Whether or not it is given,
    ///     a token that carries a nonce claim consumes it once per `sub` (until the token's `exp` + leeway +
    ///     ``nonceRetentionMargin``) before anything is written, so a captured token cannot be replayed by leaving
    ///     the nonce out; a sign-in that fails releases it.
    /// - Returns: the outcome, the record (its `key` opens the session), `sub` and `transfer_sub`.
    /// - Throws: ``BatonError`` `invalid_request` (no nonce while one is required), `invalid_token` (reason: the
    ///   verifier's code), `nonce_reused`, `keys_unavailable`, `database_unavailable`, `inconsistent_database_answer`.
    public func signIn(idToken: String, nonce: ExpectedNonce? = nil) async throws -> SignInResult {
        try await signIn(idToken: idToken, nonce: nonce, on: nil).value
    }

    /// ``signIn(idToken:nonce:)`` as far as the calling thread gets without waiting, the one sign-in both the async
    /// API and an event loop run: the token is verified on the spot when its key is cached, then the decision's steps
    /// run on `loop`'s pipeline connection (``PipelineSignInDriver``, answered in later rounds of the loop: `.soon`)
    /// or on the async pool (``SignInDriver``: `.later`). Called on `loop`'s thread, it never blocks it.
    ///
    /// Where the async pool takes over, the rule: the whole sign-in when the token's key must be fetched; the whole
    /// decision when there is no `loop`, the store has no pipelined statements, or the loop has no pipeline
    /// connection; and, on the pipeline, a step by the rule of ``PipelineSignInDriver``.
    /// - Throws: ``BatonError`` `invalid_request` and `invalid_token` at once; the rest as ``signIn(idToken:nonce:)``,
    ///   from the work.
    package func signIn(idToken: String, nonce: ExpectedNonce?, on loop: EventLoop?) throws -> NowOrLater<SignInResult> {
        try checkNoncePresence(nonce)
        let token: AppleIDToken
        do {
            guard let verified = try verifier.verifyWithoutWaiting(idToken, nonce: nonce) else {
                return .later { [self] in try await driver.run(signInDecision(for: try await verify(idToken, with: verifier, nonce: nonce))) }
            }
            token = verified
        } catch let error as VerificationError {
            throw BatonError.rejected(error)
        }
        var decision = signInDecision(for: token)
        let first = decision.start()
        guard let onLoop = pipelineDriver(on: loop) else { return .later { [decision, driver] in try await driver.run(decision, from: first) } }
        return .soon { [decision] deliver in onLoop.run(decision, from: first, deliver) }
    }

    /// The driver of `loop`'s pipeline connection; nil when there is no loop, the store has no pipelined statements or
    /// the loop no pipeline connection.
    private func pipelineDriver(on loop: EventLoop?) -> PipelineSignInDriver? {
        guard let loop, let store = store as? any PipelinedSignInStore, let pipeline = store.pipeline(on: loop) else { return nil }
        return PipelineSignInDriver(store: store, pipeline: pipeline, fallback: driver)
    }

    private func checkNoncePresence(_ nonce: ExpectedNonce?) throws {
        if requireNonce && nonce == nil { throw BatonError(.invalidRequest, "nonce is required") }
    }

    /// The decision for a verified token: its nonce claim, when it has one, consumed for its `sub` first.
    private func signInDecision(for token: AppleIDToken) -> SignInDecision {
        let identity = VerifiedIdentity(sub: token.subject, transferSub: token.transferSubject, email: token.email,
                                        isPrivateEmail: token.isPrivateEmail)
        return .signIn(identity, nonce: nonceUse(of: token, attempt: UUID().uuidString), emailPolicy: store.emailPolicy,
                       duplicatePolicy: store.duplicatePolicy)
    }

    /// The consumption of `token`'s nonce claim by its subject in the request `attempt` (``NonceUse/attempt``), kept
    /// until the token's `exp` + leeway + ``nonceRetentionMargin``; nil when it has no nonce claim.
    private func nonceUse(of token: AppleIDToken, attempt: @autoclosure () -> String) -> NonceUse? {
        token.nonce.map { claim in
            NonceUse(nonce: claim, subject: token.subject,
                     expiresAt: token.expiresAt.addingTimeInterval(verifier.leeway + BatonEngine.nonceRetentionMargin), attempt: attempt())
        }
    }

    // MARK: - Credential state

    /// The credential state of a user identifier, as Apple's `getCredentialState(forUserID:)` answers, by the
    /// rules of ``CredentialState/init(_:transferAccepted:)``.
    /// - Throws: ``BatonError`` `invalid_request` (empty identifier), `database_unavailable`.
    public func credentialState(user: String) async throws -> CredentialState {
        guard !user.isEmpty, user.utf8.count <= 255 else { throw BatonError(.invalidRequest, "user must be 1 to 255 bytes") }
        let facts = try await database { try await store.credentialFacts(of: user) }
        let accepted = transferAcceptedAt.map { $0 <= now() } ?? false
        return CredentialState(facts, transferAccepted: accepted)
    }

    // MARK: - Re-linking

    /// Opens a link session for ``link(legacyIDToken:idToken:nonce:)``: a random nonce, good for one link until
    /// ``linkMaxAge`` from now, unless ``maxLinkSessions`` are live (then for a second every call is refused at once).
    /// Baton stores only its hash, with the request's attempt, so a repeat after a lost answer finds its own session.
    /// - Throws: ``BatonError`` `not_configured` (linking not configured), `too_many_link_sessions`,
    ///   `database_unavailable`, `inconsistent_database_answer`.
    public func openLinkSession() async throws -> LinkSession {
        guard legacyVerifier != nil else { throw BatonError(.notConfigured, "re-linking needs apple.legacy_client_ids") }
        let instant = now()
        let full = BatonError(.tooManyLinkSessions, "\(maxLinkSessions) link sessions are live; try again later")
        guard linkSessionsFullUntil.withLock({ instant >= $0 }) else { throw full }
        let session = LinkSession.make(now: instant, lifetime: linkMaxAge)
        let attempt = UUID().uuidString
        let created = try await database {
            try await store.createLinkSession(nonceHash: LinkSession.hash(of: session.nonce), expiresAt: session.expiresAt, attempt: attempt,
                                              now: instant, maxLive: maxLinkSessions)
        }
        guard created else {
            linkSessionsFullUntil.withLock { $0 = instant.addingTimeInterval(1) }
            throw full
        }
        return session
    }

    /// Rewrites the record of the sending team's identifier to the current team's, from two tokens of the
    /// same person (`method = link`), for users whose transfer identifier cannot be exchanged.
    ///
    /// The rules are ``SignInDecision``'s: `nonce` must be the nonce of a live link session
    /// (``openLinkSession()``), which this call uses up whatever it comes to; both tokens must carry it (each
    /// checked by `nonce`'s flow); each token's nonce is then consumed for its own subject, so a legacy token is good
    /// for one link and never comes back; the legacy token's `sub` must be a sending-team identifier still waiting
    /// (``BatonStore/linkableSubject(legacySubject:currentSubject:)``).
    ///
    /// - Parameters:
    ///   - legacyIDToken: a token of the sending team (verified against `legacy_client_ids`).
    ///   - idToken: a token of the current team (verified against `client_ids`).
    ///   - nonce: the link session's nonce and the flow both ceremonies went through.
    /// - Returns: `migrated` when this call rewrote the record, `current` when it already was.
    /// - Throws: ``BatonError`` `not_configured` (linking not configured), `invalid_token`, `stale_token` (either
    ///   token issued more than ``linkMaxAge`` ago), `nonce_reused` (the session is unknown, used or expired, or a
    ///   token's nonce was already consumed), `not_linkable` (the legacy `sub` is no sending-team identifier
    ///   awaiting migration), `conflict` (the new identifier belongs to another record), `legacy_record_missing`,
    ///   `database_unavailable`.
    public func link(legacyIDToken: String, idToken: String, nonce: ExpectedNonce) async throws -> SignInResult {
        guard let legacyVerifier else { throw BatonError(.notConfigured, "re-linking needs apple.legacy_client_ids") }
        let legacy = try await verify(legacyIDToken, with: legacyVerifier, nonce: nonce)
        let current = try await verify(idToken, with: verifier, nonce: nonce)
        let instant = now()
        for token in [legacy, current] where instant.timeIntervalSince(token.issuedAt) > linkMaxAge {
            throw BatonError(.staleToken, "tokens for re-linking must be issued within \(Int(linkMaxAge)) s")
        }
        let identity = VerifiedIdentity(sub: current.subject, transferSub: current.transferSubject, email: current.email,
                                        isPrivateEmail: current.isPrivateEmail)
        let attempt = UUID().uuidString
        return try await driver.run(.link(legacySub: legacy.subject, current: identity, sessionNonce: nonce.value, attempt: attempt,
                                          nonces: [legacy, current].compactMap { nonceUse(of: $0, attempt: attempt) },
                                          duplicatePolicy: store.duplicatePolicy))
    }

    // MARK: - Notifications

    /// What ``handleNotification(payload:)`` did.
    public struct NotificationResult: Sendable, Equatable {
        /// The event type, as Apple named it.
        public var type: String
        /// Whether it changed the stored state (false for a duplicate or an unknown type).
        public var changed: Bool
    }

    /// Applies one of Apple's server-to-server notifications: `payload` is a JWS signed by Apple's keys
    /// whose `aud` is a configured client ID and whose `events` claim (a JSON string, or an object) holds
    /// `type`, `sub` and `event_time` (milliseconds; `iat` when absent).
    ///
    /// The token verifier's own checks run first, in its order (``IdentityTokenVerifier/verifySignedMessage(_:maxAge:)``:
    /// the compact form and header, the key by `kid`, the signature, and only then the claims: `iss`, `aud` as for an
    /// identity token, `iat` within ``notificationMaxAge`` and not in the future beyond the leeway). Each subject keeps
    /// the `event_time` of the latest event applied, and an older one (late or replayed) changes nothing.
    /// Duplicates are harmless; unknown types are accepted and ignored.
    /// - Throws: ``BatonError`` `invalid_notification` (with why), `keys_unavailable`, `database_unavailable`.
    public func handleNotification(payload: String) async throws -> NotificationResult {
        let claims: JSONObject, iat: Double
        do {
            (claims, iat) = try await verifier.verifySignedMessage(payload, maxAge: notificationMaxAge)
        } catch let error as VerificationError {
            throw error.code == .keysUnavailable ? BatonError.rejected(error) : BatonError(.invalidNotification, error.code.rawValue)
        }
        let current = now().timeIntervalSince1970
        let events: JSONObject
        if let text = claims["events"]?.stringValue, let parsed = try? JSON.parseObject(Array(text.utf8)) {
            events = parsed
        } else if let object = claims["events"]?.objectValue {
            events = object
        } else {
            throw BatonError(.invalidNotification, "'events' must be a JSON object or a string holding one")
        }
        guard let type = events["type"]?.stringValue, let sub = events["sub"]?.stringValue, !sub.isEmpty else {
            throw BatonError(.invalidNotification, "'events' needs 'type' and 'sub'")
        }
        var eventTime = Date(timeIntervalSince1970: iat)
        if let value = events["event_time"] {
            guard case .number(let milliseconds) = value, milliseconds.isFinite, milliseconds >= 0, milliseconds / 1000 <= current + verifier.leeway else {
                throw BatonError(.invalidNotification, "'event_time' must be a past time in milliseconds")
            }
            eventTime = Date(timeIntervalSince1970: milliseconds / 1000)
        }
        guard let kind = NotificationKind(rawValue: type) else { return NotificationResult(type: type, changed: false) }
        let changed = try await database { try await store.applyNotification(kind, subject: sub, eventTime: eventTime) }
        return NotificationResult(type: type, changed: changed)
    }

    // MARK: - Readiness

    /// Whether the engine can serve: the database answers and a usable key set is held.
    public struct Readiness: Sendable, Equatable {
        /// The database answered and is writable (a primary, not a standby).
        public var database: Bool
        /// A usable key set is held.
        public var keys: Bool
        /// Both.
        public var ready: Bool { database && keys }

        /// Creates a result.
        public init(database: Bool, keys: Bool) {
            self.database = database
            self.keys = keys
        }
    }

    /// Checks the database (answering and writable) and the key set; `baton serve` calls it in the background,
    /// never per request.
    public func readiness() async -> Readiness {
        let databaseUp = (try? await store.ping()) != nil
        return Readiness(database: databaseUp, keys: keysReady())
    }

    /// Connection pool counts, for metrics.
    public struct PoolUsage: Sendable, Equatable {
        /// Connections open or being opened.
        public var open: Int
        /// Open connections not lent.
        public var idle: Int
        /// Callers waiting for a connection.
        public var waiting: Int
        /// The pool's size limit.
        public var max: Int
    }

    /// The owned pool's counts; nil when the engine owns no pool.
    public func poolUsage() async -> PoolUsage? {
        guard let pool else { return nil }
        let statistics = await pool.statistics()
        return PoolUsage(open: statistics.open, idle: statistics.idle, waiting: statistics.waiting, max: pool.maxConnections)
    }

    /// The transfer's rows by state and its migrations by method, as `/metrics` exposes them.
    public struct TransferCounts: Sendable, Equatable {
        /// Rows of `baton.transfers` by state: `pending`, `migrated`, `failed`, `unresolvable` (each present).
        public var users: [String: Int]
        /// Migrated rows by method: `signin`, `exchange`, `link` (each present).
        public var migrated: [String: Int]
    }

    /// The transfer's counts from the report's count tables (schema 0013): folds the pending deltas, then reads a
    /// few thousand rows whatever the number of users; nil when the engine owns no pool.
    /// - Throws: `PostgresError`.
    public func transferCounts() async throws -> TransferCounts? {
        guard let pool else { return nil }
        return try await pool.withConnection { connection in
            try await ReportCounts.fold(connection)
            var counts = TransferCounts(users: ["pending": 0, "migrated": 0, "failed": 0, "unresolvable": 0],
                                        migrated: ["signin": 0, "exchange": 0, "link": 0])
            for row in try await ReportCounts.stateMethod(connection) {
                let state = try row.decode(String.self, at: 0)
                let count = try row.decode(Int.self, at: 2)
                counts.users[state, default: 0] += count
                if state == "migrated", let method = try row.decode(String?.self, at: 1) { counts.migrated[method, default: 0] += count }
            }
            return counts
        }
    }

    /// When the recipient accepted the transfer (`apple.transfer.accepted_at`), as the engine holds it now.
    public var transferAcceptedAt: Date? { acceptance.withLock { $0 } }

    /// Replaces the transfer's acceptance time, as `baton serve` does when SIGHUP rereads its configuration: from
    /// the next request on, sending-team identifiers are `transferred` and the report counts the window from it.
    public func updateTransferAcceptedAt(_ date: Date?) {
        acceptance.withLock { $0 = date }
    }

    // MARK: - Helpers

    private func verify(_ token: String, with verifier: IdentityTokenVerifier, nonce: ExpectedNonce?) async throws -> AppleIDToken {
        do {
            return try await verifier.verify(token, nonce: nonce)
        } catch let error as VerificationError {
            throw BatonError.rejected(error)
        }
    }

    /// Runs `body` (once more after a transient failure: ``BatonError/retryingTransient(_:)``), then maps what is
    /// left to `database_unavailable`.
    package func database<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await BatonError.retryingTransient(body)
        } catch {
            throw BatonError.mapDatabase(error)
        }
    }
}
