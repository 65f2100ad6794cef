import Baton
import BatonAppleSignIn
import BatonConcurrency
import Foundation
import BatonLogging
import BatonPostgres
import Synchronization

/// What one attempt for one user did.
public enum BulkStepOutcome: Sendable, Equatable {
    /// This attempt finished the user.
    case done
    /// Someone else (a sign-in, another worker) had already finished the user; nothing was changed.
    case alreadyDone
    /// The answer cannot be applied for good (no legacy record, or the new identifier belongs to another
    /// record): the row is recorded `unresolvable` with this reason.
    case unresolvable(String)
}

/// The work a bulk job does for one user: one call to Apple, then storing its answer.
public protocol BulkJobStep: Sendable {
    /// Calls Apple for `item` and stores the answer.
    /// - Throws: ``AppleSignIn/AppleClientError`` from Apple, ``Postgres/PostgresError`` from the database.
    func perform(_ item: TransferQueue.Item) async throws -> BulkStepOutcome
}

/// Tunables of a bulk job, all with defaults.
public struct BulkJobOptions: Sendable, Equatable {
    /// Concurrent workers in this process; default 4.
    public var workers: Int
    /// Requests per second for the whole process (shared by its workers); default 10.
    public var rate: Double
    /// Failures in a row (after retries) that stop the job; default 25.
    public var maxConsecutiveFailures: Int
    /// In-process retries of one user's request after a 5xx, timeout, connection failure or unexpected answer;
    /// default 2. Past them, an unexpected answer defers the row, and so does an outage that spares other users
    /// (Apple answered them meanwhile); an outage that spares nobody pauses the job (``maxOutageSeconds``).
    public var transientRetries: Int
    /// The first wait of the job's one backoff, in seconds; default 0.5. Every wait (a retry, Apple or the
    /// database out of reach) is a `Backoff`: doubled per failure in a row, up to ``maxRetryDelay``, with half
    /// of it jittered.
    public var retryDelay: Double
    /// The longest wait of the backoff, in seconds; default 10.
    public var maxRetryDelay: Double
    /// 429s for one user before the job takes it as an outage (``maxOutageSeconds``); default 20.
    public var maxRateLimitedRetries: Int
    /// Failures in a row with the same reason that stop the job; default 10. Only refusals and unexpected answers
    /// count (they point at a shared cause: a mistyped target team makes Apple refuse every user with
    /// `invalid_request`), never an outage; the job then stops after a few rows instead of marking the whole table
    /// `unresolvable`, and `--retry-unresolvable` gives those rows another chance.
    public var maxIdenticalFailures: Int
    /// How long the job rides out a lost database (a restart, a failover) before it stops, in seconds: a
    /// worker whose statement fails with a connection error waits with the backoff, reconnects and goes
    /// on; default 60.
    public var databaseRetrySeconds: Double
    /// How long the job waits for Apple while it answers no one (connection refused, timeouts, 5xx, 429s past
    /// ``maxRateLimitedRetries``) before it stops, in seconds; default 3,600. Meanwhile workers keep their users
    /// and retry them with the backoff; no user is deferred or failed because of the outage.
    public var maxOutageSeconds: Double

    /// Creates options.
    public init(workers: Int = 4, rate: Double = 10, maxConsecutiveFailures: Int = 25, transientRetries: Int = 2, retryDelay: Double = 0.5,
                maxRetryDelay: Double = 10, maxRateLimitedRetries: Int = 20, maxIdenticalFailures: Int = 10, databaseRetrySeconds: Double = 60,
                maxOutageSeconds: Double = 3_600) {
        self.workers = max(1, workers)
        self.rate = rate
        self.maxConsecutiveFailures = max(1, maxConsecutiveFailures)
        self.transientRetries = max(0, transientRetries)
        self.retryDelay = max(0, retryDelay)
        self.maxRetryDelay = max(self.retryDelay, maxRetryDelay)
        self.maxRateLimitedRetries = max(0, maxRateLimitedRetries)
        self.maxIdenticalFailures = max(1, maxIdenticalFailures)
        self.databaseRetrySeconds = max(0, databaseRetrySeconds)
        self.maxOutageSeconds = max(0, maxOutageSeconds)
    }
}

