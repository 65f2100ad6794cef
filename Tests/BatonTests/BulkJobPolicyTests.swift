import BatonAppleSignIn
@testable import Baton
@testable import BatonJobs
import BatonPostgres
import Foundation
import Testing

/// The bulk job's worker rules as a table: each case feeds the policy what the workers' requests came to, at
/// given moments, and checks what each worker is told to do and whether (and why) the job stopped; no Apple, no
/// database, no clock.
@Suite("BulkJobPolicy: what a worker does after each request")
struct BulkJobPolicyTests {
    static let acceptedAt = Date(timeIntervalSince1970: 1_900_000_000)
    /// Small limits, so each runs out within a few steps: 2 quick retries, 3 429s, 3 identical failures, 60 s
    /// of outage.
    static let options = BulkJobOptions(maxConsecutiveFailures: 25, transientRetries: 2, maxRateLimitedRetries: 3, maxIdenticalFailures: 3,
                                        maxOutageSeconds: 60)

    static let done = AttemptOutcome.answered(.done)
    static let outage = AttemptOutcome.failed(.outage, reason: "server_error (HTTP 503)", detail: "Apple failed")
    static let throttled = AttemptOutcome.failed(.rateLimited, reason: "rate_limited (HTTP 429)", detail: "Apple throttled")
    static let unexpected = AttemptOutcome.failed(.transient, reason: "invalid_response", detail: "Apple's answer is not JSON")
    static let refused = AttemptOutcome.failed(.user, reason: "invalid_request", detail: "Apple refused the user")
    static let refusedOther = AttemptOutcome.failed(.user, reason: "invalid_grant", detail: "Apple refused the grant")
    static let badClient = AttemptOutcome.failed(.fatal, reason: "invalid_client", detail: "Apple refused the client\ncheck the team")

    /// What happens next in a run.
    enum Event: Sendable {
        /// A worker's request for `user` came to this outcome.
        case request(user: Int, AttemptOutcome)
        /// A worker deferred a row as told and reports it (``BulkJobPolicy/noteFailure(_:sharedCause:)``).
        case deferred(reason: String, sharedCause: Bool)
    }

    struct Step: Sendable {
        var event: Event
        /// Seconds since the run began (the monotonic clock) and days since acceptance (the window's clock).
        var second: Double = 0
        var day: Double = 1
        /// The decision the request must lead to; nil after a deferral.
        var expect: WorkerDecision?
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var options = BulkJobPolicyTests.options
        var acceptedAt: Date? = BulkJobPolicyTests.acceptedAt
        var requireOpenWindow = true
        var script: [Step]
        /// The stop's code and a piece of its reason, or nil when the job goes on.
        var stop: (BulkJobErrorCode, String)?
        var testDescription: String { name }
    }

    static func ask(_ user: Int = 0, _ outcome: AttemptOutcome, at second: Double = 0, day: Double = 1, _ action: WorkerAction,
                    _ notice: WorkerDecision.Notice? = nil) -> Step {
        Step(event: .request(user: user, outcome), second: second, day: day, expect: WorkerDecision(action, notice: notice))
    }

    static let mark = WorkerAction.markUnresolvable(reason: "invalid_request")

