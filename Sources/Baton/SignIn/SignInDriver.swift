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
                    throw await failure(of: decision, error)
                }
                step = decision.next(event)
            }
        }
    }

    /// What a sign-in that `error` stopped throws: the error mapped by ``BatonError/mapDatabase(_:)``, after the
    /// decision's clean-up (a consumed nonce released), whose own failure is not thrown: `error` is the answer, and a
    /// nonce left consumed only refuses a retry with it until it expires.
    func failure(of decision: SignInDecision, _ error: any Error) async -> any Error {
        var decision = decision
        if let cleanUp = decision.cleanUpAfterFailure() { _ = try? await perform(cleanUp) }
        return BatonError.mapDatabase(error)
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

    /// The statement of `step` and how to read its rows, one statement that never waits for a row lock (a lock
    /// another transaction holds fails it at once, having written nothing); nil for a step this store runs only the
    /// async way. The store's one table from step to statement: a step it forgets does not compile.
    func statement(for step: SignInStep, now: Date) -> SignInStatement?
}

/// A sign-in step's statement, its parameters bound, and what its rows say of the step: an entry of
/// ``PipelinedSignInStore/statement(for:now:)``.
package struct SignInStatement: Sendable {
    /// The statement.
    package let query: PostgresQuery
    /// The step's event from the statement's rows.
    /// - Throws: what the rows cannot answer (`inconsistent_database_answer`, a `PostgresError` decoding them).
    package let event: @Sendable (PostgresResult) throws -> SignInEvent

    /// `query`, read by `event`.
    package init(_ query: PostgresQuery, event: @escaping @Sendable (PostgresResult) throws -> SignInEvent) {
        self.query = query
        self.event = event
    }
}

/// Runs a ``SignInDecision`` on an event loop's pipeline, on the loop's thread, with no thread waiting: each step's
/// statement is queued, and the next step starts in the callback that receives its outcome.
///
/// Where ``SignInDriver`` takes over a step, the one rule (``takeOver(_:_:stoppedBy:)``): a step the pipeline cannot send (no
/// statement for it, no connection) or that a database error stopped (its statement failed, or its rows could not be
/// read: a `PostgresError`) is performed again there, with the decision as it stands (the signature is not checked
/// again), where a locked row is waited for and a transient failure retried; any other error of the step (its answer
/// refused: `inconsistent_database_answer`) fails the sign-in there as that driver's own failure would
/// (``SignInDriver/failure(of:_:)``). A failed statement wrote nothing (a write commits alone, and a locked row fails
/// at once), except a write whose connection broke after it was sent, whose commit is unknown: performed again, each
/// step's statement finds what its own request did (the nonce and link session carry the request's attempt, a
/// migration already made is `alreadyMigrated`, a signal or a duplicate is recorded once).
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
        let handOver = { (stop: (any Error)?) in deliver(.success(takeOver(decision, step, stoppedBy: stop))) }
        guard let statement = store.statement(for: step, now: fallback.now()) else { return handOver(nil) }
        let sent = pipeline.send(statement.query, write: step.writes) { outcome in
            let event: SignInEvent
            do {
                event = try statement.event(outcome.get())
            } catch {
                return handOver(error)
            }
            var decision = decision
            let next = decision.next(event)
            run(decision, from: next, deliver)
        }
        if !sent { handOver(nil) }
    }

    /// The async work that finishes `decision` from `step`, which the pipeline did not perform (`error` nil: it could
    /// not send it) or which `error` stopped: the type's rule.
    private func takeOver(_ decision: SignInDecision, _ step: SignInStep, stoppedBy error: (any Error)?) -> NowOrLater<SignInResult> {
        let fallback = self.fallback
        guard let error, !(error is PostgresError) else { return .later { try await fallback.run(decision, from: step) } }
        return .later { throw await fallback.failure(of: decision, error) }
    }
}
