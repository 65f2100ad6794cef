import Baton
import Foundation
import Testing

/// The sign-in and link rules as a table: each case feeds the decision what the store answered and checks every
/// step it asks for, with no database.
@Suite("SignInDecision: the sign-in and link rules, step by step")
struct SignInDecisionTests {
    static let expiry = Date(timeIntervalSince1970: 2_000_000_000)
    static let nonce = NonceUse(nonce: "n", subject: "new.1", expiresAt: expiry)
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

    static let inconsistent = SignInStep.fail(BatonError(.inconsistentDatabaseAnswer, "a database answer did not match its question"))

    static let cases: [Case] = {
        let plain = identity()
        let signIn = SignInDecision.signIn(plain, nonce: nil, emailPolicy: .relay)
        let withNonce = SignInDecision.signIn(plain, nonce: nonce, emailPolicy: .relay)
        let relayed = identity(email: "b@privaterelay.appleid.com")
        return [
            Case(name: "a current user: one lookup, answered current", decision: signIn, first: .lookup(subject: "new.1"),
                 script: [(.lookedUp(SubjectMatch(user: record, state: nil)), result(.current, record))]),
            Case(name: "no record, no transfer identifier: new, nothing written",
                 decision: .signIn(identity(transfer: false), nonce: nil, emailPolicy: .relay), first: .lookup(subject: "new.1"),
                 script: [(.lookedUp(nil), result(.new, nil, transfer: false))]),
            Case(name: "no record, a transfer identifier: migrated", decision: signIn, first: .lookup(subject: "new.1"),
                 script: [(.lookedUp(nil), migration(plain)), (.migration(.migrated(record)), result(.migrated, record))]),
            Case(name: "a concurrent sign-in migrated it: current", decision: signIn, first: .lookup(subject: "new.1"),
                 script: [(.lookedUp(nil), migration(plain)), (.migration(.alreadyMigrated(record)), result(.current, record))]),
            Case(name: "nothing rewritten and a record appeared meanwhile: looked up again, current", decision: signIn,
                 first: .lookup(subject: "new.1"),
                 script: [(.lookedUp(nil), migration(plain)), (.migration(.conflict), .lookup(subject: "new.1")),
                          (.lookedUp(SubjectMatch(user: record, state: nil)), result(.current, record))]),
            Case(name: "no record anywhere: unmatched, recorded, never new", decision: signIn, first: .lookup(subject: "new.1"),
                 script: [(.lookedUp(nil), migration(plain)), (.migration(.legacyRecordMissing), .lookup(subject: "new.1")),
                          (.lookedUp(nil), .recordUnmatched(transferSub: "t.1", sub: "new.1")), (.unmatchedRecorded, result(.unmatched, nil))]),
            Case(name: "a revoked consent is restored, then the email step", decision: .signIn(relayed, nonce: nil, emailPolicy: .relay),
                 first: .lookup(subject: "new.1"),
                 script: [(.lookedUp(SubjectMatch(user: record, state: .revoked)), .restoreAuthorization(subject: "new.1")),
                          (.authorizationRestored, .updateEmail(record, to: "b@privaterelay.appleid.com")),
                          (.emailUpdated(LegacyUser(key: "7", subject: "new.1", email: "b@privaterelay.appleid.com")),
                           result(.current, LegacyUser(key: "7", subject: "new.1", email: "b@privaterelay.appleid.com")))]),
            Case(name: "an email the policy keeps is not written", decision: .signIn(relayed, nonce: nil, emailPolicy: .never),
                 first: .lookup(subject: "new.1"), script: [(.lookedUp(SubjectMatch(user: record, state: nil)), result(.current, record))]),
            Case(name: "a nonce is consumed first; a reused one is refused and nothing else runs", decision: withNonce,
                 first: .consumeNonce(nonce), script: [(.nonceConsumed(false), .fail(BatonError(.nonceReused, "this nonce was already used")))]),
            Case(name: "a consumed nonce, then the sign-in", decision: withNonce, first: .consumeNonce(nonce),
                 script: [(.nonceConsumed(true), .lookup(subject: "new.1")), (.lookedUp(SubjectMatch(user: record, state: nil)), result(.current, record))]),
            Case(name: "a lookup answering another subject's record is refused, never answered (the nonce released first)", decision: withNonce,
                 first: .consumeNonce(nonce),
                 script: [(.nonceConsumed(true), .lookup(subject: "new.1")), (.lookedUp(SubjectMatch(user: crossed, state: nil)), .releaseNonce(nonce)),
                          (.nonceReleased, inconsistent)]),
            Case(name: "a migration answering another subject's record is refused", decision: signIn, first: .lookup(subject: "new.1"),
                 script: [(.lookedUp(nil), migration(plain)), (.migration(.migrated(crossed)), inconsistent)]),
            Case(name: "a link uses its session up, consumes both nonces, checks, migrates",
                 decision: .link(legacySub: "old.1", current: plain, sessionNonce: "s", nonces: [
                     NonceUse(nonce: "h", subject: "old.1", expiresAt: expiry), NonceUse(nonce: "h", subject: "new.1", expiresAt: expiry)]),
                 first: .consumeLinkSession(nonce: "s"),
                 script: [(.linkSessionConsumed(true), .consumeNonce(NonceUse(nonce: "h", subject: "old.1", expiresAt: expiry))),
                          (.nonceConsumed(true), .consumeNonce(NonceUse(nonce: "h", subject: "new.1", expiresAt: expiry))),
                          (.nonceConsumed(true), .checkLinkable(legacySub: "old.1", currentSub: "new.1")),
                          (.linkable(true), migration(plain, oldSub: "old.1", method: .link)),
                          (.migration(.migrated(record)), result(.migrated, record))]),
            Case(name: "a used or unknown link session is refused before anything",
                 decision: .link(legacySub: "old.1", current: plain, sessionNonce: "s", nonces: []), first: .consumeLinkSession(nonce: "s"),
                 script: [(.linkSessionConsumed(false), .fail(BatonError(.nonceReused, "the link session was already used or has expired")))]),
            Case(name: "a refused link releases nothing it consumed",
                 decision: .link(legacySub: "old.1", current: plain, sessionNonce: "s", nonces: [NonceUse(nonce: "h", subject: "old.1", expiresAt: expiry)]),
                 first: .consumeLinkSession(nonce: "s"),
                 script: [(.linkSessionConsumed(true), .consumeNonce(NonceUse(nonce: "h", subject: "old.1", expiresAt: expiry))),
                          (.nonceConsumed(true), .checkLinkable(legacySub: "old.1", currentSub: "new.1")),
                          (.linkable(true), migration(plain, oldSub: "old.1", method: .link)),
                          (.migration(.conflict), .fail(BatonError(.conflict, "the new identifier already belongs to another record")))]),
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

    @Test("a failed step releases the sign-in's consumed nonce, and a re-link's nothing")
    func cleanUp() {
        var signIn = SignInDecision.signIn(Self.identity(), nonce: Self.nonce, emailPolicy: .relay)
        _ = signIn.start()
        #expect(signIn.cleanUpAfterFailure() == nil)  // nothing consumed yet
        var consumed = SignInDecision.signIn(Self.identity(), nonce: Self.nonce, emailPolicy: .relay)
        _ = consumed.start()
        _ = consumed.next(.nonceConsumed(true))
        #expect(consumed.cleanUpAfterFailure() == .releaseNonce(Self.nonce))
        var link = SignInDecision.link(legacySub: "old.1", current: Self.identity(), sessionNonce: "s", nonces: [Self.nonce])
        _ = link.start()
        _ = link.next(.linkSessionConsumed(true))
        _ = link.next(.nonceConsumed(true))
        #expect(link.cleanUpAfterFailure() == nil)
    }
}