    static let cases: [Case] = [
        Case(name: "done and already done finish the user", script: [
            ask(0, done, .finished(alreadyDone: false)),
            ask(1, .answered(.alreadyDone), .finished(alreadyDone: true)),
        ]),
        Case(name: "a step's own unresolvable answer is recorded with its reason", script: [
            ask(0, .answered(.unresolvable("no legacy record")), .markUnresolvable(reason: "no legacy record")),
        ]),
        Case(name: "an answer the database could not store: the row goes back once the database answers", script: [
            ask(0, .unstored, .releaseOnceDatabaseAnswers),
        ]),
        Case(name: "an unexpected answer: retried after a growing backoff, then the row deferred as a possible shared cause", script: [
            ask(0, unexpected, .retryAfterBackoff(failures: 1)),
            ask(0, unexpected, .retryAfterBackoff(failures: 2)),
            ask(0, unexpected, .deferRow(reason: "invalid_response", sharedCause: true)),
            ask(1, unexpected, .retryAfterBackoff(failures: 1)),
        ]),
        Case(name: "429s: retried through the limiter up to the limit, then Apple counts as out of reach and the job pauses", script: [
            ask(0, throttled, .retry),
            ask(0, throttled, .retry),
            ask(0, throttled, .retry),
            ask(0, throttled, at: 1, .retryAfterBackoff(failures: 1), .pausing(reason: "rate_limited (HTTP 429)")),
        ]),
        Case(name: "429s past the limit while Apple answers another user: this user's row is deferred, not a shared cause", script: [
            ask(0, throttled, .retry),
            ask(0, throttled, .retry),
            ask(0, throttled, .retry),
            ask(0, throttled, at: 1, .retryAfterBackoff(failures: 1), .pausing(reason: "rate_limited (HTTP 429)")),
            ask(1, done, at: 5, .finished(alreadyDone: false), .resumed(afterSeconds: 4)),
            ask(0, throttled, at: 6, .deferRow(reason: "rate_limited (HTTP 429)", sharedCause: false)),
        ]),
        Case(name: "Apple answering no one: quick retries on the job's backoff, a pause said once, then a stop past the limit with no user failed",
             script: [
                 ask(0, outage, at: 0, .retryAfterBackoff(failures: 1)),
                 ask(1, outage, at: 1, .retryAfterBackoff(failures: 2)),
                 ask(0, outage, at: 2, .retryAfterBackoff(failures: 3)),
                 ask(0, outage, at: 3, .retryAfterBackoff(failures: 4), .pausing(reason: "server_error (HTTP 503)")),
                 ask(1, outage, at: 4, .retryAfterBackoff(failures: 5)),
                 ask(1, outage, at: 30, .retryAfterBackoff(failures: 6)),
                 ask(0, outage, at: 59.5, .retryAfterBackoff(failures: 7)),
                 ask(1, outage, at: 60, .release),
             ],
             stop: (.appleUnreachable, "Apple has not answered for 60 s (the limit, --max-outage, is 60 s; last error: server_error (HTTP 503))")),
        Case(name: "Apple answering again ends the pause, said with its length; the outage is counted afresh after it", script: [
            ask(0, outage, at: 0, .retryAfterBackoff(failures: 1)),
            ask(0, outage, at: 1, .retryAfterBackoff(failures: 2)),
            ask(0, outage, at: 2, .retryAfterBackoff(failures: 3), .pausing(reason: "server_error (HTTP 503)")),
            ask(0, done, at: 50, .finished(alreadyDone: false), .resumed(afterSeconds: 50)),
            ask(1, outage, at: 100, .retryAfterBackoff(failures: 1)),
            ask(1, outage, at: 101, .retryAfterBackoff(failures: 2)),
            ask(1, outage, at: 102, .retryAfterBackoff(failures: 3), .pausing(reason: "server_error (HTTP 503)")),
            ask(1, outage, at: 159, .retryAfterBackoff(failures: 4)),
        ]),
        Case(name: "an answer the database could not store still shows Apple answers: the pause ends", script: [
            ask(0, outage, at: 0, .retryAfterBackoff(failures: 1)),
            ask(0, outage, at: 1, .retryAfterBackoff(failures: 2)),
            ask(0, outage, at: 2, .retryAfterBackoff(failures: 3), .pausing(reason: "server_error (HTTP 503)")),
            ask(1, .unstored, at: 7, .releaseOnceDatabaseAnswers, .resumed(afterSeconds: 7)),
            ask(0, outage, at: 8, .deferRow(reason: "server_error (HTTP 503)", sharedCause: false)),
        ]),
        Case(name: "a refusal with the window open records the user; once the window closed, it stops the job and gives the row back",
             script: [
                 ask(0, refused, day: 59.9, mark),
                 ask(1, refused, day: 60.1, .release),
             ],
             stop: (.windowClosed, "the 60-day transfer window closed")),
        Case(name: "refused credentials stop the job at once, with Apple's description and explanation", script: [
            ask(0, badClient, .release),
        ], stop: (.stopped, "stopped: Apple refused the client\ncheck the team")),
        Case(name: "refused credentials after the window closed: that is the window, not the credentials", script: [
            ask(0, badClient, day: 61, .release),
        ], stop: (.windowClosed, "Apple no longer answers")),
        Case(name: "a refusal before the acceptance time has come: not accepted", script: [
            ask(0, refused, day: -1, .release),
        ], stop: (.notAccepted, "acceptance time has not come yet")),
        Case(name: "the same refusal as often as the identical-failure limit: the last row goes back unmarked and the job stops", script: [
            ask(0, refused, mark),
            ask(1, refused, mark),
            ask(2, refused, .release),
            ask(3, refused, .release),
        ], stop: (.stopped, "stopped after 3 consecutive failures with the same error (invalid_request)")),
        Case(name: "different refusals do not add up, and a finished user resets the count", script: [
            ask(0, refused, mark),
            ask(1, refused, mark),
            ask(2, refusedOther, .markUnresolvable(reason: "invalid_grant")),
            ask(3, refused, mark),
            ask(4, refused, mark),
            ask(5, done, .finished(alreadyDone: false)),
            ask(6, refused, mark),
            ask(7, refused, mark),
        ]),
        Case(name: "an unexpected answer's deferral with the same reason counts as a shared cause", script: [
            Step(event: .deferred(reason: "invalid_request", sharedCause: true)),
            ask(0, refused, mark),
            ask(1, refused, .release),
        ], stop: (.stopped, "3 consecutive failures with the same error")),
        Case(name: "an outage's deferral counts in a row but neither as nor against a shared cause", script: [
            ask(0, refused, mark),
            Step(event: .deferred(reason: "server_error (HTTP 503)", sharedCause: false)),
            ask(1, refused, mark),
            ask(2, refused, .release),
        ], stop: (.stopped, "3 consecutive failures with the same error (invalid_request)")),
        Case(name: "failures of any kind in a row stop the job at the consecutive limit; the row that reached it is still recorded",
             options: BulkJobOptions(maxConsecutiveFailures: 3, maxIdenticalFailures: 10),
             script: [
                 ask(0, refused, mark),
                 Step(event: .deferred(reason: "invalid_response", sharedCause: true)),
                 ask(1, refusedOther, .markUnresolvable(reason: "invalid_grant")),
             ],
             stop: (.stopped, "stopped after 3 consecutive failures (last: invalid_grant)")),
        Case(name: "the sender job may run before acceptance: a refusal is recorded", acceptedAt: nil, requireOpenWindow: false, script: [
            ask(0, refused, mark),
        ]),
        Case(name: "the exchange needs an acceptance time: a refusal without one stops the job as not accepted, not as a closed window",
             acceptedAt: nil, script: [
                 ask(0, refused, .release),
             ],
             stop: (.notAccepted, "not accepted yet")),
    ]

