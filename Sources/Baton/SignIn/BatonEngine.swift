import BatonAppleSignIn
import BatonConcurrency
import Foundation
import BatonJOSE
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
    /// Whether ``signIn(idToken:nonce:)`` refuses a call without a nonce (default false).
    public let requireNonce: Bool
    /// The oldest server-to-server notification accepted, by its `iat`, in seconds (default 86,400).
    public let notificationMaxAge: TimeInterval
    /// How long after a token's `exp` + leeway its consumed nonce is still kept, in seconds: 300.
    public static let nonceRetentionMargin: TimeInterval = 300
    private let correlator: SignInCorrelator
    private let keys: any VerificationKeyProvider
    private let keysReady: @Sendable () -> Bool
    private let pool: PostgresPool?
    private let reportBuilder: (@Sendable (Date) -> ReportBuilder)?
    private let now: @Sendable () -> Date
    private let transferAcceptedAt: Date?

    /// Creates an engine from its parts (tests and embedders with their own pool and keys).
    /// - Parameters:
    ///   - store: the store, usually a ``LegacyStore``.
    ///   - keys: Apple's keys (a ``KeySetCache`` in production).
    ///   - clientIDs: accepted `aud` values of identity tokens and notifications; must not be empty.
    ///   - legacyClientIDs: accepted `aud` of the sending team's tokens for re-linking; empty disables `link`.
    ///   - issuer: the required `iss` (default Apple's).
    ///   - linkMaxAge: freshness of re-link tokens in seconds (default 600).
    ///   - requireNonce: refuse sign-ins without a nonce (default false).
    ///   - notificationMaxAge: the oldest notification accepted, in seconds (default 86,400).
    ///   - keysReady: whether a usable key set is held (readiness); default always true.
    ///   - pool: a pool the engine owns and closes at ``shutdown()``.
    ///   - reportBuilder: makes the report's builder for an instant; nil disables ``migrationReport()``.
    ///   - transferAcceptedAt: `apple.transfer.accepted_at`; sending-team identifiers are `transferred` from then on.
    ///   - now: the clock.
    public init(store: any BatonStore, keys: any VerificationKeyProvider, clientIDs: [String], legacyClientIDs: [String] = [],
                issuer: String = IdentityTokenVerifier.appleIssuer, linkMaxAge: TimeInterval = 600,
                requireNonce: Bool = false, notificationMaxAge: TimeInterval = 86_400,
                keysReady: @escaping @Sendable () -> Bool = { true }, pool: PostgresPool? = nil,
                reportBuilder: (@Sendable (Date) -> ReportBuilder)? = nil, transferAcceptedAt: Date? = nil,
                now: @escaping @Sendable () -> Date = { Date() }) {
        // A token is told to be the sending team's only by its `aud` (see `BatonConfiguration.validate()`).
        precondition(Set(clientIDs).isDisjoint(with: legacyClientIDs), "a client ID is both current and legacy")
        self.store = store
        self.keys = keys
        self.verifier = IdentityTokenVerifier(clientIDs: clientIDs, keys: keys, issuer: issuer, now: now)
        self.legacyVerifier = legacyClientIDs.isEmpty ? nil
            : IdentityTokenVerifier(clientIDs: legacyClientIDs, keys: keys, issuer: issuer, now: now)
        self.linkMaxAge = linkMaxAge
        self.requireNonce = requireNonce
        self.notificationMaxAge = notificationMaxAge
        self.correlator = SignInCorrelator(store: store)
        self.keysReady = keysReady
        self.pool = pool
        self.reportBuilder = reportBuilder
        self.transferAcceptedAt = transferAcceptedAt
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
                               requireNonce: configuration.requireNonce,
                               notificationMaxAge: TimeInterval(configuration.apple.notificationMaxAgeSeconds),
                               keysReady: { cache.isReady }, pool: pool,
                               reportBuilder: { now in ReportBuilder(pool: pool, configuration: configuration, now: now) },
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

    /// Verifies an identity token and correlates it with the application's records (see ``SignInCorrelator``).
    ///
    /// - Parameters:
    ///   - idToken: the identity token from Apple.
    ///   - nonce: the nonce the caller's session issued and the flow it went through (``ExpectedNonce``); the
    ///     verifier checks the token's claim against it, and the nonce is consumed once per `sub` until the
    ///     token's `exp` + leeway + ``nonceRetentionMargin``, before anything is written (a failed sign-in
    ///     releases it). Required when ``requireNonce``.
    /// - Returns: the outcome, the record (its `key` opens the session), `sub` and `transfer_sub`.
    /// - Throws: ``BatonError`` `invalid_request` (no nonce while one is required), `invalid_token` (reason: the
    ///   verifier's code), `nonce_reused`, `keys_unavailable`, `database_unavailable`.
    public func signIn(idToken: String, nonce: ExpectedNonce? = nil) async throws -> SignInResult {
        if requireNonce && nonce == nil { throw BatonError(.invalidRequest, "nonce is required") }
        let token = try await verify(idToken, with: verifier, nonce: nonce)
        let identity = VerifiedIdentity(sub: token.subject, transferSub: token.transferSubject, email: token.email,
                                        isPrivateEmail: token.isPrivateEmail)
        return try await database {
            try await consumingNonce(of: nonce == nil ? nil : token, subject: token.subject) {
                try await correlator.correlate(identity)
            }
        }
    }

    /// ``signIn(idToken:nonce:)`` on the calling thread, which may block in libpq: a server's own thread, never
    /// Swift's cooperative pool. The common sign-ins finish here with no hop to another thread: a current user
    /// whose record needs no write and a new user (one read, which never waits for a row lock), and a migration
    /// whose record no one else holds (its statement locks the row `NOWAIT`, so it never waits for another
    /// writer while the thread's other connections wait). On an event loop these are steps on its pipeline, and
    /// so is a nonce's consumption. The rest come back as the async work that finishes them: a nonce to consume
    /// off a loop, a key set to fetch, no idle pool connection, a record to refresh, a migration that did not
    /// rewrite the record here (already done, a conflict, no record) or could not (a locked row, an email another
    /// row holds), a database error (the whole sign-in runs again, as ``signIn(idToken:nonce:)`` retries one: the
    /// lookup is safe to run twice, and a failed statement wrote nothing).
    /// - Throws: ``BatonError`` `invalid_token` at once; the rest as ``signIn(idToken:nonce:)``, from the work.
    package func signInWithoutWaiting(idToken: String, nonce: ExpectedNonce?) throws -> NowOrLater<SignInResult> {
        let everything = NowOrLater<SignInResult>.later { try await self.signIn(idToken: idToken, nonce: nonce) }
        guard nonce != nil || !requireNonce, let store = store as? LegacyStore else { return everything }
        let token: AppleIDToken
        do {
            guard let verified = try verifier.verifyWithoutWaiting(idToken, nonce: nonce) else { return everything }
            token = verified
        } catch let error as VerificationError {
            throw BatonError.rejected(error)
        }
        let identity = VerifiedIdentity(sub: token.subject, transferSub: token.transferSubject, email: token.email,
                                        isPrivateEmail: token.isPrivateEmail)
        let pipeline = store.pool.pipelineOnCurrentLoop().flatMap { $0.isReady ? $0 : nil }
        if nonce != nil, let claim = token.nonce {
            guard let pipeline else { return everything }
            let keepUntil = token.expiresAt.addingTimeInterval(verifier.leeway + BatonEngine.nonceRetentionMargin)
            return .soon { deliver in
                self.signInConsumingNonce(claim, until: keepUntil, identity, store, pipeline, everything, deliver)
            }
        }
        if let pipeline {
            return .soon { deliver in self.signInOnPipeline(identity, store, pipeline, everything, deliver) }
        }
        do {
            let step = try store.pool.withConnectionBlocking { connection -> NowOrLater<SignInResult> in
                switch afterLookup(try store.lookupForSignInBlocking(subject: identity.sub, on: connection), identity) {
                case .answer(let answer): return answer
                case .migrate(let transferSub):
                    let user = try store.migrateWithoutWaiting(transferSub: transferSub, newSub: identity.sub, newEmail: identity.email,
                                                               isPrivateEmail: identity.isPrivateEmail, on: connection)
                    return afterMigration(user, identity, transferSub: transferSub)
                }
            }
            return step ?? everything
        } catch is PostgresError {
            return everything
        }
    }

    /// ``signInWithoutWaiting(idToken:nonce:)``'s statements on the calling event loop's pipeline: the lookup, then
    /// (a migration) the statement that locks the record `NOWAIT`, each answered in a later round of the loop, with
    /// no thread waiting. A statement the pipeline cannot take, or that fails, sends the whole sign-in the async way.
    private func signInOnPipeline(_ identity: VerifiedIdentity, _ store: LegacyStore, _ pipeline: PostgresPipeline,
                                  _ everything: NowOrLater<SignInResult>, _ deliver: @escaping NowOrLater<SignInResult>.Delivery) {
        let queued = store.lookupForSignIn(subject: identity.sub, on: pipeline) { [self] found in
            guard case .success(let match) = found else { return deliver(.success(everything)) }
            switch afterLookup(match, identity) {
            case .answer(let answer): deliver(.success(answer))
            case .migrate(let transferSub):
                let queued = store.migrateWithoutWaiting(transferSub: transferSub, newSub: identity.sub, newEmail: identity.email,
                                                         isPrivateEmail: identity.isPrivateEmail, on: pipeline) { [self] migrated in
                    guard case .success(let user) = migrated else { return deliver(.success(everything)) }
                    deliver(.success(afterMigration(user, identity, transferSub: transferSub)))
                }
                if !queued { deliver(.success(everything)) }
            }
        }
        if !queued { deliver(.success(everything)) }
    }

    /// A sign-in with a nonce on the loop's pipeline: the nonce's consumption (a write of its own, as
    /// ``consumingNonce(of:subject:_:)`` does before anything else), then ``signInOnPipeline``. Once it is consumed,
    /// what goes the async way correlates without consuming it again, and a sign-in that fails releases it.
    private func signInConsumingNonce(_ claim: String, until keepUntil: Date, _ identity: VerifiedIdentity, _ store: LegacyStore,
                                      _ pipeline: PostgresPipeline, _ everything: NowOrLater<SignInResult>,
                                      _ deliver: @escaping NowOrLater<SignInResult>.Delivery) {
        let queued = store.consumeNonce(claim, subject: identity.sub, expiresAt: keepUntil, on: pipeline) { [self] consumed in
            switch consumed {
            case .failure:
                // The statement wrote nothing: the whole sign-in, its nonce included, goes the async way.
                deliver(.success(everything))
            case .success(false):
                deliver(.failure(BatonError(.nonceReused, "this nonce was already used")))
            case .success(true):
                let correlator = self.correlator
                let remainder = NowOrLater<SignInResult>.later { try await self.database { try await correlator.correlate(identity) } }
                signInOnPipeline(identity, store, pipeline, remainder) { outcome in
                    deliver(Self.releasingNonce(claim, subject: identity.sub, store, whenFails: outcome))
                }
            }
        }
        if !queued { deliver(.success(everything)) }
    }

    /// `outcome` of a sign-in whose nonce is consumed, releasing the nonce if it fails: async work that throws
    /// releases it before rethrowing. (``signInOnPipeline`` answers with a result or async work, never an error.)
    private static func releasingNonce(_ claim: String, subject sub: String, _ store: LegacyStore,
                                       whenFails outcome: Result<NowOrLater<SignInResult>, any Error>) -> Result<NowOrLater<SignInResult>, any Error> {
        guard case .success(.later(let work)) = outcome else { return outcome }
        return .success(.later {
            do {
                return try await work()
            } catch {
                try? await store.releaseNonce(claim, subject: sub)
                throw error
            }
        })
    }

    /// What a sign-in read on a server's thread comes to once its lookup is known.
    private enum AfterLookup {
        /// The answer: the sign-in is settled, or needs async work (a record to refresh).
        case answer(NowOrLater<SignInResult>)
        /// No record carries the subject: the migration statement for this transfer identifier runs next.
        case migrate(transferSub: String)
    }

    /// A current user whose record needs no write, or a new user, is answered; a record to refresh goes the async
    /// way; a token with a transfer identifier and no record yet migrates.
    private func afterLookup(_ match: SubjectMatch?, _ identity: VerifiedIdentity) -> AfterLookup {
        let correlator = self.correlator
        if let match {
            guard correlator.isUnchanged(match, identity) else {
                return .answer(.later { try await self.database { try await correlator.current(match, identity) } })
            }
            return .answer(.now(SignInResult(outcome: .current, user: match.user, sub: identity.sub, transferSub: identity.transferSub)))
        }
        guard let transferSub = identity.transferSub else {
            return .answer(.now(SignInResult(outcome: .new, user: nil, sub: identity.sub, transferSub: nil)))
        }
        return .migrate(transferSub: transferSub)
    }

    /// The record this thread's migration statement rewrote answers `migrated`; any other outcome (already migrated,
    /// a conflict, no record, a locked row) is settled the async way.
    private func afterMigration(_ user: LegacyUser?, _ identity: VerifiedIdentity, transferSub: String) -> NowOrLater<SignInResult> {
        if let user { return .now(SignInResult(outcome: .migrated, user: user, sub: identity.sub, transferSub: transferSub)) }
        let correlator = self.correlator
        return .later { try await self.database { try await correlator.migrate(identity, transferSub: transferSub) } }
    }

    /// Consumes the nonce of `token` for `sub` (nothing when `token` is nil), then runs `body`; when `body`
    /// fails, the nonce is released so the caller can retry. A nonce already used is `nonce_reused` and
    /// `body` does not run, so a replay writes nothing.
    private func consumingNonce<T>(of token: AppleIDToken?, subject sub: String, _ body: () async throws -> T) async throws -> T {
        guard let token, let claim = token.nonce else { return try await body() }
        let keepUntil = token.expiresAt.addingTimeInterval(verifier.leeway + BatonEngine.nonceRetentionMargin)
        guard try await store.consumeNonce(claim, subject: sub, expiresAt: keepUntil) else {
            throw BatonError(.nonceReused, "this nonce was already used")
        }
        do {
            return try await body()
        } catch {
            try? await store.releaseNonce(claim, subject: sub)
            throw error
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

    /// Rewrites the record of the sending team's identifier to the current team's, from two tokens of the
    /// same person (`method = link`), for users whose transfer identifier cannot be exchanged.
    ///
    /// Both tokens must carry the nonce the caller's session issued (one sign-in ceremony per team, with the
    /// same nonce), which is then consumed for the current `sub`; the legacy token's `sub` must be a sending-team
    /// identifier still waiting (``BatonStore/isLinkable(legacySubject:currentSubject:)``).
    ///
    /// - Parameters:
    ///   - legacyIDToken: a token of the sending team (verified against `legacy_client_ids`).
    ///   - idToken: a token of the current team (verified against `client_ids`).
    ///   - nonce: the session's nonce and its flow; both tokens' `nonce` claims must match it.
    /// - Returns: `migrated` when this call rewrote the record, `current` when it already was.
    /// - Throws: ``BatonError`` `invalid_request` (linking not configured), `invalid_token`, `stale_token`
    ///   (either token issued more than ``linkMaxAge`` ago), `nonce_reused`, `not_linkable` (the legacy `sub` is
    ///   no sending-team identifier awaiting migration), `conflict` (the new identifier belongs to another
    ///   record), `legacy_record_missing`, `database_unavailable`.
    public func link(legacyIDToken: String, idToken: String, nonce: ExpectedNonce) async throws -> SignInResult {
        guard let legacyVerifier else { throw BatonError(.invalidRequest, "re-linking needs apple.legacy_client_ids") }
        let legacy = try await verify(legacyIDToken, with: legacyVerifier, nonce: nonce)
        let current = try await verify(idToken, with: verifier, nonce: nonce)
        let instant = now()
        for token in [legacy, current] where instant.timeIntervalSince(token.issuedAt) > linkMaxAge {
            throw BatonError(.staleToken, "tokens for re-linking must be issued within \(Int(linkMaxAge)) s")
        }
        let outcome = try await database {
            guard try await store.isLinkable(legacySubject: legacy.subject, currentSubject: current.subject) else {
                throw BatonError(.notLinkable, "the legacy token's subject is not a sending-team identifier awaiting migration")
            }
            return try await consumingNonce(of: current, subject: current.subject) {
                try await store.applyMigration(oldSub: legacy.subject, newSub: current.subject, newEmail: current.email,
                                               isPrivateEmail: current.isPrivateEmail, transferSub: current.transferSubject, method: .link)
            }
        }
        switch outcome {
        case .migrated(let user):
            return SignInResult(outcome: .migrated, user: user, sub: current.subject, transferSub: current.transferSubject)
        case .alreadyMigrated(let user):
            return SignInResult(outcome: .current, user: user, sub: current.subject, transferSub: current.transferSubject)
        case .conflict:
            throw BatonError(.conflict, "the new identifier already belongs to another record")
        case .legacyRecordMissing:
            throw BatonError(.legacyRecordMissing, "no record carries the old identifier")
        }
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
    /// Order: the compact form and header, then the signature, and only then the claims are parsed; `iat` must
    /// be within ``notificationMaxAge`` (and not in the future beyond the verifier's leeway). Each subject keeps
    /// the `event_time` of the latest event applied, and an older one (late or replayed) changes nothing.
    /// Duplicates are harmless; unknown types are accepted and ignored.
    /// - Throws: ``BatonError`` `invalid_notification` (with why), `keys_unavailable`, `database_unavailable`.
    public func handleNotification(payload: String) async throws -> NotificationResult {
        let jws: CompactJWS
        do {
            jws = try CompactJWS.parse(payload)
        } catch {
            throw BatonError(.invalidNotification, "malformed")
        }
        guard jws.header.alg == "RS256", let kid = jws.header.kid else {
            throw BatonError(.invalidNotification, VerificationError.Code.algorithmNotAllowed.rawValue)
        }
        let key: JWK
        do {
            key = try await keys.key(withID: kid)
        } catch let error as VerificationError {
            throw error.code == .keysUnavailable ? BatonError.rejected(error) : BatonError(.invalidNotification, error.code.rawValue)
        }
        guard key.allowedAlgorithm == "RS256", key.verifies(jws) else {
            throw BatonError(.invalidNotification, VerificationError.Code.badSignature.rawValue)
        }
        let claims: JSONObject
        do {
            claims = try jws.claims()
        } catch {
            throw BatonError(.invalidNotification, "malformed")
        }
        guard claims["iss"]?.stringValue == verifier.issuer else {
            throw BatonError(.invalidNotification, VerificationError.Code.wrongIssuer.rawValue)
        }
        let audiences = claims["aud"]?.stringValue.map { [$0] } ?? claims["aud"]?.arrayValue?.compactMap(\.stringValue) ?? []
        guard audiences.contains(where: verifier.clientIDs.contains) else {
            throw BatonError(.invalidNotification, VerificationError.Code.wrongAudience.rawValue)
        }
        guard case .number(let iat)? = claims["iat"], iat.isFinite else {
            throw BatonError(.invalidNotification, VerificationError.Code.missingClaim.rawValue)
        }
        let current = now().timeIntervalSince1970
        guard iat <= current + verifier.leeway else { throw BatonError(.invalidNotification, VerificationError.Code.notYetValid.rawValue) }
        guard current - iat <= notificationMaxAge else { throw BatonError(.invalidNotification, VerificationError.Code.expired.rawValue) }
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

    /// The correlation report (``MigrationReport``, rendered by `GET /v1/report`), with emails masked.
    /// - Throws: ``BatonError`` `invalid_request` when the engine was built without a report source,
    ///   `database_unavailable`.
    public func migrationReport() async throws -> MigrationReport {
        guard let reportBuilder else { throw BatonError(.invalidRequest, "no report source is configured") }
        return try await database { try await reportBuilder(now()).build() }
    }

    // MARK: - Helpers

    private func verify(_ token: String, with verifier: IdentityTokenVerifier, nonce: ExpectedNonce?) async throws -> AppleIDToken {
        do {
            return try await verifier.verify(token, nonce: nonce)
        } catch let error as VerificationError {
            throw BatonError.rejected(error)
        }
    }

    /// Runs `body`, once more after a deadlock, a serialization failure, a read-only server or a connection
    /// lost mid-statement (every store method is safe to run again: each is one statement or one transaction,
    /// and a second run of a migration that committed finds it done), then maps what is left to
    /// `database_unavailable`. A pool timeout is not retried: the wait already happened.
    private func database<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as PostgresError where error.isTransient && error.code != .poolTimeout {
            do {
                return try await body()
            } catch {
                throw BatonError.mapDatabase(error)
            }
        } catch {
            throw BatonError.mapDatabase(error)
        }
    }
}
