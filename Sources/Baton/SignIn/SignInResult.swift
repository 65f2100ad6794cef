import Foundation

/// The claims of a verified identity token that correlation needs.
public struct VerifiedIdentity: Sendable, Equatable {
    /// The receiving (current) team's `sub`.
    public var sub: String
    /// `transfer_sub`, present during the 60 days after a transfer for users of the sending team.
    public var transferSub: String?
    /// The email Apple shares with the current team.
    public var email: String?
    /// Whether `email` is a private relay address.
    public var isPrivateEmail: Bool?

    /// Creates an identity.
    public init(sub: String, transferSub: String? = nil, email: String? = nil, isPrivateEmail: Bool? = nil) {
        self.sub = sub
        self.transferSub = transferSub
        self.email = email
        self.isPrivateEmail = isPrivateEmail
    }
}

/// What a sign-in found.
public struct SignInResult: Sendable, Equatable {
    /// The correlation outcome.
    public enum Outcome: String, Sendable, Equatable, Codable {
        /// A record carries the token's `sub` (possibly migrated by a concurrent sign-in a moment ago).
        case current
        /// This sign-in rewrote the record from the sending team's identifier.
        case migrated
        /// No record: the application decides whether to create an account. Nothing was written.
        case new
        /// The token carries a `transfer_sub` that Baton cannot resolve to a record: the user exists under the
        /// sending team, so never create an account; `/v1/link` is the way out. An `unmatched` event is recorded.
        case unmatched
    }

    /// The outcome.
    public var outcome: Outcome
    /// The record (nil for ``Outcome/new`` and ``Outcome/unmatched``); its `key` opens the application's session.
    public var user: LegacyUser?
    /// The token's `sub`.
    public var sub: String
    /// The token's `transfer_sub`, when present.
    public var transferSub: String?
    /// For a merged duplicate: the key of the record made under the new identifier without Baton, whose Apple
    /// identity moved onto ``user`` (the application merges what was created in it).
    public var mergedFrom: String?

    /// Creates a result.
    public init(outcome: Outcome, user: LegacyUser?, sub: String, transferSub: String?, mergedFrom: String? = nil) {
        self.outcome = outcome
        self.user = user
        self.sub = sub
        self.transferSub = transferSub
        self.mergedFrom = mergedFrom
    }
}
