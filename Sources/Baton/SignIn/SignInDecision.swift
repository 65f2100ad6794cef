import Foundation

/// A nonce to record as used by one subject until an instant of the application's clock.
public struct NonceUse: Sendable, Equatable {
    /// The token's `nonce` claim.
    public var nonce: String
    /// The subject that uses it (a nonce is consumed per `sub`).
    public var subject: String
    /// Until when a second use is refused: the token's `exp` + leeway + ``BatonEngine/nonceRetentionMargin``.
    public var expiresAt: Date
    /// The sign-in or re-link that uses it: an identifier Baton makes at random per request (never the caller's), so
    /// the same statement repeated by that request, after a connection broke with its commit unknown, finds its own
    /// use and is not refused as a replay.
    public var attempt: String

    /// Creates a use.
    public init(nonce: String, subject: String, expiresAt: Date, attempt: String) {
        self.nonce = nonce
        self.subject = subject
        self.expiresAt = expiresAt
        self.attempt = attempt
    }
}

/// The migration statement a decision asks for: the record of `oldSub` (or, without it, the record
/// `transferSub` leads to) rewritten to `newSub`.
public struct MigrationRequest: Sendable, Equatable {
    /// The sending team's identifier, when known (a re-link); nil to find the record through `transferSub`.
    public var oldSub: String?
    /// The transfer identifier, when the token carries one.
    public var transferSub: String?
    /// The receiving team's identifier.
    public var newSub: String
    /// The email the receiving team's token carries.
    public var newEmail: String?
    /// Whether `newEmail` is a private relay address.
    public var isPrivateEmail: Bool?
    /// How the record reaches its new identifier.
    public var method: MigrationMethod

    /// Creates a request.
    public init(oldSub: String?, transferSub: String?, newSub: String, newEmail: String?, isPrivateEmail: Bool?, method: MigrationMethod) {
        self.oldSub = oldSub
        self.transferSub = transferSub
        self.newSub = newSub
        self.newEmail = newEmail
        self.isPrivateEmail = isPrivateEmail
        self.method = method
    }
}

/// What a sign-in or a re-link asks its driver to do next: a statement against the store, or the end.
public enum SignInStep: Sendable, Equatable {
    /// Record a nonce as used; answered by ``SignInEvent/nonceConsumed(_:)``.
    case consumeNonce(NonceUse)
    /// Find the record carrying a subject (and whether the legacy record of the transfer identifier still waits);
    /// answered by ``SignInEvent/lookedUp(_:)``.
    case lookup(subject: String, transferSub: String?)
    /// Rewrite a record exactly once; answered by ``SignInEvent/migration(_:)``.
    case migrate(MigrationRequest)
    /// Mark a revoked subject authorized again; answered by ``SignInEvent/authorizationRestored``.
    case restoreAuthorization(subject: String)
    /// Replace a current user's email; answered by ``SignInEvent/emailUpdated(_:)``.
    case updateEmail(LegacyUser, to: String)
    /// Record, once per subject and transfer identifier, a transfer identifier leading to no record; answered by
    /// ``SignInEvent/unmatchedRecorded``.
    case recordUnmatched(transferSub: String, sub: String)
    /// Forget a nonce this sign-in consumed, because it ends without an answer; answered by ``SignInEvent/nonceReleased``.
    case releaseNonce(NonceUse)
    /// Record once that the record holding `newSub` and the user's legacy record are one person's; answered by
    /// ``SignInEvent/duplicateRecorded(_:)``.
    case recordDuplicate(newSub: String, oldSub: String?, transferSub: String?, foundBy: MigrationMethod)
    /// Move the Apple identity from a duplicate's fresh record onto its legacy record; answered by
    /// ``SignInEvent/duplicateMerged(_:)``.
    case mergeDuplicate(DuplicatePair)
    /// Use up a server-issued link session for the re-link `attempt`; answered by ``SignInEvent/linkSessionConsumed(_:)``.
    case consumeLinkSession(nonce: String, attempt: String)
    /// Ask whether a sending-team identifier may be re-linked; answered by ``SignInEvent/linkable(_:)``.
    case checkLinkable(legacySub: String, currentSub: String)
    /// The answer.
    case finish(SignInResult)
    /// The refusal (nothing more to do: the decision released what needed releasing first).
    case fail(BatonError)

