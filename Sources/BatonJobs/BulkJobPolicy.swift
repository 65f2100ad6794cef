import Baton
import BatonAppleSignIn
import BatonPostgres
import Foundation

/// How an error from a step is handled; Apple's errors by their ``AppleSignIn/AppleClientError/cause``.
enum FailureKind: Equatable, Sendable {
    /// 429: wait as Apple says, lower the rate, try the same user again; past the limit, an outage.
    case rateLimited
    /// Apple out of reach or failing (no connection, timeout, 5xx): retry with backoff; while Apple answers no
    /// one, pause up to the outage limit; when it answers others, defer the row.
    case outage
    /// An unexpected answer, a transient database error: retry with backoff, then defer the row.
    case transient
    /// Apple refused this user for good: record `unresolvable` and go on.
    case user
    /// Credentials refused, configuration wrong, database failing: stop the job.
    case fatal

    static func of(_ error: any Error) -> FailureKind {
        if let error = error as? AppleClientError {
            if error.code == .rateLimited { return .rateLimited }
            switch error.cause {
            case .outage: return .outage
            case .unexpectedAnswer: return .transient
            case .refused: return .user
            case .configuration: return .fatal
            }
        }
        if let error = error as? PostgresError { return error.isTransient ? .transient : .fatal }
        return .fatal
    }

    /// A short reason for `last_error`: Apple's error code or the failure kind, never an identifier.
    static func reason(_ error: any Error) -> String {
        if let error = error as? AppleClientError {
            return error.appleError ?? error.code.rawValue + (error.status.map { " (HTTP \($0))" } ?? "")
        }
        if let error = error as? PostgresError { return "database: \(error.code.rawValue)" }
        return "\(type(of: error))"
    }
}

/// What one request for one user came to, as ``BulkJobPolicy`` reads it.
enum AttemptOutcome: Equatable, Sendable {
    /// The step returned.
    case answered(BulkStepOutcome)
    /// Apple answered, but the database was out of reach to store the answer.
    case unstored
    /// The step failed: how, the reason for `last_error`, and what a stop says (Apple's description and
    /// explanation, or the error).
    case failed(FailureKind, reason: String, detail: String)

    /// The outcome of a step (or a wait for its slot) that threw `error`.
    init(error: any Error) {
        if BulkJob.isDatabaseOutage(error) {
            self = .unstored
            return
        }
        let detail = (error as? AppleClientError).map { "\($0.description)\n\($0.explanation)" } ?? "\(error)"
        self = .failed(FailureKind.of(error), reason: FailureKind.reason(error), detail: detail)
    }
}

/// What a worker does with its row after a request.
enum WorkerAction: Equatable, Sendable {
    /// The user is finished, by this request or (`alreadyDone`) by someone else: count it, take the next row.
    case finished(alreadyDone: Bool)
    /// Ask Apple again for the same user once the rate limiter gives a slot (after a 429, which slowed it).
    case retry
    /// Ask Apple again for the same user after the job's backoff for this many failures in a row.
    case retryAfterBackoff(failures: Int)
    /// Record the row `unresolvable` with this reason (fenced by its lease) and count it.
    case markUnresolvable(reason: String)
    /// Defer the row (or fail it after its last attempt), count it, then report it with
    /// ``BulkJobPolicy/noteFailure(_:sharedCause:)``.
    case deferRow(reason: String, sharedCause: Bool)
    /// Give the row back untouched: the job stopped.
    case release
    /// Give the row back once the database answers again; stop the job if it does not within
    /// ``BulkJobOptions/databaseRetrySeconds``.
    case releaseOnceDatabaseAnswers
}

/// A ``WorkerAction`` and what the job should log with it.
struct WorkerDecision: Equatable, Sendable {
    /// Something worth a log line: the job's pause for Apple began or ended.
    enum Notice: Equatable, Sendable {
        /// Apple answered no one past a worker's quick retries: the job waits for it (the last error given).
        case pausing(reason: String)
        /// Apple answers again after the job had paused this many seconds.
        case resumed(afterSeconds: Double)
    }

    var action: WorkerAction
    var notice: Notice?

    init(_ action: WorkerAction, notice: Notice? = nil) {
        self.action = action
        self.notice = notice
    }
}

/// The bulk job's rules, apart from its I/O: from the outcome of each request, what the worker does with its row
/// (finish it, retry it, defer it, record it, give it back) and whether the job pauses for Apple or stops.
///
/// A value with no clock, no database and no Apple: the time is passed in (the wall clock for the transfer window,
/// the monotonic clock for Apple's outages). ``BulkJob`` keeps one behind a lock for all its workers, and each
/// worker keeps the ``Attempts`` of its user.
struct BulkJobPolicy: Sendable {
    /// The job's limits.
    let options: BulkJobOptions
    /// The transfer window; the job stops when it no longer allows requests.
    let window: TransferWindow
    /// Whether the window must be open (the exchange) or only not closed (the sender job, which may run before
    /// acceptance).
    let requireOpenWindow: Bool

