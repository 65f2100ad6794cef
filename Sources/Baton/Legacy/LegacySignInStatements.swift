import BatonConcurrency
import BatonPostgres
import Foundation

/// The sign-in's statements for an event loop's pipeline: the same statements the store's async methods run (the
/// lookup, the nonce, the migration locking the legacy row `NOWAIT`, the consent restored, the unmatched signal),
/// read the same way. A current user's email change and the re-link's steps run only the async way: they are rare,
/// and the email's fallbacks (a unique or refused value) take more than one statement.
extension LegacyStore: PipelinedSignInStore {
    package func pipeline(on loop: EventLoop) -> PostgresPipeline? {
        pool.pipeline(on: loop)
    }

    package func pipelinedStatement(for step: SignInStep, now: Date) -> PostgresQuery? {
        switch step {
        case .consumeNonce(let use): nonceInsertQuery(use, now: now)
        case .lookup(let sub): lookupQuery(subject: sub)
        case .migrate(let request): pipelinedMigrationQuery(request)
        case .restoreAuthorization(let sub): restoreAuthorizationQuery(subject: sub)
        case .recordUnmatched(let transferSub, let sub): unmatchedQuery(transferSub: transferSub, sub: sub)
        case .releaseNonce(let use): releaseNonceQuery(use)
        case .updateEmail, .consumeLinkSession, .checkLinkable, .finish, .fail: nil
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
        case .updateEmail, .consumeLinkSession, .checkLinkable, .finish, .fail:
            preconditionFailure("no pipelined statement for \(step)")
        }
    }
}
