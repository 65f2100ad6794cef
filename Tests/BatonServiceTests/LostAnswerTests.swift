import BatonAppleSignIn
import Baton
import BatonConcurrency
import BatonJOSE
import BatonPostgres
import Foundation
import Synchronization
import TestSupport
import Testing

/// A write whose answer never came back (the connection broke after PostgreSQL committed it) is performed again by
/// the sign-in's driver: the nonce or link session the first performance used up must not refuse the request that
/// used it.
@Suite("Sign-in: a committed write whose answer was lost is performed again without refusing its own request", .serialized)
struct LostAnswerTests {
    static let lostConnection = PostgresError(.connectionFailure, reason: "the connection broke before the answer came back")

    @Test("the async driver: a nonce consumed, its answer lost, the retry accepts it; the token replayed is still refused")
    func nonceAsync() async throws {
        try await ServiceFixture.run(.inProcess, people: 2) { f in
            let (store, engine) = try Self.losing(.nonce, in: f)
            let claim = Digest.sha256Hex(Array("lost-answer".utf8))
            let token = try f.token(f.people[0], nonce: claim)
            let result = try await engine.signIn(idToken: token, nonce: .native(raw: "lost-answer"))
            #expect(result.outcome == .migrated)
            #expect(store.lost.load(ordering: .relaxed) == 1)
            #expect(try f.count("SELECT count(*) FROM baton.nonces WHERE sub = '\(result.sub)'") == 1)
            await #expect(throws: BatonError(.nonceReused, "")) { try await engine.signIn(idToken: token, nonce: .native(raw: "lost-answer")) }
        }
    }

