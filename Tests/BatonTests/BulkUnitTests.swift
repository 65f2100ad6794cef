import BatonAppleSignIn
@testable import Baton
@testable import BatonJobs
import Foundation
import BatonPostgres
import Synchronization
import Testing

@Suite("Token bucket")
struct TokenBucketTests {
    @Test("a huge Retry-After pauses an hour at most (Retry-After: 9300000000 used to trap the job)")
    func hugeRetryAfter() async throws {
        var bucket = TokenBucket(rate: 10, now: 0)
        bucket.rateLimited(retryAfter: 9_300_000_000, now: 0)
        #expect(bucket.reserve(now: 0) <= 3_600)
        bucket.rateLimited(retryAfter: .infinity, now: 0)
        #expect(bucket.reserve(now: 0) <= 3_601)
        // The shared limiter converts its wait checked: a cancelled wait ends without trapping.
        let limiter = RateLimiter(rate: 10)
        limiter.rateLimited(retryAfter: 9_300_000_000)
        let waiting = Task { try await limiter.acquire() }
        try await Task.sleep(for: .milliseconds(50))
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
    }

    @Test("requests are spaced 1/rate apart, the first goes at once")
    func spacing() {
        var bucket = TokenBucket(rate: 10, now: 0)
        let waits = (0..<5).map { _ in bucket.reserve(now: 0) }
        #expect(waits.map { ($0 * 1000).rounded() } == [0, 100, 200, 300, 400])
    }

    @Test("a burst allows that many back to back after an idle spell, never more than rate·t + burst")
    func burst() {
        var bucket = TokenBucket(rate: 10, burst: 3, now: 0)
        let waits = (0..<5).map { _ in bucket.reserve(now: 100) }
        #expect(waits.map { ($0 * 1000).rounded() } == [0, 0, 0, 100, 200])
    }

    @Test("an idle spell does not bank more than the burst")
    func noBanking() {
        var bucket = TokenBucket(rate: 5, now: 0)
        #expect(bucket.reserve(now: 0) == 0)
        #expect(bucket.reserve(now: 60) == 0)
        #expect((bucket.reserve(now: 60) * 1000).rounded() == 200)
    }

    @Test("a 429 pauses every request for Retry-After and lowers the rate; quiet intervals raise it back")
    func adaptive() {
        var bucket = TokenBucket(rate: 100, now: 0)
        _ = bucket.reserve(now: 0)
        bucket.rateLimited(retryAfter: 2, now: 1)
        #expect(bucket.rate == 80)
        #expect((bucket.reserve(now: 1) * 1000).rounded() == 2000)
        bucket.rateLimited(retryAfter: nil, now: 1)
        #expect(bucket.rate == 64)
        // Ten quiet seconds later the rate grows by 10 % per interval, never past the configured rate.
        _ = bucket.reserve(now: 12)
        #expect(abs(bucket.rate - 70.4) < 1e-9)
        for second in stride(from: 22.0, through: 200, by: 10) { _ = bucket.reserve(now: second) }
        #expect(bucket.rate == 100)
    }

    @Test("the rate never drops under its floor")
    func floor() {
        var bucket = TokenBucket(rate: 10, now: 0)
        for _ in 0..<100 { bucket.rateLimited(retryAfter: 0, now: 0) }
        #expect(bucket.rate == bucket.minimumRate)
        #expect(bucket.minimumRate == 0.5)
    }

    @Test("the shared limiter admits no more than the rate across concurrent workers")
    func sharedLimiter() async throws {
        let limiter = RateLimiter(rate: 200)
        let start = ContinuousClock.now
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask { for _ in 0..<10 { try? await limiter.acquire() } }
            }
        }
        // 80 slots at 200/s: the last one is 395 ms after the first, whatever the scheduling.
        #expect(ContinuousClock.now - start >= .milliseconds(390))
    }
}

@Suite("Transfer window")
struct TransferWindowTests {
    let accepted = Date(timeIntervalSince1970: 1_800_000_000)

