import Baton
import BatonLogging
import BatonPostgres
import Foundation
import Synchronization

/// The limits past which a bulk job yields to the production database; nil turns a signal off.
public struct ThrottleLimits: Sendable, Equatable {
    /// The longest replica lag tolerated, in seconds (`--max-replica-lag`, `jobs.max_replica_lag_seconds`); default 10.
    public var maxReplicaLag: Double?
    /// The most active client backends tolerated besides the job's own probe (`--max-active-backends`,
    /// `jobs.max_active_backends`); default nil (off).
    public var maxActiveBackends: Int?

    /// Creates limits.
    public init(maxReplicaLag: Double? = 10, maxActiveBackends: Int? = nil) {
        self.maxReplicaLag = maxReplicaLag
        self.maxActiveBackends = maxActiveBackends
    }
}

/// What a probe saw of the database.
public struct ThrottleSignals: Sendable, Equatable {
    /// The worst replica lag in seconds (every standby of the primary, or this server's own replay when it is a
    /// standby); nil when there is no replica.
    public var replicaLag: Double?
    /// Whose lag ``replicaLag`` is: a standby's `application_name`, or `this standby`.
    public var replica: String
    /// Active client backends other than the probe's own.
    public var activeBackends: Int

    /// Creates signals.
    public init(replicaLag: Double? = nil, replica: String = "", activeBackends: Int = 0) {
        self.replicaLag = replicaLag
        self.replica = replica
        self.activeBackends = activeBackends
    }
}

/// Which limit throttles a job (the `reason` label of `baton_job_throttled`).
public enum ThrottleSignal: String, Sendable, CaseIterable {
    /// A standby fell behind (`--max-replica-lag`).
    case replicaLag = "replica_lag"
    /// Too many client backends are active (`--max-active-backends`).
    case activeBackends = "active_backends"
}

/// The throttle's decision. Pure: limits and signals in, a decision out.
///
/// The rule, per signal with a limit: above the limit, pause (claim nothing new); above half of it, slow down: wait
/// between claims, from nothing at half the limit growing linearly to ``maxSlowDown`` (half a second) at the limit;
/// at or below half, run at full speed. Replica lag is checked first; a pause on either signal wins over a slow-down,
/// and the longer of two slow-downs wins.
public enum Throttle: Sendable, Equatable {
    /// Every signal is within half its limit: claim work.
    case run
    /// A signal is past half its limit: wait `seconds` before each claim; the reason is for people
    /// (`slowed: replica lag 0.8 s of 1.0 s (baton_standby)`).
    case slow(seconds: Double, reason: String)
    /// A limit is crossed: claim nothing new until it is not; the reason is for people
    /// (`throttled: replica lag 3.2 s > 1.0 s (baton_standby)`).
    case pause(signal: ThrottleSignal, reason: String)

    /// The wait before each claim when a signal is at its limit.
    public static let maxSlowDown = 0.5

    /// Decides from `signals` against `limits`. A limit is crossed when the signal is strictly above it; a limit of
    /// 0 pauses on any positive signal and never slows down.
    public static func decide(_ limits: ThrottleLimits, _ signals: ThrottleSignals) -> Throttle {
        var slowest: Throttle = .run
        func consider(_ value: Double, limit: Double) -> Double? {
            guard limit > 0, value > limit / 2 else { return nil }
            return maxSlowDown * min(1, (value - limit / 2) / (limit / 2))
        }
        if let limit = limits.maxReplicaLag, let lag = signals.replicaLag {
            if lag > limit {
                return .pause(signal: .replicaLag, reason: "throttled: replica lag \(format(lag)) s > \(format(limit)) s (\(signals.replica))")
            }
            if let seconds = consider(lag, limit: limit) {
                slowest = .slow(seconds: seconds, reason: "slowed: replica lag \(format(lag)) s of \(format(limit)) s (\(signals.replica))")
            }
        }
        if let limit = limits.maxActiveBackends {
            if signals.activeBackends > limit {
                return .pause(signal: .activeBackends, reason: "throttled: active backends \(signals.activeBackends) > \(limit)")
            }
            if let seconds = consider(Double(signals.activeBackends), limit: Double(limit)), seconds > slowest.slowDown {
                slowest = .slow(seconds: seconds, reason: "slowed: active backends \(signals.activeBackends) of \(limit)")
            }
        }
        return slowest
    }

