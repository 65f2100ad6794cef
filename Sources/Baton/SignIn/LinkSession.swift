import BatonJOSE
import Foundation

/// A server-issued, single-use session for one re-link (`POST /v1/link/session`): the client runs both Sign in with
/// Apple ceremonies (the sending team's and the current team's) with its nonce, then presents both tokens and the
/// nonce to ``BatonEngine/link(legacyIDToken:idToken:nonce:)``, which uses the session up.
public struct LinkSession: Sendable, Equatable {
    /// The nonce to give both ceremonies (native: its SHA-256 hex, as for a sign-in; web: as is): 32 random bytes,
    /// base64url. Baton keeps only its hash.
    public var nonce: String
    /// When the session stops being accepted.
    public var expiresAt: Date

    /// Live sessions `baton serve` allows at once unless `max_link_sessions` says otherwise: 10,000 (about 17 new
    /// sessions a second, each live for 600 s).
    public static let defaultMaxLive = 10_000

    /// Expired sessions each new session deletes at most: more than one, so the backlog shrinks as sessions are
    /// opened, and few enough that the deletion stays short whatever the backlog.
    static let purgeBatch = 100

    /// A new session, live for `lifetime` seconds from `now`.
    static func make(now: Date, lifetime: TimeInterval) -> LinkSession {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return LinkSession(nonce: Base64URL.encode(bytes), expiresAt: now.addingTimeInterval(lifetime))
    }

    /// What Baton stores of a session's nonce: its SHA-256, hex.
    static func hash(of nonce: String) -> String {
        Digest.sha256Hex(Array(nonce.utf8))
    }
}
