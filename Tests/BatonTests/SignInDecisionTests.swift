import Baton
import Foundation
import Testing

/// The sign-in and link rules as a table: each case feeds the decision what the store answered and checks every
/// step it asks for, with no database.
@Suite("SignInDecision: the sign-in and link rules, step by step")
struct SignInDecisionTests {
    static let expiry = Date(timeIntervalSince1970: 2_000_000_000)
    static let nonce = NonceUse(nonce: "n", subject: "new.1", expiresAt: expiry, attempt: "r.1")
    static let record = LegacyUser(key: "7", subject: "new.1", email: "a@privaterelay.appleid.com")
    static let crossed = LegacyUser(key: "766", subject: "new.914", email: nil)

    static func identity(transfer: Bool = true, email: String? = nil) -> VerifiedIdentity {
        VerifiedIdentity(sub: "new.1", transferSub: transfer ? "t.1" : nil, email: email, isPrivateEmail: email == nil ? nil : true)
    }

    static func migration(_ identity: VerifiedIdentity, oldSub: String? = nil, method: MigrationMethod = .signin) -> SignInStep {
        .migrate(MigrationRequest(oldSub: oldSub, transferSub: identity.transferSub, newSub: identity.sub, newEmail: identity.email,
                                  isPrivateEmail: identity.isPrivateEmail, method: method))
    }

    static func result(_ outcome: SignInResult.Outcome, _ user: LegacyUser?, transfer: Bool = true) -> SignInStep {
        .finish(SignInResult(outcome: outcome, user: user, sub: "new.1", transferSub: transfer ? "t.1" : nil))
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var decision: SignInDecision
        /// The first step, then each event with the step it must lead to.
        var first: SignInStep
        var script: [(SignInEvent, SignInStep)]
        var testDescription: String { name }
    }

    static let lookup = SignInStep.lookup(subject: "new.1", transferSub: "t.1")
    /// The lookup after a migration that rewrote nothing: the subject's record as it is now.
    static let again = SignInStep.lookup(subject: "new.1", transferSub: nil)
    static let fresh = LegacyUser(key: "900", subject: "new.1", email: nil)
    static let merged = LegacyUser(key: "7", subject: "new.1", email: "a@privaterelay.appleid.com")
    static let pair = DuplicatePair(freshKey: "900", legacyKey: "7")
    static let inconsistent = SignInStep.fail(BatonError(.inconsistentDatabaseAnswer, "a database answer did not match its question"))

