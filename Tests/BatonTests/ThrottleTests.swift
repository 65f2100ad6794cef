@testable import Baton
@testable import BatonJobs
import BatonPostgres
import Testing

@Suite("Throttle: the decision")
struct ThrottleTests {
    @Test("limits and signals in, run, slow down or pause with a reason out", arguments: [
        (ThrottleLimits(), ThrottleSignals(), Throttle.run),
        (ThrottleLimits(maxReplicaLag: 1), ThrottleSignals(replicaLag: 0.4, replica: "baton_standby"), .run),
        // Half the limit: still full speed; past it, a wait before each claim growing to half a second at the limit.
        (ThrottleLimits(maxReplicaLag: 1), ThrottleSignals(replicaLag: 0.5, replica: "baton_standby"), .run),
        (ThrottleLimits(maxReplicaLag: 1), ThrottleSignals(replicaLag: 0.75, replica: "baton_standby"),
         .slow(seconds: 0.25, reason: "slowed: replica lag 0.8 s of 1.0 s (baton_standby)")),
        (ThrottleLimits(maxReplicaLag: 1), ThrottleSignals(replicaLag: 1, replica: "baton_standby"),
         .slow(seconds: 0.5, reason: "slowed: replica lag 1.0 s of 1.0 s (baton_standby)")),
        (ThrottleLimits(maxReplicaLag: 1), ThrottleSignals(replicaLag: 3.24, replica: "baton_standby"),
         .pause(signal: .replicaLag, reason: "throttled: replica lag 3.2 s > 1.0 s (baton_standby)")),
        (ThrottleLimits(maxReplicaLag: nil), ThrottleSignals(replicaLag: 500, replica: "baton_standby"), .run),
        (ThrottleLimits(maxReplicaLag: 10, maxActiveBackends: 4), ThrottleSignals(activeBackends: 2), .run),
        (ThrottleLimits(maxReplicaLag: 10, maxActiveBackends: 4), ThrottleSignals(activeBackends: 3),
         .slow(seconds: 0.25, reason: "slowed: active backends 3 of 4")),
        (ThrottleLimits(maxReplicaLag: 10, maxActiveBackends: 4), ThrottleSignals(activeBackends: 4),
         .slow(seconds: 0.5, reason: "slowed: active backends 4 of 4")),
        (ThrottleLimits(maxReplicaLag: 10, maxActiveBackends: 4), ThrottleSignals(activeBackends: 5),
         .pause(signal: .activeBackends, reason: "throttled: active backends 5 > 4")),
        (ThrottleLimits(maxReplicaLag: 10, maxActiveBackends: nil), ThrottleSignals(activeBackends: 5_000), .run),
        // A limit of 0 backends: any other active one pauses; there is no half of it to slow down in.
        (ThrottleLimits(maxReplicaLag: nil, maxActiveBackends: 0), ThrottleSignals(activeBackends: 0), .run),
        (ThrottleLimits(maxReplicaLag: nil, maxActiveBackends: 0), ThrottleSignals(activeBackends: 1),
         .pause(signal: .activeBackends, reason: "throttled: active backends 1 > 0")),
        // Both crossed: the replica lag is named first.
        (ThrottleLimits(maxReplicaLag: 1, maxActiveBackends: 4), ThrottleSignals(replicaLag: 2, replica: "this standby", activeBackends: 9),
         .pause(signal: .replicaLag, reason: "throttled: replica lag 2.0 s > 1.0 s (this standby)")),
        // A pause on one signal wins over a slow-down on the other.
        (ThrottleLimits(maxReplicaLag: 1, maxActiveBackends: 4), ThrottleSignals(replicaLag: 0.9, replica: "s", activeBackends: 5),
         .pause(signal: .activeBackends, reason: "throttled: active backends 5 > 4")),
        // Both slowed: the longer wait wins.
        (ThrottleLimits(maxReplicaLag: 1, maxActiveBackends: 4), ThrottleSignals(replicaLag: 0.6, replica: "s", activeBackends: 4),
         .slow(seconds: 0.5, reason: "slowed: active backends 4 of 4")),
        (ThrottleLimits(maxReplicaLag: 1, maxActiveBackends: 4), ThrottleSignals(replicaLag: 1, replica: "s", activeBackends: 3),
         .slow(seconds: 0.5, reason: "slowed: replica lag 1.0 s of 1.0 s (s)")),
    ])
    func decide(limits: ThrottleLimits, signals: ThrottleSignals, expected: Throttle) {
        #expect(Throttle.decide(limits, signals) == expected)
    }