    /// Why the job stopped (the first reason wins), or nil while it runs.
    private(set) var stopReason: BulkJobError?
    private var consecutiveFailures = 0
    private var identicalFailures = 0
    private var lastFailure = ""
    /// Requests Apple answered in this run (anything but an outage's failure or a 429).
    private var answers = 0
    /// The first outage failure since Apple last answered, and the outage failures since then.
    private var unreachableSince: ContinuousClock.Instant?
    private var unreachableFailures = 0
    /// Whether a worker is past its quick retries, waiting for Apple to answer anyone.
    private var paused = false

    /// One user's requests so far, kept by the worker that holds its row.
    struct Attempts: Equatable, Sendable {
        /// Retries after transient failures.
        var retries = 0
        /// 429s.
        var rateLimited = 0
        /// Failures while Apple did not answer.
        var outageTries = 0
        /// How many requests Apple had answered (for anyone) before this user's first outage failure.
        var answersBefore: Int?
    }

    /// Creates the policy of a job that has not started.
    init(options: BulkJobOptions, window: TransferWindow, requireOpenWindow: Bool) {
        self.options = options
        self.window = window
        self.requireOpenWindow = requireOpenWindow
    }

    /// When the pause in progress began (Apple's first unanswered request since its last answer), while a worker
    /// is past its quick retries waiting for Apple; nil otherwise.
    var pausedSince: ContinuousClock.Instant? { paused ? unreachableSince : nil }

    /// Stops the job; a reason given earlier wins.
    mutating func stop(_ reason: BulkJobError) {
        if stopReason == nil { stopReason = reason }
    }

    /// Whether a worker may ask Apple at `date` for a row leased until `leaseEnds`: not once the job stopped, nor
    /// once the lease ended (the row may be someone else's by now).
    func mayAsk(leaseEnds: Date, at date: Date) -> Bool {
        stopReason == nil && date < leaseEnds
    }

    /// The one window guard: stops the job and returns true when the window does not allow requests at `date`.
    mutating func stopIfWindowClosed(at date: Date) -> Bool {
        switch window.status(at: date) {
        case .open, .closingSoon:
            return false
        case .notAccepted where !requireOpenWindow:
            return false
        case .notAccepted:
            stop(BulkJobError(.notAccepted, "the transfer is not accepted yet (no apple.transfer.accepted_at)"))
        case .notOpenYet:
            stop(BulkJobError(.notAccepted, "the transfer's acceptance time has not come yet"))
        case .closed:
            stop(BulkJobError(.windowClosed, "the 60-day transfer window closed at \(window.closesAt.map { "\($0)" } ?? "?"): Apple no longer answers"))
        }
        return true
    }

    /// Decides what the worker holding a user's row does after a request came to `outcome`, and notes it in the
    /// job's state (failures in a row, Apple's outage, a stop). `attempts` is that user's so far; `date` reads the
    /// window, `instant` times Apple's outage.
    mutating func decide(_ outcome: AttemptOutcome, attempts: inout Attempts, at date: Date, instant: ContinuousClock.Instant) -> WorkerDecision {
        switch outcome {
        case .answered(let answer):
            let resumed = appleAnswered(at: instant)
            switch answer {
            case .done, .alreadyDone:
                consecutiveFailures = 0
                identicalFailures = 0
                lastFailure = ""
                return WorkerDecision(.finished(alreadyDone: answer == .alreadyDone), notice: resumed)
            case .unresolvable(let reason):
                return WorkerDecision(unresolvable(reason), notice: resumed)
            }
        case .unstored:
            // Apple answered, but the database did not store it: the row goes back once the database answers, and
            // is simply leased again (the answer is asked for again, and applying it twice is a no-op).
            return WorkerDecision(.releaseOnceDatabaseAnswers, notice: appleAnswered(at: instant))
        case .failed(.rateLimited, let reason, _):
            attempts.rateLimited += 1
            if attempts.rateLimited <= options.maxRateLimitedRetries { return WorkerDecision(.retry) }
            // Throttled past the limit: as good as unreachable, with no quick retries left.
            attempts.outageTries = max(attempts.outageTries, options.transientRetries)
            return appleDidNotAnswer(&attempts, reason: reason, at: instant)
        case .failed(.outage, let reason, _):
            return appleDidNotAnswer(&attempts, reason: reason, at: instant)
        case .failed(.transient, let reason, _):
            let resumed = appleAnswered(at: instant)
            attempts.retries += 1
            if attempts.retries <= options.transientRetries { return WorkerDecision(.retryAfterBackoff(failures: attempts.retries), notice: resumed) }
            return WorkerDecision(.deferRow(reason: reason, sharedCause: true), notice: resumed)
        case .failed(let kind, let reason, let detail):
            let resumed = appleAnswered(at: instant)
            // After the window, Apple refuses everyone with invalid_request, and the sender no longer owns the app
            // (invalid_client): that is the window, not the user nor the credentials.
            if stopIfWindowClosed(at: date) { return WorkerDecision(.release, notice: resumed) }
            if kind == .user { return WorkerDecision(unresolvable(reason), notice: resumed) }
            stop(BulkJobError(.stopped, "stopped: \(detail)"))
            return WorkerDecision(.release, notice: resumed)
        }
    }