    /// The wait before each claim this decision asks for (0 unless ``slow(seconds:reason:)``).
    public var slowDown: Double {
        if case .slow(let seconds, _) = self { seconds } else { 0 }
    }

    private static func format(_ value: Double) -> String { String(format: "%.1f", value) }
}

/// How long each standby has stood still behind the WAL it has received: pure bookkeeping over successive probes.
///
/// `pg_stat_replication.replay_lag` alone misses a standby that stopped replaying (`pg_wal_replay_pause()`, a
/// replay conflict, a stuck startup process): it is measured when the standby reports a replayed position, so it
/// keeps its last (small) value, or turns NULL, while nothing is replayed. Each standby reply carries its flushed
/// and replayed positions together; one reply with replay behind flush is normal (replay follows in
/// milliseconds). A later reply (a new `reply_time`) still at the same replay position behind flush is not: the
/// standby is then counted as lagging by the time since that position was first seen. Any movement, or catching
/// up, restarts the count; an idle primary sends nothing new, so a healthy standby is never counted.
public struct ReplayStallTracker: Sendable {
    private struct Seen: Sendable {
        var lsn: String
        var reply: String
        var since: Double
        var stalled: Bool
    }
    private var seen: [String: Seen] = [:]

    /// An empty tracker.
    public init() {}

    /// Notes standby `name`'s reply `reply` (its `reply_time`) at `replayLSN` (nil when it reported none), `behind`
    /// whether that is behind its flushed WAL, at time `now` (seconds on any monotonic clock); returns the seconds
    /// it has stood still, 0 when it has not.
    public mutating func observe(_ name: String, replayLSN: String?, reply: String, behind: Bool, now: Double) -> Double {
        let lsn = replayLSN ?? ""
        guard behind else {
            seen[name] = nil
            return 0
        }
        guard var entry = seen[name], entry.lsn == lsn else {
            seen[name] = Seen(lsn: lsn, reply: reply, since: now, stalled: false)
            return 0
        }
        if entry.reply != reply { entry.stalled = true }
        entry.reply = reply
        seen[name] = entry
        return entry.stalled ? now - entry.since : 0
    }

    /// Forgets standbys not in `names` (disconnected).
    public mutating func keep(only names: Set<String>) {
        seen = seen.filter { names.contains($0.key) }
    }
}

/// Reads the throttle's signals on one of the job's connections (whose thread runs the query, off the
/// cooperative pool).
///
/// Replica lag, the worst of:
/// - on a primary, each connected standby in `pg_stat_replication`: `replay_lag`, or the time it has stood still
///   behind the WAL it received (``ReplayStallTracker``), whichever is larger; rows whose columns are hidden (a role
///   without `pg_monitor` sees NULLs) are skipped;
/// - on a standby (`pg_is_in_recovery()`), `now() - pg_last_xact_replay_timestamp()` while it has received WAL it has
///   not replayed (an idle primary sends none, and its last transaction's age is then no lag).
/// Load: `pg_stat_activity`'s active client backends other than the probe's.
public final class ThrottleProbe: Sendable {
    private let pool: PostgresPool
    private let tracker = Mutex(ReplayStallTracker())
    private let started = ContinuousClock.now

    /// A probe over `pool`.
    public init(pool: PostgresPool) { self.pool = pool }