/// How a run ended.
public struct BulkJobSummary: Sendable, Equatable {
    /// The counts of this run.
    public var counts: JobCounters.Snapshot
    /// Users still pending for this job when it ended (this run's deferred ones included); nil when the
    /// database did not answer the count within the job's database retry time.
    public var remaining: Int?
    /// Why the job stopped before finishing, or nil when it ran out of work.
    public var stopReason: BulkJobError?
    /// Seconds the run took.
    public var elapsed: TimeInterval
    /// The rate in force at the end (lower than asked after 429s).
    public var finalRate: Double
    /// Seconds the job claimed nothing because the database was busy (``JobThrottle``).
    public var throttledSeconds: Double = 0

    /// Whether anything failed: a stop, or a user not finished (unresolvable, or failed after the last attempt).
    /// A user whose attempt failed transiently and who was finished later in the run is not a failure.
    public var hasFailures: Bool { stopReason != nil || counts.unresolvable > 0 || counts.failedForGood > 0 }
}

/// A bulk job waiting for Apple, which has answered no one for ``seconds``; it stops once that reaches ``limit``.
public struct BulkJobPause: Sendable, Equatable {
    /// Seconds since Apple last answered (since the first failure after its last answer).
    public var seconds: Double
    /// ``BulkJobOptions/maxOutageSeconds``.
    public var limit: Double

    /// Creates a pause.
    public init(seconds: Double, limit: Double) {
        self.seconds = seconds
        self.limit = limit
    }
}

/// Runs a bulk job: `workers` tasks take leased rows from a ``TransferQueue``, wait for the shared
/// ``RateLimiter``, and run the ``BulkJobStep`` for each, until no row is left, the window closes, or the job is
/// stopped (credentials refused, too many consecutive failures, Apple out of reach past the outage limit).
///
/// While Apple answers no one (connection refused, timeouts, 5xx), the job pauses: each worker keeps its user
/// and asks again after the job's backoff, until Apple answers (then everyone goes on, nothing lost) or
/// ``BulkJobOptions/maxOutageSeconds`` have passed (then it stops, every row still pending, for a rerun).
///
/// Resumable by construction: a row is finished in the same transaction that stores Apple's answer, and an
/// unfinished lease simply expires, so a crash loses nothing and a rerun continues.
///
/// What a worker does after each request (retry, defer, record, pause, stop) is ``BulkJobPolicy``'s decision; this
/// class only carries it out: claims, requests, waits and the database's writes.
public final class BulkJob: Sendable {
    private let queue: TransferQueue
    private let step: any BulkJobStep
    private let options: BulkJobOptions
    private let now: @Sendable () -> Date
    private let logger: Logger
    /// Pauses claims while the database is busy, if given.
    public let throttle: JobThrottle?
    /// The shared rate limiter.
    public let limiter: RateLimiter
    /// The counts, for a progress reporter.
    public let counters = JobCounters()
    /// The job's rules and their state, shared by its workers.
    private let policy: Mutex<BulkJobPolicy>

    /// Creates a job.
    /// - Parameters:
    ///   - window: the transfer window; the job stops when it closes.
    ///   - requireOpenWindow: whether the window must be open (the exchange) or only not closed (the sender job,
    ///     which may run before acceptance).
    ///   - now: the clock the window is read with.
    ///   - throttle: pauses claims while the database is busy; default none.
    public init(queue: TransferQueue, step: any BulkJobStep, options: BulkJobOptions, window: TransferWindow, requireOpenWindow: Bool,
                now: @escaping @Sendable () -> Date = { Date() }, logger: Logger = .disabled(), throttle: JobThrottle? = nil) {
        self.queue = queue
        self.step = step
        self.options = options
        policy = Mutex(BulkJobPolicy(options: options, window: window, requireOpenWindow: requireOpenWindow))
        self.now = now
        self.logger = logger
        self.throttle = throttle
        // A small burst (at most 1/20 s of requests, 10 at most) lets the workers catch up a slot lost to a slow
        // answer without ever exceeding rate·t + burst over any interval.
        limiter = RateLimiter(rate: options.rate, burst: max(1, min(10, options.rate / 20)))
    }

