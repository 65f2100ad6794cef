import BatonEmulator
import Baton
import BatonJobs
import Foundation
import BatonPostgres
import Synchronization
import TestSupport
import Testing

/// Issue 14 item 14: leases are honoured after the rate limiter's wait and when marking a row unresolvable;
/// a shared cause stops the job instead of marking the whole table.
@Suite("Bulk jobs: leases and shared causes", .serialized)
struct BulkLeaseTests {
    /// Wraps a step and records every call made after the row's lease ended.
    final class LeaseCheckingStep: BulkJobStep {
        let inner: any BulkJobStep
        let lateCalls = Mutex(0)
        let calls = Mutex(0)
        init(_ inner: any BulkJobStep) { self.inner = inner }
        func perform(_ item: TransferQueue.Item) async throws -> BulkStepOutcome {
            calls.withLock { $0 += 1 }
            if Date() >= item.leaseEnds { lateCalls.withLock { $0 += 1 } }
            return try await inner.perform(item)
        }
    }

    /// Wraps a step and holds each answer until `count` workers have one, so their refusals reach the job together.
    final class TogetherStep: BulkJobStep {
        let inner: any BulkJobStep
        let count: Int
        private let gate = Mutex<(arrived: Int, waiting: [CheckedContinuation<Void, Never>])>((0, []))
        init(_ inner: any BulkJobStep, count: Int) { (self.inner, self.count) = (inner, count) }
        func perform(_ item: TransferQueue.Item) async throws -> BulkStepOutcome {
            let outcome: Result<BulkStepOutcome, any Error>
            do { outcome = .success(try await inner.perform(item)) } catch { outcome = .failure(error) }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let released = gate.withLock { gate -> [CheckedContinuation<Void, Never>] in
                    gate.arrived += 1
                    gate.waiting.append(continuation)
                    guard gate.arrived == count else { return [] }
                    defer { gate.waiting = [] }
                    return gate.waiting
                }
                for waiting in released { waiting.resume() }
            }
            return try outcome.get()
        }
    }

    @Test("a worker whose lease ended while it waited for the rate limiter gives the row back without calling Apple")
    func leaseRecheckedAfterRateLimiter() async throws {
        try await BulkJobFixture.run(users: 4) { fixture in
            let queue = TransferQueue(pool: fixture.database.pool, kind: .exchange, leaseSeconds: 1, retryBaseSeconds: 0.2)
            let step = LeaseCheckingStep(ExchangeStep(client: try fixture.client(fixture.recipient), applier: fixture.database.store))
            // Four workers, one request a second, one-second leases: three of each four claims expire in the limiter.
            let job = BulkJob(queue: queue, step: step, options: BulkJobOptions(workers: 4, rate: 1),
                              window: TransferWindow(acceptedAt: fixture.acceptedAt), requireOpenWindow: true)
            let summary = await job.run()
            #expect(step.lateCalls.withLock { $0 } == 0, "calls made after the lease ended")
            #expect(summary.counts.succeeded == 4)
            #expect(step.calls.withLock { $0 } == 4)
            #expect(summary.remaining == 0)
        }
    }

    @Test("markUnresolvable is fenced by the lease: a row taken over by another worker is left alone")
    func markUnresolvableFenced() async throws {
        try await BulkJobFixture.run(users: 1) { fixture in
            let first = TransferQueue(pool: fixture.database.pool, kind: .exchange, owner: "first", leaseSeconds: 1)
            let second = TransferQueue(pool: fixture.database.pool, kind: .exchange, owner: "second", leaseSeconds: 60)
            let item = try #require(try await first.claim(limit: 1).first)
            try await Task.sleep(for: .milliseconds(1200))
            #expect(try await second.claim(limit: 1).count == 1)
            #expect(try await first.markUnresolvable(item, reason: "invalid_request") == false)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'pending' AND lease_owner = 'second'") == 1)
        }
    }

    @Test("the same error on every user (a shared cause): the job stops after N in a row, the rest stay pending, --retry-unresolvable resets them")
    func identicalErrorsStop() async throws {
        try await BulkJobFixture.run(users: 30) { fixture in
            for user in fixture.users {
                try fixture.emulator.revoke(clientID: BulkJobFixture.clientID, userIdentifier: user.userIdentifier)
            }
            let summary = try await fixture.exchangeJob(options: BulkJobOptions(workers: 1, rate: 500, maxIdenticalFailures: 10)).run()
            #expect(summary.stopReason?.code == .stopped)
            #expect(summary.stopReason?.reason.contains("same error (invalid_request)") == true, "\(String(describing: summary.stopReason))")
            #expect(summary.counts.unresolvable == 9)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'unresolvable'") == 9)
            #expect(summary.remaining == 21)
            let queue = TransferQueue(pool: fixture.database.pool, kind: .exchange)
            #expect(try await queue.retryUnresolvable() == 9)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'pending'") == 30)
        }
    }

    @Test("the same error reaching 30 workers at once: the job still stops with 9 rows marked, the other 21 pending (issue 40)")
    func identicalErrorsAtOnceStop() async throws {
        try await BulkJobFixture.run(users: 30) { fixture in
            for user in fixture.users {
                try fixture.emulator.revoke(clientID: BulkJobFixture.clientID, userIdentifier: user.userIdentifier)
            }
            let queue = TransferQueue(pool: fixture.database.pool, kind: .exchange)
            let step = TogetherStep(ExchangeStep(client: try fixture.client(fixture.recipient), applier: fixture.database.store), count: 30)
            let job = BulkJob(queue: queue, step: step, options: BulkJobOptions(workers: 30, rate: 1_000, maxIdenticalFailures: 10),
                              window: TransferWindow(acceptedAt: fixture.acceptedAt), requireOpenWindow: true)
            let summary = await job.run()
            #expect(summary.stopReason?.reason.contains("same error (invalid_request)") == true, "\(String(describing: summary.stopReason))")
            #expect(summary.counts.unresolvable == 9)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'unresolvable'") == 9)
            #expect(summary.remaining == 21)
        }
    }
}
