import BatonConcurrency
import BatonPostgres
import Foundation

/// The sign-in's statements for an event loop's pipeline: the same statements the store's async methods run (the
/// lookup, the nonce, the migration locking the legacy row `NOWAIT` (unless it takes Baton's own lock first: a subject
/// inside JSON), the consent restored, the unmatched signal),
/// and a duplicate's record, read the same way. A current user's email change, a duplicate's merge and the re-link's
/// steps run only the async way: they are rare, and take more than one statement (the email's fallbacks for a
/// refused value, the merge's transaction).
extension LegacyStore: PipelinedSignInStore {
    package func pipeline(on loop: EventLoop) -> PostgresPipeline? {
        pool.pipeline(on: loop)
    }

    package func statement(for step: SignInStep, now: Date) -> SignInStatement? {
        switch step {
        case .consumeNonce(let use):
            SignInStatement(nonceInsertQuery(use, now: now)) { .nonceConsumed(try Self.nonceConsumed($0, use)) }
        case .lookup(let sub, let transferSub):
            SignInStatement(lookupQuery(subject: sub, transferSub: transferSub)) { .lookedUp(try Self.subjectMatch($0)) }
        case .migrate(let request) where !locksNewSubject:
            SignInStatement(pipelinedMigrationQuery(request)) { .migration(try Self.pipelinedMigrationOutcome($0, newSub: request.newSub)) }
        case .restoreAuthorization(let sub):
            SignInStatement(restoreAuthorizationQuery(subject: sub)) { _ in .authorizationRestored }
        case .recordUnmatched(let transferSub, let sub):
            SignInStatement(unmatchedQuery(transferSub: transferSub, sub: sub)) { _ in .unmatchedRecorded }
        case .releaseNonce(let use):
            SignInStatement(releaseNonceQuery(use)) { _ in .nonceReleased }
        case .recordDuplicate(let newSub, let oldSub, let transferSub, let foundBy):
            SignInStatement(recordDuplicateQuery(newSub: newSub, oldSub: oldSub, transferSub: transferSub, foundBy: foundBy)) {
                .duplicateRecorded(try Self.recordedDuplicate($0))
            }
        case .migrate, .updateEmail, .mergeDuplicate, .consumeLinkSession, .checkLinkable, .finish, .fail: nil
        }
    }
}