    private var stopReason: BulkJobError? { policy.withLock { $0.stopReason } }

    /// The pause in progress while Apple answers no one (once a worker is past its quick retries), or nil.
    public var pause: BulkJobPause? {
        policy.withLock { $0.pausedSince }.map { BulkJobPause(seconds: BulkJobPolicy.seconds(ContinuousClock.now - $0), limit: options.maxOutageSeconds) }
    }

    /// Waits the job's one backoff after the `failures`-th failure in a row (retries, Apple's outages and the
    /// database's alike): ``BulkJobOptions/retryDelay`` doubled per failure up to ``BulkJobOptions/maxRetryDelay``,
    /// half of it jittered. Returns early when the task is cancelled.
    private func backOff(afterFailure failures: Int) async {
        try? await Backoff(initial: options.retryDelay, cap: options.maxRetryDelay).sleep(afterAttempt: failures)
    }

    /// Stops the job (the first reason wins); workers finish their current request and give back their rows.
    public func stop(_ reason: BulkJobError) {
        policy.withLock { $0.stop(reason) }
    }

    /// Runs the job to its end and returns its summary. Never throws: failures end up in the summary.
    public func run() async -> BulkJobSummary {
        let started = ContinuousClock.now
        let feeder = Feeder(queue: queue, batchSize: max(options.workers, min(500, Int(options.rate), queue.leaseSeconds * Int(options.rate) / 4)), isStopped: { [self] in stopReason != nil })
        let monitor = throttle.map { throttle in Task { await throttle.monitor() } }
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<options.workers {
                group.addTask { [self] in await work(feeder) }
            }
        }
        monitor?.cancel()
        await monitor?.value
        await feeder.releaseAll()
        let remaining = try? await ridingOutage { try await queue.pendingCount() }
        return BulkJobSummary(
            counts: counters.snapshot,
            remaining: remaining,
            stopReason: stopReason,
            elapsed: BulkJobPolicy.seconds(ContinuousClock.now - started),
            finalRate: limiter.currentRate,
            throttledSeconds: throttle?.throttledSeconds ?? 0
        )
    }

    private func work(_ feeder: Feeder) async {
        while stopReason == nil {
            // While the database is busy, nothing new is claimed; the rows in flight finish meanwhile.
            await throttle?.waitUntilClear { stopReason != nil }
            let item: TransferQueue.Item?
            do {
                // The slot first, then the row: a row taken after the wait has its whole lease ahead of it.
                try await limiter.acquire()
                // A lost connection, a restarting server or a failover: wait it out, then claim again.
                item = try await ridingOutage { try await feeder.next() }
            } catch {
                stop(BulkJobError(.stopped, "the database failed while claiming work: \(FailureKind.reason(error))"))
                return
            }
            guard let item else { return }
            guard !policy.withLock({ $0.stopIfWindowClosed(at: now()) }) else {
                try? await queue.release([item])
                return
            }
            await process(item, holdingSlot: true)
        }
    }

    /// Whether `error` means the database is out of reach for now (connection lost or refused, server shutting
    /// down or read-only during a failover, no connection free): worth waiting for, not the row's fault.
    static func isDatabaseOutage(_ error: any Error) -> Bool {
        guard let error = error as? PostgresError else { return false }
        return error.isUnavailable
    }

    /// Runs `operation`; while it fails with a database outage, waits with the backoff and runs it again, for at
    /// most ``BulkJobOptions/databaseRetrySeconds`` from the first failure. A stopped job waits no more.
    /// - Throws: the last error once the time is up, or any other error at once.
    private func ridingOutage<T>(_ operation: () async throws -> T) async throws -> T {
        var outageStarted: ContinuousClock.Instant?
        var failures = 0
        while true {
            do {
                return try await operation()
            } catch where BulkJob.isDatabaseOutage(error) {
                let started = outageStarted ?? .now
                if outageStarted == nil {
                    outageStarted = started
                    logger.warning("database unavailable; waiting for it", ["error": FailureKind.reason(error)])
                }
                guard ContinuousClock.now - started < .seconds(options.databaseRetrySeconds), !Task.isCancelled, stopReason == nil else { throw error }
                failures += 1
                await backOff(afterFailure: failures)
            }
        }
    }

    /// Works on `item` until it is finished, recorded, deferred or given back, as ``BulkJobPolicy`` decides after
    /// each request; `holdingSlot` says whether the rate limiter's slot for the first request was already taken
    /// (later requests wait for their own).
    private func process(_ item: TransferQueue.Item, holdingSlot: Bool) async {
        var attempts = BulkJobPolicy.Attempts()
        var holdingSlot = holdingSlot
        while true {
            guard mayAsk(item) else {
                try? await queue.release([item])
                return
            }
            let outcome: AttemptOutcome
            do {
                if !holdingSlot { try await limiter.acquire() }
                holdingSlot = false
                // The wait for the limiter may have outlived the lease: the row may be someone else's by now.
                guard mayAsk(item) else {
                    try? await queue.release([item])
                    return
                }
                counters.update { $0.requests += 1 }
                outcome = .answered(try await step.perform(item))
            } catch is CancellationError {
                return
            } catch {
                outcome = AttemptOutcome(error: error)
                if case .failed(.rateLimited, _, _) = outcome {
                    counters.update { $0.rateLimited += 1 }
                    limiter.rateLimited(retryAfter: (error as? AppleClientError)?.retryAfter)
                }
            }
            let decision = policy.withLock { $0.decide(outcome, attempts: &attempts, at: now(), instant: .now) }
            switch decision.notice {
            case .pausing(let reason): logger.warning("Apple answers no one; pausing until it does", ["error": reason, "limit_s": String(Int(options.maxOutageSeconds))])
            case .resumed(let seconds): logger.info("Apple answers again; going on", ["paused_s": String(Int(seconds))])
            case nil: break
            }
            switch decision.action {
            case .finished(let alreadyDone):
                counters.update { counts in
                    if alreadyDone { counts.alreadyDone += 1 } else { counts.succeeded += 1 }
                }
                return
            case .retry:
                continue
            case .retryAfterBackoff(let failures):
                await backOff(afterFailure: failures)
                continue
            case .markUnresolvable(let reason):
                await markUnresolvable(item, reason: reason)
                return
            case .deferRow(let reason, let sharedCause):
                await deferRow(item, reason: reason, sharedCause: sharedCause)
                return
            case .release:
                try? await queue.release([item])
                return
            case .releaseOnceDatabaseAnswers:
                do {
                    try await ridingOutage { try await queue.release([item]) }
                } catch {
                    stop(BulkJobError(.stopped, "the database failed for \(Int(options.databaseRetrySeconds)) s: \(FailureKind.reason(error)); rerun to continue"))
                }
                return
            }
        }
    }

    /// Whether the worker holding `item` may ask Apple for it now.
    private func mayAsk(_ item: TransferQueue.Item) -> Bool {
        policy.withLock { $0.mayAsk(leaseEnds: item.leaseEnds, at: Date()) }
    }

    /// Records the row `unresolvable` (its failure already counted by the policy) and counts it.
    private func markUnresolvable(_ item: TransferQueue.Item, reason: String) async {
        do {
            // Fenced by the lease: a row another worker took over after this lease ended is left alone.
            guard try await ridingOutage({ try await queue.markUnresolvable(item, reason: reason) }) else { return }
        } catch {
            stop(BulkJobError(.stopped, "the database failed: \(FailureKind.reason(error))"))
            return
        }
        counters.update { $0.unresolvable += 1 }
        logger.info("user unresolvable", ["reason": reason, "row": String(item.id), "old_sub": item.oldSub ?? "-", "transfer_sub": item.transferSub ?? "-"])
    }

    /// Defers the row (or fails it after its last attempt) and counts a failure; `sharedCause` says whether it
    /// counts towards ``BulkJobOptions/maxIdenticalFailures``.
    private func deferRow(_ item: TransferQueue.Item, reason: String, sharedCause: Bool) async {
        let final: Bool
        do {
            final = try await ridingOutage { try await queue.postpone(item, reason: reason) }
        } catch {
            stop(BulkJobError(.stopped, "the database failed: \(FailureKind.reason(error))"))
            return
        }
        counters.update {
            $0.failed += 1
            if final { $0.failedForGood += 1 }
        }
        logger.info("attempt failed", ["reason": reason])
        policy.withLock { _ = $0.noteFailure(reason, sharedCause: sharedCause) }
    }
}

