import Foundation
import BatonJOSE
import BatonLogging
import Synchronization

/// Fetches a JWK Set document; injectable so tests can count fetches and simulate outages.
public protocol KeySetFetcher: Sendable {
    /// The raw bytes of the key set document.
    /// - Throws: any error when the document cannot be had; the cache keeps its last good set.
    func fetchKeySet() async throws -> [UInt8]
}

/// A cache of an issuer's key set (by default Apple's `https://appleid.apple.com/auth/keys`).
///
/// - Loaded lazily on first use, or seeded.
/// - Refreshed in the background once older than ``Policy/maxAge`` (default 1 h): verification goes on
///   with the current set meanwhile.
/// - An unknown `kid` triggers at most one refetch per ``Policy/cooldown`` (default 30 s), measured from the
///   start of the previous fetch, and at most one fetch is ever in flight: concurrent callers join it.
/// - A failed refresh keeps the last good set, usable until it is ``Policy/maxStaleness`` old (default 24 h).
/// - A set that does not parse, has duplicate `kid`s or a key that breaks policy is refused like a failed fetch.
///
/// The lock guards a few words of state and is never held across a fetch, so verification never waits
/// on another caller's fetch unless it needs that fetch's result.
public final class KeySetCache: VerificationKeyProvider {
    /// Timing policy.
    public struct Policy: Sendable {
        /// Age after which the set is refreshed in the background (default 3600 s).
        public var maxAge: TimeInterval
        /// Minimum time between fetch starts prompted by an unknown `kid` or a failed load (default 30 s).
        public var cooldown: TimeInterval
        /// Age after which a set that could not be refreshed is no longer used (default 86 400 s).
        public var maxStaleness: TimeInterval

        /// Creates a policy; every parameter has the documented default.
        public init(maxAge: TimeInterval = 3600, cooldown: TimeInterval = 30, maxStaleness: TimeInterval = 86_400) {
            self.maxAge = maxAge
            self.cooldown = cooldown
            self.maxStaleness = maxStaleness
        }
    }

    private struct State: Sendable {
        var keySet: JWKSet?
        var loadedAt: Date?
        var lastFetchStart: Date?
        var inFlight: Task<JWKSet, any Error>?
        var fetchCount = 0
    }

    private enum Decision {
        case found(JWK)
        case wait(Task<JWKSet, any Error>)
        case fail(VerificationError)
    }

    private let fetcher: any KeySetFetcher
    private let policy: Policy
    private let now: @Sendable () -> Date
    private let logger: Logger
    private let state: Mutex<State>

    /// Creates a cache.
    /// - Parameters:
    ///   - fetcher: where key sets come from (``HTTPKeySetFetcher`` for a URL).
    ///   - policy: timing policy (defaults: 1 h, 30 s, 24 h).
    ///   - seed: a key set to start with, counted as loaded now (optional).
    ///   - logger: receives one line per refresh outcome (no key material).
    ///   - now: the clock (default the system clock).
    public init(
        fetcher: any KeySetFetcher,
        policy: Policy = Policy(),
        seed: JWKSet? = nil,
        logger: Logger = .disabled(),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.fetcher = fetcher
        self.policy = policy
        self.now = now
        self.logger = logger
        self.state = Mutex(State(keySet: seed, loadedAt: seed == nil ? nil : now()))
    }

    /// A cache of the key set at `url` (default Apple's), fetched with ``HTTPKeySetFetcher``'s limits.
    public convenience init(
        url: URL = HTTPKeySetFetcher.appleKeysURL,
        policy: Policy = Policy(),
        seed: JWKSet? = nil,
        logger: Logger = .disabled(),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.init(fetcher: HTTPKeySetFetcher(url: url), policy: policy, seed: seed, logger: logger, now: now)
    }

    /// The key set currently held, if any (possibly stale).
    public var currentKeySet: JWKSet? { state.withLock { $0.keySet } }

    /// How many fetches have been started.
    public var fetchCount: Int { state.withLock { $0.fetchCount } }

    /// Whether a usable (not too stale) key set is held: the readiness signal.
    public var isReady: Bool {
        let current = now()
        return state.withLock { state in
            guard state.keySet != nil, let loadedAt = state.loadedAt else { return false }
            return current.timeIntervalSince(loadedAt) <= policy.maxStaleness
        }
    }

    /// The key published under `kid`, fetching the set when needed within the policy.
    /// - Throws: ``VerificationError`` `.unknownKey` when no held or newly fetched set has `kid`;
    ///   `.keysUnavailable` when there is no usable set and none can be fetched.
    public func key(withID kid: String) async throws -> JWK {
        switch decide(kid: kid) {
        case .found(let key):
            return key
        case .fail(let error):
            throw error
        case .wait(let task):
            do {
                let keySet = try await task.value
                return try requireKey(keySet, kid)
            } catch let error as VerificationError {
                throw error
            } catch {
                // The fetch failed; a still-usable set may hold the key after all (it did not a moment ago).
                if case .found(let key) = decide(kid: kid, mayFetch: false) { return key }
                if isReady { throw VerificationError(.unknownKey, "no published key has this 'kid'") }
                throw VerificationError(.keysUnavailable, "the key set could not be fetched")
            }
        }
    }