    @Test("each outcome, in order, leads to its action; the job stops only as the case says", arguments: cases)
    func script(_ test: Case) {
        var policy = BulkJobPolicy(options: test.options, window: TransferWindow(acceptedAt: test.acceptedAt), requireOpenWindow: test.requireOpenWindow)
        var users: [Int: BulkJobPolicy.Attempts] = [:]
        let start = ContinuousClock.now
        for (index, step) in test.script.enumerated() {
            switch step.event {
            case .request(let user, let outcome):
                var attempts = users[user, default: BulkJobPolicy.Attempts()]
                let date = Self.acceptedAt.addingTimeInterval(step.day * 86_400)
                let decision = policy.decide(outcome, attempts: &attempts, at: date, instant: start + .seconds(step.second))
                users[user] = attempts
                #expect(decision == step.expect, "step \(index)")
            case .deferred(let reason, let sharedCause):
                policy.noteFailure(reason, sharedCause: sharedCause)
            }
        }
        #expect(policy.stopReason?.code == test.stop?.0, "\(String(describing: policy.stopReason))")
        if let stop = test.stop {
            #expect(policy.stopReason?.reason.contains(stop.1) == true, "\(String(describing: policy.stopReason))")
        }
    }

    @Test("the window guard through the 60 days: requests allowed while open, the job stopped with the reason once not", arguments: [
        (1.0, true, nil), (59.9, true, nil), (55.0, true, nil), (60.01, true, .windowClosed), (-0.5, true, .notAccepted),
        (60.01, false, .windowClosed), (-0.5, false, .notAccepted),
    ] as [(Double, Bool, BulkJobErrorCode?)])
    func window(day: Double, requireOpenWindow: Bool, stop: BulkJobErrorCode?) {
        var policy = BulkJobPolicy(options: Self.options, window: TransferWindow(acceptedAt: Self.acceptedAt), requireOpenWindow: requireOpenWindow)
        #expect(policy.stopIfWindowClosed(at: Self.acceptedAt.addingTimeInterval(day * 86_400)) == (stop != nil))
        #expect(policy.stopReason?.code == stop)
    }

