import Foundation
import Synchronization

/// Faults injected into Apple's endpoints (`/auth/*`): a rate limit answered with 429 and
/// `Retry-After`, extra latency, and a share of 5xx answers.
public struct EmulatorFaults: Sendable, Codable, Equatable {
    /// Requests per second allowed across `/auth/*`; nil for no limit. A token bucket refilled at
    /// this rate, holding at most `max(1, rate)` tokens and starting with one second's worth
    /// (so a rate under 1/s refuses the first request and the `Retry-After` it gives is honoured).
    public var rateLimitPerSecond: Double?
    /// Milliseconds added before every `/auth/*` answer.
    public var latencyMilliseconds: Int
    /// Share of `/auth/*` requests answered with `errorStatus`, from 0 to 1.
    public var errorRate: Double
    /// The status injected errors carry (500…599). Default 503.
    public var errorStatus: Int

    /// No faults, unless given.
    public init(rateLimitPerSecond: Double? = nil, latencyMilliseconds: Int = 0, errorRate: Double = 0, errorStatus: Int = 503) {
        self.rateLimitPerSecond = rateLimitPerSecond
        self.latencyMilliseconds = latencyMilliseconds
        self.errorRate = errorRate
        self.errorStatus = errorStatus
    }

    enum CodingKeys: String, CodingKey {
        case rateLimitPerSecond = "rate_limit_per_s"
        case latencyMilliseconds = "latency_ms"
        case errorRate = "error_rate"
        case errorStatus = "error_status"
    }

    /// Decodes the JSON body of `POST /emulator/faults`; absent members take their defaults.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        rateLimitPerSecond = try container.decodeIfPresent(Double.self, forKey: .rateLimitPerSecond)
        latencyMilliseconds = try container.decodeIfPresent(Int.self, forKey: .latencyMilliseconds) ?? 0
        errorRate = try container.decodeIfPresent(Double.self, forKey: .errorRate) ?? 0
        errorStatus = try container.decodeIfPresent(Int.self, forKey: .errorStatus) ?? 503
    }

    /// Checks the ranges.
    /// - Throws: ``EmulatorError`` `bad_input`.
    func validate() throws(EmulatorError) {
        if let rate = rateLimitPerSecond, !(rate > 0 && rate.isFinite) { throw EmulatorError(.badInput, "rate_limit_per_s must be positive") }
        guard (0...60_000).contains(latencyMilliseconds) else { throw EmulatorError(.badInput, "latency_ms must be 0 to 60000") }
        guard errorRate >= 0 && errorRate <= 1 else { throw EmulatorError(.badInput, "error_rate must be 0 to 1") }
        guard (500...599).contains(errorStatus) else { throw EmulatorError(.badInput, "error_status must be 500 to 599") }
    }
}

/// Calls and answers per endpoint, as `GET /emulator/stats` reports them.
public struct EmulatorStats: Sendable, Codable, Equatable {
    /// Figures for one endpoint.
    public struct Endpoint: Sendable, Codable, Equatable {
        /// Requests received.
        public var calls = 0
        /// Answers by status code (as a string, e.g. `"200"`).
        public var statuses: [String: Int] = [:]
        /// Answers by `error` code (`invalid_client`, …).
        public var errors: [String: Int] = [:]
        /// Requests refused with 429 by the rate limit.
        public var rateLimited = 0

        enum CodingKeys: String, CodingKey {
            case calls, statuses, errors
            case rateLimited = "rate_limited"
        }
    }

    /// Path → figures.
    public var endpoints: [String: Endpoint] = [:]

    /// The figures for `path` (zeros when never called).
    public subscript(path: String) -> Endpoint { endpoints[path] ?? Endpoint() }
}

/// The fault settings, the token bucket and the statistics, shared by all handlers.
final class FaultInjector: Sendable {
    private struct Bucket {
        var faults = EmulatorFaults()
        var tokens: Double = 0
        var refilledAt: Double = 0
    }

    private let bucket = Mutex(Bucket())
    private let stats = Mutex(EmulatorStats())
    /// Monotonic seconds; the rate limit runs on real time, not on the emulator's adjustable clock.
    private let seconds: @Sendable () -> Double

    /// Creates an injector; `seconds` is a monotonic clock (injected by tests).
    init(seconds: @escaping @Sendable () -> Double = FaultInjector.monotonicSeconds) {
        self.seconds = seconds
    }

    /// Seconds since an arbitrary point, from the continuous monotonic clock.
    static let monotonicSeconds: @Sendable () -> Double = {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    var faults: EmulatorFaults { bucket.withLock { $0.faults } }

    func set(_ faults: EmulatorFaults) {
        let now = seconds()
        bucket.withLock {
            $0.faults = faults
            $0.tokens = faults.rateLimitPerSecond ?? 0
            $0.refilledAt = now
        }
    }

    /// Takes a token; returns the seconds to wait (for `Retry-After`) when none is left.
    func admit() -> Int? {
        let now = seconds()
        return bucket.withLock { bucket in
            guard let rate = bucket.faults.rateLimitPerSecond else { return nil }
            let elapsed = max(0, now - bucket.refilledAt)
            bucket.tokens = min(max(1, rate), bucket.tokens + elapsed * rate)
            bucket.refilledAt = now
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
        }
    }

    /// Whether this request should get an injected error.
    func injectError() -> Int? {
        let faults = self.faults
        guard faults.errorRate > 0, Double.random(in: 0..<1) < faults.errorRate else { return nil }
        return faults.errorStatus
    }

    func record(path: String, status: Int, error: String?, rateLimited: Bool) {
        stats.withLock { stats in
            var endpoint = stats.endpoints[path] ?? EmulatorStats.Endpoint()
            endpoint.calls += 1
            endpoint.statuses[String(status), default: 0] += 1
            if let error { endpoint.errors[error, default: 0] += 1 }
            if rateLimited { endpoint.rateLimited += 1 }
            stats.endpoints[path] = endpoint
        }
    }

    func snapshot() -> EmulatorStats { stats.withLock { $0 } }

    func resetStats() { stats.withLock { $0 = EmulatorStats() } }
}
