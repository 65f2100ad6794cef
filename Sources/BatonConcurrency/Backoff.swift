import Foundation

/// Exponential backoff: after the `attempt`-th failure in a row (1-based) the wait's ceiling is
/// `initial · factor^(attempt−1)`, at most `cap`; the fraction ``jittered`` of that ceiling is scaled by a random
/// number in 0...1 and the rest is fixed (0.5, the default, is "equal jitter"; 0 gives the ceiling itself).
///
/// The one backoff of the package: `AppleClient`'s retries (`RetryPolicy`), the bulk jobs' waits and the
/// queue's deferral of a row all compute their waits here, each with its own numbers.
package struct Backoff: Sendable, Equatable {
    /// The first wait's ceiling, in seconds.
    package var initial: Double
    /// What each further failure multiplies the ceiling by; default 2.
    package var factor: Double
    /// The largest ceiling, in seconds.
    package var cap: Double
    /// The part of the ceiling that is jittered, 0...1; default 0.5.
    package var jittered: Double

    /// Creates a backoff.
    package init(initial: Double, factor: Double = 2, cap: Double, jittered: Double = 0.5) {
        self.initial = initial
        self.factor = factor
        self.cap = cap
        self.jittered = min(1, max(0, jittered))
    }

    /// The wait after failed attempt `attempt` (1-based), in seconds, with `jitter` (clamped to 0...1) scaling
    /// the jittered part.
    package func delay(afterAttempt attempt: Int, jitter: Double) -> Double {
        guard initial > 0 else { return 0 }
        let ceiling = min(cap, initial * pow(factor, Double(max(0, attempt - 1))))
        return ceiling * (1 - jittered) + ceiling * jittered * min(1, max(0, jitter))
    }

    /// Sleeps the wait after failed attempt `attempt`, with a random jitter.
    /// - Throws: `CancellationError` when the task is cancelled meanwhile.
    package func sleep(afterAttempt attempt: Int) async throws {
        try await Task.sleep(nanoseconds: Self.nanoseconds(delay(afterAttempt: attempt, jitter: Double.random(in: 0...1))))
    }

    /// `seconds` as whole nanoseconds for `Task.sleep`, converted checked: negative, NaN and infinite values
    /// give 0 and the result never exceeds one day, so a number from outside cannot trap the conversion.
    package static func nanoseconds(_ seconds: Double) -> UInt64 {
        guard seconds.isFinite, seconds > 0 else { return 0 }
        return UInt64(min(seconds, 86_400) * 1e9)
    }
}