    static let statusCases: [(Double, String)] = [
        (-10, "notOpenYet"), (0, "open"), (52.9 * 86_400, "open"), (53.5 * 86_400, "closingSoon"),
        (60 * 86_400, "closingSoon"), (60 * 86_400 + 1, "closed"),
    ]

    @Test("status through the 60 days", arguments: statusCases)
    func status(offset: Double, expected: String) {
        let window = TransferWindow(acceptedAt: accepted)
        let status = window.status(at: accepted.addingTimeInterval(offset))
        let name = switch status {
        case .notAccepted: "notAccepted"
        case .notOpenYet: "notOpenYet"
        case .open: "open"
        case .closingSoon: "closingSoon"
        case .closed: "closed"
        }
        #expect(name == expected)
    }

    @Test("no acceptance time: not accepted, never open")
    func notAccepted() {
        let window = TransferWindow(acceptedAt: nil)
        #expect(window.status(at: Date()) == .notAccepted)
        #expect(!window.isOpen(at: Date()))
        #expect(window.closesAt == nil)
    }

    static let durations: [(Double, String)] = [(42, "42 seconds"), (61, "1 minute 1 second"), (3 * 3600 + 120, "3 hours 2 minutes"), (86_400 * 2 + 3600, "2 days 1 hour")]

    @Test("durations read well", arguments: durations)
    func describe(seconds: Double, text: String) {
        #expect(TransferWindow.describe(seconds) == text)
    }
}

@Suite("Progress")
struct ProgressTests {
    @Test("the bar shows done / total, rate, errors and time left")
    func bar() {
        var counts = JobCounters.Snapshot()
        counts.succeeded = 498
        counts.unresolvable = 2
        var formatter = ProgressFormatter(total: 1000)
        formatter.barWidth = 10
        #expect(formatter.bar(counts, elapsed: 5) == "[#####.....] 500/1000 50% 100.0/s errors 2 left 5 seconds")
    }

    @Test("while Apple is unreachable, the bar and the log line say for how long, and the limit")
    func paused() {
        var counts = JobCounters.Snapshot()
        counts.succeeded = 500
        var formatter = ProgressFormatter(total: 1000)
        formatter.barWidth = 10
        let pause = BulkJobPause(seconds: 42.7, limit: 3_600)
        #expect(formatter.bar(counts, elapsed: 5, paused: pause)
                == "[#####.....] 500/1000 50% 100.0/s errors 0 left 5 seconds paused: apple unreachable for 42 s (limit 3600 s)")
        #expect(formatter.logLine(counts, elapsed: 5, paused: pause).hasSuffix(" eta_s=5 paused=apple_unreachable paused_s=42 pause_limit_s=3600"))
    }

    @Test("the log line is key=value")
    func logLine() {
        var counts = JobCounters.Snapshot()
        counts.succeeded = 10
        counts.failed = 1
        counts.rateLimited = 4
        #expect(ProgressFormatter(total: 22).logLine(counts, elapsed: 2) == "progress done=11 total=22 rate_per_s=5.5 errors=1 rate_limited=4 eta_s=2")
    }

    @Test("a run has failures only when it stopped or a user was not finished", arguments: [
        (JobCounters.Snapshot(succeeded: 10), nil, false),
        (JobCounters.Snapshot(succeeded: 10, failed: 3), nil, false),  // deferred, then finished later in the run
        (JobCounters.Snapshot(succeeded: 9, failed: 3, failedForGood: 1), nil, true),
        (JobCounters.Snapshot(succeeded: 9, unresolvable: 1), nil, true),
        (JobCounters.Snapshot(succeeded: 3), BulkJobError(.stopped, "stopped"), true),
    ] as [(JobCounters.Snapshot, BulkJobError?, Bool)])
    func hasFailures(counts: JobCounters.Snapshot, stop: BulkJobError?, expected: Bool) {
        let summary = BulkJobSummary(counts: counts, remaining: 0, stopReason: stop, elapsed: 1, finalRate: 10)
        #expect(summary.hasFailures == expected)
    }

    @Test("nothing done yet: time left unknown")
    func unknown() {
        #expect(ProgressFormatter(total: 5).logLine(JobCounters.Snapshot(), elapsed: 1).hasSuffix("eta_s=unknown"))
    }

    @Test("the reporter prints log lines when not on a terminal, and nothing secret")
    func reporter() async throws {
        let lines = LinesBox()
        let counters = JobCounters()
        let reporter = ProgressReporter(total: 3, counters: counters, isTerminal: false, logInterval: 0.02, write: { lines.append($0) })
        reporter.start()
        counters.update { $0.succeeded = 3 }
        while lines.count == 0 { try await Task.sleep(for: .milliseconds(10)) }
        await reporter.finish()
        #expect(lines.all.allSatisfy { $0.hasPrefix("progress done=") })
    }
}

