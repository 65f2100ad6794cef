import BatonConcurrency
import BatonPostgres
import Foundation

/// Runs a ``SignInDecision`` on the async pool: each step is one awaited call of a ``BatonStore``, so it works for
/// any store, waits for row locks and connections as it must, and takes over from ``PipelineSignInDriver`` any step
/// the pipeline could not perform.
package struct SignInDriver: Sendable {
    /// The store the steps run against.
    let store: any BatonStore
    /// The application's clock: nonce and link-session expiry are compared on it.
    let now: @Sendable () -> Date

    /// A driver over `store` with the clock `now`.
    package init(store: any BatonStore, now: @escaping @Sendable () -> Date) {
        self.store = store
        self.now = now
    }

    /// Runs `decision` from its first step to its answer.
    package func run(_ decision: SignInDecision) async throws -> SignInResult {
        var decision = decision
        let first = decision.start()
        return try await run(decision, from: first)
    }

    /// Runs `decision` from `step` (its first step, or the one another driver handed over) to its answer.
    /// - Throws: the decision's refusal (``BatonError``), or the store's error mapped by ``BatonError/mapDatabase(_:)``
    ///   after the decision cleaned up (a sign-in's consumed nonce released).
    func run(_ decision: SignInDecision, from step: SignInStep) async throws -> SignInResult {
        var decision = decision
        var step = step
        while true {
            switch step {
            case .finish(let result): return result
            case .fail(let error): throw error
            default:
                let event: SignInEvent
                do {
                    event = try await BatonError.retryingTransient { try await perform(step) }
                } catch {
                    if let cleanUp = decision.cleanUpAfterFailure() { _ = try? await perform(cleanUp) }
                    throw BatonError.mapDatabase(error)
                }
                step = decision.next(event)
            }
        }
    }

    /// Performs one step against the store.
    func perform(_ step: SignInStep) async throws -> SignInEvent {
        switch step {
        case .consumeNonce(let use):
            return .nonceConsumed(try await store.consumeNonce(use, now: now()))
        case .lookup(let sub, let transferSub):
            return .lookedUp(try await store.lookupForSignIn(subject: sub, transferSub: transferSub))
        case .migrate(let request):
            return .migration(try await store.migrate(request))
        case .restoreAuthorization(let sub):
            try await store.restoreAuthorization(subject: sub)
            return .authorizationRestored
        case .updateEmail(let user, let email):
            return .emailUpdated(try await store.updateEmail(of: user, to: email))
        case .recordUnmatched(let transferSub, let sub):
            try await store.recordUnmatched(transferSub: transferSub, sub: sub)
            return .unmatchedRecorded
        case .releaseNonce(let use):
            try await store.releaseNonce(use)
            return .nonceReleased
        case .recordDuplicate(let newSub, let oldSub, let transferSub, let foundBy):
            return .duplicateRecorded(try await store.recordDuplicate(newSub: newSub, oldSub: oldSub, transferSub: transferSub, foundBy: foundBy))
        case .mergeDuplicate(let pair):
            return .duplicateMerged(try await store.mergeDuplicate(pair))
        case .consumeLinkSession(let nonce, let attempt):
            return .linkSessionConsumed(try await store.consumeLinkSession(nonceHash: LinkSession.hash(of: nonce), attempt: attempt, now: now()))
        case .checkLinkable(let legacySub, let currentSub):
            return .linkable(try await store.linkableSubject(legacySubject: legacySub, currentSubject: currentSub))
        case .finish, .fail:
            preconditionFailure("the end of a decision is not a step to perform")
        }
    }
}

/// What an event loop's pipeline needs of a store: the statement of each step and how to read its outcome. A store
/// that offers them gets its sign-ins run on the loop that received them (``PipelineSignInDriver``); any other store
/// runs them on the async pool (``SignInDriver``).
package protocol PipelinedSignInStore: BatonStore {
    /// The pipeline connection of `loop` (called on that loop's thread); nil when there is none.
    func pipeline(on loop: EventLoop) -> PostgresPipeline?

    /// The statement of `step`, one that never waits for a row lock (a lock another transaction holds fails it at
    /// once, having written nothing); nil for a step this store runs only the async way.
    func pipelinedStatement(for step: SignInStep, now: Date) -> PostgresQuery?

    /// What the statement of `step` came to.
    func event(after step: SignInStep, rows: PostgresResult) throws -> SignInEvent
}

/// Runs a ``SignInDecision`` on an event loop's pipeline, on the loop's thread, with no thread waiting: each step's
/// statement is queued, and the next step starts in the callback that receives its outcome. A step the pipeline
/// cannot take (not connected, no statement for it) or whose statement failed is handed, with the decision as it
/// stands, to ``SignInDriver``, which performs that same step on the async pool; the signature is not checked again.
/// A failed statement wrote nothing (a write commits alone, and a locked row fails at once), except a write whose
/// connection broke after it was sent, whose commit is unknown: performed again, each step's statement finds what
/// its own request did (the nonce and link session carry the request's attempt, a migration already made is
/// `alreadyMigrated`, a signal or a duplicate is recorded once).
struct PipelineSignInDriver: Sendable {
    /// The store.
    let store: any PipelinedSignInStore
    /// The loop's pipeline.
    let pipeline: PostgresPipeline
    /// Where a step goes that the pipeline cannot perform.
    let fallback: SignInDriver

    /// Runs `decision` from `step`; `deliver` receives, on the loop's thread, the answer or the async work that
    /// finishes it.
    func run(_ decision: SignInDecision, from step: SignInStep, _ deliver: @escaping NowOrLater<SignInResult>.Delivery) {
        switch step {
        case .finish(let result): return deliver(.success(.now(result)))
        case .fail(let error): return deliver(.failure(error))
        default: break
        }
        let fallback = self.fallback
        let handOver = { deliver(.success(.later { try await fallback.run(decision, from: step) })) }
        guard let query = store.pipelinedStatement(for: step, now: fallback.now()) else { return handOver() }
        let sent = pipeline.send(query, write: step.writes) { outcome in
            guard case .success(let rows) = outcome, let event = try? store.event(after: step, rows: rows) else { return handOver() }
            var decision = decision
            let next = decision.next(event)
            run(decision, from: next, deliver)
        }
        if !sent { handOver() }
    }
}