    /// Whether the step changes the database (a driver commits it on its own).
    public var writes: Bool {
        switch self {
        case .lookup, .checkLinkable, .finish, .fail: false
        default: true
        }
    }
}

/// What a step came to, as the driver read it from the store.
public enum SignInEvent: Sendable, Equatable {
    /// True when the nonce was recorded now, false when its subject already used it.
    case nonceConsumed(Bool)
    /// The record carrying the subject, or nil.
    case lookedUp(SubjectMatch?)
    /// What the migration statement did.
    case migration(MigrationOutcome)
    /// The subject is authorized again.
    case authorizationRestored
    /// The record as stored after the email step (nil when it changed meanwhile).
    case emailUpdated(LegacyUser?)
    /// The `unmatched` event is recorded (or was already).
    case unmatchedRecorded
    /// The nonce is forgotten.
    case nonceReleased
    /// The duplicate pair, or nil when there are not two records.
    case duplicateRecorded(RecordedDuplicate?)
    /// The merge, or nil when the pair changed or was merged meanwhile.
    case duplicateMerged(MergedDuplicate?)
    /// True when the session was live and is now used up.
    case linkSessionConsumed(Bool)
    /// The sending-team identifier the store found linkable, or nil when it may not be re-linked.
    case linkable(String?)
}

/// The rules of a sign-in and of a re-link, as one value with no I/O: a driver asks for the first step, performs it
/// (on an event loop's pipeline, or on the async pool), hands what happened to ``next(_:)`` and performs the step
/// it returns, until ``SignInStep/finish(_:)`` or ``SignInStep/fail(_:)``. Every driver runs these rules and only
/// these; a driver that cannot perform a step hands the decision, as it is, to another driver, which performs the
/// same step.
///
/// A sign-in (``signIn(_:nonce:emailPolicy:)``):
/// 1. the token's nonce claim, when it has one, is consumed for its `sub` first (whether or not the request named a
///    nonce): a second use is `nonce_reused` and writes nothing else;
/// 2. a record with the token's `sub` → `current` (a revoked consent restored, a changed email written as the
///    email policy allows); when the user's legacy record still waits for the token's `transfer_sub`, that record
///    was made without Baton (a duplicate): the pair is recorded once, and with `legacy.on_duplicate` `merge` the
///    Apple identity moves onto the legacy record → `migrated` with `mergedFrom`, the fresh record's key;
/// 3. none, and no `transfer_sub` → `new`, nothing written;
/// 4. none, with a `transfer_sub` → the record it leads to is rewritten exactly once → `migrated`; when nothing was
///    rewritten (a concurrent sign-in did it, the new identifier is held, no record), the `sub` is looked up again:
///    a record → rule 2, none → `unmatched` (recorded once per subject and transfer identifier; never `new`: the
///    person has an account under the sending team).
///
/// A re-link (``link(legacy:current:sessionNonce:)``): the server-issued link session is used up, then both
/// tokens' nonces are consumed for their own subjects (a legacy token is good for one link), the legacy identifier
/// must be linkable, and the record is rewritten (`migrated`, or `current` when it already was; when another record
/// holds the new identifier the pair is recorded as a duplicate, merged under `merge`, else `conflict`). Nothing a re-link
/// consumed is ever released, even when it fails: a captured legacy token cannot be presented twice.
///
/// Every answer is checked against the question: a record whose subject is not the one asked for is an
/// `inconsistent_database_answer`, never another user's record.
public struct SignInDecision: Sendable {
    private enum Purpose: Sendable {
        case signIn
        case link(legacySub: String, sessionNonce: String, attempt: String)
    }

