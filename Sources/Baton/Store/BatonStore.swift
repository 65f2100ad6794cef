import Foundation

/// What a sign-in lookup by `sub` found: the record and the identifier's stored credential state.
public struct SubjectMatch: Sendable, Equatable {
    /// The legacy record carrying the subject.
    public var user: LegacyUser
    /// The state in `baton.subjects`, or nil when Baton holds none for this identifier.
    public var state: SubjectState?
    /// Whether another record, the user's legacy one, still waits for the token's transfer identifier: this record
    /// was made under the new identifier without Baton (a duplicate).
    public var legacyWaiting: Bool

    /// Creates a match.
    public init(user: LegacyUser, state: SubjectState?, legacyWaiting: Bool = false) {
        self.user = user
        self.state = state
        self.legacyWaiting = legacyWaiting
    }
}

/// The storage the sign-in and link rules (``SignInDecision``) run against, through ``SignInDriver``.
///
/// ``LegacyStore`` implements it on PostgreSQL; tests may implement it in memory. Every method is one
/// atomic step: a decision never needs a transaction spanning calls, because
/// ``applyMigration(oldSub:newSub:newEmail:isPrivateEmail:transferSub:method:)`` is itself exactly-once.
public protocol BatonStore: Sendable {
    /// The record whose subject column equals `sub`, with its credential state and, given `transferSub`, whether
    /// another record still waits for it (``SubjectMatch/legacyWaiting``); nil when none.
    func lookupForSignIn(subject sub: String, transferSub: String?) async throws -> SubjectMatch?

    /// The sending team's identifier that `transferSub` maps to (through `baton.transfers`, then the legacy
    /// table's transfer column when one is configured); nil when unknown.
    func oldSubject(forTransferSubject transferSub: String) async throws -> String?

    /// Rewrites the record of `oldSub` to `newSub`, exactly once across concurrent callers.
    /// See ``LegacyStore/applyMigration(oldSub:newSub:newEmail:isPrivateEmail:transferSub:method:)``.
    func applyMigration(oldSub: String, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                        transferSub: String?, method: MigrationMethod) async throws -> MigrationOutcome

    /// Like ``applyMigration(oldSub:newSub:newEmail:isPrivateEmail:transferSub:method:)``, with the old identifier
    /// found from `transferSub` (as ``oldSubject(forTransferSubject:)`` does) in the same atomic step; an
    /// unknown `transferSub` is `.legacyRecordMissing`. See
    /// ``LegacyStore/applyMigration(transferSub:newSub:newEmail:isPrivateEmail:method:)``.
    func applyMigration(transferSub: String, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                        method: MigrationMethod) async throws -> MigrationOutcome

    /// The sending-team identifier the database found linkable to `currentSub` when asked for `legacySub` (the
    /// caller checks it is `legacySub`), or nil: a pending (not migrated) `baton.transfers.old_sub`, a legacy row's
    /// subject that no migration ever produced, or one already migrated to `currentSub` (a repeat).
    func linkableSubject(legacySubject legacySub: String, currentSubject currentSub: String) async throws -> String?

    /// When a sign-in may replace a stored email; the decision asks before calling ``updateEmail(of:to:)``.
    var emailPolicy: EmailPolicy { get }

    /// What a sign-in or a link does with a duplicate it meets (report it, or merge it).
    var duplicatePolicy: DuplicatePolicy { get }

    /// Records once that the record holding `newSub` and the legacy record (of `oldSub`, else the one
    /// `transferSub` leads to) are one person's; nil when they are not two records.
    func recordDuplicate(newSub: String, oldSub: String?, transferSub: String?, foundBy: MigrationMethod) async throws -> RecordedDuplicate?

    /// Moves the Apple identity from the fresh record of `pair` onto its legacy record; nil when the pair changed
    /// or was merged meanwhile.
    func mergeDuplicate(_ pair: DuplicatePair) async throws -> MergedDuplicate?

    /// Replaces the email of the record `user` (matched by key and subject) when ``emailPolicy`` allows it,
    /// and appends an `email_changed` event (or, when another row holds the email under a unique constraint,
    /// keeps it and appends `email_conflict`); returns the record as stored, or nil when it changed meanwhile.
    func updateEmail(of user: LegacyUser, to email: String) async throws -> LegacyUser?

    /// Records that a sign-in carried a `transfer_sub` leading to no record (an `unmatched` event).
    func recordUnmatched(transferSub: String, sub: String) async throws

    /// Marks `sub` authorized again after a revocation (the user signed in again), with an event.
    func restoreAuthorization(subject sub: String) async throws

    /// Records a nonce as used by its subject until its expiry; false when another attempt of that subject already
    /// used it and it has not expired by `now` (the application's clock, which also set the expiry). The same attempt
    /// repeating the call (its first answer lost with the connection) gets true again.
    func consumeNonce(_ use: NonceUse, now: Date) async throws -> Bool

    /// Forgets a nonce ``consumeNonce(_:now:)`` recorded for `use.attempt`, when the sign-in it guarded failed before
    /// writing anything, so the caller may retry with it; another attempt's use of the nonce stays.
    func releaseNonce(_ use: NonceUse) async throws

    /// Records a link session by its nonce's SHA-256 (hex), live until `expiresAt`, for the request `attempt`, unless
    /// about `maxLive` sessions are live at `now`; deletes a few expired sessions on the way. True when recorded (also
    /// when `attempt` repeats the call, its first answer lost), false at the limit.
    func createLinkSession(nonceHash: String, expiresAt: Date, attempt: String, now: Date, maxLive: Int) async throws -> Bool

    /// Uses up the link session of `nonceHash` for `attempt`: true when it was live at `now` or already used by this
    /// attempt, false when unknown, used by another attempt or expired; the row answered must be that session's, used
    /// by `attempt`.
    func consumeLinkSession(nonceHash: String, attempt: String, now: Date) async throws -> Bool

    /// What Baton's tables know of `sub`, for the credential-state rules (``CredentialState/init(_:transferAccepted:)``).
    func credentialFacts(of sub: String) async throws -> CredentialFacts

    /// Applies one server-to-server notification that happened at `eventTime` to `baton.subjects`; true when it
    /// changed something (then with an event), false for a duplicate or an event older than the latest applied.
    func applyNotification(_ kind: NotificationKind, subject sub: String, eventTime: Date) async throws -> Bool

    /// Whether the database answers and accepts writes (a writable primary).
    func ping() async throws
}

extension BatonStore {
    /// The migration a decision asks for: by the old identifier when the request names it, else through the
    /// transfer identifier (an unknown one is `.legacyRecordMissing`).
    func migrate(_ request: MigrationRequest) async throws -> MigrationOutcome {
        if let oldSub = request.oldSub {
            return try await applyMigration(oldSub: oldSub, newSub: request.newSub, newEmail: request.newEmail,
                                            isPrivateEmail: request.isPrivateEmail, transferSub: request.transferSub, method: request.method)
        }
        guard let transferSub = request.transferSub else { return .legacyRecordMissing }
        return try await applyMigration(transferSub: transferSub, newSub: request.newSub, newEmail: request.newEmail,
                                        isPrivateEmail: request.isPrivateEmail, method: request.method)
    }
}