/// Hands leased rows to workers, claiming a batch at a time; one claim in flight however many workers wait.
///
/// The next batch is claimed once half of this one has been handed out, so the workers do not wait for the claim:
/// claimed only when the batch ran out, an unthrottled rehearsal's workers all stood still during each claim (an
/// `UPDATE` of 500 rows, a fifth of the time the exchange took to work through them). Each claim goes on from the id
/// the last one reached (``TransferQueue/claim(limit:after:)``).
actor Feeder {
    private let queue: TransferQueue
    private let batchSize: Int
    private let isStopped: @Sendable () -> Bool
    private var buffer: [TransferQueue.Item] = []
    private var position = 0
    /// The claim in flight: the rows it leased and where the next claim goes on from, or nil when none is pending
    /// for the queue any more.
    private var refill: Task<(items: [TransferQueue.Item], next: Int64?)?, any Error>?
    /// Where the next claim goes on from.
    private var claimedThrough: Int64?
    /// A claim found nothing pending for the queue.
    private var finished = false

    init(queue: TransferQueue, batchSize: Int, isStopped: @escaping @Sendable () -> Bool) {
        self.queue = queue
        self.batchSize = max(1, batchSize)
        self.isStopped = isStopped
    }

    /// The next row to work on, or nil when there is none left (or the job stopped).
    func next() async throws -> TransferQueue.Item? {
        while !isStopped() {
            if position < buffer.count {
                let item = buffer[position]
                position += 1
                if buffer.count - position <= buffer.count / 2 { claimNext(waitingWhenNone: false) }
                if Date() < item.leaseEnds { return item }
                try await queue.release([item])
                continue
            }
            if finished { return nil }
            claimNext(waitingWhenNone: true)
            guard let task = refill else { return nil }
            let claimed: (items: [TransferQueue.Item], next: Int64?)?
            do {
                claimed = try await task.value
            } catch {
                if refill == task { refill = nil }
                throw error
            }
            // Workers that waited for the same claim: the first to resume takes its rows, the others go round again.
            guard refill == task else { continue }
            refill = nil
            guard let claimed else {
                finished = true
                return nil
            }
            buffer = claimed.items
            position = 0
            claimedThrough = claimed.next
        }
        return nil
    }

    /// Starts the next claim unless one is in flight. It ends with the rows leased; with none, and rows still
    /// pending (leased, this batch's among them, or deferred), with none, after waiting for the next to come due (a
    /// second at most) when `waitingWhenNone` (the workers have nothing else to do); nil when nothing is pending.
    private func claimNext(waitingWhenNone: Bool) {
        guard refill == nil, !finished else { return }
        refill = Task { [queue, batchSize, claimedThrough] in
            let claimed = try await queue.claim(limit: batchSize, after: claimedThrough)
            if !claimed.items.isEmpty { return claimed }
            guard try await queue.pendingCount() > 0 else { return nil }
            guard waitingWhenNone else { return claimed }
            let wait = min(1, max(0.05, try await queue.secondsUntilNextDue() ?? 1))
            try await Task.sleep(for: .milliseconds(Int64(wait * 1000)))
            return claimed
        }
    }

    /// Gives back the rows claimed but not handed out, the claim in flight's included.
    func releaseAll() async {
        var rest = Array(buffer[min(position, buffer.count)...])
        buffer = []
        position = 0
        if let task = refill {
            refill = nil
            rest += (try? await task.value).flatMap { $0?.items } ?? []
        }
        try? await queue.release(rest)
    }
}
