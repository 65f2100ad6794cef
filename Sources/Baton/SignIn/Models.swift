/// A record of the application's own user table, as Baton sees it.
///
/// `key` is the primary key column's value in PostgreSQL's text form (so a `bigint` 42 is `"42"`
/// and a `uuid` is its canonical text); the login endpoint opens its session with it.
public struct LegacyUser: Sendable, Equatable, Hashable, Codable {
    /// The primary key, as text.
    public var key: String
    /// The Apple `sub` stored in the subject column.
    public var subject: String
    /// The stored email, if any.
    public var email: String?
    /// The key of the application's account the record belongs to, as text, when the configuration knows it: the
    /// users row an identity row references (`legacy.email.reference_column`). Nil for a users table, whose `key` is
    /// the account's own.
    public var accountKey: String?

    /// Creates a record.
    public init(key: String, subject: String, email: String?, accountKey: String? = nil) {
        self.key = key
        self.subject = subject
        self.email = email
        self.accountKey = accountKey
    }
}

/// How a legacy record reached its new identifier; stored in `baton.transfers.method` and in events.
public enum MigrationMethod: String, Sendable, Equatable, Codable, CaseIterable {
    /// The user signed in with a token carrying `transfer_sub` (passive migration).
    case signin
    /// A bulk job exchanged the transfer identifier with Apple (active migration).
    case exchange
    /// The user presented an old-team token and a new-team token (`POST /v1/link`).
    case link
}

/// What ``BatonStore/applyMigration(oldSub:newSub:newEmail:isPrivateEmail:transferSub:method:)`` did.
public enum MigrationOutcome: Sendable, Equatable {
    /// This call rewrote the record from the old identifier to the new one (exactly one caller sees this).
    case migrated(LegacyUser)
    /// The record already carries the new identifier (an earlier or concurrent caller migrated it); nothing written.
    case alreadyMigrated(LegacyUser)
    /// No record carries the old identifier, and none carries the new one; nothing written.
    case legacyRecordMissing
    /// The new identifier already belongs to another record than the old identifier's; nothing written.
    case conflict
}

/// The stored credential state of one identifier in `baton.subjects`.
public enum SubjectState: String, Sendable, Equatable, Codable {
    /// Authorized (the default, or restored by a later sign-in).
    case authorized
    /// The user revoked the app's consent.
    case revoked
    /// The user deleted their Apple account.
    case deleted
}

/// A server-to-server notification type Apple sends (`events.type`).
public enum NotificationKind: String, Sendable, Equatable, CaseIterable {
    /// The user stopped forwarding from their private relay address.
    case emailDisabled = "email-disabled"
    /// The user resumed forwarding.
    case emailEnabled = "email-enabled"
    /// The user stopped using Sign in with Apple with the app.
    case consentRevoked = "consent-revoked"
    /// The user asked Apple to delete their account (Apple's documented spelling).
    case accountDelete = "account-delete"
    /// The same, as some payloads spell it.
    case accountDeleted = "account-deleted"
}