/// Collects lines written by a reporter.
final class LinesBox: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var count: Int { lines.withLock { $0.count } }
    var all: [String] { lines.withLock { $0 } }
}

@Suite("CSV lines")
struct ImportLineTests {
    @Test("valid pairs")
    func valid() throws {
        let pair = try TransferImporter.parse("001234.abcdef.0123,tr.Ab-c_9").get()
        #expect(pair.oldSub == "001234.abcdef.0123" && pair.transferSub == "tr.Ab-c_9")
    }

    static let rejectedLines: [(String, String)] = [
        ("onlyone", "expected 2 fields, found 1"),
        ("a,b,c", "expected 2 fields, found 3"),
        (",b", "old_sub is empty"),
        ("a,", "transfer_sub is empty"),
        ("a b,c", "old_sub holds a character other than letters, digits, '.', '_' and '-'"),
        ("a,\"c\"", "transfer_sub holds a character other than letters, digits, '.', '_' and '-'"),
        ("same,same", "old_sub and transfer_sub are the same"),
        (String(repeating: "x", count: 257) + ",t", "old_sub is longer than 256 characters"),
    ]

    @Test("rejected lines, one reason each", arguments: rejectedLines)
    func rejected(line: String, reason: String) {
        guard case .failure(let problem) = TransferImporter.parse(line) else {
            Issue.record("accepted \(line)")
            return
        }
        #expect(problem.reason == reason)
    }

    @Test("array literals quote and escape")
    func arrays() {
        #expect(arrayLiteral(["a", "b\"c", "d\\e"]) == "{\"a\",\"b\\\"c\",\"d\\\\e\"}")
        #expect(arrayLiteral([]) == "{}")
    }
}

@Suite("Failure classification")
struct FailureKindTests {
    static let appleCases: [(AppleClientError.Code, FailureKind)] = [
        (.rateLimited, .rateLimited), (.serverError, .outage), (.timeout, .outage), (.connectionFailed, .outage),
        (.unexpectedStatus, .transient), (.invalidResponse, .transient), (.invalidRequest, .user), (.invalidGrant, .user),
        (.invalidClient, .fatal), (.unauthorizedClient, .fatal), (.keyInvalid, .fatal), (.otherAppleError, .fatal),
    ]

    @Test("Apple's errors decide wait, retry, per-user record, or stop", arguments: appleCases)
    func apple(code: AppleClientError.Code, kind: FailureKind) {
        #expect(FailureKind.of(AppleClientError(code)) == kind)
    }

    @Test("database errors: transient ones are retried, others stop the job")
    func database() {
        #expect(FailureKind.of(PostgresError(.connectionFailure, reason: "x")) == .transient)
        #expect(FailureKind.of(PostgresError(.undefinedObject, reason: "x")) == .fatal)
    }

    @Test("reasons carry Apple's code, never an identifier")
    func reasons() {
        #expect(FailureKind.reason(AppleClientError(.invalidRequest, status: 400, appleError: "invalid_request")) == "invalid_request")
        #expect(FailureKind.reason(AppleClientError(.serverError, status: 503)) == "server_error (HTTP 503)")
    }
}