    /// Counts a failure in a row, and when `sharedCause` (a refusal or an unexpected answer, never an outage) one
    /// with the same reason; stops the job at either limit. Returns whether the failures with the same reason
    /// have reached their limit.
    @discardableResult
    mutating func noteFailure(_ reason: String, sharedCause: Bool) -> Bool {
        consecutiveFailures += 1
        if sharedCause {
            identicalFailures = lastFailure == reason ? identicalFailures + 1 : 1
            lastFailure = reason
        }
        if identicalFailures >= options.maxIdenticalFailures {
            stop(BulkJobError(.stopped, "stopped after \(identicalFailures) consecutive failures with the same error (\(reason)): a shared cause, such as a wrong target team or client ID, rather than these users; fix it, then rerun with --retry-unresolvable"))
            return true
        }
        if consecutiveFailures >= options.maxConsecutiveFailures {
            stop(BulkJobError(.stopped, "stopped after \(consecutiveFailures) consecutive failures (last: \(reason)); rerun to continue once the cause is fixed"))
        }
        return false
    }

    /// Seconds in `duration`.
    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// A user to record `unresolvable`: the failure is counted first, in one step with the check (workers refused
    /// at the same moment all passed a separate check while the first of them was still marking its row, and
    /// marked a row each); the failure that makes ``BulkJobOptions/maxIdenticalFailures`` in a row (a shared
    /// cause) stops the job and gives the row back instead.
    private mutating func unresolvable(_ reason: String) -> WorkerAction {
        noteFailure(reason, sharedCause: true) ? .release : .markUnresolvable(reason: reason)
    }

    /// Notes that Apple answered a request (whatever it said): an outage, if any, is over. Returns the notice of
    /// the pause it ends.
    private mutating func appleAnswered(at instant: ContinuousClock.Instant) -> WorkerDecision.Notice? {
        answers += 1
        defer {
            unreachableSince = nil
            unreachableFailures = 0
            paused = false
        }
        return pausedSince.map { .resumed(afterSeconds: Self.seconds(instant - $0)) }
    }

    /// Notes that Apple did not answer the request for a user and decides what its worker does: a few quick
    /// retries of its own; then, while Apple answers no one, waits for it up to ``BulkJobOptions/maxOutageSeconds``
    /// (counted from Apple's last answer); when Apple answered others since this user's first failure, defers the
    /// user.
    private mutating func appleDidNotAnswer(_ attempts: inout Attempts, reason: String, at instant: ContinuousClock.Instant) -> WorkerDecision {
        attempts.outageTries += 1
        let since = unreachableSince ?? instant
        unreachableSince = since
        unreachableFailures += 1
        let answersBefore = attempts.answersBefore ?? answers
        attempts.answersBefore = answersBefore
        if attempts.outageTries <= options.transientRetries { return WorkerDecision(.retryAfterBackoff(failures: unreachableFailures)) }
        // Apple answers others: the trouble is this user's.
        if answers > answersBefore { return WorkerDecision(.deferRow(reason: reason, sharedCause: false)) }
        let unreachable = Self.seconds(instant - since)
        guard unreachable < options.maxOutageSeconds else {
            stop(BulkJobError(.appleUnreachable, "Apple has not answered for \(Int(unreachable)) s (the limit, --max-outage, is \(Int(options.maxOutageSeconds)) s; last error: \(reason)); no user was marked failed for it; rerun to continue once Apple answers"))
            return WorkerDecision(.release)
        }
        let pausing = !paused
        paused = true
        return WorkerDecision(.retryAfterBackoff(failures: unreachableFailures), notice: pausing ? .pausing(reason: reason) : nil)
    }
}