    private enum Phase: Sendable {
        case start
        case consumingSession
        case consumingNonce(index: Int)
        case checkingLinkable
        case lookingUp
        case migrating
        case lookingUpAgain
        case restoring(SubjectMatch)
        case updatingEmail(SubjectMatch)
        case recordingUnmatched
        case recordingDuplicate(SubjectMatch?)
        case merging(DuplicatePair)
        case releasing(then: BatonError)
        case done
    }

    /// The current team's identity the token carries.
    public let identity: VerifiedIdentity
    private let purpose: Purpose
    private let nonces: [NonceUse]
    private let emailPolicy: EmailPolicy
    private let duplicatePolicy: DuplicatePolicy
    private var phase = Phase.start
    private var consumed: [NonceUse] = []

    private init(identity: VerifiedIdentity, purpose: Purpose, nonces: [NonceUse], emailPolicy: EmailPolicy, duplicatePolicy: DuplicatePolicy) {
        self.identity = identity
        self.purpose = purpose
        self.nonces = nonces
        self.emailPolicy = emailPolicy
        self.duplicatePolicy = duplicatePolicy
    }

    /// A sign-in of `identity`, consuming `nonce` (the token's claim) first when there is one.
    public static func signIn(_ identity: VerifiedIdentity, nonce: NonceUse?, emailPolicy: EmailPolicy,
                              duplicatePolicy: DuplicatePolicy = .report) -> SignInDecision {
        SignInDecision(identity: identity, purpose: .signIn, nonces: nonce.map { [$0] } ?? [], emailPolicy: emailPolicy,
                       duplicatePolicy: duplicatePolicy)
    }

    /// A re-link of the sending team's `legacy` identifier to the `current` identity, in the link session whose
    /// nonce is `sessionNonce`, used up by `attempt` (the request's identifier, as in ``NonceUse/attempt``); `nonces`
    /// are both tokens' claims, each for its own subject.
    public static func link(legacySub: String, current: VerifiedIdentity, sessionNonce: String, attempt: String, nonces: [NonceUse],
                            duplicatePolicy: DuplicatePolicy = .report) -> SignInDecision {
        SignInDecision(identity: current, purpose: .link(legacySub: legacySub, sessionNonce: sessionNonce, attempt: attempt), nonces: nonces,
                       emailPolicy: .never, duplicatePolicy: duplicatePolicy)
    }

    /// Whether the decision has ended (its last step was ``SignInStep/finish(_:)`` or ``SignInStep/fail(_:)``).
    public var isDone: Bool {
        if case .done = phase { return true }
        return false
    }

    /// The first step.
    public mutating func start() -> SignInStep {
        precondition(isStart, "start() is called once")
        if case .link(_, let sessionNonce, let attempt) = purpose {
            phase = .consumingSession
            return .consumeLinkSession(nonce: sessionNonce, attempt: attempt)
        }
        return nonceOrNext(0)
    }

    private var isStart: Bool {
        if case .start = phase { return true }
        return false
    }