    @Test("a standby counts as lagging once a later reply finds it at the same replay position behind its flush")
    func stall() {
        var tracker = ReplayStallTracker()
        #expect(tracker.observe("s", replayLSN: "0/10", reply: "r1", behind: false, now: 0) == 0)
        // Behind in one reply: normal, replay follows.
        #expect(tracker.observe("s", replayLSN: "0/10", reply: "r2", behind: true, now: 1) == 0)
        // No new reply (an idle primary sends nothing): still not counted.
        #expect(tracker.observe("s", replayLSN: "0/10", reply: "r2", behind: true, now: 3) == 0)
        // A later reply at the same position: stalled since it was first seen there.
        #expect(tracker.observe("s", replayLSN: "0/10", reply: "r3", behind: true, now: 4.5) == 3.5)
        #expect(tracker.observe("s", replayLSN: "0/10", reply: "r3", behind: true, now: 6) == 5)
        // It moved: replaying, however slowly (replay_lag measures it then); the count starts again.
        #expect(tracker.observe("s", replayLSN: "0/20", reply: "r4", behind: true, now: 7) == 0)
        // Caught up: no lag.
        #expect(tracker.observe("s", replayLSN: "0/90", reply: "r5", behind: false, now: 8) == 0)
        // Never reported a replay position while it flushes WAL: counted too.
        #expect(tracker.observe("t", replayLSN: nil, reply: "a", behind: true, now: 8) == 0)
        #expect(tracker.observe("t", replayLSN: nil, reply: "b", behind: true, now: 10) == 2)
        // A standby that disconnected is forgotten: back later, its count starts again.
        tracker.keep(only: ["s"])
        #expect(tracker.observe("t", replayLSN: nil, reply: "c", behind: true, now: 20) == 0)
    }

    @Test("time throttled is counted across pauses (not while slowed down), and the reason and signal are held while paused")
    func accounting() async throws {
        // No connection is opened: the decisions are applied by hand.
        let throttle = JobThrottle(limits: ThrottleLimits(), probe: ThrottleProbe(pool: PostgresPool(url: "postgresql:///unused")))
        #expect(throttle.reason == nil && throttle.signal == nil && throttle.status == nil)
        throttle.apply(.pause(signal: .activeBackends, reason: "throttled: active backends 5 > 4"))
        #expect(throttle.reason == "throttled: active backends 5 > 4")
        #expect(throttle.signal == .activeBackends)
        try await Task.sleep(for: .milliseconds(20))
        throttle.apply(.pause(signal: .replicaLag, reason: "throttled: replica lag 2.0 s > 1.0 s (s)"))
        #expect(throttle.reason == "throttled: replica lag 2.0 s > 1.0 s (s)")
        #expect(throttle.signal == .replicaLag)
        throttle.apply(.slow(seconds: 0.25, reason: "slowed: active backends 3 of 4"))
        #expect(throttle.reason == nil && throttle.signal == nil)
        #expect(throttle.status == "slowed: active backends 3 of 4")
        let first = throttle.throttledSeconds
        #expect(first >= 0.02)
        try await Task.sleep(for: .milliseconds(20))
        throttle.apply(.run)
        #expect(throttle.status == nil)
        #expect(throttle.throttledSeconds == first)
    }

    @Test("the limits from the jobs section: 0 s means no replica limit")
    func configurationLimits() {
        #expect(BatonConfiguration.Jobs().throttleLimits == ThrottleLimits(maxReplicaLag: 10, maxActiveBackends: nil))
        #expect(BatonConfiguration.Jobs(maxReplicaLagSeconds: 0, maxActiveBackends: 8).throttleLimits == ThrottleLimits(maxReplicaLag: nil, maxActiveBackends: 8))
    }

    @Test("the time left comes from the wall-clock rate, time throttled included")
    func estimateIncludesThrottledTime() {
        // 100 users done in 20 s, 10 of them throttled: 5 a second, so the 100 left take 20 s more (not 10).
        let formatter = ProgressFormatter(total: 200)
        let (perSecond, left) = formatter.rates(JobCounters.Snapshot(succeeded: 100), elapsed: 20)
        #expect(perSecond == 5)
        #expect(left == 20)
    }

    @Test("the progress line says why the job is throttled")
    func progressLine() {
        let formatter = ProgressFormatter(total: 10)
        let reason = "throttled: replica lag 3.2 s > 1.0 s (baton_standby)"
        #expect(formatter.bar(JobCounters.Snapshot(), elapsed: 1, throttled: reason).hasSuffix(" " + reason))
        #expect(formatter.logLine(JobCounters.Snapshot(), elapsed: 1, throttled: reason).hasSuffix(" throttled=\"\(reason)\""))
        #expect(!formatter.logLine(JobCounters.Snapshot(), elapsed: 1).contains("throttled"))
    }
}
