import BatonAppleSignIn
import Foundation
import BatonJOSE
import BatonLogging
import BatonPostgres

/// Baton's public library API: sign-in correlation, credential state, re-linking and Apple's
/// server-to-server notifications, for the HTTP service and for Swift servers that embed Baton.
///
/// ```swift
/// let engine = try await BatonEngine.start(configuration: configuration, logger: logger)
/// let result = try await engine.signIn(idToken: token, nonce: nil)
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
    private let correlator: SignInCorrelator
    private let keys: any VerificationKeyProvider
    private let keysReady: @Sendable () -> Bool
    private let pool: PostgresPool?
    private let reportBuilder: (@Sendable (Date) -> ReportBuilder)?
    private let now: @Sendable () -> Date

    /// Creates an engine from its parts (tests and embedders with their own pool and keys).
    /// - Parameters:
    ///   - store: the store, usually a ``LegacyStore``.
    ///   - keys: Apple's keys (a ``KeySetCache`` in production).
    ///   - clientIDs: accepted `aud` values of identity tokens and notifications; must not be empty.
    ///   - legacyClientIDs: accepted `aud` of the sending team's tokens for re-linking; empty disables `link`.
    ///   - issuer: the required `iss` (default Apple's).
    ///   - linkMaxAge: freshness of re-link tokens in seconds (default 600).
    ///   - keysReady: whether a usable key set is held (readiness); default always true.
    ///   - pool: a pool the engine owns and closes at ``shutdown()``.
    ///   - reportBuilder: makes the report's builder for an instant; nil disables ``migrationReport()``.
    ///   - now: the clock.
    public init(store: any BatonStore, keys: any VerificationKeyProvider, clientIDs: [String], legacyClientIDs: [String] = [],
                issuer: String = IdentityTokenVerifier.appleIssuer, linkMaxAge: TimeInterval = 600,
                keysReady: @escaping @Sendable () -> Bool = { true }, pool: PostgresPool? = nil,
                reportBuilder: (@Sendable (Date) -> ReportBuilder)? = nil, now: @escaping @Sendable () -> Date = { Date() }) {
        self.store = store
        self.keys = keys
        self.verifier = IdentityTokenVerifier(clientIDs: clientIDs, keys: keys, issuer: issuer, now: now)
        self.legacyVerifier = legacyClientIDs.isEmpty ? nil
            : IdentityTokenVerifier(clientIDs: legacyClientIDs, keys: keys, issuer: issuer, now: now)
        self.linkMaxAge = linkMaxAge
        self.correlator = SignInCorrelator(store: store)
        self.keysReady = keysReady
        self.pool = pool
        self.reportBuilder = reportBuilder
        self.now = now
    }

    /// Builds an engine from the configuration: opens the pool, checks Baton's schema and the legacy table
    /// (``LegacyStore/validateLegacyTable()``), and loads Apple's key set (a failure there only leaves the
    /// engine not ready: the cache retries).
    /// - Throws: ``BatonError`` (`database_unavailable`, `invalid_legacy_table`), ``ConfigurationError``.
    public static func start(configuration: BatonConfiguration, logger: Logger = .disabled()) async throws -> BatonEngine {
        let pool = PostgresPool(url: configuration.database.url, maxConnections: configuration.database.poolSize,
                                statementTimeoutMilliseconds: configuration.database.statementTimeoutMilliseconds, logger: logger)
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
                               keysReady: { cache.isReady }, pool: pool,
                               reportBuilder: { now in ReportBuilder(pool: pool, configuration: configuration, now: now) })
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
    ///   - nonce: when given, the token's `nonce` claim must equal it (web flow) or its SHA-256 in hex (native
    ///     flow), and the nonce is accepted once until the token expires.
    /// - Returns: the outcome, the record (its `key` opens the session), `sub` and `transfer_sub`.
    /// - Throws: ``BatonError`` `invalid_token` (reason: the verifier's code), `nonce_reused`,
    ///   `keys_unavailable`, `database_unavailable`.
    public func signIn(idToken: String, nonce: String? = nil) async throws -> SignInResult {
        let token = try await verify(idToken, with: verifier)
        if let nonce {
            guard let claim = token.nonce else { throw BatonError(.invalidToken, VerificationError.Reason.missingClaim.rawValue) }
            guard claim == nonce || claim == Digest.sha256Hex(Array(nonce.utf8)) else {
                throw BatonError(.invalidToken, VerificationError.Reason.nonceMismatch.rawValue)
            }
        }
        let identity = VerifiedIdentity(sub: token.subject, transferSub: token.transferSubject, email: token.email,
                                        isPrivateEmail: token.isPrivateEmail)
        return try await database {
            // The nonce is recorded only after correlation succeeded, so a failed attempt can be retried.
            let result = try await correlator.correlate(identity)
            if let claim = token.nonce, nonce != nil, try await !store.consumeNonce(claim, expiresAt: token.expiresAt) {
                throw BatonError(.nonceReused, "this nonce was already used")
            }
            return result
        }
    }

    // MARK: - Credential state

    /// The credential state of a stored user identifier, as Apple's `getCredentialState(forUserID:)` answers.
    /// - Throws: ``BatonError`` `invalid_request` (empty identifier), `database_unavailable`.
    public func credentialState(user: String) async throws -> CredentialState {
        guard !user.isEmpty, user.utf8.count <= 255 else { throw BatonError(.invalidRequest, "user must be 1 to 255 bytes") }
        return try await database { try await store.credentialState(of: user) }
    }

    // MARK: - Re-linking

    /// Rewrites the record of the sending team's identifier to the current team's, from two tokens of the
    /// same person (`method = link`), for users whose transfer identifier cannot be exchanged.
    ///
    /// - Parameters:
    ///   - legacyIDToken: a token of the sending team (verified against `legacy_client_ids`).
    ///   - idToken: a token of the current team (verified against `client_ids`).
    /// - Returns: `migrated` when this call rewrote the record, `current` when it already was.
    /// - Throws: ``BatonError`` `invalid_request` (linking not configured), `invalid_token`, `stale_token`
    ///   (either token issued more than ``linkMaxAge`` ago), `conflict` (the new identifier belongs to another
    ///   record), `legacy_record_missing`, `database_unavailable`.
    public func link(legacyIDToken: String, idToken: String) async throws -> SignInResult {
        guard let legacyVerifier else { throw BatonError(.invalidRequest, "re-linking needs apple.legacy_client_ids") }
        let legacy = try await verify(legacyIDToken, with: legacyVerifier)
        let current = try await verify(idToken, with: verifier)
        let instant = now()
        for token in [legacy, current] where instant.timeIntervalSince(token.issuedAt) > linkMaxAge {
            throw BatonError(.staleToken, "tokens for re-linking must be issued within \(Int(linkMaxAge)) s")
        }
        let outcome = try await database {
            try await store.applyMigration(oldSub: legacy.subject, newSub: current.subject, newEmail: current.email,
                                           isPrivateEmail: current.isPrivateEmail, transferSub: current.transferSubject, method: .link)
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
    /// `type` and `sub`. Duplicates are harmless; unknown types are accepted and ignored.
    /// - Throws: ``BatonError`` `invalid_notification` (with why), `keys_unavailable`, `database_unavailable`.
    public func handleNotification(payload: String) async throws -> NotificationResult {
        let jws: CompactJWS
        let claims: JSONObject
        do {
            jws = try CompactJWS.parse(payload)
            claims = try jws.claims()
        } catch {
            throw BatonError(.invalidNotification, "malformed")
        }
        guard jws.header.alg == "RS256", let kid = jws.header.kid else {
            throw BatonError(.invalidNotification, VerificationError.Reason.algorithmNotAllowed.rawValue)
        }
        let key: JWK
        do {
            key = try await keys.key(withID: kid)
        } catch let error as VerificationError {
            throw error.reason == .keysUnavailable ? BatonError.rejected(error) : BatonError(.invalidNotification, error.reason.rawValue)
        }
        guard key.allowedAlgorithm == "RS256", key.verifies(jws) else {
            throw BatonError(.invalidNotification, VerificationError.Reason.badSignature.rawValue)
        }
        guard claims["iss"]?.stringValue == verifier.issuer else {
            throw BatonError(.invalidNotification, VerificationError.Reason.wrongIssuer.rawValue)
        }
        let audiences = claims["aud"]?.stringValue.map { [$0] } ?? claims["aud"]?.arrayValue?.compactMap(\.stringValue) ?? []
        guard audiences.contains(where: verifier.clientIDs.contains) else {
            throw BatonError(.invalidNotification, VerificationError.Reason.wrongAudience.rawValue)
        }
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
        guard let kind = NotificationKind(rawValue: type) else { return NotificationResult(type: type, changed: false) }
        let changed = try await database { try await store.applyNotification(kind, subject: sub) }
        return NotificationResult(type: type, changed: changed)
    }

    // MARK: - Readiness

    /// Whether the engine can serve: the database answers and a usable key set is held.
    public struct Readiness: Sendable, Equatable {
        /// The database answered `SELECT 1`.
        public var database: Bool
        /// A usable key set is held.
        public var keys: Bool
        /// Both.
        public var ready: Bool { database && keys }
    }

    /// Checks the database and the key set.
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

    private func verify(_ token: String, with verifier: IdentityTokenVerifier) async throws -> AppleIDToken {
        do {
            return try await verifier.verify(token)
        } catch let error as VerificationError {
            throw BatonError.rejected(error)
        }
    }

    private func database<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            throw BatonError.mapDatabase(error)
        }
    }
}