    @Test("no acceptance time: the sender job goes on, the exchange stops as not accepted")
    func notAccepted() {
        for requireOpenWindow in [false, true] {
            var policy = BulkJobPolicy(options: Self.options, window: TransferWindow(acceptedAt: nil), requireOpenWindow: requireOpenWindow)
            #expect(policy.stopIfWindowClosed(at: Self.acceptedAt) == requireOpenWindow)
            #expect(policy.stopReason?.code == (requireOpenWindow ? .notAccepted : nil))
        }
    }

    @Test("a worker asks Apple only while the job runs and its lease lasts; the first stop's reason wins")
    func mayAsk() {
        var policy = BulkJobPolicy(options: Self.options, window: TransferWindow(acceptedAt: Self.acceptedAt), requireOpenWindow: true)
        let now = Self.acceptedAt.addingTimeInterval(86_400)
        #expect(policy.mayAsk(leaseEnds: now.addingTimeInterval(1), at: now))
        #expect(!policy.mayAsk(leaseEnds: now, at: now))
        policy.stop(BulkJobError(.stopped, "first"))
        policy.stop(BulkJobError(.appleUnreachable, "second"))
        #expect(!policy.mayAsk(leaseEnds: now.addingTimeInterval(1), at: now))
        #expect(policy.stopReason == BulkJobError(.stopped, "first"))
        #expect(policy.stopReason?.reason == "first")
    }

    @Test("the pause is visible from the first unanswered request once a worker waits past its quick retries, and gone once Apple answers")
    func pause() {
        var policy = BulkJobPolicy(options: Self.options, window: TransferWindow(acceptedAt: Self.acceptedAt), requireOpenWindow: true)
        var attempts = BulkJobPolicy.Attempts()
        let start = ContinuousClock.now
        let date = Self.acceptedAt.addingTimeInterval(86_400)
        for second in 0..<2 {
            _ = policy.decide(Self.outage, attempts: &attempts, at: date, instant: start + .seconds(second))
            #expect(policy.pausedSince == nil)
        }
        _ = policy.decide(Self.outage, attempts: &attempts, at: date, instant: start + .seconds(2))
        #expect(policy.pausedSince == start)
        var other = BulkJobPolicy.Attempts()
        _ = policy.decide(Self.done, attempts: &other, at: date, instant: start + .seconds(3))
        #expect(policy.pausedSince == nil)
    }

    @Test("errors become outcomes: a database out of reach means the answer was not stored; Apple's errors keep their kind and reason",
          arguments: [
              (PostgresError(.connectionFailure, reason: "x"), AttemptOutcome.unstored),
              (PostgresError(.poolTimeout, reason: "x"), .unstored),
              (PostgresError(.deadlockDetected, reason: "x"), .failed(.transient, reason: "database: deadlock_detected", detail: "postgres deadlock_detected: x")),
              (PostgresError(.undefinedObject, reason: "x"), .failed(.fatal, reason: "database: undefined_object", detail: "postgres undefined_object: x")),
          ] as [(PostgresError, AttemptOutcome)])
    func outcomes(error: PostgresError, outcome: AttemptOutcome) {
        #expect(AttemptOutcome(error: error) == outcome)
    }

    @Test("Apple's error: its kind and short reason, and for a stop its description and explanation")
    func appleOutcome() {
        let error = AppleClientError(.rateLimited, status: 429)
        #expect(AttemptOutcome(error: error) == .failed(.rateLimited, reason: "rate_limited (HTTP 429)", detail: "\(error.description)\n\(error.explanation)"))
        let refused = AppleClientError(.invalidRequest, status: 400, appleError: "invalid_request")
        guard case .failed(.user, "invalid_request", let detail) = AttemptOutcome(error: refused) else {
            Issue.record("a refusal is the user's failure")
            return
        }
        #expect(detail.hasPrefix(refused.description))
    }
}