    @Test("the loop's pipeline: a nonce consumed there, its answer lost, the async driver takes the step over and accepts it")
    func nonceOnLoop() async throws {
        try await ServiceFixture.run(.inProcess, people: 2) { f in
            let (store, engine) = try Self.losing(.nonce, in: f)
            guard let work = try await Self.handedOver(engine, f, nonce: "lost-on-loop") else { return }
            #expect(store.lost.load(ordering: .relaxed) == 1)
            #expect(try f.count("SELECT count(*) FROM baton.nonces") == 1)  // the first performance did commit
            let result = try await work()
            #expect(result.outcome == .migrated)
            #expect(try f.count("SELECT count(*) FROM baton.nonces") == 1)
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 1)
        }
    }

    @Test("the loop's pipeline: an answer the store refuses fails the sign-in as the async driver fails (the nonce released), not performed again")
    func refusedOnLoop() async throws {
        try await ServiceFixture.run(.inProcess, people: 2) { f in
            let (store, engine) = try Self.losing(.refusedLookup, in: f)
            guard let work = try await Self.handedOver(engine, f, nonce: "refused-on-loop") else { return }
            await #expect(throws: BatonError(.inconsistentDatabaseAnswer, "")) { try await work() }
            #expect(store.lost.load(ordering: .relaxed) == 1)
            #expect(try f.count("SELECT count(*) FROM baton.nonces") == 0)
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 0)
        }
    }

    @Test("a re-link: its session used up, the answer lost, the retry goes on and links; the session stays used for any other link")
    func linkSession() async throws {
        try await ServiceFixture.run(.inProcess, people: 2) { f in
            let (store, engine) = try Self.losing(.linkSession, in: f)
            let session = try await engine.openLinkSession()
            let claim = Digest.sha256Hex(Array(session.nonce.utf8))
            let person = f.people[0]
            let result = try await engine.link(legacyIDToken: try f.legacyToken(person, nonce: claim), idToken: try f.token(person, nonce: claim),
                                               nonce: .native(raw: session.nonce))
            #expect(result.outcome == .migrated)
            #expect(store.lost.load(ordering: .relaxed) == 1)
            await #expect(throws: BatonError(.nonceReused, "")) {
                try await engine.link(legacyIDToken: try f.legacyToken(person, nonce: claim), idToken: try f.token(person, nonce: claim),
                                      nonce: .native(raw: session.nonce))
            }
        }
    }

    @Test("a link session recorded, its answer lost: the retry finds its own session and answers it; one row, and it links")
    func linkSessionCreated() async throws {
        try await ServiceFixture.run(.inProcess, people: 2) { f in
            let (store, engine) = try Self.losing(.createLinkSession, in: f)
            let session = try await engine.openLinkSession()
            #expect(store.lost.load(ordering: .relaxed) == 1)
            #expect(try f.count("SELECT count(*) FROM baton.link_sessions") == 1)
            let claim = Digest.sha256Hex(Array(session.nonce.utf8))
            let person = f.people[0]
            let result = try await engine.link(legacyIDToken: try f.legacyToken(person, nonce: claim), idToken: try f.token(person, nonce: claim),
                                               nonce: .native(raw: session.nonce))
            #expect(result.outcome == .migrated)
        }
    }

    @Test("a migration committed, its answer lost: performed again it finds the record already rewritten and answers it, migrated once")
    func migration() async throws {
        try await ServiceFixture.run(.inProcess, people: 2) { f in
            let (store, engine) = try Self.losing(.migration, in: f)
            let person = f.people[0]
            let result = try await engine.signIn(idToken: try f.token(person))
            #expect(store.lost.load(ordering: .relaxed) == 1)
            #expect(result.outcome == .current)
            #expect(result.user?.subject == (try f.newSub(person)))
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 1)
            #expect(try f.count("SELECT count(*) FROM users WHERE apple_sub = '\(person.oldSub)'") == 0)
        }
    }

    @Test("a merge committed, its answer lost: performed again it answers the same merge, migrated with the fresh key, merged once")
    func merge() async throws {
        let f = try await ServiceFixture(.inProcess, people: 2, onDuplicate: .merge)
        let person = f.people[0]
        let freshKey = try TestDatabase.psql(f.url, "INSERT INTO public.users (apple_sub) VALUES ('\(try f.newSub(person))') RETURNING id")
        let (store, engine) = try Self.losing(.merge, in: f)
        let result = try await engine.signIn(idToken: try f.token(person))
        #expect(store.lost.load(ordering: .relaxed) == 1)
        #expect(result.outcome == .migrated && result.mergedFrom == freshKey, "\(result)")
        let newSub = try f.newSub(person)
        #expect(result.user?.key != freshKey && result.user?.subject == newSub)
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'duplicate_merged'") == 1)
        await f.close()
    }

    /// The async work the first person's sign-in (its token carrying `nonce`), started on a loop's pipeline, was handed
    /// to; nil, with an issue recorded, when it was not handed over.
    static func handedOver(_ engine: BatonEngine, _ f: ServiceFixture, nonce: String) async throws -> (@Sendable () async throws -> SignInResult)? {
        let token = try f.token(f.people[0], nonce: Digest.sha256Hex(Array(nonce.utf8)))
        let loop = try EventLoop()
        loop.start(name: "lost-answer-test")
        defer { loop.stop() }
        guard case .later(let work) = try await signInOnLoop(engine, token, nonce: .native(raw: nonce), loop: loop, pool: f.pool) else {
            Issue.record("the sign-in on the pipeline was not handed to the async driver")
            return nil
        }
        return work
    }

    /// An engine like the fixture's over a ``LosingStore`` that loses the first answer of `kind`.
    static func losing(_ kind: LosingStore.Kind, in f: ServiceFixture) throws -> (LosingStore, BatonEngine) {
        let store = LosingStore(base: try #require(f.engine.store as? LegacyStore), losing: kind)
        let engine = BatonEngine(store: store, keys: FixedKeySet(f.emulator.jwks), clientIDs: [ServiceFixture.clientID],
                                 legacyClientIDs: [ServiceFixture.legacyClientID])
        return (store, engine)
    }
}

/// The fixture's ``LegacyStore``, except that the first nonce consumption, link session record or use, migration or merge
/// (on the pipeline or the async way) runs and commits, and then its answer is lost as with a connection that broke;
/// or (`refusedLookup`) that every lookup answered on the pipeline is refused as inconsistent.
final class LosingStore: PipelinedSignInStore {
    enum Kind: Sendable { case nonce, createLinkSession, linkSession, migration, merge, refusedLookup }
    let base: LegacyStore
    let kind: Kind
    /// How many answers were lost (at most one).
    let lost = Atomic<Int>(0)

    init(base: LegacyStore, losing kind: Kind) {
        self.base = base
        self.kind = kind
    }

    /// Throws after `body` ran when this is the first answer of `kind` to lose.
    private func losingFirst<T>(_ kind: Kind, _ body: () async throws -> T) async throws -> T {
        let answer = try await body()
        try loseFirst(kind)
        return answer
    }

    private func loseFirst(_ kind: Kind) throws {
        guard kind == self.kind, lost.compareExchange(expected: 0, desired: 1, ordering: .relaxed).exchanged else { return }
        throw LostAnswerTests.lostConnection
    }

