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

    /// Creates a result.
    public init(outcome: Outcome, user: LegacyUser?, sub: String, transferSub: String?) {
        self.outcome = outcome
        self.user = user
        self.sub = sub
        self.transferSub = transferSub
    }
}

/// The correlation rules of a sign-in, against a ``BatonStore`` (no I/O of its own).
///
/// 1. A record with the token's `sub` → `current` (a changed email is updated, a revoked consent restored).
/// 2. Otherwise, `transfer_sub` present and mapped to an old identifier whose record exists → the record is
///    rewritten exactly once (``BatonStore/applyMigration(transferSub:newSub:newEmail:isPrivateEmail:method:)``)
///    → `migrated` for the caller that rewrote it, `current` for every concurrent one.
/// 3. Otherwise, with a `transfer_sub` that leads to no record → `unmatched` (never `new`: the person has an
///    account under the sending team), recorded as an `unmatched` event.
/// 4. Otherwise → `new`, nothing written.
///
/// A current user's email is refreshed only when the store's ``BatonStore/emailPolicy`` allows it.
public struct SignInCorrelator: Sendable {
    /// The store.
    public let store: any BatonStore

    /// Creates a correlator over `store`.
    public init(store: any BatonStore) {
        self.store = store
    }

    /// Correlates a verified identity with the application's records.
    /// - Throws: the store's errors.
    public func correlate(_ identity: VerifiedIdentity) async throws -> SignInResult {
        if let match = try await store.lookupForSignIn(subject: identity.sub) {
            return try await current(match, identity)
        }
        guard let transferSub = identity.transferSub else {
            return SignInResult(outcome: .new, user: nil, sub: identity.sub, transferSub: nil)
        }
        return try await migrate(identity, transferSub: transferSub)
    }

    /// Rules 2 and 3 for a `sub` no record carries: the record `transferSub` leads to is rewritten.
    func migrate(_ identity: VerifiedIdentity, transferSub: String) async throws -> SignInResult {
        // Resolving the transfer identifier and rewriting the record is one atomic step of the store.
        let outcome = try await store.applyMigration(transferSub: transferSub, newSub: identity.sub, newEmail: identity.email,
                                                     isPrivateEmail: identity.isPrivateEmail, method: .signin)
        return try await settle(outcome, identity, transferSub: transferSub)
    }

    /// Rule 1 for the record `match` found: `current`, after the refresh it needs.
    func current(_ match: SubjectMatch, _ identity: VerifiedIdentity) async throws -> SignInResult {
        SignInResult(outcome: .current, user: try await refresh(match, identity), sub: identity.sub, transferSub: identity.transferSub)
    }

    /// Whether a current user's sign-in leaves the record as it is (rule 1 without a write): consent not
    /// revoked, and no email to replace.
    func isUnchanged(_ match: SubjectMatch, _ identity: VerifiedIdentity) -> Bool {
        guard match.state != .revoked else { return false }
        guard let email = identity.email else { return true }
        return !store.emailPolicy.allowsReplacing(match.user.email, with: email)
    }

    /// Rules 2 and 3 once the store's migration step answered `outcome`.
    private func settle(_ outcome: MigrationOutcome, _ identity: VerifiedIdentity, transferSub: String) async throws -> SignInResult {
        switch outcome {
        case .migrated(let user):
            return SignInResult(outcome: .migrated, user: user, sub: identity.sub, transferSub: transferSub)
        case .alreadyMigrated(let user):
            return SignInResult(outcome: .current, user: user, sub: identity.sub, transferSub: transferSub)
        case .legacyRecordMissing, .conflict:
            // A record for the new identifier may have appeared meanwhile (created by the application).
            if let match = try await store.lookupForSignIn(subject: identity.sub) {
                return SignInResult(outcome: .current, user: try await refresh(match, identity), sub: identity.sub, transferSub: transferSub)
            }
            try await store.recordUnmatched(transferSub: transferSub, sub: identity.sub)
            return SignInResult(outcome: .unmatched, user: nil, sub: identity.sub, transferSub: transferSub)
        }
    }

    /// Applies what a sign-in of a current user tells: a changed email, a consent given again.
    private func refresh(_ match: SubjectMatch, _ identity: VerifiedIdentity) async throws -> LegacyUser {
        if match.state == .revoked {
            try await store.restoreAuthorization(subject: identity.sub)
        }
        guard let email = identity.email, store.emailPolicy.allowsReplacing(match.user.email, with: email) else { return match.user }
        return try await store.updateEmail(of: match.user, to: email) ?? match.user
    }
}