    static let cases: [Case] = {
        let plain = identity()
        let signIn = SignInDecision.signIn(plain, nonce: nil, emailPolicy: .relay)
        let withNonce = SignInDecision.signIn(plain, nonce: nonce, emailPolicy: .relay)
        let relayed = identity(email: "b@privaterelay.appleid.com")
        return [
            Case(name: "a current user: one lookup, answered current", decision: signIn, first: lookup,
                 script: [(.lookedUp(SubjectMatch(user: record, state: nil)), result(.current, record))]),
            Case(name: "no record, no transfer identifier: new, nothing written",
                 decision: .signIn(identity(transfer: false), nonce: nil, emailPolicy: .relay), first: .lookup(subject: "new.1", transferSub: nil),
                 script: [(.lookedUp(nil), result(.new, nil, transfer: false))]),
            Case(name: "no record, a transfer identifier: migrated", decision: signIn, first: lookup,
                 script: [(.lookedUp(nil), migration(plain)), (.migration(.migrated(record)), result(.migrated, record))]),
            Case(name: "a concurrent sign-in migrated it: current", decision: signIn, first: lookup,
                 script: [(.lookedUp(nil), migration(plain)), (.migration(.alreadyMigrated(record)), result(.current, record))]),
            Case(name: "nothing rewritten and a record appeared meanwhile: looked up again, current", decision: signIn,
                 first: lookup,
                 script: [(.lookedUp(nil), migration(plain)), (.migration(.conflict), again),
                          (.lookedUp(SubjectMatch(user: record, state: nil)), result(.current, record))]),
            Case(name: "no record anywhere: unmatched, recorded, never new", decision: signIn, first: lookup,
                 script: [(.lookedUp(nil), migration(plain)), (.migration(.legacyRecordMissing), again),
                          (.lookedUp(nil), .recordUnmatched(transferSub: "t.1", sub: "new.1")), (.unmatchedRecorded, result(.unmatched, nil))]),
            Case(name: "a revoked consent is restored, then the email step", decision: .signIn(relayed, nonce: nil, emailPolicy: .relay),
                 first: lookup,
                 script: [(.lookedUp(SubjectMatch(user: record, state: .revoked)), .restoreAuthorization(subject: "new.1")),
                          (.authorizationRestored, .updateEmail(record, to: "b@privaterelay.appleid.com")),
                          (.emailUpdated(LegacyUser(key: "7", subject: "new.1", email: "b@privaterelay.appleid.com")),
                           result(.current, LegacyUser(key: "7", subject: "new.1", email: "b@privaterelay.appleid.com")))]),
            Case(name: "an email the policy keeps is not written", decision: .signIn(relayed, nonce: nil, emailPolicy: .never),
                 first: lookup, script: [(.lookedUp(SubjectMatch(user: record, state: nil)), result(.current, record))]),
            Case(name: "a nonce is consumed first; a reused one is refused and nothing else runs", decision: withNonce,
                 first: .consumeNonce(nonce), script: [(.nonceConsumed(false), .fail(BatonError(.nonceReused, "this nonce was already used")))]),
            Case(name: "a consumed nonce, then the sign-in", decision: withNonce, first: .consumeNonce(nonce),
                 script: [(.nonceConsumed(true), lookup), (.lookedUp(SubjectMatch(user: record, state: nil)), result(.current, record))]),
            Case(name: "a lookup answering another subject's record is refused, never answered (the nonce released first)", decision: withNonce,
                 first: .consumeNonce(nonce),
                 script: [(.nonceConsumed(true), lookup), (.lookedUp(SubjectMatch(user: crossed, state: nil)), .releaseNonce(nonce)),
                          (.nonceReleased, inconsistent)]),
            Case(name: "a migration answering another subject's record is refused", decision: signIn, first: lookup,
                 script: [(.lookedUp(nil), migration(plain)), (.migration(.migrated(crossed)), inconsistent)]),
            Case(name: "a record made without Baton while the legacy one waits: the pair recorded, the fresh record answered (report)",
                 decision: signIn, first: lookup,
                 script: [(.lookedUp(SubjectMatch(user: fresh, state: nil, legacyWaiting: true)),
                           .recordDuplicate(newSub: "new.1", oldSub: nil, transferSub: "t.1", foundBy: .signin)),
                          (.duplicateRecorded(RecordedDuplicate(pair: pair, isNew: true, isUnmerged: true)), result(.current, fresh))]),
            Case(name: "the same under merge: the identity moves onto the legacy record, migrated, the fresh key named",
                 decision: .signIn(plain, nonce: nil, emailPolicy: .relay, duplicatePolicy: .merge), first: lookup,
                 script: [(.lookedUp(SubjectMatch(user: fresh, state: nil, legacyWaiting: true)),
                           .recordDuplicate(newSub: "new.1", oldSub: nil, transferSub: "t.1", foundBy: .signin)),
                          (.duplicateRecorded(RecordedDuplicate(pair: pair, isNew: true, isUnmerged: true)), .mergeDuplicate(pair)),
                          (.duplicateMerged(MergedDuplicate(user: merged, freshKey: "900", releasedSubject: nil, sameAccount: false)),
                           .finish(SignInResult(outcome: .migrated, user: merged, sub: "new.1", transferSub: "t.1", mergedFrom: "900")))]),
            Case(name: "a merge someone else made meanwhile: the subject looked up again, current",
                 decision: .signIn(plain, nonce: nil, emailPolicy: .relay, duplicatePolicy: .merge), first: lookup,
                 script: [(.lookedUp(SubjectMatch(user: fresh, state: nil, legacyWaiting: true)),
                           .recordDuplicate(newSub: "new.1", oldSub: nil, transferSub: "t.1", foundBy: .signin)),
                          (.duplicateRecorded(RecordedDuplicate(pair: pair, isNew: false, isUnmerged: true)), .mergeDuplicate(pair)),
                          (.duplicateMerged(nil), again), (.lookedUp(SubjectMatch(user: merged, state: nil)), result(.current, merged))]),
            Case(name: "a re-link onto a taken identifier records the pair; without merge it stays a conflict",
                 decision: .link(legacySub: "old.1", current: plain, sessionNonce: "s", attempt: "r.1", nonces: []), first: .consumeLinkSession(nonce: "s", attempt: "r.1"),
                 script: [(.linkSessionConsumed(true), .checkLinkable(legacySub: "old.1", currentSub: "new.1")),
                          (.linkable("old.1"), migration(plain, oldSub: "old.1", method: .link)),
                          (.migration(.conflict), .recordDuplicate(newSub: "new.1", oldSub: "old.1", transferSub: "t.1", foundBy: .link)),
                          (.duplicateRecorded(RecordedDuplicate(pair: pair, isNew: true, isUnmerged: true)),
                           .fail(BatonError(.conflict, "the new identifier already belongs to another record")))]),
            Case(name: "a link uses its session up, consumes both nonces, checks, migrates",
                 decision: .link(legacySub: "old.1", current: plain, sessionNonce: "s", attempt: "r.1", nonces: [
                     NonceUse(nonce: "h", subject: "old.1", expiresAt: expiry, attempt: "r.1"), NonceUse(nonce: "h", subject: "new.1", expiresAt: expiry, attempt: "r.1")]),
                 first: .consumeLinkSession(nonce: "s", attempt: "r.1"),
                 script: [(.linkSessionConsumed(true), .consumeNonce(NonceUse(nonce: "h", subject: "old.1", expiresAt: expiry, attempt: "r.1"))),
                          (.nonceConsumed(true), .consumeNonce(NonceUse(nonce: "h", subject: "new.1", expiresAt: expiry, attempt: "r.1"))),
                          (.nonceConsumed(true), .checkLinkable(legacySub: "old.1", currentSub: "new.1")),
                          (.linkable("old.1"), migration(plain, oldSub: "old.1", method: .link)),
                          (.migration(.migrated(record)), result(.migrated, record))]),
            Case(name: "a linkable answer naming another sending-team identifier is refused",
                 decision: .link(legacySub: "old.1", current: plain, sessionNonce: "s", attempt: "r.1", nonces: []), first: .consumeLinkSession(nonce: "s", attempt: "r.1"),
                 script: [(.linkSessionConsumed(true), .checkLinkable(legacySub: "old.1", currentSub: "new.1")), (.linkable("old.2"), inconsistent)]),
            Case(name: "an email update answering another record is refused", decision: .signIn(relayed, nonce: nil, emailPolicy: .relay),
                 first: lookup,
                 script: [(.lookedUp(SubjectMatch(user: record, state: nil)), .updateEmail(record, to: "b@privaterelay.appleid.com")),
                          (.emailUpdated(LegacyUser(key: "8", subject: "new.1", email: "b@privaterelay.appleid.com")), inconsistent)]),
            Case(name: "a recorded pair whose fresh half is not the record looked up is refused, never merged",
                 decision: .signIn(plain, nonce: nil, emailPolicy: .relay, duplicatePolicy: .merge), first: lookup,
                 script: [(.lookedUp(SubjectMatch(user: fresh, state: nil, legacyWaiting: true)),
                           .recordDuplicate(newSub: "new.1", oldSub: nil, transferSub: "t.1", foundBy: .signin)),
                          (.duplicateRecorded(RecordedDuplicate(pair: DuplicatePair(freshKey: "901", legacyKey: "7"), isNew: true, isUnmerged: true)),
                           inconsistent)]),
            Case(name: "a merge answering another pair is refused",
                 decision: .signIn(plain, nonce: nil, emailPolicy: .relay, duplicatePolicy: .merge), first: lookup,
                 script: [(.lookedUp(SubjectMatch(user: fresh, state: nil, legacyWaiting: true)),
                           .recordDuplicate(newSub: "new.1", oldSub: nil, transferSub: "t.1", foundBy: .signin)),
                          (.duplicateRecorded(RecordedDuplicate(pair: pair, isNew: true, isUnmerged: true)), .mergeDuplicate(pair)),
                          (.duplicateMerged(MergedDuplicate(user: LegacyUser(key: "8", subject: "new.1", email: nil), freshKey: "900",
                                                            releasedSubject: nil, sameAccount: false)), inconsistent)]),
            Case(name: "a used or unknown link session is refused before anything",
                 decision: .link(legacySub: "old.1", current: plain, sessionNonce: "s", attempt: "r.1", nonces: []), first: .consumeLinkSession(nonce: "s", attempt: "r.1"),
                 script: [(.linkSessionConsumed(false), .fail(BatonError(.nonceReused, "the link session was already used or has expired")))]),
            Case(name: "a refused link releases nothing it consumed",
                 decision: .link(legacySub: "old.1", current: plain, sessionNonce: "s", attempt: "r.1", nonces: [NonceUse(nonce: "h", subject: "old.1", expiresAt: expiry, attempt: "r.1")]),
                 first: .consumeLinkSession(nonce: "s", attempt: "r.1"),
                 script: [(.linkSessionConsumed(true), .consumeNonce(NonceUse(nonce: "h", subject: "old.1", expiresAt: expiry, attempt: "r.1"))),
                          (.nonceConsumed(true), .checkLinkable(legacySub: "old.1", currentSub: "new.1")),
                          (.linkable("old.1"), migration(plain, oldSub: "old.1", method: .link)),
                          (.migration(.legacyRecordMissing), .fail(BatonError(.legacyRecordMissing, "no record carries the old identifier")))]),
        ]
    }()

