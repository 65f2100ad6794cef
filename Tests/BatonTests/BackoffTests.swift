import BatonConcurrency
import Testing

@Suite("Backoff")
struct BackoffTests {
    @Test("the jobs' backoff: 0.5 s doubling to 10 s, half of it jittered")
    func jobs() {
        let backoff = Backoff(initial: 0.5, cap: 10)
        #expect((1...7).map { backoff.delay(afterAttempt: $0, jitter: 1) } == [0.5, 1, 2, 4, 8, 10, 10])
        #expect((1...7).map { backoff.delay(afterAttempt: $0, jitter: 0) } == [0.25, 0.5, 1, 2, 4, 5, 5])
    }

    @Test("the queue's deferral: 5 s doubling to 300 s, no jitter")
    func queue() {
        let backoff = Backoff(initial: 5, cap: 300, jittered: 0)
        #expect((1...8).map { backoff.delay(afterAttempt: $0, jitter: 0.9) } == [5, 10, 20, 40, 80, 160, 300, 300])
    }

    @Test("out-of-range inputs stay in range: jitter clamped, huge attempts at the cap, no first wait means none")
    func edges() {
        let backoff = Backoff(initial: 1, cap: 60)
        #expect(backoff.delay(afterAttempt: 3, jitter: 7) == 4)
        #expect(backoff.delay(afterAttempt: 0, jitter: 1) == 1)
        #expect(backoff.delay(afterAttempt: 5_000, jitter: 1) == 60)
        #expect(Backoff(initial: 0, cap: 60).delay(afterAttempt: 5_000, jitter: 1) == 0)
        #expect(Backoff.nanoseconds(.infinity) == 0 && Backoff.nanoseconds(-1) == 0 && Backoff.nanoseconds(0.25) == 250_000_000)
    }
}