    /// The step after `event`, the outcome of the last step returned.
    public mutating func next(_ event: SignInEvent) -> SignInStep {
        switch (phase, event) {
        case (.consumingSession, .linkSessionConsumed(let live)):
            guard live else { return finish(failing: BatonError(.nonceReused, "the link session was already used or has expired")) }
            return nonceOrNext(0)
        case (.consumingNonce(let index), .nonceConsumed(let fresh)):
            guard fresh else { return refuse(BatonError(.nonceReused, "this nonce was already used")) }
            consumed.append(nonces[index])
            return nonceOrNext(index + 1)
        case (.checkingLinkable, .linkable(let found)):
            guard let found else {
                return refuse(BatonError(.notLinkable, "the legacy token's subject is not a sending-team identifier awaiting migration"))
            }
            guard case .link(let legacySub, _, _) = purpose, found == legacySub else { return inconsistent() }
            return migrate()
        case (.lookingUp, .lookedUp(let match)):
            if let match {
                guard isAsked(match.user) else { return inconsistent() }
                guard match.legacyWaiting, let transferSub = identity.transferSub else { return settleCurrent(match) }
                phase = .recordingDuplicate(match)
                return .recordDuplicate(newSub: identity.sub, oldSub: nil, transferSub: transferSub, foundBy: .signin)
            }
            guard identity.transferSub != nil else { return finish(.new, user: nil, transferSub: nil) }
            return migrate()
        case (.migrating, .migration(let outcome)):
            return migrated(outcome)
        case (.lookingUpAgain, .lookedUp(let match)):
            if let match { return isAsked(match.user) ? settleCurrent(match) : inconsistent() }
            guard let transferSub = identity.transferSub else { return inconsistent() }
            phase = .recordingUnmatched
            return .recordUnmatched(transferSub: transferSub, sub: identity.sub)
        case (.restoring(let match), .authorizationRestored):
            return emailStep(match)
        case (.updatingEmail(let match), .emailUpdated(let user)):
            if let user, !isAsked(user) || user.key != match.user.key { return inconsistent() }
            return finish(.current, user: user ?? match.user, transferSub: identity.transferSub)
        case (.recordingDuplicate(let match), .duplicateRecorded(let recorded)):
            // The fresh half of the pair is the record the lookup found under the token's subject.
            if let recorded, let match, recorded.pair.freshKey != match.user.key { return inconsistent() }
            guard let pair = duplicatePolicy.pairToMerge(recorded) else { return withoutMerge(match) }
            phase = .merging(pair)
            return .mergeDuplicate(pair)
        case (.merging(let pair), .duplicateMerged(let merged)):
            guard let merged else {
                // Changed meanwhile (a concurrent sign-in or merge): the subject's record, as it is now.
                phase = .lookingUpAgain
                return .lookup(subject: identity.sub, transferSub: nil)
            }
            return isAsked(merged.user) && merged.user.key == pair.legacyKey && merged.freshKey == pair.freshKey
                ? finish(.migrated, user: merged.user, transferSub: identity.transferSub, mergedFrom: merged.freshKey) : inconsistent()
        case (.recordingUnmatched, .unmatchedRecorded):
            return finish(.unmatched, user: nil, transferSub: identity.transferSub)
        case (.releasing(let error), .nonceReleased):
            consumed.removeAll()
            phase = .done
            return .fail(error)
        default:
            preconditionFailure("sign-in decision: \(event) does not answer the step of \(phase)")
        }
    }

    /// What to do after a step failed with an error the driver holds and will rethrow: release the nonce this
    /// sign-in consumed, or was consuming when the step failed with its commit unknown (the release removes only
    /// this attempt's use), so the caller may retry with it; or nothing (nil). A re-link releases nothing.
    public mutating func cleanUpAfterFailure() -> SignInStep? {
        let failed = phase
        phase = .done
        guard case .signIn = purpose else { return nil }
        if let nonce = consumed.popLast() { return .releaseNonce(nonce) }
        if case .consumingNonce(let index) = failed { return .releaseNonce(nonces[index]) }
        return nil
    }

    // MARK: - Rules

    private mutating func nonceOrNext(_ index: Int) -> SignInStep {
        if index < nonces.count {
            phase = .consumingNonce(index: index)
            return .consumeNonce(nonces[index])
        }
        switch purpose {
        case .signIn:
            phase = .lookingUp
            return .lookup(subject: identity.sub, transferSub: identity.transferSub)
        case .link(let legacySub, _, _):
            phase = .checkingLinkable
            return .checkLinkable(legacySub: legacySub, currentSub: identity.sub)
        }
    }