    @Test("each case asks for exactly the steps the rules give", arguments: cases)
    func table(_ test: Case) {
        var decision = test.decision
        #expect(decision.start() == test.first)
        for (event, expected) in test.script {
            #expect(!decision.isDone)
            #expect(decision.next(event) == expected)
        }
        #expect(decision.isDone)
    }

    @Test("a failed step releases the sign-in's consumed nonce (or the one whose consumption failed, commit unknown), and a re-link's nothing")
    func cleanUp() {
        var withoutNonce = SignInDecision.signIn(Self.identity(), nonce: nil, emailPolicy: .relay)
        _ = withoutNonce.start()
        #expect(withoutNonce.cleanUpAfterFailure() == nil)  // nothing consumed
        var consuming = SignInDecision.signIn(Self.identity(), nonce: Self.nonce, emailPolicy: .relay)
        _ = consuming.start()
        #expect(consuming.cleanUpAfterFailure() == .releaseNonce(Self.nonce))  // the consumption's answer was lost
        var consumed = SignInDecision.signIn(Self.identity(), nonce: Self.nonce, emailPolicy: .relay)
        _ = consumed.start()
        _ = consumed.next(.nonceConsumed(true))
        #expect(consumed.cleanUpAfterFailure() == .releaseNonce(Self.nonce))
        var link = SignInDecision.link(legacySub: "old.1", current: Self.identity(), sessionNonce: "s", attempt: "r.1", nonces: [Self.nonce])
        _ = link.start()
        _ = link.next(.linkSessionConsumed(true))
        _ = link.next(.nonceConsumed(true))
        #expect(link.cleanUpAfterFailure() == nil)
    }
}