    func consumeNonce(_ use: NonceUse, now: Date) async throws -> Bool {
        try await losingFirst(.nonce) { try await base.consumeNonce(use, now: now) }
    }

    func createLinkSession(nonceHash: String, expiresAt: Date, attempt: String, now: Date, maxLive: Int) async throws -> Bool {
        try await losingFirst(.createLinkSession) {
            try await base.createLinkSession(nonceHash: nonceHash, expiresAt: expiresAt, attempt: attempt, now: now, maxLive: maxLive)
        }
    }

    func consumeLinkSession(nonceHash: String, attempt: String, now: Date) async throws -> Bool {
        try await losingFirst(.linkSession) { try await base.consumeLinkSession(nonceHash: nonceHash, attempt: attempt, now: now) }
    }

    func pipeline(on loop: EventLoop) -> PostgresPipeline? { base.pipeline(on: loop) }
    func statement(for step: SignInStep, now: Date) -> SignInStatement? {
        guard let statement = base.statement(for: step, now: now) else { return nil }
        switch step {
        case .consumeNonce:
            return SignInStatement(statement.query) { [self] rows in
                try loseFirst(.nonce)
                return try statement.event(rows)
            }
        case .lookup where kind == .refusedLookup:
            return SignInStatement(statement.query) { [self] _ in
                lost.add(1, ordering: .relaxed)
                throw BatonError(.inconsistentDatabaseAnswer, "a database answer did not match its question")
            }
        default:
            return statement
        }
    }

    // The rest as the fixture's store.
    var emailPolicy: EmailPolicy { base.emailPolicy }
    var duplicatePolicy: DuplicatePolicy { base.duplicatePolicy }
    func lookupForSignIn(subject sub: String, transferSub: String?) async throws -> SubjectMatch? {
        try await base.lookupForSignIn(subject: sub, transferSub: transferSub)
    }
    func oldSubject(forTransferSubject transferSub: String) async throws -> String? { try await base.oldSubject(forTransferSubject: transferSub) }
    func applyMigration(oldSub: String, newSub: String, newEmail: String?, isPrivateEmail: Bool?, transferSub: String?,
                        method: MigrationMethod) async throws -> MigrationOutcome {
        try await base.applyMigration(oldSub: oldSub, newSub: newSub, newEmail: newEmail, isPrivateEmail: isPrivateEmail, transferSub: transferSub,
                                      method: method)
    }
    func applyMigration(transferSub: String, newSub: String, newEmail: String?, isPrivateEmail: Bool?,
                        method: MigrationMethod) async throws -> MigrationOutcome {
        try await losingFirst(.migration) {
            try await base.applyMigration(transferSub: transferSub, newSub: newSub, newEmail: newEmail, isPrivateEmail: isPrivateEmail, method: method)
        }
    }
    func linkableSubject(legacySubject legacySub: String, currentSubject currentSub: String) async throws -> String? {
        try await base.linkableSubject(legacySubject: legacySub, currentSubject: currentSub)
    }
    func recordDuplicate(newSub: String, oldSub: String?, transferSub: String?, foundBy: MigrationMethod) async throws -> RecordedDuplicate? {
        try await base.recordDuplicate(newSub: newSub, oldSub: oldSub, transferSub: transferSub, foundBy: foundBy)
    }
    func mergeDuplicate(_ pair: DuplicatePair) async throws -> MergedDuplicate? { try await losingFirst(.merge) { try await base.mergeDuplicate(pair) } }
    func updateEmail(of user: LegacyUser, to email: String) async throws -> LegacyUser? { try await base.updateEmail(of: user, to: email) }
    func recordUnmatched(transferSub: String, sub: String) async throws { try await base.recordUnmatched(transferSub: transferSub, sub: sub) }
    func restoreAuthorization(subject sub: String) async throws { try await base.restoreAuthorization(subject: sub) }
    func releaseNonce(_ use: NonceUse) async throws { try await base.releaseNonce(use) }
    func credentialFacts(of sub: String) async throws -> CredentialFacts { try await base.credentialFacts(of: sub) }
    func applyNotification(_ kind: NotificationKind, subject sub: String, eventTime: Date) async throws -> Bool {
        try await base.applyNotification(kind, subject: sub, eventTime: eventTime)
    }
    func ping() async throws { try await base.ping() }
}
