import BatonBuildInfo
import Foundation
import Synchronization

/// The service's counters, rendered in Prometheus' text format by ``render(pool:)``.
///
/// The build (`baton_build_info`: version and commit, always 1), requests by route and status, sign-in outcomes,
/// refused identity tokens and notifications by reason, and a request latency histogram.
/// A `Mutex` guards a few dictionaries; each request takes it once.
public final class ServiceMetrics: Sendable {
    /// Upper bounds of the latency histogram's buckets, in seconds.
    public static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5]

    private struct State {
        var requests: [String: Int] = [:]  // "route\u{0}status"
        var outcomes: [String: Int] = [:]
        var rejections: [String: Int] = [:]
        var buckets = [Int](repeating: 0, count: ServiceMetrics.latencyBuckets.count)
        var latencyCount = 0
        var latencySum = 0.0
    }

    private let state = Mutex(State())

    /// Creates empty counters.
    public init() {}

    /// Counts one request: its route, status, duration, and (for sign-ins) outcome or (for a refused token or notification) reason.
    public func record(route: String, status: Int, seconds: Double, outcome: String?, rejection: String?) {
        state.withLock { state in
            state.requests[route + "\u{0}" + String(status), default: 0] += 1
            if let outcome { state.outcomes[outcome, default: 0] += 1 }
            if let rejection { state.rejections[rejection, default: 0] += 1 }
            if let bucket = ServiceMetrics.latencyBuckets.firstIndex(where: { seconds <= $0 }) { state.buckets[bucket] += 1 }
            state.latencyCount += 1
            state.latencySum += seconds
        }
    }

    /// Requests counted so far for `route` with `status`.
    public func requests(route: String, status: Int) -> Int {
        state.withLock { $0.requests[route + "\u{0}" + String(status)] ?? 0 }
    }

    /// The Prometheus text exposition (format 0.0.4), with the pool's gauges when given.
    public func render(pool: (open: Int, idle: Int, waiting: Int, max: Int)?) -> String {
        let snapshot = state.withLock { $0 }
        var out = "# HELP baton_build_info The version and the commit baton was built from.\n# TYPE baton_build_info gauge\n"
        out += "baton_build_info{version=\"\(BuildInfo.version)\",commit=\"\(BuildInfo.commit)\"} 1\n"
        out += "# HELP baton_http_requests_total HTTP requests by route and status.\n# TYPE baton_http_requests_total counter\n"
        for (key, count) in snapshot.requests.sorted(by: { $0.key < $1.key }) {
            let parts = key.split(separator: "\u{0}", omittingEmptySubsequences: false)
            out += "baton_http_requests_total{route=\"\(parts[0])\",status=\"\(parts[1])\"} \(count)\n"
        }
        out += "# HELP baton_signin_outcomes_total Sign-in outcomes.\n# TYPE baton_signin_outcomes_total counter\n"
        for outcome in ["current", "migrated", "new", "unmatched"] {
            out += "baton_signin_outcomes_total{outcome=\"\(outcome)\"} \(snapshot.outcomes[outcome] ?? 0)\n"
        }
        out += "# HELP baton_rejections_total Refused identity tokens and notifications by reason.\n# TYPE baton_rejections_total counter\n"
        for (reason, count) in snapshot.rejections.sorted(by: { $0.key < $1.key }) {
            out += "baton_rejections_total{reason=\"\(reason)\"} \(count)\n"
        }
        out += "# HELP baton_http_request_duration_seconds Request latency.\n# TYPE baton_http_request_duration_seconds histogram\n"
        var cumulative = 0
        for (index, bound) in ServiceMetrics.latencyBuckets.enumerated() {
            cumulative += snapshot.buckets[index]
            out += "baton_http_request_duration_seconds_bucket{le=\"\(bound)\"} \(cumulative)\n"
        }
        out += "baton_http_request_duration_seconds_bucket{le=\"+Inf\"} \(snapshot.latencyCount)\n"
        out += "baton_http_request_duration_seconds_sum \(snapshot.latencySum)\n"
        out += "baton_http_request_duration_seconds_count \(snapshot.latencyCount)\n"
        if let pool {
            out += "# HELP baton_db_pool_connections Database pool connections by state.\n# TYPE baton_db_pool_connections gauge\n"
            out += "baton_db_pool_connections{state=\"open\"} \(pool.open)\n"
            out += "baton_db_pool_connections{state=\"idle\"} \(pool.idle)\n"
            out += "baton_db_pool_connections{state=\"max\"} \(pool.max)\n"
            out += "# HELP baton_db_pool_waiting Callers waiting for a database connection.\n# TYPE baton_db_pool_waiting gauge\n"
            out += "baton_db_pool_waiting \(pool.waiting)\n"
        }
        return out
    }
}