    /// Reads the signals once.
    /// - Throws: ``BatonPostgres/PostgresError`` when the database does not answer.
    public func read() async throws -> ThrottleSignals {
        let (standbys, own, active) = try await pool.withConnection { connection in
            let standbys = try await connection.query("""
                SELECT coalesce(nullif(application_name, ''), 'pid ' || pid::text), replay_lsn::text, coalesce(reply_time::text, ''),
                       coalesce(replay_lsn < flush_lsn, flush_lsn IS NOT NULL), coalesce(EXTRACT(epoch FROM replay_lag)::float8, 0)
                FROM pg_stat_replication WHERE state IS NOT NULL AND NOT pg_is_in_recovery()
                """)
            let own = try await connection.query("""
                SELECT CASE WHEN pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()
                            THEN coalesce(EXTRACT(epoch FROM now() - pg_last_xact_replay_timestamp())::float8, 0) ELSE 0 END
                WHERE pg_is_in_recovery()
                """)
            let active = try await connection.query("""
                SELECT count(*)::int FROM pg_stat_activity
                WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
                """)
            return (standbys, own, active)
        }
        let elapsed = ContinuousClock.now - started
        let now = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        var worst: (seconds: Double, replica: String)?
        try tracker.withLock { tracker in
            var names: Set<String> = []
            for row in standbys {
                let name = try row.decode(String.self, at: 0)
                names.insert(name)
                let stalled = tracker.observe(name, replayLSN: try row.decode(String?.self, at: 1), reply: try row.decode(String.self, at: 2),
                                              behind: try row.decode(Bool.self, at: 3), now: now)
                let lag = max(try row.decode(Double.self, at: 4), stalled)
                if lag > (worst?.seconds ?? -1) { worst = (lag, name) }
            }
            tracker.keep(only: names)
        }
        if let row = own.first {
            let lag = try row.decode(Double.self, at: 0)
            if lag > (worst?.seconds ?? -1) { worst = (lag, "this standby") }
        }
        return ThrottleSignals(replicaLag: worst?.seconds, replica: worst?.replica ?? "", activeBackends: try active[0].decode(Int.self, at: 0))
    }
}

/// A running job's throttle: probes every ``interval`` seconds while the job runs, holds the decision for its
/// workers, and counts the time spent throttled. The limits can change meanwhile (SIGHUP).
public final class JobThrottle: Sendable {
    private let probe: ThrottleProbe
    private let logger: Logger
    /// Seconds between probes; default 1.
    public let interval: Double
    private let state: Mutex<State>

    private struct State {
        var limits: ThrottleLimits
        var decision = Throttle.run
        var since: ContinuousClock.Instant?
        var total: Duration = .zero
    }

    /// Creates a throttle with `limits`, probing through `probe`.
    public init(limits: ThrottleLimits, probe: ThrottleProbe, interval: Double = 1, logger: Logger = .disabled()) {
        self.probe = probe
        self.interval = interval
        self.logger = logger
        state = Mutex(State(limits: limits))
    }

    /// The limits in force.
    public var limits: ThrottleLimits { state.withLock { $0.limits } }

    /// Replaces the limits (a SIGHUP's reread); logs the change. The next probe applies them.
    public func setLimits(_ limits: ThrottleLimits) {
        let old = state.withLock { state in
            defer { state.limits = limits }
            return state.limits
        }
        guard old != limits else { return }
        logger.info("throttle limits changed", ["max_replica_lag_s": Self.describe(limits.maxReplicaLag), "max_active_backends": Self.describe(limits.maxActiveBackends.map(Double.init)),
                                                "was_max_replica_lag_s": Self.describe(old.maxReplicaLag), "was_max_active_backends": Self.describe(old.maxActiveBackends.map(Double.init))])
    }

    private static func describe(_ value: Double?) -> String { value.map { String(format: "%g", $0) } ?? "off" }

    /// Why the job is paused now, or nil.
    public var reason: String? {
        state.withLock { state in
            if case .pause(_, let reason) = state.decision { reason } else { nil }
        }
    }

