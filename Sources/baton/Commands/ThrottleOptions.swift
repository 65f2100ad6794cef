import Baton
import BatonJobs
import BatonLogging
import BatonCommandLine
import Dispatch

/// The bulk jobs' throttle options: when they yield to the production database.
struct ThrottleOptions: CommandOptions {
    let maxReplicaLag = Option.number("max-replica-lag", "S", in: 0...86_400, "claim nothing new while a standby is more than S seconds behind, and\nslow down past half of it (0: no limit; default jobs.max_replica_lag_seconds, 10)")
    let maxActiveBackends = Option.integer("max-active-backends", in: 0...100_000, "claim nothing new while more than N other client backends are\nactive, and slow down past half of it (0: no limit; default\njobs.max_active_backends, none)")
}

extension Parsed<ThrottleOptions> {
    /// The `jobs.*` limits of the configuration, each replaced by its option when given (0 turns a limit off).
    func limits(_ jobs: BatonConfiguration.Jobs) -> ThrottleLimits {
        var limits = jobs.throttleLimits
        if let lag = self.maxReplicaLag { limits.maxReplicaLag = lag > 0 ? lag : nil }
        if let backends = self.maxActiveBackends { limits.maxActiveBackends = backends > 0 ? backends : nil }
        return limits
    }
}

/// On each SIGHUP, rereads the configuration file and gives `throttle` its `jobs.*` limits (which then replace
/// the command line's); a file that does not load is logged and changes nothing. Cancel the returned source to stop.
func rereadingThrottleLimits(_ throttle: JobThrottle, configurationPath: String?, logger: Logger) -> any DispatchSourceSignal {
    onHangUp {
        do {
            throttle.setLimits(try await loadConfiguration(configurationPath).jobs.throttleLimits)
        } catch {
            logger.warning("SIGHUP: the configuration did not load; the throttle's limits are unchanged", ["error": "\(error)"])
        }
    }
}

/// `throttled 15.3 s (67%)`: the time a job claimed nothing new because the database was busy, and its share of the
/// `elapsed` seconds of the run.
func throttledText(_ seconds: Double, of elapsed: Double) -> String {
    let share = elapsed > 0 ? min(100, (seconds / elapsed * 100).rounded()) : 0
    return "throttled \(String(format: "%.1f", seconds)) s (\(Int(share))%)"
}

/// ``throttledText(_:of:)`` for a job that started at `started` and waited on `throttle`.
func throttledText(_ throttle: JobThrottle, since started: ContinuousClock.Instant) -> String {
    let elapsed = ContinuousClock.now - started
    return throttledText(throttle.throttledSeconds, of: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
}
