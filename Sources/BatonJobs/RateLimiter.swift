import Baton
import BatonAppleSignIn
import Foundation
import Synchronization

/// A token bucket in the GCRA form (one "theoretical arrival time"), pure: the caller passes the time in
/// seconds on a monotonic clock, so the schedule is testable without sleeping.
///
/// Requests are spaced `1/rate` apart, with at most `burst` of them back to back after an idle spell. A 429
/// pauses every request until the `Retry-After` has passed and lowers the rate by ``decreaseFactor`` (never
/// under ``minimumRate``); after ``recoveryInterval`` seconds without a 429 the rate grows back by
/// ``increaseFactor`` per interval, up to the configured rate.
public struct TokenBucket: Sendable, Equatable {
    /// The rate the operator asked for, requests per second.
    public let configuredRate: Double
    /// The rate in force now (lowered after 429s).
    public private(set) var rate: Double
    /// Requests allowed back to back after an idle spell; default 1 (strict spacing).
    public let burst: Double
    /// The lowest rate adaptation goes to.
    public let minimumRate: Double
    /// The factor applied to the rate on a 429; default 0.8.
    public let decreaseFactor: Double = 0.8
    /// The factor applied per quiet interval while recovering; default 1.1.
    public let increaseFactor: Double = 1.1
    /// Seconds without a 429 before the rate is raised again; default 10.
    public let recoveryInterval: Double = 10
    private var theoreticalArrival: Double
    private var pausedUntil: Double
    private var lastAdjustment: Double

    /// Creates a bucket for `rate` requests per second, starting at `now`.
    public init(rate: Double, burst: Double = 1, now: Double) {
        precondition(rate > 0 && burst >= 1)
        configuredRate = rate
        self.rate = rate
        self.burst = burst
        minimumRate = min(rate, max(rate / 20, 0.2))
        theoreticalArrival = now
        pausedUntil = now
        lastAdjustment = now
    }

    /// Reserves the next request's slot and returns how long to wait for it (0: go now).
    public mutating func reserve(now: Double) -> Double {
        if rate < configuredRate, now - lastAdjustment >= recoveryInterval {
            rate = min(configuredRate, rate * increaseFactor)
            lastAdjustment = now
        }
        let interval = 1 / rate
        let base = max(theoreticalArrival, pausedUntil)
        let start = max(now, base - (burst - 1) * interval, pausedUntil)
        theoreticalArrival = max(base, now) + interval
        return start - now
    }

    /// Records a 429: no request before `now + retryAfter` (1 s when Apple gave none; at most
    /// `RetryPolicy.retryAfterCeiling`, one hour), and a lower rate.
    public mutating func rateLimited(retryAfter: Double?, now: Double) {
        let pause = retryAfter.map { $0.isNaN ? 1 : min(max(0, $0), RetryPolicy.retryAfterCeiling) } ?? 1
        pausedUntil = max(pausedUntil, now + pause)
        rate = max(minimumRate, rate * decreaseFactor)
        lastAdjustment = now
    }
}

/// The process-wide rate limiter its workers share: a ``TokenBucket`` behind a mutex, waiting with
/// `Task.sleep` (never blocking a thread).
public final class RateLimiter: Sendable {
    private let bucket: Mutex<TokenBucket>
    private let clock = ContinuousClock()
    private let origin: ContinuousClock.Instant

    /// A limiter for `rate` requests per second.
    public init(rate: Double, burst: Double = 1) {
        origin = clock.now
        bucket = Mutex(TokenBucket(rate: rate, burst: burst, now: 0))
    }

    private var seconds: Double {
        let elapsed = clock.now - origin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    /// Waits for the next request's slot.
    /// - Throws: `CancellationError` when the task is cancelled while waiting.
    public func acquire() async throws {
        let now = seconds
        let wait = bucket.withLock { $0.reserve(now: now) }
        if wait > 0 { try await Task.sleep(nanoseconds: RetryPolicy.nanoseconds(wait)) }
    }

    /// Records a 429 with Apple's `Retry-After` (seconds).
    public func rateLimited(retryAfter: Double?) {
        let now = seconds
        bucket.withLock { $0.rateLimited(retryAfter: retryAfter, now: now) }
    }

    /// The rate in force now.
    public var currentRate: Double { bucket.withLock { $0.rate } }
}