    /// Which limit pauses the job now, or nil.
    public var signal: ThrottleSignal? {
        state.withLock { state in
            if case .pause(let signal, _) = state.decision { signal } else { nil }
        }
    }

    /// What the progress line says: why the job is paused or slowed down now, or nil when it runs at full speed.
    public var status: String? {
        state.withLock { state in
            switch state.decision {
            case .run: nil
            case .slow(_, let reason), .pause(_, let reason): reason
            }
        }
    }

    /// Seconds spent throttled so far, the current pause included.
    public var throttledSeconds: Double {
        let total = state.withLock { state in state.total + (state.since.map { ContinuousClock.now - $0 } ?? .zero) }
        return Double(total.components.seconds) + Double(total.components.attoseconds) / 1e18
    }

    /// Probes until the task is cancelled. A probe that fails lets the job go on (its own statements ride out a
    /// lost database, up to `--db-retry-seconds`, and stop it after that; a pause held meanwhile would wait forever);
    /// the first failure in a row is logged.
    public func monitor() async {
        await monitor(failing: false, sleepFirst: false)
    }

    private func monitor(failing: Bool, sleepFirst: Bool) async {
        var failing = failing
        if sleepFirst { try? await Task.sleep(for: .milliseconds(Int64(interval * 1000))) }
        while !Task.isCancelled, let failed = await probeOnce(failing: failing) {
            failing = failed
            try? await Task.sleep(for: .milliseconds(Int64(interval * 1000)))
        }
        apply(.run)
    }

    /// Probes once and applies the decision; returns whether the probe failed, or nil when the task was cancelled.
    private func probeOnce(failing: Bool) async -> Bool? {
        do {
            apply(Throttle.decide(limits, try await probe.read()))
            return false
        } catch is CancellationError {
            return nil
        } catch {
            if !failing { logger.warning("throttle probe failed; not throttling until it answers", ["error": "\(error)"]) }
            apply(.run)
            return true
        }
    }

    /// Applies a decision: starts or ends a pause, logging each.
    func apply(_ decision: Throttle) {
        let now = ContinuousClock.now
        let change: (String?, Duration?) = state.withLock { state in
            state.decision = decision
            switch decision {
            case .pause(_, let reason):
                guard state.since == nil else { return (nil, nil) }
                state.since = now
                return (reason, nil)
            case .run, .slow:
                guard let since = state.since else { return (nil, nil) }
                state.total += now - since
                state.since = nil
                return (nil, now - since)
            }
        }
        if let reason = change.0 { logger.warning("pausing: claiming no new work until the database is clear", ["reason": reason]) }
        if let paused = change.1 { logger.info("database clear; going on", ["throttled_s": String(format: "%.1f", Double(paused.components.seconds))]) }
    }

    /// Returns once the job is not paused (checking every quarter second) and, while it is slowed down, after the
    /// slow-down's wait; at once when it runs at full speed, or once `isStopped` says so. The bulk jobs call it
    /// before each claim, the import and the merge before each batch.
    public func waitUntilClear(isStopped: () -> Bool = { false }) async {
        while reason != nil, !isStopped(), !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(250))
        }
        let slowDown = state.withLock { $0.decision.slowDown }
        if slowDown > 0, !isStopped() { try? await Task.sleep(for: .milliseconds(Int64(slowDown * 1000))) }
    }

    /// Runs `body` while the throttle monitors the database (``monitor()``), for jobs that wait between their own
    /// batches (``waitUntilClear(isStopped:)``).
    public func monitoring<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
        // The first probe before the body starts, so a database already busy is waited for at once.
        let failing = await probeOnce(failing: false) ?? false
        let monitor = Task { await self.monitor(failing: failing, sleepFirst: true) }
        do {
            let result = try await body()
            monitor.cancel()
            await monitor.value
            return result
        } catch {
            monitor.cancel()
            await monitor.value
            throw error
        }
    }
}