    /// The key published under `kid` when the held set answers (a refetch it makes due starts in the
    /// background); nil when the caller would have to wait for a fetch.
    /// - Throws: ``VerificationError`` `.unknownKey` or `.keysUnavailable`, as ``key(withID:)`` would at once.
    public func keyWithoutWaiting(withID kid: String) throws -> JWK? {
        switch decide(kid: kid) {
        case .found(let key): return key
        case .fail(let error): throw error
        case .wait: return nil
        }
    }

    /// Fetches the key set now (joining a fetch in flight) and returns it.
    /// - Throws: the fetcher's error, or a ``JOSE/JOSEError`` for a set that is refused.
    @discardableResult
    public func refresh() async throws -> JWKSet {
        let task = state.withLock { state in
            if let inFlight = state.inFlight { return inFlight }
            return startFetch(&state, at: now())
        }
        return try await task.value
    }

    private func decide(kid: String, mayFetch: Bool = true) -> Decision {
        let current = now()
        return state.withLock { state -> Decision in
            let age = state.loadedAt.map { current.timeIntervalSince($0) }
            let usable = state.keySet != nil && (age ?? .infinity) <= policy.maxStaleness
            if usable, let keySet = state.keySet {
                if let key = keySet.key(withID: kid) {
                    if mayFetch, (age ?? 0) >= policy.maxAge, state.inFlight == nil, cooledDown(state, current) {
                        _ = startFetch(&state, at: current)
                    }
                    return .found(key)
                }
            }
            guard mayFetch else { return .fail(VerificationError(.unknownKey, "no published key has this 'kid'")) }
            if let inFlight = state.inFlight { return .wait(inFlight) }
            if cooledDown(state, current) { return .wait(startFetch(&state, at: current)) }
            if usable { return .fail(VerificationError(.unknownKey, "no published key has this 'kid'")) }
            return .fail(VerificationError(.keysUnavailable, "no usable key set; the next fetch waits for the cooldown"))
        }
    }

    private func cooledDown(_ state: State, _ current: Date) -> Bool {
        guard let last = state.lastFetchStart else { return true }
        return current.timeIntervalSince(last) >= policy.cooldown
    }

    /// Starts the one fetch in flight; called with the lock held.
    private func startFetch(_ state: inout State, at current: Date) -> Task<JWKSet, any Error> {
        state.lastFetchStart = current
        state.fetchCount += 1
        let task = Task<JWKSet, any Error> {
            do {
                let bytes = try await self.fetcher.fetchKeySet()
                let keySet = try JWKSet(json: bytes)
                let loadedAt = self.now()
                self.state.withLock { state in
                    state.keySet = keySet
                    state.loadedAt = loadedAt
                    state.inFlight = nil
                }
                self.logger.info("key set refreshed", ["keys": String(keySet.keys.count)])
                return keySet
            } catch {
                self.state.withLock { $0.inFlight = nil }
                self.logger.notice("key set refresh failed; keeping the last good set", ["error": String(describing: error)])
                throw error
            }
        }
        state.inFlight = task
        return task
    }
}

/// Fetches a key set over HTTPS with strict limits, through the module's one transport
/// (``URLSessionAppleTransport``): a 5 s timeout, no redirects, HTTP 200 only, and at most 64 KiB of body.
public struct HTTPKeySetFetcher: KeySetFetcher {
    /// Apple's key set, `https://appleid.apple.com/auth/keys`.
    public static let appleKeysURL = URL(string: "https://appleid.apple.com/auth/keys")!

    /// Why a fetch failed. Kept apart from ``VerificationError``: the cache, not the fetcher, decides from what it still
    /// holds whether a failed fetch means `keys_unavailable` or `unknown_key`.
    public struct FetchError: Error, CustomStringConvertible, Sendable {
        /// What went wrong (status, size, transport error); never the body.
        public let description: String
    }

    /// The key set URL (`http` or `https`).
    public let url: URL
    /// The whole-request timeout in seconds (default 5).
    public let timeout: TimeInterval
    /// The largest body accepted in bytes (default 65 536).
    public let maxBytes: Int
    private let transport: URLSessionAppleTransport

    /// Creates a fetcher for `url`.
    public init(url: URL, timeout: TimeInterval = 5, maxBytes: Int = 65_536) {
        self.url = url
        self.timeout = timeout
        self.maxBytes = maxBytes
        self.transport = URLSessionAppleTransport(timeout: timeout, maxConnectionsPerHost: 1, maxBodyBytes: maxBytes)
    }

    /// Fetches the document.
    /// - Throws: ``FetchError`` for a non-HTTP URL, a redirect or other non-200 status, an oversize body,
    ///   a timeout or a transport failure.
    public func fetchKeySet() async throws -> [UInt8] {
        guard let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http" else {
            throw FetchError(description: "key set URL must be http or https")
        }
        let response: AppleHTTPResponse
        do {
            response = try await transport.send("GET", url: url, headers: ["Accept": "application/json"])
        } catch let error as AppleTransportError {
            throw FetchError(description: "fetch failed: \(error)")
        }
        switch response.status {
        case 200: return [UInt8](response.body)
        case 300..<400: throw FetchError(description: "redirect refused (HTTP \(response.status))")
        default: throw FetchError(description: "HTTP \(response.status), expected 200")
        }
    }
}