    private mutating func migrate() -> SignInStep {
        phase = .migrating
        switch purpose {
        case .signIn:
            return .migrate(MigrationRequest(oldSub: nil, transferSub: identity.transferSub, newSub: identity.sub, newEmail: identity.email,
                                             isPrivateEmail: identity.isPrivateEmail, method: .signin))
        case .link(let legacySub, _, _):
            return .migrate(MigrationRequest(oldSub: legacySub, transferSub: identity.transferSub, newSub: identity.sub,
                                             newEmail: identity.email, isPrivateEmail: identity.isPrivateEmail, method: .link))
        }
    }

    private mutating func migrated(_ outcome: MigrationOutcome) -> SignInStep {
        switch (purpose, outcome) {
        case (_, .migrated(let user)):
            return isAsked(user) ? finish(.migrated, user: user, transferSub: identity.transferSub) : inconsistent()
        case (_, .alreadyMigrated(let user)):
            return isAsked(user) ? finish(.current, user: user, transferSub: identity.transferSub) : inconsistent()
        case (.signIn, .legacyRecordMissing), (.signIn, .conflict):
            // A record for the new identifier may exist (a concurrent sign-in, or the application made one).
            phase = .lookingUpAgain
            return .lookup(subject: identity.sub, transferSub: nil)
        case (.link(let legacySub, _, _), .conflict):
            phase = .recordingDuplicate(nil)
            return .recordDuplicate(newSub: identity.sub, oldSub: legacySub, transferSub: identity.transferSub, foundBy: .link)
        case (.link, .legacyRecordMissing):
            return refuse(BatonError(.legacyRecordMissing, "no record carries the old identifier"))
        }
    }

    /// A duplicate left as it is: a sign-in answers with the record it found (rule 2), a re-link is a conflict.
    private mutating func withoutMerge(_ match: SubjectMatch?) -> SignInStep {
        guard let match else { return refuse(BatonError(.conflict, "the new identifier already belongs to another record")) }
        return settleCurrent(match)
    }

    /// Rule 2: a revoked consent restored first, then the email step.
    private mutating func settleCurrent(_ match: SubjectMatch) -> SignInStep {
        if match.state == .revoked {
            phase = .restoring(match)
            return .restoreAuthorization(subject: identity.sub)
        }
        return emailStep(match)
    }

    private mutating func emailStep(_ match: SubjectMatch) -> SignInStep {
        guard let email = identity.email, emailPolicy.allowsReplacing(match.user.email, with: email) else {
            return finish(.current, user: match.user, transferSub: identity.transferSub)
        }
        phase = .updatingEmail(match)
        return .updateEmail(match.user, to: email)
    }

    /// Whether a record the store returned carries the subject that was asked for.
    private func isAsked(_ user: LegacyUser) -> Bool {
        user.subject == identity.sub
    }

    private mutating func inconsistent() -> SignInStep {
        refuse(BatonError(.inconsistentDatabaseAnswer, "a database answer did not match its question"))
    }

    private mutating func finish(_ outcome: SignInResult.Outcome, user: LegacyUser?, transferSub: String?,
                                 mergedFrom: String? = nil) -> SignInStep {
        phase = .done
        return .finish(SignInResult(outcome: outcome, user: user, sub: identity.sub, transferSub: transferSub, mergedFrom: mergedFrom))
    }

    /// Ends with `error`; a sign-in first releases the nonce it consumed, a re-link keeps everything used up.
    private mutating func refuse(_ error: BatonError) -> SignInStep {
        if case .signIn = purpose, let nonce = consumed.last {
            phase = .releasing(then: error)
            return .releaseNonce(nonce)
        }
        return finish(failing: error)
    }

    private mutating func finish(failing error: BatonError) -> SignInStep {
        phase = .done
        return .fail(error)
    }
}

extension DuplicatePolicy {
    /// The duplicate rule every path follows (a sign-in, a re-link, the exchange): a pair the path recorded, or found
    /// recorded and still waiting, is merged at once under `merge`; otherwise it is left for `baton merge` (nil).
    public func pairToMerge(_ recorded: RecordedDuplicate?) -> DuplicatePair? {
        guard let recorded, recorded.isUnmerged, self == .merge else { return nil }
        return recorded.pair
    }
}
