import BatonConcurrency
import BatonPostgres
import Foundation

/// The sign-in's statements for an event loop's pipeline: the same statements the store's async methods run (the
/// lookup, the nonce, the migration locking the legacy row `NOWAIT`, the consent restored, the unmatched signal),
/// and a duplicate's record, read the same way. A current user's email change, a duplicate's merge and the re-link's
/// steps run only the async way: they are rare, and take more than one statement (the email's fallbacks for a
/// refused value, the merge's transaction).
extension LegacyStore: PipelinedSignInStore {
    package func pipeline(on loop: EventLoop) -> PostgresPipeline? {
        pool.pipeline(on: loop)
    }

    package func pipelinedStatement(for step: SignInStep, now: Date) -> PostgresQuery? {
        switch step {
        case .consumeNonce(let use): nonceInsertQuery(use, now: now)
        case .lookup(let sub, let transferSub): lookupQuery(subject: sub, transferSub: transferSub)
        case .migrate(let request): pipelinedMigrationQuery(request)
        case .restoreAuthorization(let sub): restoreAuthorizationQuery(subject: sub)
        case .recordUnmatched(let transferSub, let sub): unmatchedQuery(transferSub: transferSub, sub: sub)
        case .releaseNonce(let use): releaseNonceQuery(use)
        case .recordDuplicate(let newSub, let oldSub, let transferSub, let foundBy):
            recordDuplicateQuery(newSub: newSub, oldSub: oldSub, transferSub: transferSub, foundBy: foundBy)
        case .updateEmail, .mergeDuplicate, .consumeLinkSession, .checkLinkable, .finish, .fail: nil
        }
    }

    package func event(after step: SignInStep, rows: PostgresResult) throws -> SignInEvent {
        switch step {
        case .consumeNonce(let use): return .nonceConsumed(try Self.nonceConsumed(rows, use))
        case .lookup: return .lookedUp(try Self.subjectMatch(rows))
        case .migrate(let request): return .migration(try Self.pipelinedMigrationOutcome(rows, newSub: request.newSub))
        case .restoreAuthorization: return .authorizationRestored
        case .recordUnmatched: return .unmatchedRecorded
        case .releaseNonce: return .nonceReleased
        case .recordDuplicate: return .duplicateRecorded(try Self.recordedDuplicate(rows))
        case .updateEmail, .mergeDuplicate, .consumeLinkSession, .checkLinkable, .finish, .fail:
            preconditionFailure("no pipelined statement for \(step)")
        }
    }
}
